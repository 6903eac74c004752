package dedup

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"
)

// NewToken returns a fresh claim token: 128 random bits from crypto/rand as
// 32 lowercase hex characters. Every store uses it.
func NewToken() (Token, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("dedup: token: %w", err)
	}
	return Token(hex.EncodeToString(b[:])), nil
}

// MemoryStore is a Store that keeps its rows in process memory. It is NOT
// durable: every claim, accepted key and stored reply is lost when the
// process exits, so a retransmission after a restart is processed again. Use
// it for tests and demos only; the SQLite and PostgreSQL stores are the
// durable ones.
//
// It follows the same rules as the SQL stores (see Store): a claim holds a
// key for Options.Lease; the holder may still Accept after its lease ran out
// as long as no other delivery took the key over; Expire removes accepted and
// abandoned rows first seen before the given time and never a claim in
// progress. Every new claim (new key, lease takeover, reclaim after abandon,
// window reuse) resets the row's first-seen time.
//
// It is also the memory Ledger: the business interchange rows are kept
// apart from the transport keys, under the same lock, lease and clock.
type MemoryStore struct {
	lease time.Duration
	now   func() time.Time

	mu     sync.Mutex
	rows   map[Key]*memoryRow
	ledger map[Key]*ledgerRow
	// replaced holds accepted ledger rows a later claim replaced.
	replaced []InterchangeRecord
	closed   bool
}

type rowState int

const (
	stateClaimed rowState = iota + 1
	stateAccepted
	stateAbandoned
)

// claimRow is what the claim rules read and write. Both kinds of memory row
// embed it, so that transport keys and ledger interchanges follow one set of
// rules: decideClaim for a claim, heldBy for Accept and Abandon.
type claimRow struct {
	state      rowState
	token      Token
	payload    string
	firstSeen  time.Time
	leaseUntil time.Time
}

// decideClaim applies the Store's claim rules at now to the row held for a
// key (nil when there is none):
//   - a claim still within its lease answers InFlight;
//   - an accepted row answers Duplicate while inside window (always when
//     window is not positive); the caller adds what its kind of row records
//     (a reply, retries);
//   - otherwise (new key, abandoned claim, lease ran out, window passed) the
//     answer is Claimed with token, Reused when an accepted row's window
//     passed, and next is the fresh claim row the caller stores.
func decideClaim(held *claimRow, now time.Time, window, lease time.Duration, token Token, payload string) (d Decision, next claimRow) {
	if held != nil {
		switch {
		case held.state == stateClaimed && now.Before(held.leaseUntil):
			return Decision{
				Outcome:    InFlight,
				FirstSeen:  held.firstSeen,
				RetryAfter: RetryAfter(held.leaseUntil.Sub(now)),
			}, claimRow{}
		case held.state == stateAccepted && (window <= 0 || !held.firstSeen.Before(now.Add(-window))):
			return Decision{
				Outcome:       Duplicate,
				FirstSeen:     held.firstSeen,
				PayloadSHA256: held.payload,
			}, claimRow{}
		}
	}
	return Decision{Outcome: Claimed, Token: token, Reused: held != nil && held.state == stateAccepted, FirstSeen: now},
		claimRow{state: stateClaimed, token: token, payload: payload, firstSeen: now, leaseUntil: now.Add(lease)}
}

// heldBy reports whether token still holds the row's claim: the
// compare-and-set that Accept and Abandon make before moving the row on.
func (r *claimRow) heldBy(token Token) bool {
	return r.state == stateClaimed && r.token == token
}

type memoryRow struct {
	claimRow
	reply []byte
}

// MemoryOption configures a MemoryStore.
type MemoryOption func(*MemoryStore)

// MemoryClock makes the store read time from now instead of time.Now, so that
// tests can move time forward without sleeping.
func MemoryClock(now func() time.Time) MemoryOption {
	return func(s *MemoryStore) { s.now = now }
}

// NewMemoryStore returns an empty in-memory store. It is not durable; see
// MemoryStore.
func NewMemoryStore(opts Options, mopts ...MemoryOption) *MemoryStore {
	opts = opts.WithDefaults()
	s := &MemoryStore{lease: opts.Lease, now: time.Now, rows: make(map[Key]*memoryRow), ledger: make(map[Key]*ledgerRow)}
	for _, o := range mopts {
		o(s)
	}
	return s
}

// errClosed is returned by every call after Close.
var errClosed = fmt.Errorf("dedup: memory store closed: %w", ErrUnavailable)

// lockForClaim starts every memory claim: it checks ctx, draws a fresh token
// and takes the store's lock. When it returns no error the caller holds s.mu
// and must release it.
func (s *MemoryStore) lockForClaim(ctx context.Context, op string) (Token, error) {
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("dedup: %s: %w", op, err)
	}
	token, err := NewToken()
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return "", errClosed
	}
	return token, nil
}

// Claim implements Store.
func (s *MemoryStore) Claim(ctx context.Context, req ClaimRequest) (Decision, error) {
	token, err := s.lockForClaim(ctx, "claim")
	if err != nil {
		return Decision{}, err
	}
	defer s.mu.Unlock()
	var held *claimRow
	r, ok := s.rows[req.Key]
	if ok {
		held = &r.claimRow
	}
	d, next := decideClaim(held, s.now(), req.Window, s.lease, token, req.PayloadSHA256)
	switch d.Outcome {
	case Duplicate:
		d.Reply = append([]byte{}, r.reply...)
	case Claimed:
		s.rows[req.Key] = &memoryRow{claimRow: next}
	}
	return d, nil
}

// Accept implements Store. The holder of the current token may accept even
// after its lease ran out, as long as no other delivery took the key over.
func (s *MemoryStore) Accept(ctx context.Context, key Key, token Token, reply []byte) error {
	return s.transition("accept", key, token, stateAccepted, reply)
}

// Abandon implements Store.
func (s *MemoryStore) Abandon(ctx context.Context, key Key, token Token) error {
	return s.transition("abandon", key, token, stateAbandoned, nil)
}

// transition moves a transport row held by token to state to; an accepted
// row keeps a copy of reply.
func (s *MemoryStore) transition(op string, key Key, token Token, to rowState, reply []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	r, ok := s.rows[key]
	if !ok || !r.heldBy(token) {
		return fmt.Errorf("dedup: %s: %w", op, ErrStaleClaim)
	}
	r.state = to
	if to == stateAccepted {
		r.reply = append([]byte{}, reply...)
	}
	return nil
}

// Expire implements Store. It removes accepted rows, and abandoned rows
// (which count as absent anyway), first seen before the given time.
func (s *MemoryStore) Expire(ctx context.Context, before time.Time) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, errClosed
	}
	var n int64
	for k, r := range s.rows {
		if r.state != stateClaimed && r.firstSeen.Before(before) {
			delete(s.rows, k)
			n++
		}
	}
	return n, nil
}

// Len returns the number of rows held, in any state.
func (s *MemoryStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.rows)
}

// Close drops every row, transport and ledger. Later calls fail with an error wrapping
// ErrUnavailable, which lets tests simulate an unreachable store.
func (s *MemoryStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.rows = nil
	s.ledger = nil
	s.replaced = nil
	return nil
}

var _ Store = (*MemoryStore)(nil)

// ClaimRecord implements ClaimReader.
func (s *MemoryStore) ClaimRecord(ctx context.Context, key Key) (ClaimRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.rows[key]
	if !ok {
		return ClaimRecord{}, ErrNotFound
	}
	return ClaimRecord{Key: key, State: r.state.String(), PayloadSHA256: r.payload, FirstSeen: r.firstSeen,
		Reply: append([]byte(nil), r.reply...)}, nil
}

// RenewClaims implements Renewer: every claim still held by its token gets
// the lease from now, under one lock.
func (s *MemoryStore) RenewClaims(ctx context.Context, claims []HeldClaim) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dedup: renew: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	until := s.now().Add(s.lease)
	lost := 0
	for _, c := range claims {
		var row *claimRow
		if c.Interchange {
			if r, ok := s.ledger[c.Key]; ok {
				row = &r.claimRow
			}
		} else if r, ok := s.rows[c.Key]; ok {
			row = &r.claimRow
		}
		if row == nil || !row.heldBy(c.Token) {
			lost++
			continue
		}
		row.leaseUntil = until
	}
	if lost > 0 {
		return fmt.Errorf("dedup: renew: %d of %d claims no longer held: %w", lost, len(claims), ErrStaleClaim)
	}
	return nil
}

var _ Renewer = (*MemoryStore)(nil)
