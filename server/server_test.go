package server

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"gateway/config"
)

func demoConfig(t *testing.T) *config.Config {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	cfg, err := config.Load(filepath.Join(filepath.Dir(file), "..", "testdata", "demo", "gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg.Store = "sqlite:" + filepath.Join(dir, "gw.db")
	cfg.Handler.Inbox = filepath.Join(dir, "inbox")
	cfg.Audit.File = filepath.Join(dir, "audit.jsonl")
	cfg.ShutdownTimeout = 2 * time.Second
	return cfg
}

func TestServeHealthAndGracefulShutdown(t *testing.T) {
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
	resp, err := http.Get("http://" + ln.Addr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "ok\n" {
		t.Fatalf("healthz: %d %q", resp.StatusCode, b)
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
