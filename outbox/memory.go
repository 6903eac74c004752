package outbox

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"
)

// Memory is a Store in process memory. It is NOT durable: queued replies are
// lost when the process exits. Use it for tests, demos and the memory: store.
type Memory struct {
	mu   sync.Mutex
	now  func() time.Time
	rows map[string]*memoryRow
}

type memoryRow struct {
	d           Delivery
	state       State
	leasedUntil time.Time
	token       string // the lease's fencing token; "" when not leased
}

// MemoryOption tunes NewMemory.
type MemoryOption func(*Memory)

// MemoryClock makes the store read time from now instead of time.Now.
func MemoryClock(now func() time.Time) MemoryOption { return func(m *Memory) { m.now = now } }

// NewMemory returns an empty in-memory outbox.
func NewMemory(opts ...MemoryOption) *Memory {
	m := &Memory{now: time.Now, rows: map[string]*memoryRow{}}
	for _, o := range opts {
		o(m)
	}
	return m
}

// Enqueue adds a pending delivery due now.
func (m *Memory) Enqueue(ctx context.Context, d Delivery) error {
	if d.ID == "" {
		return fmt.Errorf("outbox: enqueue: empty delivery id")
	}
	if d.URL == "" {
		return fmt.Errorf("outbox: enqueue %s: empty URL", d.ID)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.rows[d.ID]; ok {
		return fmt.Errorf("outbox: enqueue: delivery %s already exists", d.ID)
	}
	now := m.now()
	d = clone(d)
	if d.Created.IsZero() {
		d.Created = now
	}
	d.NextAttempt = now
	d.Attempts = 0
	d.LastError = ""
	m.rows[d.ID] = &memoryRow{d: d, state: Pending}
	return nil
}

// Lease hands out up to limit due pending deliveries, oldest due first, each
// held for lease.
func (m *Memory) Lease(ctx context.Context, limit int, lease time.Duration) ([]Delivery, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("outbox: lease: %w", err)
	}
	if limit <= 0 {
		return nil, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	var due []*memoryRow
	for _, r := range m.rows {
		if r.state == Pending && !r.d.NextAttempt.After(now) && !r.leasedUntil.After(now) {
			due = append(due, r)
		}
	}
	sort.Slice(due, func(i, j int) bool {
		if !due[i].d.NextAttempt.Equal(due[j].d.NextAttempt) {
			return due[i].d.NextAttempt.Before(due[j].d.NextAttempt)
		}
		return due[i].d.ID < due[j].d.ID
	})
	if len(due) > limit {
		due = due[:limit]
	}
	out := make([]Delivery, 0, len(due))
	token := NewLeaseToken()
	for _, r := range due {
		r.leasedUntil = now.Add(lease)
		r.token = token
		d := clone(r.d)
		d.LeaseToken = token
		out = append(out, d)
	}
	return out, nil
}

// pending returns the row of a pending delivery.
func (m *Memory) pending(id string) (*memoryRow, error) {
	r, ok := m.rows[id]
	if !ok {
		return nil, fmt.Errorf("outbox: delivery %s: %w", id, ErrNotFound)
	}
	if r.state != Pending {
		return nil, fmt.Errorf("outbox: delivery %s is %s, not pending", id, r.state)
	}
	return r, nil
}

// held returns the row of a pending delivery leased under token (an empty
// token: any pending delivery, for operators).
func (m *Memory) held(id, token string, fenced bool) (*memoryRow, error) {
	r, err := m.pending(id)
	if err != nil {
		return nil, err
	}
	if (fenced || token != "") && (token == "" || r.token != token) {
		return nil, fmt.Errorf("outbox: delivery %s: %w", id, ErrLeaseLost)
	}
	return r, nil
}

// Renew extends the lease held under token to lease from now.
func (m *Memory) Renew(ctx context.Context, id, token string, lease time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.held(id, token, true)
	if err != nil {
		return err
	}
	r.leasedUntil = m.now().Add(lease)
	return nil
}

// Release hands the delivery leased under token back, due at once.
func (m *Memory) Release(ctx context.Context, id, token string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.held(id, token, true)
	if err != nil {
		return err
	}
	r.leasedUntil, r.token = time.Time{}, ""
	return nil
}

// Delivered marks a delivery done.
func (m *Memory) Delivered(ctx context.Context, id, token string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.held(id, token, false)
	if err != nil {
		return err
	}
	r.state = Delivered
	r.d.Attempts++
	r.d.LastError = ""
	r.leasedUntil, r.token = time.Time{}, ""
	return nil
}

// Retry records a failed attempt and schedules the next one at next.
func (m *Memory) Retry(ctx context.Context, id, token string, next time.Time, lastErr string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.held(id, token, false)
	if err != nil {
		return err
	}
	r.d.Attempts++
	r.d.NextAttempt = next
	r.d.LastError = lastErr
	r.leasedUntil, r.token = time.Time{}, ""
	return nil
}

// GiveUp records the final failed attempt.
func (m *Memory) GiveUp(ctx context.Context, id, token string, lastErr string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.held(id, token, false)
	if err != nil {
		return err
	}
	r.state = GaveUp
	r.d.Attempts++
	r.d.LastError = lastErr
	r.leasedUntil, r.token = time.Time{}, ""
	return nil
}

// Get returns a delivery and its state.
func (m *Memory) Get(ctx context.Context, id string) (Delivery, State, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.rows[id]
	if !ok {
		return Delivery{}, "", fmt.Errorf("outbox: delivery %s: %w", id, ErrNotFound)
	}
	return clone(r.d), r.state, nil
}

// List returns every delivery with its state, ordered by creation (for
// tests and operators).
func (m *Memory) List() []MemoryEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]MemoryEntry, 0, len(m.rows))
	for _, r := range m.rows {
		out = append(out, MemoryEntry{Delivery: clone(r.d), State: r.state})
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.Before(out[j].Created)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// MemoryEntry is a delivery with its state, as List returns it.
type MemoryEntry struct {
	Delivery
	State State
}

func clone(d Delivery) Delivery {
	if d.Header != nil {
		d.Header = d.Header.Clone()
	} else {
		d.Header = http.Header{}
	}
	d.Body = append([]byte(nil), d.Body...)
	return d
}

var _ Store = (*Memory)(nil)

// Pending reports how many deliveries are pending and when the oldest of
// them was created (for the outbox metrics).
func (m *Memory) Pending(ctx context.Context) (int, time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, oldest := 0, time.Time{}
	for _, r := range m.rows {
		if r.state != Pending {
			continue
		}
		n++
		if oldest.IsZero() || r.d.Created.Before(oldest) {
			oldest = r.d.Created
		}
	}
	return n, oldest, nil
}

// ListPending implements Operator.
func (m *Memory) ListPending(ctx context.Context, limit int) ([]Delivery, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Delivery
	for _, r := range m.rows {
		if r.state == Pending {
			out = append(out, clone(r.d))
		}
	}
	SortDue(out)
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// RetryNow implements Operator.
func (m *Memory) RetryNow(ctx context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.pending(id)
	if err != nil {
		return err
	}
	if now := m.now(); r.d.NextAttempt.After(now) {
		r.d.NextAttempt = now
	}
	return nil
}

var _ Operator = (*Memory)(nil)
