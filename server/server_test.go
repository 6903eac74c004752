package server

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/internal/cms"
)

func demoConfig(t *testing.T) *config.Config {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	cfg, err := config.Load(filepath.Join(filepath.Dir(file), "..", "testdata", "fixture", "gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg.Store = "sqlite:" + filepath.Join(dir, "gw.db")
	cfg.Handler.Inbox = filepath.Join(dir, "inbox")
	cfg.Audit.File = filepath.Join(dir, "audit.jsonl")
	cfg.ShutdownTimeout = 2 * time.Second
	cfg.DrainPeriod = 0 // the drain's own tests set it (drain_test.go)
	cfg.Admin.Listen = "127.0.0.1:0"
	return cfg
}

func TestServeGracefulShutdown(t *testing.T) {
	cfg := demoConfig(t)
	s, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	resp, err := http.Get("http://" + ln.Addr().String() + "/as2")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET /as2: %d", resp.StatusCode)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("serve did not stop")
	}
}

func TestNewFailsOnBadPartnerDirectory(t *testing.T) {
	cfg := demoConfig(t)
	cfg.Partners = filepath.Join(t.TempDir(), "missing")
	if _, err := New(context.Background(), cfg, nil); err == nil {
		t.Fatal("missing partner directory accepted")
	}
}

func TestSlowClientsAreCutOff(t *testing.T) {
	cfg := demoConfig(t)
	cfg.Limits.ReadHeaderTimeout = 200 * time.Millisecond
	cfg.Limits.ReadTimeout = 400 * time.Millisecond
	s, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Serve(ctx, ln)

	for name, partial := range map[string]string{
		"header": "POST /as2 HTTP/1.1\r\nHost: x\r\nAS2-From: DEMO\r\n",
		"body":   "POST /as2 HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nabc",
	} {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		conn.Write([]byte(partial))
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, _ := io.ReadAll(conn)
		conn.Close()
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("%s: slow client held the connection for %s", name, took)
		}
		if name == "header" && len(b) > 0 && !bytes.Contains(b, []byte("408")) && !bytes.Contains(b, []byte("400")) {
			t.Errorf("%s: unexpected answer %q", name, b)
		}
	}
}

// demoAS2KeyPairs is the demo partner's key pair and the gateway's, from
// testdata/fixture, for tests that send AS2 as the demo partner.
func demoAS2KeyPairs(t testing.TB) (partner, gw cms.KeyPair) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	demo := filepath.Join(filepath.Dir(file), "..", "testdata", "fixture")
	read := func(p string) []byte {
		b, err := os.ReadFile(filepath.Join(demo, p))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	partner, err := cms.ParseKeyPair(read("partners/demo-partner.pem"), read("keys/demo-partner.key"))
	if err != nil {
		t.Fatal(err)
	}
	gw, err = cms.ParseKeyPair(read("keys/gateway.pem"), read("keys/gateway.key"))
	if err != nil {
		t.Fatal(err)
	}
	return partner, gw
}
