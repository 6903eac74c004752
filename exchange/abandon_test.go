package exchange

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/dedup/deduptest"
	"github.com/edigateway/gateway/internal/pgtest"
	"github.com/edigateway/gateway/store/pgstore"
	"github.com/edigateway/gateway/store/sqlitestore"
)

// storeLedger is a store that is also the ledger, as every real one is.
type storeLedger interface {
	dedup.Store
	dedup.Ledger
}

type flakyStore = deduptest.Flaky

// recoveryStores are the stores the outage tests run on.
func recoveryStores(t *testing.T) map[string]func(t *testing.T) storeLedger {
	opts := dedup.Options{Lease: 5 * time.Minute}
	return map[string]func(t *testing.T) storeLedger{
		"memory": func(t *testing.T) storeLedger { return dedup.NewMemoryStore(opts) },
		"sqlite": func(t *testing.T) storeLedger {
			s, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "gw.db"), opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
		"postgres": func(t *testing.T) storeLedger {
			dsn, schema := pgtest.Schema(t)
			s, err := pgstore.Open(context.Background(), dsn, opts, pgstore.WithSchema(schema))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
	}
}

// outageFixture: a pipeline (lease 5 minutes) whose handler fails on its
// first call after taking the store down, so that every abandon of that
// delivery fails.
type outageFixture struct {
	p     *Pipeline
	st    *flakyStore
	h     *countingHandler
	proto *testProtocol
}

func newOutageFixture(t *testing.T, st storeLedger, ledger bool) *outageFixture {
	f := &outageFixture{st: deduptest.NewFlaky(st), proto: &testProtocol{}}
	f.h = &countingHandler{fn: func(*Message) error {
		if f.h.calls == 1 {
			f.st.Down.Store(true) // the store goes away while the handler runs
			return fmt.Errorf("ERP rejected the document")
		}
		return nil
	}}
	f.p = &Pipeline{Store: f.st, Audit: &audit.Memory{}, Handler: f.h, Lease: 5 * time.Minute, Log: slog.New(slog.DiscardHandler)}
	if ledger {
		f.p.Ledger = f.st
	}
	return f
}

func (f *outageFixture) send(id, payload string) Reply {
	return f.p.Process(context.Background(), f.proto.inbound("acme", id, payload))
}

// TestAbandonRetriedAfterOutage: the handler fails while the store is down,
// so the transport claim (and the interchange claim) cannot be abandoned.
// Once the store is back, the partner's retransmission (same Message-ID, or
// the same interchange under a new one) is processed at once instead of
// getting 503 in flight until the 5-minute lease runs out; on every store.
func TestAbandonRetriedAfterOutage(t *testing.T) {
	for name, open := range recoveryStores(t) {
		t.Run(name, func(t *testing.T) {
			t.Run("retransmission", func(t *testing.T) {
				f := newOutageFixture(t, open(t), false)
				if r := f.send("m1", "payload"); !strings.Contains(string(r.Body), "failed kind=1") {
					t.Fatalf("first delivery: %d %q", r.Status, r.Body)
				}
				if n := f.p.PendingAbandons(); n != 1 {
					t.Fatalf("pending abandons after the outage: %d, want 1", n)
				}
				f.st.Down.Store(false)
				r := f.send("m1", "payload")
				if r.Status != 200 || !strings.HasPrefix(string(r.Body), "receipt") || f.h.n() != 2 {
					t.Fatalf("retransmission after the store came back: %d %q (Retry-After %q), handler ran %d times; want processed",
						r.Status, r.Body, r.Header.Get("Retry-After"), f.h.n())
				}
				if n := f.p.PendingAbandons(); n != 0 {
					t.Errorf("pending abandons after the retransmission: %d", n)
				}
			})
			t.Run("interchange-resent", func(t *testing.T) {
				f := newOutageFixture(t, open(t), true)
				ref := "OUTAGE" + strings.ReplaceAll(t.Name(), "/", "")[:4]
				if r := f.send("m1", invoic(ref, "INV-1")); !strings.Contains(string(r.Body), "failed kind=1") {
					t.Fatalf("first delivery: %d %q", r.Status, r.Body)
				}
				if n := f.p.PendingAbandons(); n != 2 {
					t.Fatalf("pending abandons after the outage: %d, want 2 (transport and interchange)", n)
				}
				f.st.Down.Store(false)
				r := f.send("m2", invoic(ref, "INV-1"))
				if r.Status != 200 || !strings.HasPrefix(string(r.Body), "receipt") || f.h.n() != 2 {
					t.Fatalf("EDI resend under a new id after the store came back: %d %q, handler ran %d times; want processed",
						r.Status, r.Body, f.h.n())
				}
			})
			t.Run("background", func(t *testing.T) {
				f := newOutageFixture(t, open(t), false)
				in := f.proto.inbound("acme", "m1", "payload")
				f.p.Process(context.Background(), in)
				f.st.Down.Store(false)
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error)
				go func() { done <- f.p.RetryAbandons(ctx) }()
				deadline := time.Now().Add(5 * time.Second)
				for f.p.PendingAbandons() != 0 && time.Now().Before(deadline) {
					time.Sleep(20 * time.Millisecond)
				}
				cancel()
				<-done
				if n := f.p.PendingAbandons(); n != 0 {
					t.Fatalf("the background retry left %d abandons pending", n)
				}
				d, err := f.st.Claim(context.Background(), dedup.ClaimRequest{Key: in.Message.TransportKey, PayloadSHA256: "x"})
				if err != nil || d.Outcome != dedup.Claimed {
					t.Errorf("claim after the background retry: %v %v, want claimed (released)", d.Outcome, err)
				}
			})
		})
	}
}

// TestPendingAbandonsBounded: the retry list holds at most
// MaxPendingAbandons entries; entries past their lease, or whose claim went
// stale, are dropped without a store call succeeding.
func TestPendingAbandonsBounded(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var clock atomic.Int64
	clock.Store(now.UnixNano())
	mem := dedup.NewMemoryStore(dedup.Options{Lease: time.Minute})
	st := deduptest.NewFlaky(mem)
	p := &Pipeline{Store: st, Lease: time.Minute, MaxPendingAbandons: 2, Log: slog.New(slog.DiscardHandler),
		Now: func() time.Time { return time.Unix(0, clock.Load()) }}
	lg := p.log()
	for i := range 3 {
		p.keepAbandon(transportClaim, dedup.HashFields("k", fmt.Sprint(i)), "t", lg)
	}
	if n := p.PendingAbandons(); n != 2 {
		t.Fatalf("pending abandons: %d, want the bound 2", n)
	}
	// Stale tokens: the memory store answers ErrStaleClaim; dropped.
	clock.Add(int64(2 * time.Second))
	p.retryDueAbandons(context.Background())
	if n := p.PendingAbandons(); n != 0 {
		t.Errorf("stale claims still pending: %d", n)
	}
	// Store down, then the lease passes: dropped without a successful call.
	st.Down.Store(true)
	p.keepAbandon(transportClaim, dedup.HashFields("k", "down"), "t", lg)
	clock.Add(int64(2 * time.Second))
	p.retryDueAbandons(context.Background())
	if n := p.PendingAbandons(); n != 1 {
		t.Fatalf("pending while the store is down: %d, want 1", n)
	}
	clock.Add(int64(2 * time.Minute))
	p.retryDueAbandons(context.Background())
	if n := p.PendingAbandons(); n != 0 {
		t.Errorf("an abandon past its lease is still pending")
	}
}
