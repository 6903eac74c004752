package limits

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"time"
)

// DefaultSharePercent is the default of limits.memory_share_per_source and
// limits.memory_share_per_partner: the most of the memory budget that the
// requests of one source address, or naming one partner, may hold at
// once. The other half always remains for everyone else.
const DefaultSharePercent = 50

// Defaults of the budget's give-back (see Budget.GiveBack).
const (
	// DefaultGiveBackAfter is how many bytes of large reservations must
	// have been released before the heap's free pages are returned to the
	// operating system.
	DefaultGiveBackAfter = 32 << 20
	// DefaultGiveBackEvery is the shortest interval between two returns.
	DefaultGiveBackEvery = 2 * time.Second
	// giveBackAbove is the reservation size whose release counts towards
	// a give-back (small ones leave memory the next request reuses).
	giveBackAbove = 4 << 20
	// giveBackDelay is the least wait before a return, so that the
	// releases of a burst are returned together.
	giveBackDelay = 100 * time.Millisecond
)

// Budget is a process-wide number of bytes that requests may hold in
// memory at once, shared by every endpoint. A nil *Budget is unlimited.
//
// A budget may also cap the share of one source address and of one
// partner (SetShares), so that one sender cannot take all of it, and it
// returns the memory large requests held to the operating system once they
// are done (GiveBack).
type Budget struct {
	mu          sync.Mutex
	total, used int64

	perSource, perPartner int64 // 0: no cap
	bySource, byPartner   map[string]int64

	giveBackAfter int64         // 0: never
	giveBackEvery time.Duration // shortest interval between two returns
	released      int64         // bytes of large reservations released since the last return
	lastGiveBack  time.Time
	givingBack    bool
	giveBack      func() // debug.FreeOSMemory; replaced by tests
}

// NewBudget returns a budget of total bytes (total <= 0: nil, unlimited).
// It gives memory back by default (DefaultGiveBackAfter,
// DefaultGiveBackEvery) and has no per-source or per-partner cap until
// SetShares sets them.
func NewBudget(total int64) *Budget {
	if total <= 0 {
		return nil
	}
	return &Budget{total: total, giveBackAfter: DefaultGiveBackAfter, giveBackEvery: DefaultGiveBackEvery,
		giveBack: debug.FreeOSMemory}
}

// SetShares caps what the requests of one source address (perSource) and
// those naming one partner (perPartner) may hold together, in bytes
// (<= 0 or >= the total: no cap of that kind). A request bigger than its
// share can never be had and fails with ErrTooLarge; one that would take
// its source or partner past the share fails with ErrBusy.
func (b *Budget) SetShares(perSource, perPartner int64) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	cap := func(n int64) int64 {
		if n <= 0 || n >= b.total {
			return 0
		}
		return n
	}
	b.perSource, b.perPartner = cap(perSource), cap(perPartner)
	if b.bySource == nil {
		b.bySource, b.byPartner = map[string]int64{}, map[string]int64{}
	}
}

// Shares returns the per-source and per-partner caps (0: none).
func (b *Budget) Shares() (perSource, perPartner int64) {
	if b == nil {
		return 0, 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.perSource, b.perPartner
}

// SetGiveBack sets after how many bytes released by large reservations
// (after <= 0: never) and at most how often the heap's free memory is
// returned to the operating system.
func (b *Budget) SetGiveBack(after int64, every time.Duration) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.giveBackAfter, b.giveBackEvery = after, every
}

// Total is the size of the budget (0 when unlimited).
func (b *Budget) Total() int64 {
	if b == nil {
		return 0
	}
	return b.total
}

// Used is the number of bytes reserved now.
func (b *Budget) Used() int64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// UsedBy returns what the requests of source and those naming partner hold
// now.
func (b *Budget) UsedBy(source, partner string) (bySource, byPartner int64) {
	if b == nil {
		return 0, 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.bySource[source], b.byPartner[partner]
}

// Reserve returns an empty reservation on b, counted against no source
// address or partner.
func (b *Budget) Reserve() *Reservation { return &Reservation{b: b} }

// ReserveFor returns an empty reservation on b for a request from the
// source address source naming the partner partner ("" for either: not
// counted against a share).
func (b *Budget) ReserveFor(source, partner string) *Reservation {
	return &Reservation{b: b, source: source, partner: partner}
}

// Reservation is what one request holds of a Budget. Its methods are safe
// for concurrent use; a nil *Reservation is unlimited.
type Reservation struct {
	b               *Budget
	source, partner string
	mu              sync.Mutex
	n               int64
}

// Grow adds n bytes to the reservation without waiting. It fails with
// ErrTooLarge when the reservation would exceed the whole budget or its
// source's or partner's share (it can never be had) and with ErrBusy when
// other requests hold too much now (of the budget or of the share).
func (r *Reservation) Grow(n int64) error {
	if r == nil || r.b == nil || n <= 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.b
	if r.n+n > b.total {
		return fmt.Errorf("%d bytes needed, the memory budget is %d: %w", r.n+n, b.total, ErrTooLarge)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	src, prt := b.perSource > 0 && r.source != "", b.perPartner > 0 && r.partner != ""
	if src && r.n+n > b.perSource {
		return fmt.Errorf("%d bytes needed, the share of one source address is %d: %w", r.n+n, b.perSource, ErrTooLarge)
	}
	if prt && r.n+n > b.perPartner {
		return fmt.Errorf("%d bytes needed, the share of one partner is %d: %w", r.n+n, b.perPartner, ErrTooLarge)
	}
	if b.used+n > b.total {
		return fmt.Errorf("%d more bytes needed, %d of %d in use: %w", n, b.used, b.total, ErrBusy)
	}
	if src && b.bySource[r.source]+n > b.perSource {
		return fmt.Errorf("%d more bytes needed, source address %s holds %d of its share of %d: %w",
			n, r.source, b.bySource[r.source], b.perSource, ErrBusy)
	}
	if prt && b.byPartner[r.partner]+n > b.perPartner {
		return fmt.Errorf("%d more bytes needed, requests naming partner %q hold %d of its share of %d: %w",
			n, r.partner, b.byPartner[r.partner], b.perPartner, ErrBusy)
	}
	b.used += n
	if src {
		b.bySource[r.source] += n
	}
	if prt {
		b.byPartner[r.partner] += n
	}
	r.n += n
	return nil
}

// Claim counts the reservation against partner from now on, what it holds
// already included: for a request that names its partner only in its body
// (AS4's eb:From, read with the envelope). It fails with ErrBusy when the
// partner's share cannot take it now (ErrTooLarge: never), and does
// nothing when the reservation already counts against a partner.
func (r *Reservation) Claim(partner string) error {
	if r == nil || r.b == nil || partner == "" {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if r.partner != "" {
		return nil
	}
	if b.perPartner > 0 {
		if r.n > b.perPartner {
			return fmt.Errorf("%d bytes held, the share of one partner is %d: %w", r.n, b.perPartner, ErrTooLarge)
		}
		if b.byPartner[partner]+r.n > b.perPartner {
			return fmt.Errorf("%d bytes held, requests naming partner %q hold %d of its share of %d: %w",
				r.n, partner, b.byPartner[partner], b.perPartner, ErrBusy)
		}
		b.byPartner[partner] += r.n
	}
	r.partner = partner
	return nil
}

// Held is the number of bytes reserved.
func (r *Reservation) Held() int64 {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// Shrink returns n of the bytes the reservation holds to the budget (all
// of them when it holds fewer): what a step reserved before it knew its
// cost and turned out not to need.
func (r *Reservation) Shrink(n int64) {
	if r == nil || r.b == nil || n <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n = min(n, r.n)
	b := r.b
	b.mu.Lock()
	defer b.mu.Unlock()
	b.unaccount(r, n)
	r.n -= n
}

// unaccount takes n bytes of r off the budget and r's shares (b.mu held).
func (b *Budget) unaccount(r *Reservation, n int64) {
	b.used -= n
	if r.source != "" && b.bySource != nil {
		if b.bySource[r.source] -= n; b.bySource[r.source] <= 0 {
			delete(b.bySource, r.source)
		}
	}
	if r.partner != "" && b.byPartner != nil {
		if b.byPartner[r.partner] -= n; b.byPartner[r.partner] <= 0 {
			delete(b.byPartner, r.partner)
		}
	}
}

// Release returns everything the reservation holds to the budget. When
// large reservations have released more than the give-back threshold
// since the last return, or some and nothing is reserved any more, the
// heap's free memory is returned to the operating system in the
// background (at most once per interval): the memory a burst of large
// requests made resident does not stay so.
func (r *Reservation) Release() {
	if r == nil || r.b == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.b
	b.mu.Lock()
	defer b.mu.Unlock()
	b.unaccount(r, r.n)
	if r.n >= giveBackAbove {
		b.released += r.n
	}
	r.n = 0
	b.maybeGiveBack()
}

// maybeGiveBack starts a return of free memory to the operating system
// when enough has been released by large reservations since the last
// one, or when the last request of a burst is done (b.mu held). The
// return runs after a short delay, so that the releases of a burst's
// requests are returned together, and no sooner than the interval after
// the last one; never two at once.
func (b *Budget) maybeGiveBack() {
	if b.giveBackAfter <= 0 || b.givingBack || b.released == 0 {
		return
	}
	if b.released < b.giveBackAfter && b.used > 0 {
		// Less than the threshold, and requests still hold memory: wait
		// for more, or for the last of them (the tail of a burst).
		return
	}
	b.givingBack = true
	delay := max(giveBackDelay, b.giveBackEvery-time.Since(b.lastGiveBack))
	go func() {
		time.Sleep(delay)
		b.mu.Lock()
		b.released = 0
		give := b.giveBack
		b.mu.Unlock()
		// A full collection and the return of every free page: blunt,
		// hence only after large releases and at most once per interval.
		give()
		b.mu.Lock()
		b.lastGiveBack, b.givingBack = time.Now(), false
		// What was released while this return ran is returned by the
		// next one.
		b.maybeGiveBack()
		b.mu.Unlock()
	}()
}

type ctxKey struct{}

// WithReservation returns ctx carrying r, for code that grows the
// reservation of its request (decompression).
func WithReservation(ctx context.Context, r *Reservation) context.Context {
	return context.WithValue(ctx, ctxKey{}, r)
}

// ReservationFrom returns the reservation of ctx's request, nil (unlimited)
// when there is none.
func ReservationFrom(ctx context.Context) *Reservation {
	r, _ := ctx.Value(ctxKey{}).(*Reservation)
	return r
}
