package server

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// When shutdown runs out of time, the exchanges' context is cancelled and
// their claims are abandoned. Serve must wait for that to finish: the caller
// closes the store right after Serve returns, and an abandon (or accept)
// against a closed store leaves the claim held until its lease runs out.
func TestShutdownWaitsForCancelledExchangesToFinish(t *testing.T) {
	cfg := demoConfig(t)
	cfg.ShutdownTimeout = 200 * time.Millisecond
	s, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var started, finished atomic.Bool
	s.mux.HandleFunc("POST /slow", func(w http.ResponseWriter, r *http.Request) {
		started.Store(true)
		<-r.Context().Done()
		time.Sleep(300 * time.Millisecond) // abandoning the claim
		finished.Store(true)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	go http.Post("http://"+ln.Addr().String()+"/slow", "text/plain", nil)
	for i := 0; !started.Load(); i++ {
		if i > 500 {
			t.Fatal("request never arrived")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop")
	}
	if !finished.Load() {
		t.Fatal("Serve returned while a cancelled exchange was still finishing")
	}
}
