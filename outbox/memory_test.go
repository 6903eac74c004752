package outbox

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"
)

// fakeClock is a settable clock shared by a store and a dispatcher.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock { return &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *fakeClock) Advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func delivery(id string) Delivery {
	return Delivery{ID: id, Partner: "acme", MessageID: "<m-" + id + "@acme>", URL: "http://127.0.0.1:1/mdn",
		Header: http.Header{"Content-Type": {"multipart/report"}}, Body: []byte("mdn " + id)}
}

func TestMemoryLifecycle(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	m := NewMemory(MemoryClock(clk.Now))
	if err := m.Enqueue(ctx, delivery("a")); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	if err := m.Enqueue(ctx, delivery("b")); err != nil {
		t.Fatal(err)
	}
	if err := m.Enqueue(ctx, delivery("a")); err == nil {
		t.Fatal("duplicate id accepted")
	}
	if err := m.Enqueue(ctx, Delivery{ID: "x"}); err == nil {
		t.Fatal("delivery without URL accepted")
	}

	got, err := m.Lease(ctx, 1, time.Minute)
	if err != nil || len(got) != 1 || got[0].ID != "a" {
		t.Fatalf("lease 1: %v %+v", err, got)
	}
	if string(got[0].Body) != "mdn a" || got[0].Header.Get("Content-Type") != "multipart/report" || !got[0].Created.Equal(clk.Now().Add(-time.Second)) {
		t.Fatalf("leased delivery %+v", got[0])
	}
	// Mutating the copy does not change the store.
	got[0].Body[0] = 'X'
	got[0].Header.Set("Content-Type", "changed")

	got, _ = m.Lease(ctx, 10, time.Minute)
	if len(got) != 1 || got[0].ID != "b" {
		t.Fatalf("a is leased and must be skipped: %+v", got)
	}
	// After the lease runs out, a is due again (its holder died).
	clk.Advance(time.Minute + time.Second)
	got, _ = m.Lease(ctx, 10, time.Minute)
	if len(got) != 2 || got[0].ID != "a" || string(got[0].Body) != "mdn a" || got[0].Header.Get("Content-Type") != "multipart/report" {
		t.Fatalf("after lease expiry: %+v", got)
	}

	next := clk.Now().Add(30 * time.Second)
	if err := m.Retry(ctx, "a", "", next, "HTTP 500"); err != nil {
		t.Fatal(err)
	}
	if err := m.Delivered(ctx, "b", ""); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.Lease(ctx, 10, time.Minute); len(got) != 0 {
		t.Fatalf("nothing is due before next attempt: %+v", got)
	}
	clk.Advance(30 * time.Second)
	got, _ = m.Lease(ctx, 10, time.Minute)
	if len(got) != 1 || got[0].ID != "a" || got[0].Attempts != 1 || got[0].LastError != "HTTP 500" {
		t.Fatalf("retry: %+v", got)
	}
	if err := m.GiveUp(ctx, "a", "", "HTTP 404"); err != nil {
		t.Fatal(err)
	}
	d, st, err := m.Get(ctx, "a")
	if err != nil || st != GaveUp || d.Attempts != 2 || d.LastError != "HTTP 404" {
		t.Fatalf("get a: %v %s %+v", err, st, d)
	}
	d, st, _ = m.Get(ctx, "b")
	if st != Delivered || d.Attempts != 1 {
		t.Fatalf("get b: %s %+v", st, d)
	}
	if _, _, err := m.Get(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get unknown: %v", err)
	}
	if err := m.Delivered(ctx, "nope", ""); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delivered unknown: %v", err)
	}
	if err := m.Retry(ctx, "b", "", next, "x"); err == nil {
		t.Fatal("retry of a delivered delivery accepted")
	}
	if l := m.List(); len(l) != 2 || l[0].ID != "a" || l[0].State != GaveUp || l[1].State != Delivered {
		t.Fatalf("list: %+v", l)
	}
}

func TestMemoryConcurrentLeaseHandsOutEachOnce(t *testing.T) {
	ctx := context.Background()
	m := NewMemory()
	for i := range 50 {
		if err := m.Enqueue(ctx, delivery(string(rune('A'+i)))); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				got, err := m.Lease(ctx, 3, time.Hour)
				if err != nil || len(got) == 0 {
					return
				}
				mu.Lock()
				for _, d := range got {
					seen[d.ID]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(seen) != 50 {
		t.Fatalf("%d distinct deliveries leased", len(seen))
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s leased %d times", id, n)
		}
	}
}
