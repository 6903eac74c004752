package exchange

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
)

// pausableRenewer is a memory store whose renewals can be held back, as if
// the gateway running the exchange froze (a long GC pause, SIGSTOP, a VM
// migration) while its handler ran.
type pausableRenewer struct {
	*dedup.MemoryStore
	paused  atomic.Bool
	renewed atomic.Int64
}

func (s *pausableRenewer) RenewClaims(ctx context.Context, claims []dedup.HeldClaim) error {
	if s.paused.Load() {
		return nil // the renewal never reached the store
	}
	s.renewed.Add(1)
	return s.MemoryStore.RenewClaims(ctx, claims)
}

// TestClaimLostStopsHandler: the renewals of a running exchange stop for
// longer than the 1s lease and another delivery takes the message over and
// is accepted; the next renewal finds the claim taken (fencing): the first
// handler's context ends with ErrClaimLost, and the first delivery is
// answered 503, never a second positive reply; the accepted one stands.
func TestClaimLostStopsHandler(t *testing.T) {
	t.Parallel()
	st := &pausableRenewer{MemoryStore: dedup.NewMemoryStore(dedup.Options{Lease: time.Second})}
	var calls atomic.Int64
	stopped := make(chan error, 1)
	entered := make(chan struct{})
	h := HandlerFunc(func(ctx context.Context, m *Message) error {
		if calls.Add(1) > 1 {
			return nil // the delivery that took over
		}
		close(entered)
		select {
		case <-ctx.Done():
			stopped <- context.Cause(ctx)
			return ctx.Err()
		case <-time.After(10 * time.Second):
			stopped <- nil
			return nil
		}
	})
	p := &Pipeline{Store: st, Audit: &audit.Memory{}, Handler: h, Lease: time.Second, Log: slog.New(slog.DiscardHandler)}
	var proto testProtocol
	in := proto.inbound("acme", "lost@acme", "payload")
	first := make(chan Reply, 1)
	go func() { first <- p.Process(context.Background(), in) }()
	<-entered
	st.paused.Store(true)
	time.Sleep(1300 * time.Millisecond) // the lease ran out unrenewed
	if r := p.Process(context.Background(), proto.inbound("acme", "lost@acme", "payload")); r.Status != 200 {
		t.Fatalf("delivery after the lease ran out: HTTP %d %q, want it taken over and accepted", r.Status, r.Body)
	}
	st.paused.Store(false)
	select {
	case cause := <-stopped:
		if !errors.Is(cause, ErrClaimLost) || !errors.Is(cause, dedup.ErrStaleClaim) {
			t.Fatalf("handler's context ended with %v, want ErrClaimLost (stale claim)", cause)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first handler was not stopped after its claim was taken over")
	}
	if r := <-first; r.Status != 503 {
		t.Fatalf("first delivery after losing its claim: HTTP %d %q, want 503", r.Status, r.Body)
	}
	d, err := st.Claim(context.Background(), dedup.ClaimRequest{Key: in.Message.TransportKey})
	if err != nil || d.Outcome != dedup.Duplicate {
		t.Fatalf("after both: %+v %v, want the taken-over delivery's accept", d, err)
	}
}

// TestSlowHandlerKeepsClaimAndLeaksNothing: a handler that runs 3s under a
// 1s lease keeps its claim (the heartbeat renewed it about every 333ms),
// concurrent deliveries are in flight throughout with Retry-After within
// the lease, and when the exchanges are over no timer or goroutine of theirs
// is left.
func TestSlowHandlerKeepsClaimAndLeaksNothing(t *testing.T) {
	st := &pausableRenewer{MemoryStore: dedup.NewMemoryStore(dedup.Options{Lease: time.Second})}
	var calls atomic.Int64
	entered := make(chan struct{})
	h := HandlerFunc(func(ctx context.Context, m *Message) error {
		if calls.Add(1) == 1 {
			close(entered)
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(3 * time.Second):
			}
		}
		return nil
	})
	p := &Pipeline{Store: st, Audit: &audit.Memory{}, Handler: h, Lease: time.Second, Log: slog.New(slog.DiscardHandler)}
	var proto testProtocol
	before := runtime.NumGoroutine()
	first := make(chan Reply, 1)
	go func() { first <- p.Process(context.Background(), proto.inbound("acme", "slow@acme", "payload")) }()
	<-entered
	var wg sync.WaitGroup
	for i := 0; i < 12; i++ {
		r := p.Process(context.Background(), proto.inbound("acme", "slow@acme", "payload"))
		if r.Status != 503 || r.Header.Get("Retry-After") != "1" {
			t.Fatalf("copy %d during the slow handler: HTTP %d Retry-After %q, want 503 in flight within the 1s lease",
				i, r.Status, r.Header.Get("Retry-After"))
		}
		// Short exchanges beside it start and end their own keepers.
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Process(context.Background(), proto.inbound("acme", "other@acme"+time.Now().String(), "x"))
		}()
		time.Sleep(200 * time.Millisecond)
	}
	wg.Wait()
	if r := <-first; r.Status != 200 {
		t.Fatalf("slow delivery: HTTP %d %q", r.Status, r.Body)
	}
	if n := st.renewed.Load(); n < 6 {
		t.Errorf("%d renewals during a 3s run under a 1s lease, want about 9", n)
	}
	if n := calls.Load(); n != 13 {
		t.Errorf("handler runs %d, want 13 (the slow one once, 12 others)", n)
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after the exchanges, %d before", n, before)
	}
	renewed := st.renewed.Load()
	time.Sleep(700 * time.Millisecond)
	if n := st.renewed.Load(); n != renewed {
		t.Errorf("claims still renewed after their exchanges ended (%d → %d)", renewed, n)
	}
}
