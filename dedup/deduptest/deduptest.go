// Package deduptest is the conformance kit of the dedup claim contract: one
// call runs every rule of dedup.Store against a store implementation.
//
// Use it from a store package's tests:
//
//	func TestContract(t *testing.T) {
//		deduptest.Exercise(t, func(t testing.TB, opts dedup.Options) dedup.Store {
//			return mystore.Open(t, opts)
//		})
//	}
//
// Every subtest builds its own store with newStore, so stores need not be
// cleaned between checks; the kit closes each store when its subtest ends.
// The lease and window groups start their keys, sleep once past ShortLease
// (or the window) and then run their subtests, so the whole kit takes about
// two and a half seconds whatever -parallel is.
//
// The stores are expected to read time from a clock close to the test
// process's own (the database server of SQL stores runs on the same host in
// tests): FirstSeen is checked to be within ClockSkew of time.Now.
package deduptest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/edigateway/gateway/dedup"
)

// T is the part of *testing.T the kit uses. Std adapts a *testing.T; tests of
// the kit itself pass a recorder to see which checks fail.
type T interface {
	testing.TB
	// Run runs f as a subtest named name, like (*testing.T).Run.
	Run(name string, f func(t T)) bool
	// Parallel signals that the subtest may run in parallel with its
	// siblings, like (*testing.T).Parallel.
	Parallel()
}

// NewStore builds an empty store with the given options for one subtest. It
// may use t for temporary directories, cleanups and fatal set-up errors.
type NewStore func(t testing.TB, opts dedup.Options) dedup.Store

// ShortLease is the lease of the subtests that wait for a lease to run out.
const ShortLease = 1500 * time.Millisecond

// ClockSkew is how far a store's FirstSeen may be from the test's clock.
const ClockSkew = 5 * time.Second

// callTimeout bounds every store call of the kit so a hanging store fails
// instead of stalling the test binary.
const callTimeout = 30 * time.Second

// Exercise runs the whole contract against the stores newStore builds, as
// subtests of t.
func Exercise(t *testing.T, newStore NewStore) {
	t.Helper()
	ExerciseT(Std(t), newStore)
}

// Std adapts a *testing.T to T.
func Std(t *testing.T) T { return stdT{t} }

type stdT struct{ *testing.T }

func (s stdT) Run(name string, f func(t T)) bool {
	return s.T.Run(name, func(t *testing.T) { f(stdT{t}) })
}

// ExerciseT is Exercise for any T. The subtests, by name:
//
//	claim/new-key                       a new key is Claimed with a fresh 128-bit hex token
//	duplicate/binary-reply              an accepted key is Duplicate with the reply byte for byte (NUL, non-UTF-8)
//	duplicate/empty-reply               an empty reply comes back empty
//	duplicate/large-reply               a 256 KiB reply comes back byte for byte
//	duplicate/stored-payload-hash       Duplicate carries the hash stored at claim, not the new request's
//	duplicate/reply-is-a-copy           the stored reply shares no memory with the caller's slices
//	in-flight/within-lease              a claimed key is InFlight with RetryAfter = the rest of the lease (≥ 1s)
//	lease/takeover-new-token            after the lease a new claim gets a different token and its own payload hash
//	lease/stale-accept                  the taken-over holder's Accept fails with ErrStaleClaim and accepts nothing
//	lease/stale-abandon                 the taken-over holder's Abandon fails and does not release the new holder
//	lease/late-accept-without-takeover  the holder may accept after its lease if nobody took the key over
//	abandon/reclaim                     after Abandon the key is Claimed again with a new token
//	abandon/accept-after-abandon        Accept with an abandoned token fails and accepts nothing
//	abandon/wrong-token                 Accept and Abandon with a token that never held the key fail
//	accept/twice                        a second Accept (and an Abandon after Accept) fails; the first reply stays
//	concurrency/one-claim               32 goroutines claiming one key: exactly one Claimed, 31 InFlight
//	concurrency/many-keys               32 goroutines on 32 keys: each claims, accepts and reads its own reply
//	expire/removes-old-accepted         Expire(now+1s) removes an accepted row, keeps a claimed one, counts 1
//	expire/keeps-young-accepted         Expire(now-1h) removes nothing
//	expire/keeps-claims                 Expire(now+1h) never removes a claim in progress
//	window/reuses-old                   an accepted row older than Window is Claimed again with Reused set
//	window/keeps-young                  an accepted row younger than Window stays Duplicate
//	window/in-flight-unaffected         Window never reclaims a claim in progress
//	keys/independent                    keys differing in one character never share a row
func ExerciseT(t T, newStore NewStore) {
	t.Helper()
	k := kit{newStore: newStore}
	t.Run("claim", func(t T) {
		t.Run("new-key", k.newKey)
	})
	t.Run("duplicate", func(t T) {
		t.Run("binary-reply", k.duplicateBinary)
		t.Run("empty-reply", k.duplicateEmpty)
		t.Run("large-reply", k.duplicateLarge)
		t.Run("stored-payload-hash", k.duplicatePayloadHash)
		t.Run("reply-is-a-copy", k.duplicateCopy)
	})
	t.Run("in-flight", func(t T) {
		t.Run("within-lease", k.inFlight)
	})
	t.Run("lease", k.lease)
	t.Run("abandon", func(t T) {
		t.Run("reclaim", k.abandonReclaim)
		t.Run("accept-after-abandon", k.acceptAfterAbandon)
		t.Run("wrong-token", k.wrongToken)
	})
	t.Run("accept", func(t T) {
		t.Run("twice", k.acceptTwice)
	})
	t.Run("concurrency", func(t T) {
		t.Run("one-claim", k.concurrentOneKey)
		t.Run("many-keys", k.concurrentManyKeys)
	})
	t.Run("expire", func(t T) {
		t.Run("removes-old-accepted", k.expireOld)
		t.Run("keeps-young-accepted", k.expireYoung)
		t.Run("keeps-claims", k.expireClaims)
	})
	t.Run("window", k.window)
	t.Run("keys", func(t T) {
		t.Run("independent", k.keysIndependent)
	})
}

type kit struct{ newStore NewStore }

// store builds a store for one subtest and closes it when the subtest ends.
func (k kit) store(t T, opts dedup.Options) dedup.Store {
	t.Helper()
	s := k.newStore(t, opts)
	if s == nil {
		t.Fatalf("newStore returned nil")
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func ctx(t T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), callTimeout)
	t.Cleanup(cancel)
	return c
}

// NewKey returns a random well-formed key.
func NewKey(t testing.TB) dedup.Key {
	t.Helper()
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("random key: %v", err)
	}
	return dedup.Key(hex.EncodeToString(b[:]))
}

// PayloadHash returns the lowercase hex SHA-256 of s.
func PayloadHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// binaryReply is an MDN-like reply with NUL bytes, invalid UTF-8 and CRLF.
var binaryReply = []byte("HTTP/1.1 200 OK\r\nContent-Type: multipart/signed\r\n\r\n\x00\x01\xff\xfe\xc3\x28 \xed\xa0\x80 signed\x00\r\n")

func claim(t T, c context.Context, s dedup.Store, key dedup.Key, hash string, window time.Duration) dedup.Decision {
	t.Helper()
	d, err := s.Claim(c, dedup.ClaimRequest{Key: key, PayloadSHA256: hash, Window: window})
	if err != nil {
		t.Fatalf("Claim(%.8s…): %v", key, err)
	}
	return d
}

func mustClaimed(t T, d dedup.Decision, what string) {
	t.Helper()
	if d.Outcome != dedup.Claimed {
		t.Fatalf("%s: outcome %v, want claimed (decision %+v)", what, d.Outcome, brief(d))
	}
	if !validToken(d.Token) {
		t.Fatalf("%s: token %q is not 32 lowercase hex characters (128 bits)", what, d.Token)
	}
}

func mustInFlight(t T, d dedup.Decision, what string) {
	t.Helper()
	if d.Outcome != dedup.InFlight {
		t.Fatalf("%s: outcome %v, want in-flight (decision %+v)", what, d.Outcome, brief(d))
	}
	if d.Token != "" {
		t.Errorf("%s: in-flight decision carries token %q", what, d.Token)
	}
	if d.RetryAfter < time.Second {
		t.Errorf("%s: RetryAfter %v, want at least 1s", what, d.RetryAfter)
	}
}

func mustDuplicate(t T, d dedup.Decision, reply []byte, hash, what string) {
	t.Helper()
	if d.Outcome != dedup.Duplicate {
		t.Fatalf("%s: outcome %v, want duplicate (decision %+v)", what, d.Outcome, brief(d))
	}
	if d.Token != "" {
		t.Errorf("%s: duplicate decision carries token %q", what, d.Token)
	}
	if !bytes.Equal(d.Reply, reply) {
		t.Errorf("%s: reply differs from the accepted one:\n got %q\nwant %q", what, d.Reply, reply)
	}
	if d.PayloadSHA256 != hash {
		t.Errorf("%s: PayloadSHA256 %q, want the stored %q", what, d.PayloadSHA256, hash)
	}
	if skew := time.Since(d.FirstSeen); skew < -ClockSkew || skew > ClockSkew {
		t.Errorf("%s: FirstSeen %v is not close to now (%v)", what, d.FirstSeen, time.Now())
	}
}

func mustStale(t T, err error, what string) {
	t.Helper()
	if !errors.Is(err, dedup.ErrStaleClaim) {
		t.Fatalf("%s: error %v, want one wrapping dedup.ErrStaleClaim", what, err)
	}
}

func mustOK(t T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// brief is a Decision without the (possibly large) reply, for messages.
func brief(d dedup.Decision) dedup.Decision {
	if len(d.Reply) > 64 {
		d.Reply = append(d.Reply[:64:64], "…"...)
	}
	return d
}

func validToken(tok dedup.Token) bool {
	if len(tok) != 32 {
		return false
	}
	for _, c := range []byte(tok) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// claimAccept claims a new key and accepts it with reply.
func claimAccept(t T, c context.Context, s dedup.Store, key dedup.Key, hash string, reply []byte) dedup.Token {
	t.Helper()
	d := claim(t, c, s, key, hash, 0)
	mustClaimed(t, d, "first claim")
	mustOK(t, s.Accept(c, key, d.Token, reply), "Accept")
	return d.Token
}

func (k kit) newKey(t T) {
	s, c := k.store(t, dedup.Options{}), ctx(t)
	d1 := claim(t, c, s, NewKey(t), PayloadHash("a"), 0)
	mustClaimed(t, d1, "new key")
	if d1.Reused {
		t.Errorf("new key: Reused set")
	}
	d2 := claim(t, c, s, NewKey(t), PayloadHash("b"), 0)
	mustClaimed(t, d2, "second new key")
	if d1.Token == d2.Token {
		t.Errorf("two claims got the same token %q", d1.Token)
	}
}

func (k kit) duplicateReply(t T, reply []byte) {
	s, c := k.store(t, dedup.Options{}), ctx(t)
	key, hash := NewKey(t), PayloadHash("payload")
	claimAccept(t, c, s, key, hash, reply)
	for i := 0; i < 2; i++ {
		mustDuplicate(t, claim(t, c, s, key, hash, 0), reply, hash, "claim after accept")
	}
}

func (k kit) duplicateBinary(t T) { k.duplicateReply(t, binaryReply) }
func (k kit) duplicateEmpty(t T)  { k.duplicateReply(t, []byte{}) }

func (k kit) duplicateLarge(t T) {
	reply := make([]byte, 256<<10)
	if _, err := rand.Read(reply); err != nil {
		t.Fatalf("random reply: %v", err)
	}
	k.duplicateReply(t, reply)
}

func (k kit) duplicatePayloadHash(t T) {
	s, c := k.store(t, dedup.Options{}), ctx(t)
	key, stored := NewKey(t), PayloadHash("original")
	claimAccept(t, c, s, key, stored, binaryReply)
	// A retransmission with drifted content must see the stored hash.
	mustDuplicate(t, claim(t, c, s, key, PayloadHash("drifted"), 0), binaryReply, stored, "claim with another payload")
}

func (k kit) duplicateCopy(t T) {
	s, c := k.store(t, dedup.Options{}), ctx(t)
	key, hash := NewKey(t), PayloadHash("p")
	reply := bytes.Clone(binaryReply)
	claimAccept(t, c, s, key, hash, reply)
	for i := range reply {
		reply[i] = 'X' // the caller reuses its buffer
	}
	d := claim(t, c, s, key, hash, 0)
	mustDuplicate(t, d, binaryReply, hash, "after the caller overwrote its reply buffer")
	for i := range d.Reply {
		d.Reply[i] = 'Y' // a caller scribbles on the returned reply
	}
	mustDuplicate(t, claim(t, c, s, key, hash, 0), binaryReply, hash, "after a caller overwrote a returned reply")
}

func (k kit) inFlight(t T) {
	s, c := k.store(t, dedup.Options{}), ctx(t)
	key := NewKey(t)
	mustClaimed(t, claim(t, c, s, key, PayloadHash("a"), 0), "first claim")
	d := claim(t, c, s, key, PayloadHash("a"), 0)
	mustInFlight(t, d, "second claim within the lease")
	// The default lease is 5 minutes; the rest of it, rounded up to whole
	// seconds, is between 4m50s and 5m.
	if d.RetryAfter < dedup.DefaultLease-10*time.Second || d.RetryAfter > dedup.DefaultLease {
		t.Errorf("RetryAfter %v, want the rest of the %v lease", d.RetryAfter, dedup.DefaultLease)
	}
	if d.RetryAfter%time.Second != 0 {
		t.Errorf("RetryAfter %v is not whole seconds", d.RetryAfter)
	}
	if skew := time.Since(d.FirstSeen); skew < -ClockSkew || skew > ClockSkew {
		t.Errorf("in-flight FirstSeen %v is not close to now", d.FirstSeen)
	}
}

// leaseStart is a key claimed under ShortLease, recorded before the lease
// group sleeps once for all its subtests; each subtest checks its own start,
// so a failure is reported by the subtest it concerns.
type leaseStart struct {
	s         dedup.Store
	key       dedup.Key
	first     dedup.Decision
	firstErr  error
	within    dedup.Decision
	withinErr error
}

func (k kit) startLease(t T, c context.Context) *leaseStart {
	t.Helper()
	st := &leaseStart{s: k.store(t, dedup.Options{Lease: ShortLease}), key: NewKey(t)}
	st.first, st.firstErr = st.s.Claim(c, dedup.ClaimRequest{Key: st.key, PayloadSHA256: PayloadHash("first")})
	st.within, st.withinErr = st.s.Claim(c, dedup.ClaimRequest{Key: st.key, PayloadSHA256: PayloadHash("first")})
	return st
}

// check asserts the start: claimed, then in flight within the lease.
func (st *leaseStart) check(t T) {
	t.Helper()
	mustOK(t, st.firstErr, "first claim")
	mustClaimed(t, st.first, "first claim")
	mustOK(t, st.withinErr, "claim within the lease")
	mustInFlight(t, st.within, "claim within the lease")
}

// takeover claims the key after its lease ran out.
func (st *leaseStart) takeover(t T, c context.Context) dedup.Decision {
	t.Helper()
	st.check(t)
	second := claim(t, c, st.s, st.key, PayloadHash("second"), 0)
	mustClaimed(t, second, "claim after the lease ran out")
	if second.Token == st.first.Token {
		t.Fatalf("takeover reused the old token %q", st.first.Token)
	}
	return second
}

func (k kit) lease(t T) {
	c := ctx(t)
	takeover, staleAccept, staleAbandon, late := k.startLease(t, c), k.startLease(t, c), k.startLease(t, c), k.startLease(t, c)
	time.Sleep(ShortLease + 300*time.Millisecond)

	t.Run("takeover-new-token", func(t T) {
		st := takeover
		second := st.takeover(t, c)
		if second.Reused {
			t.Errorf("takeover of a claim: Reused set (it is for window reuse of accepted rows)")
		}
		mustOK(t, st.s.Accept(c, st.key, second.Token, []byte("second reply")), "new holder's Accept")
		mustDuplicate(t, claim(t, c, st.s, st.key, PayloadHash("third"), 0), []byte("second reply"), PayloadHash("second"),
			"claim after the new holder accepted")
	})
	t.Run("stale-accept", func(t T) {
		st := staleAccept
		second := st.takeover(t, c)
		mustStale(t, st.s.Accept(c, st.key, st.first.Token, []byte("first reply")), "old holder's Accept after takeover")
		mustInFlight(t, claim(t, c, st.s, st.key, PayloadHash("third"), 0), "claim after the old holder's failed Accept")
		mustOK(t, st.s.Accept(c, st.key, second.Token, []byte("second reply")), "new holder's Accept")
		mustDuplicate(t, claim(t, c, st.s, st.key, PayloadHash("third"), 0), []byte("second reply"), PayloadHash("second"),
			"claim after the new holder accepted")
	})
	t.Run("stale-abandon", func(t T) {
		st := staleAbandon
		second := st.takeover(t, c)
		mustStale(t, st.s.Abandon(c, st.key, st.first.Token), "old holder's Abandon after takeover")
		mustInFlight(t, claim(t, c, st.s, st.key, PayloadHash("third"), 0), "claim after the old holder's failed Abandon")
		mustOK(t, st.s.Abandon(c, st.key, second.Token), "new holder's Abandon")
	})
	t.Run("late-accept-without-takeover", func(t T) {
		st := late
		st.check(t)
		// Nobody took the key over: the slow holder's accept stands.
		mustOK(t, st.s.Accept(c, st.key, st.first.Token, []byte("late reply")), "Accept after the lease ran out, no takeover")
		mustDuplicate(t, claim(t, c, st.s, st.key, PayloadHash("x"), 0), []byte("late reply"), PayloadHash("first"),
			"claim after the late Accept")
	})
}

func (k kit) abandonReclaim(t T) {
	s, c := k.store(t, dedup.Options{}), ctx(t)
	key := NewKey(t)
	d1 := claim(t, c, s, key, PayloadHash("1"), 0)
	mustClaimed(t, d1, "first claim")
	mustOK(t, s.Abandon(c, key, d1.Token), "Abandon")
	d2 := claim(t, c, s, key, PayloadHash("2"), 0)
	mustClaimed(t, d2, "claim after Abandon")
	if d2.Token == d1.Token {
		t.Fatalf("reclaim after Abandon reused the token %q", d1.Token)
	}
	if d2.Reused {
		t.Errorf("reclaim after Abandon: Reused set")
	}
	mustInFlight(t, claim(t, c, s, key, PayloadHash("3"), 0), "claim while the reclaim holds the key")
	mustOK(t, s.Accept(c, key, d2.Token, []byte("reply 2")), "Accept of the reclaim")
	mustDuplicate(t, claim(t, c, s, key, PayloadHash("3"), 0), []byte("reply 2"), PayloadHash("2"), "claim after Accept")
}

func (k kit) acceptAfterAbandon(t T) {
	s, c := k.store(t, dedup.Options{}), ctx(t)
	key := NewKey(t)
	d := claim(t, c, s, key, PayloadHash("1"), 0)
	mustClaimed(t, d, "first claim")
	mustOK(t, s.Abandon(c, key, d.Token), "Abandon")
	mustStale(t, s.Accept(c, key, d.Token, []byte("too late")), "Accept after Abandon")
	mustStale(t, s.Abandon(c, key, d.Token), "second Abandon")
	mustClaimed(t, claim(t, c, s, key, PayloadHash("2"), 0), "claim after the failed Accept")
}

func (k kit) wrongToken(t T) {
	s, c := k.store(t, dedup.Options{}), ctx(t)
	key := NewKey(t)
	d := claim(t, c, s, key, PayloadHash("1"), 0)
	mustClaimed(t, d, "first claim")
	bogus, err := dedup.NewToken()
	mustOK(t, err, "NewToken")
	mustStale(t, s.Accept(c, key, bogus, []byte("forged")), "Accept with a foreign token")
	mustStale(t, s.Abandon(c, key, bogus), "Abandon with a foreign token")
	mustStale(t, s.Accept(c, key, "", []byte("forged")), "Accept with an empty token")
	mustStale(t, s.Accept(c, NewKey(t), d.Token, []byte("x")), "Accept of a key never claimed")
	mustStale(t, s.Abandon(c, NewKey(t), d.Token), "Abandon of a key never claimed")
	mustInFlight(t, claim(t, c, s, key, PayloadHash("1"), 0), "claim after the forged calls")
	mustOK(t, s.Accept(c, key, d.Token, []byte("real")), "holder's Accept")
	mustDuplicate(t, claim(t, c, s, key, PayloadHash("1"), 0), []byte("real"), PayloadHash("1"), "claim after Accept")
}

func (k kit) acceptTwice(t T) {
	s, c := k.store(t, dedup.Options{}), ctx(t)
	key, hash := NewKey(t), PayloadHash("1")
	tok := claimAccept(t, c, s, key, hash, []byte("first"))
	mustStale(t, s.Accept(c, key, tok, []byte("second")), "second Accept")
	mustStale(t, s.Abandon(c, key, tok), "Abandon after Accept")
	mustDuplicate(t, claim(t, c, s, key, hash, 0), []byte("first"), hash, "claim after the failed calls")
}

const goroutines = 32

func (k kit) concurrentOneKey(t T) {
	s, c := k.store(t, dedup.Options{}), ctx(t)
	key, hash := NewKey(t), PayloadHash("race")
	var (
		wg        sync.WaitGroup
		start     = make(chan struct{})
		decisions = make([]dedup.Decision, goroutines)
		errs      = make([]error, goroutines)
	)
	for i := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			decisions[i], errs[i] = s.Claim(c, dedup.ClaimRequest{Key: key, PayloadSHA256: hash})
		}()
	}
	close(start)
	wg.Wait()
	var claimed, inFlight int
	var winner dedup.Token
	for i, d := range decisions {
		if errs[i] != nil {
			t.Errorf("goroutine %d: Claim: %v", i, errs[i])
			continue
		}
		switch d.Outcome {
		case dedup.Claimed:
			claimed++
			winner = d.Token
		case dedup.InFlight:
			inFlight++
		default:
			t.Errorf("goroutine %d: outcome %v", i, d.Outcome)
		}
	}
	if claimed != 1 || inFlight != goroutines-1 {
		t.Fatalf("%d concurrent claims of one key: %d claimed, %d in-flight; want 1 and %d",
			goroutines, claimed, inFlight, goroutines-1)
	}
	mustOK(t, s.Accept(c, key, winner, []byte("winner")), "winner's Accept")
	mustDuplicate(t, claim(t, c, s, key, hash, 0), []byte("winner"), hash, "claim after the race")
}

func (k kit) concurrentManyKeys(t T) {
	s, c := k.store(t, dedup.Options{}), ctx(t)
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan string, goroutines*3)
	for range goroutines {
		key := NewKey(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			hash, reply := PayloadHash(string(key)), []byte("reply for "+string(key))
			d, err := s.Claim(c, dedup.ClaimRequest{Key: key, PayloadSHA256: hash})
			if err != nil || d.Outcome != dedup.Claimed {
				errs <- "claim " + string(key[:8]) + ": " + d.Outcome.String() + " " + errString(err)
				return
			}
			if err := s.Accept(c, key, d.Token, reply); err != nil {
				errs <- "accept " + string(key[:8]) + ": " + err.Error()
				return
			}
			d, err = s.Claim(c, dedup.ClaimRequest{Key: key, PayloadSHA256: hash})
			if err != nil || d.Outcome != dedup.Duplicate || !bytes.Equal(d.Reply, reply) || d.PayloadSHA256 != hash {
				errs <- "duplicate " + string(key[:8]) + ": " + d.Outcome.String() + " reply " + string(d.Reply) + " " + errString(err)
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("concurrent keys: %s", e)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func (k kit) expireOld(t T) {
	s, c := k.store(t, dedup.Options{}), ctx(t)
	old, held := NewKey(t), NewKey(t)
	claimAccept(t, c, s, old, PayloadHash("old"), []byte("old reply"))
	mustClaimed(t, claim(t, c, s, held, PayloadHash("held"), 0), "claim of the held key")
	n, err := s.Expire(c, time.Now().Add(time.Second))
	mustOK(t, err, "Expire")
	if n != 1 {
		t.Errorf("Expire(now+1s) removed %d rows, want 1 (the accepted one)", n)
	}
	d := claim(t, c, s, old, PayloadHash("old"), 0)
	mustClaimed(t, d, "claim of the expired key")
	if d.Reused {
		t.Errorf("claim of an expired (removed) key: Reused set")
	}
	mustInFlight(t, claim(t, c, s, held, PayloadHash("held"), 0), "claim of the held key after Expire")
}

func (k kit) expireYoung(t T) {
	s, c := k.store(t, dedup.Options{}), ctx(t)
	key, hash := NewKey(t), PayloadHash("young")
	claimAccept(t, c, s, key, hash, []byte("young reply"))
	n, err := s.Expire(c, time.Now().Add(-time.Hour))
	mustOK(t, err, "Expire")
	if n != 0 {
		t.Errorf("Expire(now-1h) removed %d rows, want 0", n)
	}
	mustDuplicate(t, claim(t, c, s, key, hash, 0), []byte("young reply"), hash, "claim after Expire(now-1h)")
}

func (k kit) expireClaims(t T) {
	s, c := k.store(t, dedup.Options{}), ctx(t)
	key, hash := NewKey(t), PayloadHash("held")
	d := claim(t, c, s, key, hash, 0)
	mustClaimed(t, d, "first claim")
	n, err := s.Expire(c, time.Now().Add(time.Hour))
	mustOK(t, err, "Expire")
	if n != 0 {
		t.Errorf("Expire(now+1h) with only a claim in progress removed %d rows, want 0", n)
	}
	mustInFlight(t, claim(t, c, s, key, hash, 0), "claim after Expire")
	mustOK(t, s.Accept(c, key, d.Token, []byte("kept")), "holder's Accept after Expire")
	mustDuplicate(t, claim(t, c, s, key, hash, 0), []byte("kept"), hash, "claim after Accept")
}

const window = 300 * time.Millisecond

func (k kit) window(t T) {
	c := ctx(t)
	// Start the two keys that must age past the window, sleep once.
	old := k.store(t, dedup.Options{})
	oldKey := NewKey(t)
	oldFirst, oldErr := old.Claim(c, dedup.ClaimRequest{Key: oldKey, PayloadSHA256: PayloadHash("first")})
	var oldAcceptErr error
	if oldErr == nil && oldFirst.Outcome == dedup.Claimed {
		oldAcceptErr = old.Accept(c, oldKey, oldFirst.Token, []byte("first reply"))
	}
	held := k.store(t, dedup.Options{})
	heldKey := NewKey(t)
	heldFirst, heldErr := held.Claim(c, dedup.ClaimRequest{Key: heldKey, PayloadSHA256: PayloadHash("held")})
	time.Sleep(2 * window)

	t.Run("reuses-old", func(t T) {
		s, key := old, oldKey
		mustOK(t, oldErr, "first claim")
		mustClaimed(t, oldFirst, "first claim")
		mustOK(t, oldAcceptErr, "Accept")
		d := claim(t, c, s, key, PayloadHash("second"), window)
		mustClaimed(t, d, "claim with a passed window")
		if !d.Reused {
			t.Errorf("claim with a passed window: Reused not set")
		}
		if d.Token == oldFirst.Token {
			t.Errorf("window reuse kept the old token")
		}
		mustInFlight(t, claim(t, c, s, key, PayloadHash("second"), window), "claim while the reuse holds the key")
		mustOK(t, s.Accept(c, key, d.Token, []byte("second reply")), "Accept of the reuse")
		mustDuplicate(t, claim(t, c, s, key, PayloadHash("x"), 0), []byte("second reply"), PayloadHash("second"),
			"claim after the reuse was accepted")
	})
	t.Run("keeps-young", func(t T) {
		s, c := k.store(t, dedup.Options{}), ctx(t)
		key, hash := NewKey(t), PayloadHash("young")
		claimAccept(t, c, s, key, hash, []byte("reply"))
		mustDuplicate(t, claim(t, c, s, key, hash, time.Hour), []byte("reply"), hash, "claim within a 1h window")
	})
	t.Run("in-flight-unaffected", func(t T) {
		mustOK(t, heldErr, "first claim")
		mustClaimed(t, heldFirst, "first claim")
		mustInFlight(t, claim(t, c, held, heldKey, PayloadHash("held"), window),
			"claim with a passed window of a key in progress")
	})
}

// keysIndependent uses keys that differ only in the last or only in the first
// character, which catches stores that truncate or prefix-match keys.
func (k kit) keysIndependent(t T) {
	s, c := k.store(t, dedup.Options{}), ctx(t)
	a := NewKey(t)
	b := a[:63] + flip(a[63:])
	z := flip(a[:1]) + a[1:]
	claimAccept(t, c, s, a, PayloadHash("a"), []byte("reply a"))
	db := claim(t, c, s, b, PayloadHash("b"), 0)
	mustClaimed(t, db, "claim of a key differing in the last character")
	dz := claim(t, c, s, z, PayloadHash("z"), 0)
	mustClaimed(t, dz, "claim of a key differing in the first character")
	mustOK(t, s.Abandon(c, b, db.Token), "Abandon of b")
	mustDuplicate(t, claim(t, c, s, a, PayloadHash("a"), 0), []byte("reply a"), PayloadHash("a"), "a after b was abandoned")
	mustInFlight(t, claim(t, c, s, z, PayloadHash("z"), 0), "z after b was abandoned")
	mustOK(t, s.Accept(c, z, dz.Token, []byte("reply z")), "Accept of z")
	mustDuplicate(t, claim(t, c, s, z, PayloadHash("z"), 0), []byte("reply z"), PayloadHash("z"), "z after Accept")
	mustDuplicate(t, claim(t, c, s, a, PayloadHash("a"), 0), []byte("reply a"), PayloadHash("a"), "a after z was accepted")
	mustClaimed(t, claim(t, c, s, b, PayloadHash("b"), 0), "b after everything")
}

// flip changes a one-character hex string to another hex digit.
func flip(s dedup.Key) dedup.Key {
	if s == "0" {
		return "1"
	}
	return "0"
}
