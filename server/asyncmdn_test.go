package server

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edigateway/gateway/outbox"
)

// The served gateway's dispatcher checks every queued async MDN against the
// partner's as2.async_mdn_urls at the attempt: an unlisted loopback URL is
// refused without a request, and the refusal is in the audit file.
func TestServedDispatcherRefusesUnlistedAsyncMDN(t *testing.T) {
	cfg := demoConfig(t)
	s, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var hits atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer target.Close()
	ob := s.Backend.Outbox()
	ctx := context.Background()
	if err := ob.Enqueue(ctx, outbox.Delivery{ID: "d1", Partner: "demo", MessageID: "<m1@demo>", URL: target.URL + "/mdn",
		Header: http.Header{"Content-Type": {"multipart/report"}}, Body: []byte("mdn")}); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Serve(sctx, ln) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, st, err := ob.Get(ctx, "d1")
		if err != nil {
			t.Fatal(err)
		}
		if st == outbox.GaveUp {
			if !strings.Contains(got.LastError, "matches none of as2.async_mdn_urls of partner demo") {
				t.Fatalf("last error %q", got.LastError)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("state %s %+v", st, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if hits.Load() != 0 {
		t.Fatalf("%d requests reached the unlisted URL", hits.Load())
	}
	// The dispatcher audits the refusal after it marks the delivery given
	// up: wait for the record rather than read the file at once.
	for {
		b, err := os.ReadFile(cfg.Audit.File)
		if err == nil && strings.Contains(string(b), `"step":"delivery"`) && strings.Contains(string(b), `"decision":"refused"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("audit file %q %v", b, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
