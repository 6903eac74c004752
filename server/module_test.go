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
	fmt.Println("embedded gateway ready:", len(srv.Partners.Partners), "partners")
}
`

// modulePath reads the module line of the repository's go.mod, so that the
// test follows a rename of the module.
func modulePath(t *testing.T, root string) string {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	t.Fatal("go.mod has no module line")
	return ""
}

// TestExampleModuleBuildsAgainstGateway builds and runs a separate module
// that requires the gateway (with a replace to this checkout) and
// implements exchange.Handler. It works offline: the dependencies come from
// the module cache that building this repository filled, checked against a
// copy of its go.sum.
func TestExampleModuleBuildsAgainstGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	_, file, _, _ := runtime.Caller(0)
	root, err := filepath.Abs(filepath.Join(filepath.Dir(file), ".."))
	if err != nil {
		t.Fatal(err)
	}
	mod := modulePath(t, root)
	dir := t.TempDir()
	goMod := "module example.com/erpgateway\n\ngo 1.26\n\nrequire " + mod + " v0.0.0\n\nreplace " + mod + " => " + root + "\n"
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
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod -buildvcs=false", "GOPROXY=off", "GOSUMDB=off", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build of the example module (require %s, replace => %s): %v\n%s", mod, root, err, out)
	}

	run := exec.Command(bin, filepath.Join(root, "testdata", "demo", "gateway.yaml"))
	state := t.TempDir()
	run.Env = append(os.Environ(), "GATEWAY_STORE=sqlite:"+filepath.Join(state, "gw.db"),
		"GATEWAY_HANDLER_INBOX="+filepath.Join(state, "inbox"), "GATEWAY_AUDIT_FILE="+filepath.Join(state, "audit.jsonl"))
	var out bytes.Buffer
	run.Stdout, run.Stderr = &out, &out
	if err := run.Run(); err != nil || !strings.Contains(out.String(), "embedded gateway ready: 1 partners") {
		t.Fatalf("example program: %v\n%s", err, out.String())
	}
}
