package outbox

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// slowReceiver answers 200 after delay and counts the requests per path.
func slowReceiver(t *testing.T, delay time.Duration) (*httptest.Server, *atomic.Int64, chan struct{}) {
	var hits atomic.Int64
	arrived := make(chan struct{}, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		arrived <- struct{}{}
		time.Sleep(delay)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits, arrived
}

func runDispatcher(d *Dispatcher) (cancel func(), done chan error) {
	ctx, cancel := context.WithCancel(context.Background())
	done = make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	return cancel, done
}

// A stop while an MDN POST waits for the partner's answer lets the attempt
// finish within StopTimeout and records it delivered: it is posted once.
func TestDispatcherStopLetsAttemptInFlightFinish(t *testing.T) {
	t.Parallel()
	srv, hits, arrived := slowReceiver(t, 700*time.Millisecond)
	st := NewMemory()
	d := delivery("a")
	d.URL = srv.URL + "/mdn"
	st.Enqueue(context.Background(), d)
	disp := &Dispatcher{Store: st, PollInterval: time.Hour, Log: slog.New(slog.DiscardHandler), Authorize: allowLoopback,
		StopTimeout: 10 * time.Second}
	cancel, done := runDispatcher(disp)
	<-arrived
	stopped := time.Now()
	cancel()
	<-done
	if waited := time.Since(stopped); waited < 500*time.Millisecond {
		t.Errorf("Run returned %s after the stop, before the partner answered", waited)
	}
	got, s, _ := st.Get(context.Background(), "a")
	if s != Delivered || got.Attempts != 1 || hits.Load() != 1 {
		t.Fatalf("after the stop: state %s, attempts %d, posted %d times; want delivered, 1, 1 (%q)", s, got.Attempts, hits.Load(), got.LastError)
	}
}

// A stop starts no new attempt and hands the deliveries of the batch not
// yet attempted back at once, unattempted.
func TestDispatcherStopHandsBackDeliveriesNotStarted(t *testing.T) {
	t.Parallel()
	srv, hits, arrived := slowReceiver(t, 500*time.Millisecond)
	st := NewMemory()
	for _, id := range []string{"a", "b", "c"} {
		d := delivery(id)
		d.URL = srv.URL + "/mdn"
		st.Enqueue(context.Background(), d)
		time.Sleep(2 * time.Millisecond) // a is due first
	}
	disp := &Dispatcher{Store: st, PollInterval: time.Hour, Log: slog.New(slog.DiscardHandler), Authorize: allowLoopback,
		Concurrency: 1, Lease: time.Hour}
	cancel, done := runDispatcher(disp)
	<-arrived
	cancel()
	<-done
	if _, s, _ := st.Get(context.Background(), "a"); s != Delivered {
		t.Errorf("the attempt in flight: %s, want delivered", s)
	}
	if hits.Load() != 1 {
		t.Errorf("%d posts after the stop began, want 1 (no new attempt)", hits.Load())
	}
	again, err := st.Lease(context.Background(), 10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 2 {
		t.Fatalf("another gateway leased %v at once, want b and c (handed back, not held for the hour's lease)", again)
	}
	for _, d := range again {
		if d.Attempts != 0 {
			t.Errorf("handed-back delivery %s: %d attempts, want 0", d.ID, d.Attempts)
		}
	}
}

// An attempt that runs longer than the lease keeps its delivery: the
// heartbeat renews the lease, and another gateway leasing meanwhile gets
// nothing.
func TestDispatcherHeartbeatKeepsSlowAttempt(t *testing.T) {
	t.Parallel()
	srv, hits, arrived := slowReceiver(t, 1200*time.Millisecond)
	st := NewMemory()
	d := delivery("a")
	d.URL = srv.URL + "/mdn"
	st.Enqueue(context.Background(), d)
	disp := &Dispatcher{Store: st, PollInterval: time.Hour, Log: slog.New(slog.DiscardHandler), Authorize: allowLoopback,
		Lease: 300 * time.Millisecond, Heartbeat: 100 * time.Millisecond}
	cancel, done := runDispatcher(disp)
	defer func() { cancel(); <-done }()
	<-arrived
	for {
		if _, s, _ := st.Get(context.Background(), "a"); s == Delivered {
			break
		}
		other, err := st.Lease(context.Background(), 10, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(other) != 0 {
			t.Fatalf("another gateway leased %s while the first was still posting it", other[0].ID)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if hits.Load() != 1 {
		t.Fatalf("posted %d times, want 1", hits.Load())
	}
}

// A dispatcher whose lease ran out and was taken over does not record its
// outcome over the new holder's (fencing).
func TestDispatcherLostLeaseOutcomeNotRecorded(t *testing.T) {
	t.Parallel()
	srv, _, arrived := slowReceiver(t, 800*time.Millisecond)
	st := NewMemory()
	d := delivery("a")
	d.URL = srv.URL + "/mdn"
	st.Enqueue(context.Background(), d)
	// A heartbeat slower than the lease: the lease runs out mid-attempt
	// (a gateway frozen, or cut off from its database).
	disp := &Dispatcher{Store: st, PollInterval: time.Hour, Log: slog.New(slog.DiscardHandler), Authorize: allowLoopback,
		Lease: 200 * time.Millisecond, Heartbeat: time.Hour}
	cancel, done := runDispatcher(disp)
	defer func() { cancel(); <-done }()
	<-arrived
	time.Sleep(300 * time.Millisecond)
	other, err := st.Lease(context.Background(), 10, time.Hour)
	if err != nil || len(other) != 1 {
		t.Fatalf("the other gateway's Lease after the lease ran out: %v %v", other, err)
	}
	if err := st.Retry(context.Background(), "a", other[0].LeaseToken, time.Now().Add(time.Hour), "the new holder's attempt"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(800 * time.Millisecond) // the first attempt's answer arrives
	got, s, _ := st.Get(context.Background(), "a")
	if s != Pending || got.Attempts != 1 || got.LastError != "the new holder's attempt" {
		t.Fatalf("state %s, attempts %d, last error %q: the stale worker recorded over the new holder", s, got.Attempts, got.LastError)
	}
	if err := st.Delivered(context.Background(), "a", "stale"); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Delivered with a stale token: %v", err)
	}
}
