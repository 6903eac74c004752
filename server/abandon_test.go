package server

import (
	"context"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	as2client "github.com/edigateway/gateway/as2/client"
	"github.com/edigateway/gateway/dedup/deduptest"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/internal/cms"
)

// TestServeRetriesFailedAbandons: the store goes down while the handler
// runs and the handler fails, so the claim cannot be abandoned. Serve's
// background worker releases it soon after the store is back, without a
// retransmission to trigger it.
func TestServeRetriesFailedAbandons(t *testing.T) {
	cfg := demoConfig(t)
	s, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fl := deduptest.NewFlaky(s.Backend)
	s.Pipeline.Store = fl
	var calls atomic.Int32
	s.SetHandler(exchange.HandlerFunc(func(context.Context, *exchange.Message) error {
		if calls.Add(1) == 1 {
			fl.Down.Store(true)
			return errors.New("ERP unreachable")
		}
		return nil
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	defer func() { cancel(); <-done }()

	demo := filepath.Dir(cfg.File)
	pair := func(cert, key string) cms.KeyPair {
		c, _ := os.ReadFile(filepath.Join(demo, cert))
		k, _ := os.ReadFile(filepath.Join(demo, key))
		kp, err := cms.ParseKeyPair(c, k)
		if err != nil {
			t.Fatal(err)
		}
		return kp
	}
	partner, gw := pair("partners/demo-partner.pem", "keys/demo-partner.key"), pair("keys/gateway.pem", "keys/gateway.key")
	c := &as2client.Client{URL: "http://" + ln.Addr().String() + "/as2", From: "DEMO", To: "GATEWAY", SignCert: partner.Cert,
		SignKey: partner.Key, SignDigest: "sha256", RecipientCerts: []*x509.Certificate{gw.Cert}, Cipher: "aes128-cbc",
		MDN: as2client.MDNSync, SignedMDN: true}
	msg, err := c.Prepare([]byte("outage test"), "text/plain", "outage.txt")
	if err != nil {
		t.Fatal(err)
	}
	if r, err := c.Send(context.Background(), msg); err == nil && r.OK() {
		t.Fatalf("first delivery: %+v, want HTTP 503 (the handler failed)", r)
	}
	if n := s.Pipeline.PendingAbandons(); n != 1 {
		t.Fatalf("pending abandons after the outage: %d, want 1", n)
	}
	fl.Down.Store(false)
	deadline := time.Now().Add(5 * time.Second)
	for s.Pipeline.PendingAbandons() != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := s.Pipeline.PendingAbandons(); n != 0 {
		t.Fatalf("serve did not retry the failed abandon: %d pending after 5s", n)
	}
}
