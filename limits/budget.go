package limits

import (
	"context"
	"fmt"
	"sync"
)

// Budget is a process-wide number of bytes that requests may hold in
// memory at once, shared by every endpoint. A nil *Budget is unlimited.
type Budget struct {
	mu          sync.Mutex
	total, used int64
}

// NewBudget returns a budget of total bytes (total <= 0: nil, unlimited).
func NewBudget(total int64) *Budget {
	if total <= 0 {
		return nil
	}
	return &Budget{total: total}
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

// Reserve returns an empty reservation on b.
func (b *Budget) Reserve() *Reservation { return &Reservation{b: b} }

// Reservation is what one request holds of a Budget. Its methods are safe
// for concurrent use; a nil *Reservation is unlimited.
type Reservation struct {
	b  *Budget
	mu sync.Mutex
	n  int64
}

// Grow adds n bytes to the reservation without waiting. It fails with
// ErrTooLarge when the reservation would exceed the whole budget (it can
// never be had) and with ErrBusy when other requests hold too much now.
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
	if b.used+n > b.total {
		return fmt.Errorf("%d more bytes needed, %d of %d in use: %w", n, b.used, b.total, ErrBusy)
	}
	b.used += n
	r.n += n
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

// Release returns everything the reservation holds to the budget.
func (r *Reservation) Release() {
	if r == nil || r.b == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.b.mu.Lock()
	r.b.used -= r.n
	r.b.mu.Unlock()
	r.n = 0
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
