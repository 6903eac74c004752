package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"crypto/x509"

	as2client "github.com/edigateway/gateway/as2/client"
	"github.com/edigateway/gateway/inbox"
	"github.com/edigateway/gateway/internal/cms"
)

// TestMain lets the test binary act as the gateway binary: the crash test
// runs `gateway serve` as a real child process it can kill -9.
func TestMain(m *testing.M) {
	if os.Getenv("GATEWAY_TEST_RUN_MAIN") == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	code := m.Run()
	if faultBin.dir != "" {
		os.RemoveAll(faultBin.dir)
	}
	os.Exit(code)
}

// faultBin is the gateway built with the gatewayfault tag, which alone
// reads GATEWAY_FAULT_* (server/fault.go): built once, for the tests that
// inject faults. The test binary itself is a production build.
var faultBin struct {
	once      sync.Once
	dir, path string
	err       error
}

// goTool is the go command of the toolchain running the tests: go test
// puts its own GOROOT/bin first in the test's PATH.
func goTool() string {
	if g, err := exec.LookPath("go"); err == nil {
		return g
	}
	return "go"
}

func faultGateway(t *testing.T) string {
	t.Helper()
	faultBin.once.Do(func() {
		if faultBin.dir, faultBin.err = os.MkdirTemp("", "gateway-fault-"); faultBin.err != nil {
			return
		}
		faultBin.path = filepath.Join(faultBin.dir, "gateway")
		out, err := exec.Command(goTool(), "build", "-tags", "gatewayfault", "-o", faultBin.path, ".").CombinedOutput()
		if err != nil {
			faultBin.err = fmt.Errorf("go build -tags gatewayfault: %v: %s", err, out)
		}
	})
	if faultBin.err != nil {
		t.Fatal(faultBin.err)
	}
	return faultBin.path
}

func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startGateway runs `gateway serve -config cfg` and waits until it answers
// on addr: the test binary as the gateway, or, when extraEnv injects a
// fault (GATEWAY_FAULT_*), the gatewayfault build (faultGateway).
func startGateway(t *testing.T, cfg, addr string, extraEnv ...string) *exec.Cmd {
	t.Helper()
	return startGatewayFlags(t, cfg, addr, nil, extraEnv...)
}

// startGatewayFlags is startGateway with more serve flags.
func startGatewayFlags(t *testing.T, cfg, addr string, flags []string, extraEnv ...string) *exec.Cmd {
	t.Helper()
	bin := os.Args[0]
	for _, e := range extraEnv {
		if strings.HasPrefix(e, "GATEWAY_FAULT_") {
			bin = faultGateway(t)
		}
	}
	return startGatewayBinaryFlags(t, bin, cfg, addr, flags, extraEnv...)
}

// startGatewayBinary is startGateway with the binary bin; its log is
// serve-*.log beside cfg.
func startGatewayBinary(t *testing.T, bin, cfg, addr string, extraEnv ...string) *exec.Cmd {
	t.Helper()
	return startGatewayBinaryFlags(t, bin, cfg, addr, nil, extraEnv...)
}

// startGatewayBinaryFlags is startGatewayBinary with more serve flags.
func startGatewayBinaryFlags(t *testing.T, bin, cfg, addr string, flags []string, extraEnv ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "-config", cfg}, flags...)...)
	// The admin listener on a port of the kernel's choice, so that tests
	// (and other gateways on this machine) never compete for 9090.
	cmd.Env = append(os.Environ(), append([]string{"GATEWAY_TEST_RUN_MAIN=1", "GATEWAY_ADMIN_LISTEN=127.0.0.1:0"}, extraEnv...)...)
	logf, err := os.Create(filepath.Join(filepath.Dir(cfg), fmt.Sprintf("serve-%d.log", time.Now().UnixNano())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logf.Close() })
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
			resp.Body.Close()
			return cmd
		}
		// A gateway with a fault injected may come up and kill itself
		// between two polls (the kill matrix's senders are waiting): its
		// start-up line says it was up.
		if b, _ := os.ReadFile(logf.Name()); bytes.Contains(b, []byte(`"msg":"gateway listening"`)) {
			return cmd
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("gateway did not come up in 60 s; log %s:\n%s", logf.Name(), logTail(logf.Name()))
	return nil
}

// logTail is the end of a gateway's log, for a failure message.
func logTail(name string) string {
	b, _ := os.ReadFile(name)
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return string(b)
}

func readKeyPair(t *testing.T, cert, key string) cms.KeyPair {
	c, _ := os.ReadFile(cert)
	k, _ := os.ReadFile(key)
	kp, err := cms.ParseKeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// TestKillDuringHandlerThenResendDeliversOnce kills the real gateway
// process (SQLite store) after the handler wrote the payload and before
// the claim was accepted, restarts it and resends the identical message:
// the inbox must hold exactly one payload, and a further resend must get
// the duplicate MDN.
func TestKillDuringHandlerThenResendDeliversOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the gateway three times")
	}
	demo := filepath.Dir(demoConfig(t))
	dir := t.TempDir()
	addr := freePort(t)
	cfg := filepath.Join(dir, "gateway.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`listen: %s
admin:
  listen: 127.0.0.1:0
store: sqlite:gw.db
lease: 2s
partners: %s
identity:
  as2_id: GATEWAY
  keys:
    - cert: %s
      key: %s
handler:
  inbox: inbox
shutdown_timeout: 1s
`, addr, filepath.Join(demo, "partners"), filepath.Join(demo, "keys", "gateway.pem"), filepath.Join(demo, "keys", "gateway.key"))), 0o600)

	partner := readKeyPair(t, filepath.Join(demo, "partners", "demo-partner.pem"), filepath.Join(demo, "keys", "demo-partner.key"))
	gw := readKeyPair(t, filepath.Join(demo, "keys", "gateway.pem"), filepath.Join(demo, "keys", "gateway.key"))
	client := &as2client.Client{URL: "http://" + addr + "/as2", From: "DEMO", To: "GATEWAY",
		SignCert: partner.Cert, SignKey: partner.Key, SignDigest: "sha256",
		RecipientCerts: []*x509.Certificate{gw.Cert}, Cipher: "aes256-cbc", MDN: as2client.MDNSync, SignedMDN: true}
	msg, err := client.Prepare([]byte("UNB+UNOA:2+DEMO:14+GATEWAY:14+261130:1200+CRASH1'UNH+1+INVOIC:D:96A:UN'UNT+2+1'UNZ+1+CRASH1'"), "application/edifact", "invoice.edi")
	if err != nil {
		t.Fatal(err)
	}

	first := startGateway(t, cfg, addr, "GATEWAY_FAULT_HANDLER_DELAY=60s")
	sent := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := client.Send(ctx, msg)
		sent <- err
	}()
	inboxDir := filepath.Join(dir, "inbox", "demo")
	waitFor(t, func() bool { return len(inboxFiles(inboxDir)) == 1 }, "payload written by the first run")
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	first.Wait()
	if err := <-sent; err == nil {
		t.Log("first send returned without error after the kill")
	}

	startGateway(t, cfg, addr)
	time.Sleep(2500 * time.Millisecond) // the dead process's lease (2s) runs out
	res, err := client.Send(context.Background(), msg)
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK() || res.MDN.Disposition.IsWarning() {
		t.Fatalf("resend after restart: status %d, problems %v, disposition %v", res.Status, res.Problems, res.MDN)
	}
	res, err = client.Send(context.Background(), msg)
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK() || !strings.Contains(res.MDN.Disposition.String(), "duplicate-document") || !res.MDN.MICMatched {
		t.Fatalf("second resend: %v %v", res.Problems, res.MDN.Disposition)
	}
	if files := inboxFiles(inboxDir); len(files) != 1 {
		t.Fatalf("inbox holds %d files, want exactly 1: %v", len(files), files)
	}
}

// inboxFiles lists the delivered payloads in dir: not the temporary files
// a kill -9 during the write leaves behind, nor the sidecars
// (inbox.Payloads).
func inboxFiles(dir string) []string {
	names, _ := inbox.Payloads(dir)
	return names
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}
