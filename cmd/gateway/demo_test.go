package main

import (
	"bytes"
	"context"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// demoTestFile is the one test source that may read testdata/demo: the
// demo is the operators' to try things in (a partner they add there must
// not break go test), the tests have their own copy in testdata/fixture.
const demoTestFile = "cmd/gateway/demo_test.go"

// demoShipped are the files of testdata/demo as the repository ships them.
// The demo test copies these by name, so that what an operator added to
// the demo while trying it never reaches the test.
var demoShipped = []string{
	"gateway.yaml", "invoice.edi",
	"keys/gateway.pem", "keys/gateway.key", "keys/demo-partner.key",
	"partners/demo.yaml", "partners/demo-partner.pem",
}

// moduleRoot is the repository's root directory.
func moduleRoot(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root, err := filepath.Abs(filepath.Join(filepath.Dir(file), "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestOnlyTheDemoTestReadsTheDemo: no test source but demo_test.go names
// testdata/demo (as a path or as filepath.Join's "testdata", "demo").
func TestOnlyTheDemoTestReadsTheDemo(t *testing.T) {
	root := moduleRoot(t)
	var offenders []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "var" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		if filepath.ToSlash(rel) == demoTestFile {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "testdata/demo") || strings.Contains(line, `"testdata", "demo"`) {
				offenders = append(offenders, filepath.ToSlash(rel)+":"+strconv.Itoa(i+1)+": "+strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(offenders) > 0 {
		t.Fatalf("tests read testdata/demo, which operators may change while trying the demo; use testdata/fixture:\n%s", strings.Join(offenders, "\n"))
	}
}

// TestDemoIsNotReadByTests: a broken partner file an operator left in the
// demo directory does not change what the tests' partner directory loads.
func TestDemoIsNotReadByTests(t *testing.T) {
	if filepath.Base(filepath.Dir(demoConfig(t))) != "fixture" {
		t.Fatalf("demoConfig is %s, not the tests' fixture", demoConfig(t))
	}
	var out, errb bytes.Buffer
	if code := run([]string{"partners", "check", "-config", demoConfig(t)}, &out, &errb); code != 0 {
		t.Fatalf("fixture: exit %d: %s%s", code, out.String(), errb.String())
	}
}

// TestDemoWorksAsTheREADMESays runs the README's commands unchanged (serve
// with testdata/demo/gateway.yaml, then send and send-as4 as the demo
// partner) with the real binary, on a copy of the shipped demo files, while
// 127.0.0.1:9090 (Prometheus' port) is held by another listener: the
// gateway starts, its admin listener answers on the demo's admin.listen,
// both protocols get their verified receipt, and an async MDN reaches the
// demo's async MDN address (127.0.0.1:8078).
func TestDemoWorksAsTheREADMESays(t *testing.T) {
	root := moduleRoot(t)
	tmp := t.TempDir()
	for _, f := range demoShipped {
		b, err := os.ReadFile(filepath.Join(root, "testdata", "demo", filepath.FromSlash(f)))
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(tmp, "testdata", "demo", filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(dst), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Prometheus' port, taken: by this test if it is free, else by
	// whatever holds it already.
	if prom, err := net.Listen("tcp", "127.0.0.1:9090"); err == nil {
		defer prom.Close()
	} else {
		t.Logf("127.0.0.1:9090 is already taken (%v)", err)
	}
	// The demo's own ports: the README's commands need them.
	for _, addr := range []string{"127.0.0.1:8080", "127.0.0.1:8079", "127.0.0.1:8078"} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Skipf("the demo's port %s is taken by another program on this machine: %v", addr, err)
		}
		ln.Close()
	}

	env := []string{"GATEWAY_TEST_RUN_MAIN=1"}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "GATEWAY_") {
			env = append(env, e)
		}
	}
	gateway := func(ctx context.Context, args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, os.Args[0], args...)
		cmd.Dir, cmd.Env = tmp, env
		return cmd
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	serve := gateway(ctx, "serve", "-config", "testdata/demo/gateway.yaml")
	var log syncBuffer
	serve.Stdout, serve.Stderr = &log, &log
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- serve.Wait() }()
	defer func() {
		serve.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			serve.Process.Kill()
			<-exited
		}
	}()
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := http.Get("http://127.0.0.1:8079/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("serve -config testdata/demo/gateway.yaml ended (%v):\n%s", err, log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demo's admin listener 127.0.0.1:8079 did not answer /healthz within 90 s:\n%s", log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}

	send := func(want string, args ...string) {
		t.Helper()
		out, err := gateway(ctx, args...).CombinedOutput()
		t.Logf("gateway %s:\n%s", strings.Join(args, " "), out)
		if err != nil || !strings.Contains(string(out), want) {
			t.Fatalf("gateway %s: %v, want %q in:\n%s\nserve log:\n%s", strings.Join(args, " "), err, want, out, log.String())
		}
	}
	as2 := []string{"send", "-config", "testdata/demo/gateway.yaml", "-partner", "demo",
		"-key", "testdata/demo/keys/demo-partner.key", "-file", "testdata/demo/invoice.edi"}
	send("processed", as2...)
	send("duplicate-document", as2...)
	// The async MDN of the demo partner's async_mdn_urls, on a port of its own.
	send("result:       OK", append(as2, "-mdn", "async", "-async-listen", "127.0.0.1:8078", "-wait", "60s")...)
	send("signature valid", "send-as4", "-config", "testdata/demo/gateway.yaml", "-partner", "demo",
		"-key", "testdata/demo/keys/demo-partner.key", "testdata/demo/invoice.edi")
	files, _ := filepath.Glob(filepath.Join(tmp, "var", "inbox", "demo", "*"))
	if len(files) == 0 {
		t.Fatalf("no payload in var/inbox/demo after the demo's sends")
	}
}
