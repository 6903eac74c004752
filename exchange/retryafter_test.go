package exchange

import (
	"testing"
	"time"
)

func TestHandlerTimesP95KeepsRecentRuns(t *testing.T) {
	var h HandlerTimes
	if got := h.P95(); got != 0 {
		t.Fatalf("P95 without samples: %v", got)
	}
	for i := 1; i <= 100; i++ {
		h.Observe(time.Duration(i) * time.Millisecond)
	}
	// The ring holds the latest 64 runs (37…100 ms); nearest-rank p95 of 64
	// samples is the 61st: 97 ms.
	if got := h.P95(); got != 97*time.Millisecond {
		t.Errorf("P95 = %v, want 97ms", got)
	}
}

func TestInFlightRetryAfterRules(t *testing.T) {
	fast := func() *Pipeline {
		p := &Pipeline{Lease: time.Minute}
		for range 10 {
			p.HandlerTimes.Observe(20 * time.Millisecond)
		}
		return p
	}
	for _, tc := range []struct {
		name      string
		p         *Pipeline
		leaseLeft time.Duration
		want      time.Duration
	}{
		{"fast handler: at least 1s", fast(), time.Minute, time.Second},
		{"no samples yet", &Pipeline{Lease: time.Minute}, time.Minute, time.Second},
		{"holder slower than usual: as long as it ran", fast(), 30 * time.Second, 30 * time.Second},
		{"configured value", &Pipeline{Lease: time.Minute, InFlightRetryAfter: 10 * time.Second}, time.Minute, 10 * time.Second},
		{"configured value beyond the lease left", &Pipeline{Lease: time.Minute, InFlightRetryAfter: 10 * time.Second}, 4 * time.Second, 4 * time.Second},
	} {
		if got := tc.p.inFlightRetryAfter(tc.leaseLeft, tc.p.Lease-tc.leaseLeft); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	slow := &Pipeline{Lease: time.Minute}
	slow.HandlerTimes.Observe(10 * time.Minute)
	if got := slow.inFlightRetryAfter(20*time.Second, 40*time.Second); got != 20*time.Second {
		t.Errorf("handler times beyond the lease: %v, want the lease left (20s)", got)
	}
	// A holder that renewed its claim has held it longer than the lease:
	// the estimate follows how long it ran, never beyond the lease left.
	if got := fast().inFlightRetryAfter(50*time.Second, 3*time.Minute); got != 50*time.Second {
		t.Errorf("renewed holder that ran 3m: %v, want the lease left (50s)", got)
	}
	if got := fast().inFlightRetryAfter(58*time.Second, 7*time.Second); got != 7*time.Second {
		t.Errorf("renewed holder that ran 7s: %v, want 7s", got)
	}
	// A lease left read against a clock taken before the renewal (a
	// little more than the lease, rounded up to 4 s by the store) is the
	// lease at most: a 3 s lease never gets Retry-After 4.
	short := &Pipeline{Lease: 3 * time.Second}
	short.HandlerTimes.Observe(10 * time.Second)
	if got := short.inFlightRetryAfter(4*time.Second, 10*time.Second); got != 3*time.Second {
		t.Errorf("lease left above the lease: %v, want the lease (3s)", got)
	}
}
