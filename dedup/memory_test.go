package dedup_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/dedup/deduptest"
)

func TestMemoryStoreContract(t *testing.T) {
	deduptest.Exercise(t, func(t testing.TB, opts dedup.Options) dedup.Store {
		return dedup.NewMemoryStore(opts)
	})
}

// fakeClock is a manually advanced clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newClocked(lease time.Duration) (*dedup.MemoryStore, *fakeClock) {
	clk := &fakeClock{now: t0}
	return dedup.NewMemoryStore(dedup.Options{Lease: lease}, dedup.MemoryClock(clk.Now)), clk
}

const key = dedup.Key("6a1f0c6f1d0e4a2b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b")

func TestMemoryLeaseBoundaries(t *testing.T) {
	ctx := context.Background()
	s, clk := newClocked(10 * time.Second)
	d, err := s.Claim(ctx, dedup.ClaimRequest{Key: key, PayloadSHA256: "h1"})
	if err != nil || d.Outcome != dedup.Claimed || !d.FirstSeen.Equal(t0) {
		t.Fatalf("first claim: %+v, %v", d, err)
	}
	for _, tc := range []struct {
		at    time.Duration
		retry time.Duration
	}{
		{0, 10 * time.Second},
		{1500 * time.Millisecond, 9 * time.Second}, // 8.5s left, rounded up
		{9 * time.Second, time.Second},
		{9999 * time.Millisecond, time.Second}, // 1ms left: at least one second
	} {
		clk.now = t0.Add(tc.at)
		got, err := s.Claim(ctx, dedup.ClaimRequest{Key: key})
		if err != nil || got.Outcome != dedup.InFlight || got.RetryAfter != tc.retry || !got.FirstSeen.Equal(t0) {
			t.Errorf("at +%v: %+v, %v; want in-flight, retry %v, first seen %v", tc.at, got, err, tc.retry, t0)
		}
	}
	// At exactly the end of the lease the key may be taken over.
	clk.now = t0.Add(10 * time.Second)
	got, err := s.Claim(ctx, dedup.ClaimRequest{Key: key, PayloadSHA256: "h2"})
	if err != nil || got.Outcome != dedup.Claimed || got.Token == d.Token || got.Reused {
		t.Fatalf("claim at lease end: %+v, %v", got, err)
	}
	if !got.FirstSeen.Equal(t0.Add(10 * time.Second)) {
		t.Errorf("takeover FirstSeen %v, want reset to the takeover time", got.FirstSeen)
	}
	if err := s.Accept(ctx, key, d.Token, []byte("old")); !errors.Is(err, dedup.ErrStaleClaim) {
		t.Errorf("old holder's Accept: %v", err)
	}
	if err := s.Accept(ctx, key, got.Token, []byte("new")); err != nil {
		t.Fatal(err)
	}
	dup, _ := s.Claim(ctx, dedup.ClaimRequest{Key: key, PayloadSHA256: "h3"})
	if dup.Outcome != dedup.Duplicate || string(dup.Reply) != "new" || dup.PayloadSHA256 != "h2" ||
		!dup.FirstSeen.Equal(t0.Add(10*time.Second)) || dup.RetryAfter != 0 {
		t.Errorf("duplicate: %+v", dup)
	}
}

func TestMemoryLateAcceptWithoutTakeover(t *testing.T) {
	ctx := context.Background()
	s, clk := newClocked(time.Second)
	d, _ := s.Claim(ctx, dedup.ClaimRequest{Key: key})
	clk.Add(time.Hour)
	if err := s.Accept(ctx, key, d.Token, []byte("late")); err != nil {
		t.Fatalf("late accept by the untouched holder: %v", err)
	}
}

func TestMemoryWindowBoundaries(t *testing.T) {
	ctx := context.Background()
	s, clk := newClocked(time.Minute)
	d, _ := s.Claim(ctx, dedup.ClaimRequest{Key: key, PayloadSHA256: "h1"})
	if err := s.Accept(ctx, key, d.Token, []byte("r1")); err != nil {
		t.Fatal(err)
	}
	w := 24 * time.Hour
	clk.now = t0.Add(w) // first seen exactly Window ago: still a duplicate
	if got, _ := s.Claim(ctx, dedup.ClaimRequest{Key: key, Window: w}); got.Outcome != dedup.Duplicate {
		t.Fatalf("at exactly the window: %v", got.Outcome)
	}
	clk.now = t0.Add(w + time.Nanosecond)
	got, _ := s.Claim(ctx, dedup.ClaimRequest{Key: key, PayloadSHA256: "h2", Window: w})
	if got.Outcome != dedup.Claimed || !got.Reused {
		t.Fatalf("past the window: %+v", got)
	}
	// A zero window never reuses, however old the row.
	if err := s.Accept(ctx, key, got.Token, []byte("r2")); err != nil {
		t.Fatal(err)
	}
	clk.Add(1000 * w)
	if got, _ := s.Claim(ctx, dedup.ClaimRequest{Key: key}); got.Outcome != dedup.Duplicate || string(got.Reply) != "r2" {
		t.Fatalf("zero window: %+v", got)
	}
}

func TestMemoryExpireBoundaries(t *testing.T) {
	ctx := context.Background()
	s, clk := newClocked(time.Minute)
	keys := map[string]dedup.Key{
		"accepted":  dedup.HashFields("t", "accepted"),
		"abandoned": dedup.HashFields("t", "abandoned"),
		"claimed":   dedup.HashFields("t", "claimed"),
		"expired":   dedup.HashFields("t", "expired lease"),
	}
	tok := map[string]dedup.Token{}
	for name, k := range keys {
		d, _ := s.Claim(ctx, dedup.ClaimRequest{Key: k})
		tok[name] = d.Token
	}
	_ = s.Accept(ctx, keys["accepted"], tok["accepted"], nil)
	_ = s.Abandon(ctx, keys["abandoned"], tok["abandoned"])
	// Rows first seen exactly at "before" stay.
	if n, err := s.Expire(ctx, t0); n != 0 || err != nil {
		t.Fatalf("Expire(first seen): %d, %v", n, err)
	}
	clk.Add(time.Hour) // the lease of both claims ran out; still not removable
	n, err := s.Expire(ctx, t0.Add(time.Nanosecond))
	if n != 2 || err != nil {
		t.Fatalf("Expire: %d, %v; want the accepted and the abandoned row", n, err)
	}
	if s.Len() != 2 {
		t.Fatalf("%d rows left, want the two claims", s.Len())
	}
	if err := s.Accept(ctx, keys["claimed"], tok["claimed"], []byte("ok")); err != nil {
		t.Fatalf("Accept of a claim that survived Expire: %v", err)
	}
}

func TestMemoryEmptyReplyIsNotNil(t *testing.T) {
	ctx := context.Background()
	s, _ := newClocked(time.Minute)
	d, _ := s.Claim(ctx, dedup.ClaimRequest{Key: key})
	if err := s.Accept(ctx, key, d.Token, nil); err != nil {
		t.Fatal(err)
	}
	got, _ := s.Claim(ctx, dedup.ClaimRequest{Key: key})
	if got.Outcome != dedup.Duplicate || got.Reply == nil || len(got.Reply) != 0 {
		t.Fatalf("duplicate of an empty reply: %+v (nil reply: %v)", got, got.Reply == nil)
	}
}

func TestMemoryClosedIsUnavailable(t *testing.T) {
	ctx := context.Background()
	s, _ := newClocked(time.Minute)
	d, _ := s.Claim(ctx, dedup.ClaimRequest{Key: key})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, dedup.ClaimRequest{Key: key}); !errors.Is(err, dedup.ErrUnavailable) {
		t.Errorf("Claim after Close: %v", err)
	}
	if err := s.Accept(ctx, key, d.Token, nil); !errors.Is(err, dedup.ErrUnavailable) {
		t.Errorf("Accept after Close: %v", err)
	}
	if err := s.Abandon(ctx, key, d.Token); !errors.Is(err, dedup.ErrUnavailable) {
		t.Errorf("Abandon after Close: %v", err)
	}
	if _, err := s.Expire(ctx, t0); !errors.Is(err, dedup.ErrUnavailable) {
		t.Errorf("Expire after Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestMemoryCanceledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s, _ := newClocked(time.Minute)
	if _, err := s.Claim(ctx, dedup.ClaimRequest{Key: key}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Claim with a canceled context: %v", err)
	}
	if s.Len() != 0 {
		t.Fatalf("a canceled claim left a row")
	}
}

func TestNewToken(t *testing.T) {
	seen := map[dedup.Token]bool{}
	for range 1000 {
		tok, err := dedup.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		if len(tok) != 32 || !bytes.Equal([]byte(tok), bytes.ToLower([]byte(tok))) || seen[tok] {
			t.Fatalf("token %q: want 32 lowercase hex characters, unique", tok)
		}
		seen[tok] = true
	}
}

func TestMemoryStoreRenew(t *testing.T) {
	t.Parallel()
	deduptest.ExerciseRenew(t, func(t testing.TB, opts dedup.Options) dedup.Store {
		return dedup.NewMemoryStore(opts)
	})
}
