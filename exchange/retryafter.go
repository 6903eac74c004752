package exchange

import (
	"slices"

	"github.com/edigateway/gateway/dedup"
	"sync"
	"time"
)

// handlerTimeSamples is how many recent handler durations HandlerTimes
// keeps.
const handlerTimeSamples = 64

// HandlerTimes keeps the durations of the most recent handler runs (a ring
// of fixed size, so memory does not grow with traffic) for the Retry-After
// estimate sent to a delivery that finds its message in flight. The zero
// value is ready; it is safe for concurrent use.
type HandlerTimes struct {
	mu   sync.Mutex
	ring [handlerTimeSamples]time.Duration
	n    int // samples held, at most len(ring)
	next int
}

// Observe records one handler run.
func (h *HandlerTimes) Observe(d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ring[h.next] = d
	h.next = (h.next + 1) % len(h.ring)
	if h.n < len(h.ring) {
		h.n++
	}
}

// P95 is the 95th percentile of the recent runs (nearest rank), zero
// before the first.
func (h *HandlerTimes) P95() time.Duration {
	h.mu.Lock()
	s := slices.Clone(h.ring[:h.n])
	h.mu.Unlock()
	if len(s) == 0 {
		return 0
	}
	slices.Sort(s)
	rank := (95*len(s) + 99) / 100 // ceil(0.95 n), 1-based
	return s[rank-1]
}

// inFlightRetryAfter is the Retry-After for a delivery whose key another
// delivery has held for heldFor and holds with leaseLeft to run. With
// InFlightRetryAfter set it is that value; otherwise (auto) the 95th
// percentile of recent handler runs, or as long as the holder has already
// run when it is slower than that (so a stuck holder is retried with
// growing gaps). Either way it is clamped to [1s, leaseLeft]: after the
// lease the key can be taken over if the holder did not renew it, and a
// holder that renews it is asked about again by then.
func (p *Pipeline) inFlightRetryAfter(leaseLeft, heldFor time.Duration) time.Duration {
	// The lease left is never more than the lease: a store reading it
	// against a clock taken before the holder renewed it (PostgreSQL's
	// now() is the transaction's start) may say a little more, which
	// Retry-After's rounding up to whole seconds would make a second more
	// than the lease (Retry-After 4 under a 3 s lease).
	if p.Lease > 0 && leaseLeft > p.Lease {
		leaseLeft = p.Lease
	}
	est := p.InFlightRetryAfter
	if est <= 0 {
		est = max(p.HandlerTimes.P95(), heldFor)
	}
	if leaseLeft > 0 && est > leaseLeft {
		est = leaseLeft
	}
	return max(est, time.Second)
}

// heldFor is how long the holder of an in-flight claim has held it: since
// its FirstSeen (the claim's time, on the store's clock), or, without one,
// what its lease left says of a claim never renewed.
func (p *Pipeline) heldFor(d dedup.Decision) time.Duration {
	if !d.FirstSeen.IsZero() {
		return max(p.now().Sub(d.FirstSeen), 0)
	}
	if p.Lease > 0 && d.RetryAfter > 0 && d.RetryAfter <= p.Lease {
		return p.Lease - d.RetryAfter
	}
	return 0
}
