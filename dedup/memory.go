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
	closed bool
}

type rowState int

const (
	stateClaimed rowState = iota + 1
	stateAccepted
	stateAbandoned
)

type memoryRow struct {
	state      rowState
	token      Token
	payload    string
	firstSeen  time.Time
	leaseUntil time.Time
	reply      []byte
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

// Claim implements Store.
func (s *MemoryStore) Claim(ctx context.Context, req ClaimRequest) (Decision, error) {
	if err := ctx.Err(); err != nil {
		return Decision{}, fmt.Errorf("dedup: claim: %w", err)
	}
	token, err := NewToken()
	if err != nil {
		return Decision{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return Decision{}, errClosed
	}
	now := s.now()
	r, ok := s.rows[req.Key]
	if ok {
		switch {
		case r.state == stateClaimed && now.Before(r.leaseUntil):
			return Decision{
				Outcome:    InFlight,
				FirstSeen:  r.firstSeen,
				RetryAfter: RetryAfter(r.leaseUntil.Sub(now)),
			}, nil
		case r.state == stateAccepted && (req.Window <= 0 || !r.firstSeen.Before(now.Add(-req.Window))):
			return Decision{
				Outcome:       Duplicate,
				FirstSeen:     r.firstSeen,
				PayloadSHA256: r.payload,
				Reply:         append([]byte{}, r.reply...),
			}, nil
		}
	}
	// New key, abandoned claim, lease ran out, or window passed.
	reused := ok && r.state == stateAccepted
	s.rows[req.Key] = &memoryRow{
		state:      stateClaimed,
		token:      token,
		payload:    req.PayloadSHA256,
		firstSeen:  now,
		leaseUntil: now.Add(s.lease),
	}
	return Decision{Outcome: Claimed, Token: token, Reused: reused, FirstSeen: now}, nil
}

// Accept implements Store. The holder of the current token may accept even
// after its lease ran out, as long as no other delivery took the key over.
func (s *MemoryStore) Accept(ctx context.Context, key Key, token Token, reply []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	r, ok := s.rows[key]
	if !ok || r.state != stateClaimed || r.token != token {
		return fmt.Errorf("dedup: accept: %w", ErrStaleClaim)
	}
	r.state = stateAccepted
	r.reply = append([]byte{}, reply...)
	return nil
}

// Abandon implements Store.
func (s *MemoryStore) Abandon(ctx context.Context, key Key, token Token) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	r, ok := s.rows[key]
	if !ok || r.state != stateClaimed || r.token != token {
		return fmt.Errorf("dedup: abandon: %w", ErrStaleClaim)
	}
	r.state = stateAbandoned
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
	return nil
}

var _ Store = (*MemoryStore)(nil)
