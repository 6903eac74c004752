package deduptest_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/edigateway/gateway/dedup"
)

// Deliberately broken stores. Each wraps a correct store (the memory store)
// and breaks exactly one rule of the contract, except racyStore, which is a
// whole store written the wrong way (check, then act).

// tracker remembers the latest token handed out per key, so that wrappers
// can misuse it.
type tracker struct {
	mu     sync.Mutex
	latest map[dedup.Key]dedup.Token
	state  map[dedup.Token]string // "claimed", "accepted", "abandoned"
	at     map[dedup.Token]time.Time
}

func newTracker() *tracker {
	return &tracker{latest: map[dedup.Key]dedup.Token{}, state: map[dedup.Token]string{}, at: map[dedup.Token]time.Time{}}
}

func (tr *tracker) claimed(key dedup.Key, d dedup.Decision) {
	if d.Outcome != dedup.Claimed {
		return
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.latest[key] = d.Token
	tr.state[d.Token] = "claimed"
	tr.at[d.Token] = time.Now()
}

func (tr *tracker) set(tok dedup.Token, state string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.state[tok] = state
}

func (tr *tracker) get(key dedup.Key) (dedup.Token, string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tok := tr.latest[key]
	return tok, tr.state[tok]
}

func (tr *tracker) stateOf(tok dedup.Token) string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.state[tok]
}

func fakeToken() dedup.Token {
	tok, err := dedup.NewToken()
	if err != nil {
		panic(err)
	}
	return tok
}

// neverDuplicate answers accepted keys as new: the handler runs again.
type neverDuplicate struct{ dedup.Store }

func (s neverDuplicate) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Decision, error) {
	d, err := s.Store.Claim(ctx, req)
	if err == nil && d.Outcome == dedup.Duplicate {
		return dedup.Decision{Outcome: dedup.Claimed, Token: fakeToken(), FirstSeen: time.Now()}, nil
	}
	return d, err
}

// textReply stores the reply as text (like a TEXT column): invalid UTF-8 is
// replaced.
type textReply struct{ dedup.Store }

func (s textReply) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Decision, error) {
	d, err := s.Store.Claim(ctx, req)
	if d.Outcome == dedup.Duplicate {
		d.Reply = []byte(strings.ToValidUTF8(string(d.Reply), "\uFFFD"))
	}
	return d, err
}

// requestHash reports the new request's payload hash instead of the stored one.
type requestHash struct{ dedup.Store }

func (s requestHash) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Decision, error) {
	d, err := s.Store.Claim(ctx, req)
	if d.Outcome == dedup.Duplicate {
		d.PayloadSHA256 = req.PayloadSHA256
	}
	return d, err
}

// aliasedReply keeps the caller's reply slice instead of a copy and hands the
// same slice to every duplicate.
type aliasedReply struct {
	dedup.Store
	mu      sync.Mutex
	replies map[dedup.Key][]byte
}

func (s *aliasedReply) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Decision, error) {
	d, err := s.Store.Claim(ctx, req)
	if d.Outcome == dedup.Duplicate {
		s.mu.Lock()
		d.Reply = s.replies[req.Key]
		s.mu.Unlock()
	}
	return d, err
}

func (s *aliasedReply) Accept(ctx context.Context, key dedup.Key, tok dedup.Token, reply []byte) error {
	err := s.Store.Accept(ctx, key, tok, reply)
	if err == nil {
		s.mu.Lock()
		s.replies[key] = reply
		s.mu.Unlock()
	}
	return err
}

// inFlightAsDuplicate answers a claim in progress as a duplicate with an
// empty reply.
type inFlightAsDuplicate struct{ dedup.Store }

func (s inFlightAsDuplicate) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Decision, error) {
	d, err := s.Store.Claim(ctx, req)
	if d.Outcome == dedup.InFlight {
		return dedup.Decision{Outcome: dedup.Duplicate, FirstSeen: d.FirstSeen, PayloadSHA256: req.PayloadSHA256}, err
	}
	return d, err
}

// zeroRetryAfter reports in-flight claims without a retry delay.
type zeroRetryAfter struct{ dedup.Store }

func (s zeroRetryAfter) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Decision, error) {
	d, err := s.Store.Claim(ctx, req)
	d.RetryAfter = 0
	return d, err
}

// stealsLease never answers InFlight: a second delivery gets a claim of its
// own while the first still holds the key.
type stealsLease struct{ dedup.Store }

func (s stealsLease) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Decision, error) {
	d, err := s.Store.Claim(ctx, req)
	if d.Outcome == dedup.InFlight {
		return dedup.Decision{Outcome: dedup.Claimed, Token: fakeToken(), FirstSeen: time.Now()}, err
	}
	return d, err
}

// acceptIgnoresToken accepts whoever calls, with the key's latest token.
type acceptIgnoresToken struct {
	dedup.Store
	tr *tracker
}

func (s acceptIgnoresToken) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Decision, error) {
	d, err := s.Store.Claim(ctx, req)
	s.tr.claimed(req.Key, d)
	return d, err
}

func (s acceptIgnoresToken) Accept(ctx context.Context, key dedup.Key, _ dedup.Token, reply []byte) error {
	tok, _ := s.tr.get(key)
	return s.Store.Accept(ctx, key, tok, reply)
}

// abandonIgnoresToken releases the key for whoever calls.
type abandonIgnoresToken struct {
	dedup.Store
	tr *tracker
}

func (s abandonIgnoresToken) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Decision, error) {
	d, err := s.Store.Claim(ctx, req)
	s.tr.claimed(req.Key, d)
	return d, err
}

func (s abandonIgnoresToken) Abandon(ctx context.Context, key dedup.Key, _ dedup.Token) error {
	tok, _ := s.tr.get(key)
	return s.Store.Abandon(ctx, key, tok)
}

// abandonKeepsClaim reports success but does not release the key.
type abandonKeepsClaim struct{ dedup.Store }

func (abandonKeepsClaim) Abandon(context.Context, dedup.Key, dedup.Token) error { return nil }

// acceptAfterAbandon lets a holder that abandoned still accept, by claiming
// the key again behind the scenes.
type acceptAfterAbandon struct {
	dedup.Store
	tr *tracker
}

func (s acceptAfterAbandon) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Decision, error) {
	d, err := s.Store.Claim(ctx, req)
	s.tr.claimed(req.Key, d)
	return d, err
}

func (s acceptAfterAbandon) Abandon(ctx context.Context, key dedup.Key, tok dedup.Token) error {
	err := s.Store.Abandon(ctx, key, tok)
	if err == nil {
		s.tr.set(tok, "abandoned")
	}
	return err
}

func (s acceptAfterAbandon) Accept(ctx context.Context, key dedup.Key, tok dedup.Token, reply []byte) error {
	if s.tr.stateOf(tok) == "abandoned" {
		d, err := s.Store.Claim(ctx, dedup.ClaimRequest{Key: key})
		if err != nil || d.Outcome != dedup.Claimed {
			return fmt.Errorf("reclaim: %v %w", d.Outcome, err)
		}
		tok = d.Token
	}
	return s.Store.Accept(ctx, key, tok, reply)
}

// acceptTwice makes Accept idempotent: a second accept of the same token
// succeeds (and drops its reply).
type acceptTwice struct {
	dedup.Store
	tr *tracker
}

func (s acceptTwice) Accept(ctx context.Context, key dedup.Key, tok dedup.Token, reply []byte) error {
	if s.tr.stateOf(tok) == "accepted" {
		return nil
	}
	err := s.Store.Accept(ctx, key, tok, reply)
	if err == nil {
		s.tr.set(tok, "accepted")
	}
	return err
}

// expireIgnoresBefore removes every accepted row, however young.
type expireIgnoresBefore struct{ dedup.Store }

func (s expireIgnoresBefore) Expire(ctx context.Context, _ time.Time) (int64, error) {
	return s.Store.Expire(ctx, time.Now().AddDate(100, 0, 0))
}

// expireRemovesClaims also drops claims in progress.
type expireRemovesClaims struct {
	dedup.Store
	tr *tracker
}

func (s expireRemovesClaims) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Decision, error) {
	d, err := s.Store.Claim(ctx, req)
	s.tr.claimed(req.Key, d)
	return d, err
}

func (s expireRemovesClaims) Expire(ctx context.Context, before time.Time) (int64, error) {
	n, err := s.Store.Expire(ctx, before)
	s.tr.mu.Lock()
	var held []struct {
		k dedup.Key
		t dedup.Token
	}
	for k, tok := range s.tr.latest {
		held = append(held, struct {
			k dedup.Key
			t dedup.Token
		}{k, tok})
	}
	s.tr.mu.Unlock()
	for _, h := range held {
		if s.Store.Abandon(ctx, h.k, h.t) == nil {
			n++
		}
	}
	return n, err
}

// ignoresWindow treats every accepted key as a duplicate forever.
type ignoresWindow struct{ dedup.Store }

func (s ignoresWindow) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Decision, error) {
	req.Window = 0
	return s.Store.Claim(ctx, req)
}

// windowOnClaims applies the window to claims in progress too.
type windowOnClaims struct{ dedup.Store }

func (s windowOnClaims) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Decision, error) {
	d, err := s.Store.Claim(ctx, req)
	if d.Outcome == dedup.InFlight && req.Window > 0 && time.Since(d.FirstSeen) > req.Window {
		return dedup.Decision{Outcome: dedup.Claimed, Token: fakeToken(), Reused: true, FirstSeen: time.Now()}, err
	}
	return d, err
}

// truncatedKey keeps only the first 32 characters of a key, as a CHAR(32)
// column would.
type truncatedKey struct{ dedup.Store }

func (s truncatedKey) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Decision, error) {
	req.Key = req.Key[:32]
	return s.Store.Claim(ctx, req)
}

func (s truncatedKey) Accept(ctx context.Context, key dedup.Key, tok dedup.Token, reply []byte) error {
	return s.Store.Accept(ctx, key[:32], tok, reply)
}

func (s truncatedKey) Abandon(ctx context.Context, key dedup.Key, tok dedup.Token) error {
	return s.Store.Abandon(ctx, key[:32], tok)
}

// keyDerivedToken derives the token from the key, so a takeover gets the
// same token as the holder it replaced.
type keyDerivedToken struct {
	dedup.Store
	tr *tracker
}

func derived(key dedup.Key) dedup.Token {
	h := sha256.Sum256([]byte("token:" + key))
	return dedup.Token(hex.EncodeToString(h[:16]))
}

func (s keyDerivedToken) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Decision, error) {
	d, err := s.Store.Claim(ctx, req)
	s.tr.claimed(req.Key, d)
	if d.Outcome == dedup.Claimed {
		d.Token = derived(req.Key)
	}
	return d, err
}

func (s keyDerivedToken) inner(key dedup.Key, tok dedup.Token) dedup.Token {
	if tok != derived(key) {
		return tok
	}
	inner, _ := s.tr.get(key)
	return inner
}

func (s keyDerivedToken) Accept(ctx context.Context, key dedup.Key, tok dedup.Token, reply []byte) error {
	return s.Store.Accept(ctx, key, s.inner(key, tok), reply)
}

func (s keyDerivedToken) Abandon(ctx context.Context, key dedup.Key, tok dedup.Token) error {
	return s.Store.Abandon(ctx, key, s.inner(key, tok))
}

// rejectsLateAccept refuses an accept once the holder's lease ran out, even
// though nobody took the key over.
type rejectsLateAccept struct {
	dedup.Store
	tr    *tracker
	lease time.Duration
}

func (s rejectsLateAccept) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Decision, error) {
	d, err := s.Store.Claim(ctx, req)
	s.tr.claimed(req.Key, d)
	return d, err
}

func (s rejectsLateAccept) Accept(ctx context.Context, key dedup.Key, tok dedup.Token, reply []byte) error {
	s.tr.mu.Lock()
	at, ok := s.tr.at[tok]
	s.tr.mu.Unlock()
	if ok && time.Since(at) > s.lease {
		return fmt.Errorf("late: %w", dedup.ErrStaleClaim)
	}
	return s.Store.Accept(ctx, key, tok, reply)
}

// racyStore is a whole store with the classic bug: it reads the row, decides,
// and writes in a separate step (as a SELECT followed by an INSERT would),
// so concurrent claims of a new key all win. Everything else is right.
type racyStore struct {
	lease time.Duration
	mu    sync.Mutex
	rows  map[dedup.Key]racyRow
}

type racyRow struct {
	state     string
	token     dedup.Token
	hash      string
	firstSeen time.Time
	until     time.Time
	reply     []byte
}

func newRacy(opts dedup.Options) *racyStore {
	return &racyStore{lease: opts.WithDefaults().Lease, rows: map[dedup.Key]racyRow{}}
}

func (s *racyStore) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Decision, error) {
	s.mu.Lock()
	r, ok := s.rows[req.Key] // check …
	s.mu.Unlock()
	now := time.Now()
	if ok {
		switch {
		case r.state == "claimed" && now.Before(r.until):
			return dedup.Decision{Outcome: dedup.InFlight, FirstSeen: r.firstSeen, RetryAfter: dedup.RetryAfter(r.until.Sub(now))}, nil
		case r.state == "accepted" && (req.Window <= 0 || !r.firstSeen.Before(now.Add(-req.Window))):
			return dedup.Decision{Outcome: dedup.Duplicate, FirstSeen: r.firstSeen, PayloadSHA256: r.hash, Reply: append([]byte{}, r.reply...)}, nil
		}
	}
	time.Sleep(5 * time.Millisecond) // the round trip between SELECT and INSERT
	tok := fakeToken()
	s.mu.Lock() // … then act
	s.rows[req.Key] = racyRow{state: "claimed", token: tok, hash: req.PayloadSHA256, firstSeen: now, until: now.Add(s.lease)}
	s.mu.Unlock()
	return dedup.Decision{Outcome: dedup.Claimed, Token: tok, Reused: ok && r.state == "accepted", FirstSeen: now}, nil
}

func (s *racyStore) transition(key dedup.Key, tok dedup.Token, state string, reply []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.rows[key]
	if !ok || r.state != "claimed" || r.token != tok {
		return dedup.ErrStaleClaim
	}
	r.state, r.reply = state, append([]byte{}, reply...)
	s.rows[key] = r
	return nil
}

func (s *racyStore) Accept(_ context.Context, key dedup.Key, tok dedup.Token, reply []byte) error {
	return s.transition(key, tok, "accepted", reply)
}

func (s *racyStore) Abandon(_ context.Context, key dedup.Key, tok dedup.Token) error {
	return s.transition(key, tok, "abandoned", nil)
}

func (s *racyStore) Expire(_ context.Context, before time.Time) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for k, r := range s.rows {
		if r.state != "claimed" && r.firstSeen.Before(before) {
			delete(s.rows, k)
			n++
		}
	}
	return n, nil
}

func (s *racyStore) Close() error { return nil }
