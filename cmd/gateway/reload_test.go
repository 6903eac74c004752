package main

import (
	"context"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	as2client "github.com/edigateway/gateway/as2/client"
)

// TestSIGHUPReloadsAndDoesNotExit runs the real binary: SIGHUP reloads the
// partner directory (a partner added to it is accepted afterwards) and the
// process keeps serving; SIGTERM still ends it gracefully (exit 0).
func TestSIGHUPReloadsAndDoesNotExit(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the gateway")
	}
	demo := filepath.Dir(demoConfig(t))
	dir := t.TempDir()
	pdir := filepath.Join(dir, "partners")
	os.Mkdir(pdir, 0o750)
	for _, n := range []string{"demo.yaml", "demo-partner.pem"} {
		b, err := os.ReadFile(filepath.Join(demo, "partners", n))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(pdir, n), b, 0o600)
	}
	addr := freePort(t)
	cfg := filepath.Join(dir, "gateway.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`listen: %s
store: sqlite:gw.db
partners: partners
reload_on_change: false
identity:
  as2_id: GATEWAY
  keys:
    - cert: %s
      key: %s
handler:
  inbox: inbox
shutdown_timeout: 2s
`, addr, filepath.Join(demo, "keys", "gateway.pem"), filepath.Join(demo, "keys", "gateway.key"))), 0o600)

	partner := readKeyPair(t, filepath.Join(demo, "partners", "demo-partner.pem"), filepath.Join(demo, "keys", "demo-partner.key"))
	gw := readKeyPair(t, filepath.Join(demo, "keys", "gateway.pem"), filepath.Join(demo, "keys", "gateway.key"))
	n := 0
	send := func(from string) string {
		n++
		ref := fmt.Sprintf("R%d", n)
		c := &as2client.Client{URL: "http://" + addr + "/as2", From: from, To: "GATEWAY",
			SignCert: partner.Cert, SignKey: partner.Key, SignDigest: "sha256",
			RecipientCerts: []*x509.Certificate{gw.Cert}, Cipher: "aes256-cbc", MDN: as2client.MDNSync, SignedMDN: true,
			MDNCerts: []*x509.Certificate{gw.Cert}}
		msg, err := c.Prepare([]byte("UNB+UNOA:2+"+from+":14+GATEWAY:14+261201:1200+"+ref+"'UNH+1+INVOIC:D:96A:UN'UNT+2+1'UNZ+1+"+ref+"'"), "application/edifact", "x.edi")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		res, err := c.Send(ctx, msg)
		if err != nil {
			return err.Error()
		}
		if res.MDN == nil {
			return fmt.Sprintf("status %d %v", res.Status, res.Problems)
		}
		return res.MDN.Disposition.String()
	}

	gwp := startGateway(t, cfg, addr)
	logs := func() string {
		files, _ := filepath.Glob(filepath.Join(dir, "serve-*.log"))
		var b strings.Builder
		for _, f := range files {
			x, _ := os.ReadFile(f)
			b.Write(x)
		}
		return b.String()
	}
	if d := send("DEMO2"); !strings.Contains(d, "unknown-trading-partner") {
		t.Fatalf("before the reload: %s", d)
	}
	b, _ := os.ReadFile(filepath.Join(pdir, "demo.yaml"))
	y := strings.Replace(strings.Replace(string(b), "id: demo\n", "id: demo2\n", 1), "as2_id: DEMO\n", "as2_id: DEMO2\n", 1)
	y = y[:strings.Index(y, "as4:")]
	os.WriteFile(filepath.Join(pdir, "demo2.yaml"), []byte(y), 0o600)

	if err := gwp.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		return strings.Contains(logs(), `"msg":"configuration reloaded","trigger":"sighup","partners":2`)
	}, "the reload after SIGHUP")
	if d := send("DEMO2"); !strings.HasSuffix(d, "; processed") {
		t.Fatalf("after SIGHUP the added partner got %q; log:\n%s", d, logs())
	}
	if d := send("DEMO"); !strings.HasSuffix(d, "; processed") {
		t.Fatalf("after SIGHUP the existing partner got %q", d)
	}

	// A broken file: SIGHUP keeps the running configuration.
	os.WriteFile(filepath.Join(pdir, "demo2.yaml"), []byte("id: demo2\nas2: [\n"), 0o600)
	gwp.Process.Signal(syscall.SIGHUP)
	waitFor(t, func() bool {
		return strings.Contains(logs(), `"level":"ERROR","msg":"configuration reload failed; the running configuration stays","trigger":"sighup"`)
	}, "the failed reload")
	if d := send("DEMO2"); !strings.HasSuffix(d, "; processed") {
		t.Fatalf("after a failed reload the partner got %q", d)
	}

	if err := gwp.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- gwp.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v; log:\n%s", err, logs())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no exit after SIGTERM")
	}
	if !strings.Contains(logs(), "shutting down; waiting for in-flight exchanges") {
		t.Fatalf("no graceful shutdown in the log:\n%s", logs())
	}
}

// TestReloadKeepsCommandLineListenAddresses runs the real binary with
// -listen and -admin-listen: a reload reads the file with those overrides,
// so it does not report listen and admin.listen (which the file and the
// environment set otherwise) as changes that need a restart; a setting
// that did change in the file still is.
func TestReloadKeepsCommandLineListenAddresses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the gateway")
	}
	demo := filepath.Dir(demoConfig(t))
	dir := t.TempDir()
	addr := freePort(t)
	cfg := filepath.Join(dir, "gateway.yaml")
	yaml := fmt.Sprintf(`listen: 127.0.0.1:2
admin:
  listen: 127.0.0.1:3
lease: 5m
store: sqlite:gw.db
partners: %s
reload_on_change: false
identity:
  as2_id: GATEWAY
  keys:
    - cert: %s
      key: %s
handler:
  inbox: inbox
shutdown_timeout: 2s
`, filepath.Join(demo, "partners"), filepath.Join(demo, "keys", "gateway.pem"), filepath.Join(demo, "keys", "gateway.key"))
	os.WriteFile(cfg, []byte(yaml), 0o600)
	// The environment names yet another admin address: the flag wins.
	gw := startGatewayFlags(t, cfg, addr, []string{"-listen", addr, "-admin-listen", "127.0.0.1:0"}, "GATEWAY_ADMIN_LISTEN=127.0.0.1:4")
	logs := func() string {
		files, _ := filepath.Glob(filepath.Join(dir, "serve-*.log"))
		var b strings.Builder
		for _, f := range files {
			x, _ := os.ReadFile(f)
			b.Write(x)
		}
		return b.String()
	}
	reloads := func() int { return strings.Count(logs(), `"msg":"configuration reloaded","trigger":"sighup"`) }

	gw.Process.Signal(syscall.SIGHUP)
	waitFor(t, func() bool { return reloads() == 1 }, "the reload after SIGHUP")
	if l := logs(); strings.Contains(l, "need a restart") {
		t.Fatalf("a reload without changes reports changes that need a restart:\n%s", l)
	}

	os.WriteFile(cfg, []byte(strings.Replace(yaml, "lease: 5m", "lease: 6m", 1)), 0o600)
	gw.Process.Signal(syscall.SIGHUP)
	waitFor(t, func() bool { return reloads() == 2 }, "the second reload")
	waitFor(t, func() bool { return strings.Contains(logs(), "need a restart") }, "the restart warning for lease")
	if l := logs(); !strings.Contains(l, `"settings":["lease"]`) {
		t.Fatalf("the changed lease is not the only setting that needs a restart:\n%s", l)
	}
}
