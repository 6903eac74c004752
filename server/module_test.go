package server_test

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// exampleMain is a program in another module: its own business handler,
// plugged into the gateway with server.New and SetHandler. MODULE is
// replaced by the gateway's module path.
const exampleMain = `package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"MODULE/config"
	"MODULE/exchange"
	"MODULE/server"
)

// erp is the business handler of this other module.
type erp struct{ booked int }

func (e *erp) Handle(ctx context.Context, m *exchange.Message) error {
	for _, p := range m.Payloads {
		r, err := p.Open()
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, r)
		r.Close()
		if err != nil {
			return err
		}
	}
	e.booked++
	return nil
}

var _ exchange.Handler = (*erp)(nil)

func main() {
	cfg, err := config.Load(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv, err := server.New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer srv.Close()
	srv.SetHandler(&erp{})
	fmt.Println("embedded gateway ready:", len(srv.Directory().Partners), "partners")
}
`

// readGoMod reads the repository's go.mod: its module path (so that the
// test follows a rename of the module) and its require blocks.
func readGoMod(t *testing.T, root string) (module, requires string) {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var req strings.Builder
	inBlock := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "module "):
			module = strings.Trim(strings.TrimSpace(strings.TrimPrefix(line, "module ")), `"`)
		case line == "require (":
			inBlock = true
			req.WriteString(line + "\n")
		case inBlock:
			req.WriteString("\t" + line + "\n")
			inBlock = line != ")"
		case strings.HasPrefix(line, "require "):
			req.WriteString(line + "\n")
		}
	}
	if module == "" {
		t.Fatal("go.mod has no module line")
	}
	return module, req.String()
}

// TestExampleModuleBuildsAgainstGateway builds and runs a separate module
// that requires the gateway (with a replace to this checkout) and
// implements exchange.Handler. It builds offline (GOPROXY=off) when the
// module cache holds every go.mod file of the module graph; dependencies
// are checked against a copy of this repository's go.sum.
func TestExampleModuleBuildsAgainstGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	_, file, _, _ := runtime.Caller(0)
	root, err := filepath.Abs(filepath.Join(filepath.Dir(file), ".."))
	if err != nil {
		t.Fatal(err)
	}
	mod, requires := readGoMod(t, root)
	dir := t.TempDir()
	// The gateway's own requirements are listed too, as go mod tidy would:
	// the module graph then needs no go.mod file that building the gateway
	// did not already put in the module cache (an unpruned dependency such
	// as pgpassfile would otherwise pull in testify's go.mod).
	goMod := "module example.com/erpgateway\n\ngo 1.26\n\nrequire " + mod + " v0.0.0\n\n" + requires + "\nreplace " + mod + " => " + root + "\n"
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string][]byte{
		"go.mod": []byte(goMod), "go.sum": sum,
		"main.go": []byte(strings.ReplaceAll(exampleMain, "MODULE", mod)),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "erpgateway")
	goBuild := func(proxy string) ([]byte, error) {
		build := exec.Command("go", "build", "-o", bin, ".")
		build.Dir = dir
		build.Env = append(os.Environ(), "GOFLAGS=-mod=mod -buildvcs=false", "GOPROXY="+proxy, "GOWORK=off")
		return build.CombinedOutput()
	}
	out, err := goBuild("off")
	if err != nil && bytes.Contains(out, []byte("GOPROXY=off")) {
		// A clean module cache filled by building this repository lacks
		// the go.mod files of dependencies it never loaded (the requirements
		// of an unpruned pre-1.17 module such as pgpassfile): fetch those
		// from the module proxy. The replaced gateway itself never is.
		proxy := os.Getenv("GOPROXY")
		if proxy == "" {
			proxy = "https://proxy.golang.org,direct"
		}
		t.Logf("offline build needs go.mod files outside the module cache; retrying with the module proxy:\n%s", out)
		out, err = goBuild(proxy)
	}
	if err != nil {
		t.Fatalf("go build of the example module (require %s, replace => %s): %v\n%s", mod, root, err, out)
	}

	run := exec.Command(bin, filepath.Join(root, "testdata", "fixture", "gateway.yaml"))
	state := t.TempDir()
	run.Env = append(os.Environ(), "GATEWAY_STORE=sqlite:"+filepath.Join(state, "gw.db"),
		"GATEWAY_HANDLER_INBOX="+filepath.Join(state, "inbox"), "GATEWAY_AUDIT_FILE="+filepath.Join(state, "audit.jsonl"))
	var runOut bytes.Buffer
	run.Stdout, run.Stderr = &runOut, &runOut
	if err := run.Run(); err != nil || !strings.Contains(runOut.String(), "embedded gateway ready: 1 partners") {
		t.Fatalf("example program: %v\n%s", err, runOut.String())
	}
}
