package dedup

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Outcome is what a claim decided.
type Outcome int

const (
	// Claimed: the key is new (or its previous claim was abandoned, its lease
	// ran out, or its window passed); the caller holds it with Decision.Token
	// and must Accept or Abandon.
	Claimed Outcome = iota + 1
	// Duplicate: the key was accepted before; Decision carries the first-seen
	// time, the payload hash and the reply bytes stored at accept.
	Duplicate
	// InFlight: another delivery holds the key within its lease; retry after
	// Decision.RetryAfter.
	InFlight
)

func (o Outcome) String() string {
	switch o {
	case Claimed:
		return "claimed"
	case Duplicate:
		return "duplicate"
	case InFlight:
		return "in-flight"
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// Token identifies one claim. Every transition after a claim is a
// compare-and-set on it.
type Token string

// ClaimRequest asks a store to claim a key.
type ClaimRequest struct {
	Key Key
	// PayloadSHA256 is the hex SHA-256 of the delivered payload(s), stored on
	// claim so that a later duplicate can be checked for drift.
	PayloadSHA256 string
	// Window, when positive, limits how long an accepted key counts as a
	// duplicate: an accepted row first seen more than Window ago is claimed
	// anew (Decision.Reused is set). Zero means for as long as the row exists.
	Window time.Duration
}

// Decision is the answer to a claim.
type Decision struct {
	Outcome Outcome
	// Token is set when Outcome is Claimed.
	Token Token
	// Reused is set when Outcome is Claimed over an accepted row whose window
	// had passed.
	Reused bool
	// FirstSeen is when the key was first claimed (Duplicate, InFlight).
	FirstSeen time.Time
	// PayloadSHA256 is the hash stored with the accepted delivery (Duplicate).
	PayloadSHA256 string
	// Reply holds the reply bytes stored at accept (Duplicate).
	Reply []byte
	// RetryAfter is the time left on the holder's lease (InFlight), at least
	// one second.
	RetryAfter time.Duration
	// Retries is set by Ledger claims answered Duplicate: the deliveries
	// recorded after the first, this one included.
	Retries int
}

// ErrStaleClaim is returned by Accept and Abandon when the token no longer
// holds the key: the lease ran out and another delivery took it over, or the
// claim was already accepted or abandoned.
var ErrStaleClaim = errors.New("dedup: stale claim")

// ErrUnavailable wraps errors of a store that cannot be reached; callers
// answer such errors with a retryable status, never a positive reply.
var ErrUnavailable = errors.New("dedup: store unavailable")

// Store is the claim contract. Implementations must be safe for concurrent
// use, and SQL implementations read time from the database clock so that a
// fleet of gateways agrees on leases.
//
// The life of a key: Claim → (Accept | Abandon). A key that was abandoned,
// or whose lease ran out before accept, can be claimed again with a new
// token; the old token then fails with ErrStaleClaim. The holder of the
// current token may still Accept after its lease ran out, as long as no other
// delivery took the key over. Every new claim (new key, takeover, reclaim
// after abandon, window reuse) resets the key's first-seen time.
// deduptest.Exercise checks all of this against an implementation.
type Store interface {
	Claim(ctx context.Context, req ClaimRequest) (Decision, error)
	// Accept marks the claim as done and stores the reply that was sent.
	Accept(ctx context.Context, key Key, token Token, reply []byte) error
	// Abandon releases the claim so that a retransmission is processed anew.
	Abandon(ctx context.Context, key Key, token Token) error
	// Expire removes accepted rows first seen before the given time and
	// returns how many it removed. It never removes claims in progress.
	// Abandoned rows first seen before that time are removed and counted
	// too: they answer exactly like absent ones.
	Expire(ctx context.Context, before time.Time) (int64, error)
	Close() error
}

// Options are the settings every store takes.
type Options struct {
	// Lease is how long a claim holds a key before another delivery may take
	// it over, unless its holder renews it (Renewer). Default 30 seconds.
	Lease time.Duration
}

// DefaultLease is used when Options.Lease is zero. It is short because a
// live holder renews its claims while it works (Renewer): the lease only
// says how soon a dead holder's claims are free again.
const DefaultLease = 30 * time.Second

// HeldClaim is one claim a delivery holds: a transport key of the Store, or
// (Interchange set) a business interchange of the Ledger kept by the same
// store.
type HeldClaim struct {
	Interchange bool
	Key         Key
	Token       Token
}

// Renewer is implemented by stores whose claims their holder can keep while
// it works, however long that takes: a heartbeat renews them well before
// their lease runs out, so that the lease can be short and a dead holder's
// claims are free again soon.
type Renewer interface {
	// RenewClaims sets the lease of every claim in claims (transport keys
	// and ledger interchanges together, in one statement or transaction) to
	// the store's lease from now, each only if its token still holds it: the
	// compare-and-set of Accept, so a holder whose lease ran out may renew
	// as long as nobody took the key over. It returns an error wrapping
	// ErrStaleClaim when any claim is no longer held (taken over after its
	// lease, accepted or abandoned); the others are renewed all the same.
	// Errors reaching the store wrap ErrUnavailable.
	RenewClaims(ctx context.Context, claims []HeldClaim) error
}

// WithDefaults fills zero settings.
func (o Options) WithDefaults() Options {
	if o.Lease <= 0 {
		o.Lease = DefaultLease
	}
	return o
}

// RetryAfter rounds a remaining lease up to whole seconds, at least one.
func RetryAfter(remaining time.Duration) time.Duration {
	if remaining < time.Second {
		return time.Second
	}
	return (remaining + time.Second - 1).Truncate(time.Second)
}

// ClaimRecord is the stored row of one transport key, for operators.
type ClaimRecord struct {
	Key           Key
	State         string // claimed, accepted, abandoned
	PayloadSHA256 string
	FirstSeen     time.Time
	// Reply is the encoded reply stored at accept (exchange.DecodeReply);
	// nil unless accepted.
	Reply []byte
}

// ClaimReader is implemented by stores that read a transport key's row
// without changing it (the console's message detail shows the reply that
// was sent). It returns ErrNotFound for an unknown key.
type ClaimReader interface {
	ClaimRecord(ctx context.Context, key Key) (ClaimRecord, error)
}
