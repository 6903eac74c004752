package outbound_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edigateway/gateway/outbound"
	"github.com/edigateway/gateway/outbound/outboundtest"
)

// TestMemoryContract runs the conformance kit on Memory.
func TestMemoryContract(t *testing.T) {
	// ClockedMemory is Memory with a clock SubmitAt sets: every check runs.
	outboundtest.Exercise(t, func(*testing.T) outbound.Store { return outboundtest.NewMemory() })
}

// fakeClock is a settable clock for a Memory.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *fakeClock) Advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func testMessage(id string) outbound.Message {
	return outbound.Message{ID: id, Partner: "acme", Protocol: outbound.AS2, MessageID: "<" + id + "@gateway>"}
}

// TestMemoryClock: the store reads every time from its clock: Created,
// Updated, NextAttempt, lease expiry and the deadline of an awaited MDN.
func TestMemoryClock(t *testing.T) {
	ctx := context.Background()
	clk := &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	m := outbound.NewMemory(outbound.MemoryClock(clk.Now))
	start := clk.Now()
	got, created, err := m.Submit(ctx, testMessage("a"), strings.NewReader("payload"))
	if err != nil || !created {
		t.Fatalf("Submit: %v, created %v", err, created)
	}
	if !got.Created.Equal(start) || !got.Updated.Equal(start) || !got.NextAttempt.Equal(start) {
		t.Fatalf("times %v %v %v, want the clock's %v", got.Created, got.Updated, got.NextAttempt, start)
	}
	leased, err := m.Lease(ctx, 10, time.Minute)
	if err != nil || len(leased) != 1 || !leased[0].LeasedUntil.Equal(start.Add(time.Minute)) {
		t.Fatalf("Lease: %v %+v", err, leased)
	}
	clk.Advance(59 * time.Second)
	if again, _ := m.Lease(ctx, 10, time.Minute); len(again) != 0 {
		t.Fatalf("leased again within the lease: %+v", again)
	}
	clk.Advance(time.Second)
	again, _ := m.Lease(ctx, 10, time.Minute)
	if len(again) != 1 || again[0].LeaseToken == leased[0].LeaseToken {
		t.Fatalf("not leased again with a new token when the lease ran out: %+v", again)
	}
	tok := again[0].LeaseToken
	if err := m.Posting(ctx, "a", tok, "mic"); err != nil {
		t.Fatal(err)
	}
	if err := m.Awaiting(ctx, "a", tok, clk.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour - time.Nanosecond)
	if l, _ := m.Lease(ctx, 10, time.Minute); len(l) != 0 {
		t.Fatalf("awaiting message leased before its deadline: %+v", l)
	}
	clk.Advance(time.Nanosecond)
	l, _ := m.Lease(ctx, 10, time.Minute)
	if len(l) != 1 || l[0].State != outbound.AwaitingMDN || l[0].Attempts != 1 {
		t.Fatalf("awaiting message past its deadline: %+v", l)
	}
	if got, _ := m.Get(ctx, "a"); !got.Updated.Equal(clk.Now().Add(-time.Hour)) {
		t.Errorf("Updated %v, want the time of Awaiting %v", got.Updated, clk.Now().Add(-time.Hour))
	}
}

// TestMemorySubmitReadsOutsideTheLock: a slow payload does not hold up the
// queue's other callers.
func TestMemorySubmitReadsOutsideTheLock(t *testing.T) {
	ctx := context.Background()
	m := outbound.NewMemory()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, _, err := m.Submit(ctx, testMessage("slow"), pr)
		done <- err
	}()
	if _, err := pw.Write([]byte("first half")); err != nil {
		t.Fatal(err)
	}
	// The Submit is now blocked reading: the store answers meanwhile.
	if _, _, err := m.Submit(ctx, testMessage("quick"), strings.NewReader("x")); err != nil {
		t.Fatalf("a Submit while another reads its payload: %v", err)
	}
	if _, err := m.Get(ctx, "slow"); !errors.Is(err, outbound.ErrNotFound) {
		t.Fatalf("Get of a message whose payload is still being read: %v, want outbound.ErrNotFound", err)
	}
	pw.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got, err := m.Get(ctx, "slow")
	if err != nil || got.Size != int64(len("first half")) {
		t.Fatalf("Get: %v %+v", err, got)
	}
}

// TestMemorySubmitCancelled: a Submit whose context ends while it reads
// stores nothing.
func TestMemorySubmitCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	m := outbound.NewMemory()
	r := readerFunc(func(p []byte) (int, error) { cancel(); return 0, io.EOF })
	if _, _, err := m.Submit(ctx, testMessage("a"), r); !errors.Is(err, context.Canceled) {
		t.Fatalf("Submit: %v, want context.Canceled", err)
	}
	if _, err := m.Get(context.Background(), "a"); !errors.Is(err, outbound.ErrNotFound) {
		t.Fatalf("Get after a cancelled Submit: %v, want outbound.ErrNotFound", err)
	}
}

type readerFunc func(p []byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// TestMemoryStatsByProtocol: a partner sending with both protocols has one
// entry per protocol, sorted by partner then protocol.
func TestMemoryStatsByProtocol(t *testing.T) {
	ctx := context.Background()
	m := outbound.NewMemory()
	for i, p := range []outbound.Protocol{outbound.AS4, outbound.AS2, outbound.AS4} {
		msg := testMessage(string(rune('a' + i)))
		msg.Protocol = p
		if _, _, err := m.Submit(ctx, msg, strings.NewReader("x")); err != nil {
			t.Fatal(err)
		}
	}
	st, err := m.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 2 || st[0].Protocol != outbound.AS2 || st[0].Queued != 1 || st[1].Protocol != outbound.AS4 || st[1].Queued != 2 {
		t.Fatalf("Stats: %+v, want acme/as2 with 1 queued, acme/as4 with 2", st)
	}
}
