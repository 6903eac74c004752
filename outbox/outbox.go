// Package outbox is the durable queue of replies the gateway delivers on its
// own connection (AS2 asynchronous MDNs): enqueued in the store's database
// in the exchange that produced them, posted with retries and backoff, and
// picked up again after a restart.
package outbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"sort"
	"time"
)

// Delivery is one reply to post.
type Delivery struct {
	ID        string
	Partner   string
	MessageID string // the message the reply answers
	URL       string
	Header    http.Header
	Body      []byte
	// Attempts made so far, and when the next one is due.
	Attempts    int
	NextAttempt time.Time
	LastError   string
	Created     time.Time
	// LeaseToken names the lease Lease handed the delivery out under: the
	// fencing token that Renew, Release, Delivered, Retry and GiveUp must
	// present. A worker whose lease ran out and was taken over by another
	// holds a token that no longer matches, and its outcome is refused
	// (ErrLeaseLost) instead of overwriting the new holder's.
	LeaseToken string
}

// State of a delivery.
type State string

const (
	Pending   State = "pending"
	Delivered State = "delivered"
	// GaveUp: the retry budget is spent; an operator must look.
	GaveUp State = "gave-up"
)

// ErrNotFound is returned by Get for an unknown id.
var ErrNotFound = errors.New("outbox: no such delivery")

// ErrLeaseLost is returned by Renew, Release, Delivered, Retry and GiveUp
// when the token presented is not the delivery's current lease: its lease
// ran out and another worker (or gateway) leased it again, or it was
// released.
var ErrLeaseLost = errors.New("outbox: lease lost to another worker")

// Store persists deliveries. Implementations share the dedup store's database.
type Store interface {
	// Enqueue adds a pending delivery due now. ID must be unique.
	Enqueue(ctx context.Context, d Delivery) error
	// Lease hands out up to limit pending deliveries that are due and not
	// leased, each held for the lease duration so that another worker (or
	// gateway) skips it, under a fresh LeaseToken.
	Lease(ctx context.Context, limit int, lease time.Duration) ([]Delivery, error)
	// Renew extends the lease of a delivery to lease from now (the
	// worker's heartbeat), as long as token is still its lease — also when
	// the lease ran out but nobody took the delivery over; ErrLeaseLost
	// otherwise.
	Renew(ctx context.Context, id, token string, lease time.Duration) error
	// Release hands a leased delivery back without an attempt (a stopping
	// worker): it is due again at once for any worker, its attempts and
	// last error unchanged. ErrLeaseLost when token is not its lease.
	Release(ctx context.Context, id, token string) error
	// Delivered marks a leased delivery done. Delivered, Retry and GiveUp
	// are fenced: token must be the delivery's lease (ErrLeaseLost
	// otherwise); an empty token skips the check (operators, not workers).
	Delivered(ctx context.Context, id, token string) error
	// Retry records a failed attempt and schedules the next one; the lease
	// is released.
	Retry(ctx context.Context, id, token string, next time.Time, lastErr string) error
	// GiveUp records the final failed attempt.
	GiveUp(ctx context.Context, id, token string, lastErr string) error
	// Get returns a delivery and its state (for tests and operators).
	Get(ctx context.Context, id string) (Delivery, State, error)
}

// SortDue puts deliveries in the order Lease hands them out: the oldest
// NextAttempt first, then by ID.
func SortDue(ds []Delivery) {
	sort.Slice(ds, func(i, j int) bool {
		if !ds[i].NextAttempt.Equal(ds[j].NextAttempt) {
			return ds[i].NextAttempt.Before(ds[j].NextAttempt)
		}
		return ds[i].ID < ds[j].ID
	})
}

// PendingCounter is implemented by stores that can report their queue for
// the outbox metrics: how many deliveries are pending and when the oldest
// of them was created.
type PendingCounter interface {
	Pending(ctx context.Context) (n int, oldest time.Time, err error)
}

// Operator is implemented by stores an operator can drive (the console's
// outbox page): the pending deliveries, due first, and making one due now.
type Operator interface {
	// ListPending returns up to limit pending deliveries in the order
	// Lease would hand them out.
	ListPending(ctx context.Context, limit int) ([]Delivery, error)
	// RetryNow makes a pending delivery due at once (its attempts and last
	// error stay); ErrNotFound for an unknown id, an error for one that is
	// no longer pending. A delivery leased by a worker stays leased.
	RetryNow(ctx context.Context, id string) error
}

// NewLeaseToken returns a fresh random lease token (stores call it in
// Lease).
func NewLeaseToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}
