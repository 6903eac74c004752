package deduptest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/edigateway/gateway/dedup"
)

// NewLedger returns the ledger a subtest of ExerciseLedger uses, with the
// given options. Every check uses fresh random keys, partners, references
// and message ids, so it may return the same ledger to every subtest with
// equal options (a SQL test can open one schema per top-level test). The kit
// never closes it: register cleanups on t.
type NewLedger func(t testing.TB, opts dedup.Options) dedup.Ledger

// LedgerWindow is the window of the ledger checks that wait for a window to
// pass; the window group sleeps twice as long once for all its checks. The
// checks that deliver inside a window (a duplicate, a reuse and its
// duplicate) need a few store calls to fit in it: at 300 ms they did not
// on a loaded 2-core machine (0.35 s seen), hence 1 s.
const LedgerWindow = time.Second

// ExerciseLedger runs the whole business ledger contract against the
// ledgers newLedger returns, as subtests of t.
func ExerciseLedger(t *testing.T, newLedger NewLedger) {
	t.Helper()
	ExerciseLedgerT(Std(t), newLedger)
}

// ExerciseLedgerT is ExerciseLedger for any T. The claim follows the Store's
// rules; a Duplicate also records the delivery. The subtests, by name:
//
//	claim/new                       a new interchange is Claimed; its record holds every field, state claimed,
//	                                FirstSeen = LastSeen, Retries 0, MessageIDs [the id], the window
//	duplicate/retries               accepted → Duplicate with Retries 1, 2, 3, 4; each message id recorded once,
//	                                oldest first; LastSeen moves, FirstSeen stays
//	duplicate/stored-payload-hash   a duplicate with another payload hash gets the stored hash (drift detection)
//	duplicate/message-id-cap        70 more ids: the first MaxLedgerMessageIDs are kept, Retries counts all
//	in-flight/within-lease          a claimed interchange is InFlight with RetryAfter = the rest of the lease
//	lease/takeover                  after the lease a new claim gets a new token and fresh evidence; the old
//	                                holder's Accept and Abandon fail with ErrStaleClaim
//	lease/late-accept               the holder may accept after its lease if nobody took the interchange over
//	abandon/reclaim                 after Abandon: Claimed with a new token and fresh evidence; the abandoned
//	                                token's Accept and Abandon fail
//	accept/stale-token              foreign, empty and spent tokens fail with ErrStaleClaim and change nothing
//	concurrency/one-claim           32 goroutines, one interchange, 32 message ids: exactly one Claimed, 31 InFlight
//	concurrency/duplicates-counted  32 concurrent duplicates get Retries 1…32 each once; the record has 32
//	                                retries and all 33 ids (no lost update)
//	window/reuse                    an accepted row first seen more than Window ago is Claimed again, Reused,
//	                                evidence reset
//	window/keeps-young              a row younger than Window stays Duplicate
//	window/recorded-longer          a row accepted with a 1h window stays Duplicate for a claim with a shorter,
//	                                passed window (the longer of recorded and requested decides)
//	window/extended-by-duplicate    a Duplicate with a longer window records it: the row is neither reused nor
//	                                listed as expired after the first window
//	window/recorded-forever         a row accepted with window 0 stays Duplicate for a claim with a window
//	window/supersede                Supersede takes over an accepted row inside its window (Reused, fresh
//	                                evidence, the new window), never a claim in flight
//	window/forever                  Window 0 never reuses, however old the row
//	expired/lists-passed-window     ExpiredInterchanges lists an accepted row whose window passed, and honours limit
//	expired/never-forever           … never a row with window 0
//	expired/keeps-inside-window     … never a row inside its window
//	expired/never-claims            … never a claim in progress
//	expired/last-seen-before        … never a row last seen at or after before (a duplicate moves LastSeen)
//	history/keeps-replaced          a reuse keeps the accepted row it replaced: ReplacedInterchanges lists it
//	                                whole, Replaced = the reuse's FirstSeen; filters as FindInterchanges
//	history/supersede               … so does Supersede
//	history/only-accepted           … a reclaim of an abandoned row keeps nothing
//	history/delete                  DeleteReplaced removes a listed row once and counts it; the current row stays
//	delete/spares-reuse             DeleteInterchanges spares a listed row that was reused (and accepted) meanwhile
//	delete/removes-listed           DeleteInterchanges removes a listed row once and counts it
//	find/filters                    FindInterchanges by partner, reference, message id, From (inclusive) / To
//	                                (exclusive) on LastSeen, Limit; ordered by FirstSeen
//	interchange/not-found           Interchange of an unknown key fails with ErrNotFound
func ExerciseLedgerT(t T, newLedger NewLedger) {
	t.Helper()
	k := ledgerKit{newLedger: newLedger}
	t.Run("claim", func(t T) {
		t.Run("new", k.claimNew)
	})
	t.Run("duplicate", func(t T) {
		t.Run("retries", k.duplicateRetries)
		t.Run("stored-payload-hash", k.duplicateHash)
		t.Run("message-id-cap", k.messageIDCap)
	})
	t.Run("in-flight", func(t T) {
		t.Run("within-lease", k.inFlight)
	})
	t.Run("lease", k.lease)
	t.Run("abandon", func(t T) {
		t.Run("reclaim", k.abandonReclaim)
	})
	t.Run("accept", func(t T) {
		t.Run("stale-token", k.staleToken)
	})
	t.Run("concurrency", func(t T) {
		t.Run("one-claim", k.concurrentOneClaim)
		t.Run("duplicates-counted", k.concurrentDuplicates)
	})
	k.windowGroup(t)
	t.Run("find", func(t T) {
		t.Run("filters", k.find)
	})
	t.Run("interchange", func(t T) {
		t.Run("not-found", k.notFound)
	})
}

type ledgerKit struct{ newLedger NewLedger }

func (k ledgerKit) ledger(t T, opts dedup.Options) dedup.Ledger {
	t.Helper()
	l := k.newLedger(t, opts)
	if l == nil {
		t.Fatalf("newLedger returned nil")
	}
	return l
}

func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("random: %v", err)
	}
	return hex.EncodeToString(b)
}

// NewInterchange returns an interchange with a random key, partner and
// reference. Its sender holds a quote, double quotes and non-ASCII letters
// to catch stores that mangle text.
func NewInterchange(t testing.TB) dedup.Interchange {
	t.Helper()
	return dedup.Interchange{
		Key:       NewKey(t),
		Partner:   "partner-" + randomHex(t, 6),
		Standard:  "EDIFACT",
		Sender:    `5790000000001:14 O'Brien "Ærø"`,
		Recipient: "RECEIVER:ZZ",
		Reference: "REF" + randomHex(t, 7),
		Date:      "260301:1200",
		Type:      "INVOIC",
	}
}

// NewMessageID returns a random AS2-style message id.
func NewMessageID(t testing.TB) string {
	t.Helper()
	return "<" + randomHex(t, 8) + "@partner.example>"
}

func claimIC(t T, c context.Context, l dedup.Ledger, ic dedup.Interchange, hash, msgID string, window time.Duration) dedup.Decision {
	t.Helper()
	d, err := l.ClaimInterchange(c, dedup.InterchangeClaim{
		Interchange: ic, PayloadSHA256: hash, TransportKey: NewKey(t), MessageID: msgID, Window: window,
	})
	if err != nil {
		t.Fatalf("ClaimInterchange(%.8s…, %s): %v", ic.Key, msgID, err)
	}
	return d
}

func record(t T, c context.Context, l dedup.Ledger, key dedup.Key) dedup.InterchangeRecord {
	t.Helper()
	r, err := l.Interchange(c, key)
	if err != nil {
		t.Fatalf("Interchange(%.8s…): %v", key, err)
	}
	return r
}

func mustLedgerDuplicate(t T, d dedup.Decision, hash string, retries int, what string) {
	t.Helper()
	if d.Outcome != dedup.Duplicate {
		t.Fatalf("%s: outcome %v, want duplicate (decision %+v)", what, d.Outcome, brief(d))
	}
	if d.Token != "" {
		t.Errorf("%s: duplicate decision carries token %q", what, d.Token)
	}
	if d.PayloadSHA256 != hash {
		t.Errorf("%s: PayloadSHA256 %q, want the stored %q", what, d.PayloadSHA256, hash)
	}
	if d.Retries != retries {
		t.Errorf("%s: Retries %d, want %d", what, d.Retries, retries)
	}
	if skew := time.Since(d.FirstSeen); skew < -ClockSkew || skew > ClockSkew {
		t.Errorf("%s: FirstSeen %v is not close to now (%v)", what, d.FirstSeen, time.Now())
	}
}

// mustFresh checks the evidence of a row just claimed (new, takeover,
// reclaim or reuse) by d under msgID with hash.
func mustFresh(t T, r dedup.InterchangeRecord, ic dedup.Interchange, d dedup.Decision, hash, msgID string, window time.Duration, what string) {
	t.Helper()
	if r.Interchange != ic {
		t.Errorf("%s: record interchange\n got %+v\nwant %+v", what, r.Interchange, ic)
	}
	if r.State != "claimed" {
		t.Errorf("%s: state %q, want claimed", what, r.State)
	}
	if r.PayloadSHA256 != hash {
		t.Errorf("%s: PayloadSHA256 %q, want %q", what, r.PayloadSHA256, hash)
	}
	if !r.FirstSeen.Equal(d.FirstSeen) || !r.LastSeen.Equal(r.FirstSeen) {
		t.Errorf("%s: FirstSeen %v, LastSeen %v; want both %v (the claim's)", what, r.FirstSeen, r.LastSeen, d.FirstSeen)
	}
	if r.Retries != 0 {
		t.Errorf("%s: Retries %d, want 0", what, r.Retries)
	}
	if !slices.Equal(r.MessageIDs, []string{msgID}) {
		t.Errorf("%s: MessageIDs %q, want [%q]", what, r.MessageIDs, msgID)
	}
	if r.Window != window {
		t.Errorf("%s: Window %v, want %v", what, r.Window, window)
	}
}

func (k ledgerKit) claimNew(t T) {
	l, c := k.ledger(t, dedup.Options{}), ctx(t)
	ic, h := NewInterchange(t), PayloadHash("invoice")
	// Quotes, a backslash, a comma and non-ASCII catch stores that mangle ids
	// in a JSON or array column.
	m := `<"quoted\\id",{ü}` + randomHex(t, 4) + `@partner.example>`
	d := claimIC(t, c, l, ic, h, m, 7*24*time.Hour)
	mustClaimed(t, d, "new interchange")
	if d.Reused {
		t.Errorf("new interchange: Reused set")
	}
	if skew := time.Since(d.FirstSeen); skew < -ClockSkew || skew > ClockSkew {
		t.Errorf("new interchange: FirstSeen %v is not close to now", d.FirstSeen)
	}
	mustFresh(t, record(t, c, l, ic.Key), ic, d, h, m, 7*24*time.Hour, "record of the new claim")
	other := NewInterchange(t)
	d2 := claimIC(t, c, l, other, h, m, 0)
	mustClaimed(t, d2, "second interchange")
	if d2.Token == d.Token {
		t.Errorf("two claims got the same token")
	}
	mustFresh(t, record(t, c, l, other.Key), other, d2, h, m, 0, "record of the second claim")
	recs, err := l.FindInterchanges(c, dedup.InterchangeQuery{MessageID: m})
	mustOK(t, err, "FindInterchanges by the id")
	// Both claims may share a first-seen instant (millisecond clocks), when
	// the order falls back to the key: compare as a set.
	if len(recs) != 2 || !(recs[0].Key == ic.Key && recs[1].Key == other.Key || recs[0].Key == other.Key && recs[1].Key == ic.Key) {
		t.Errorf("FindInterchanges by message id %q returned %s, want both claims", m, keysOf(recs))
	}
}

// claimAcceptIC claims a new interchange and accepts it.
func claimAcceptIC(t T, c context.Context, l dedup.Ledger, ic dedup.Interchange, hash, msgID string, window time.Duration) dedup.Decision {
	t.Helper()
	d := claimIC(t, c, l, ic, hash, msgID, window)
	mustClaimed(t, d, "first claim")
	mustOK(t, l.AcceptInterchange(c, ic.Key, d.Token), "AcceptInterchange")
	return d
}

// tick lets the clock of a millisecond-precision store move.
func tick() { time.Sleep(5 * time.Millisecond) }

func (k ledgerKit) duplicateRetries(t T) {
	l, c := k.ledger(t, dedup.Options{}), ctx(t)
	ic, h := NewInterchange(t), PayloadHash("invoice")
	m1, m2, m3 := NewMessageID(t), NewMessageID(t), NewMessageID(t)
	first := claimAcceptIC(t, c, l, ic, h, m1, 0)
	r := record(t, c, l, ic.Key)
	if r.State != "accepted" || r.Retries != 0 || !slices.Equal(r.MessageIDs, []string{m1}) {
		t.Fatalf("after accept: state %q, retries %d, ids %q", r.State, r.Retries, r.MessageIDs)
	}
	last := r.LastSeen
	for i, m := range []string{m2, m3, m2, m1} {
		tick()
		d := claimIC(t, c, l, ic, h, m, 0)
		mustLedgerDuplicate(t, d, h, i+1, fmt.Sprintf("delivery %d", i+2))
		if !d.FirstSeen.Equal(first.FirstSeen) {
			t.Errorf("delivery %d: FirstSeen %v, want the first claim's %v", i+2, d.FirstSeen, first.FirstSeen)
		}
		r = record(t, c, l, ic.Key)
		if r.Retries != i+1 {
			t.Errorf("delivery %d: record Retries %d, want %d", i+2, r.Retries, i+1)
		}
		if !r.LastSeen.After(last) {
			t.Errorf("delivery %d: LastSeen %v did not move past %v", i+2, r.LastSeen, last)
		}
		if !r.FirstSeen.Equal(first.FirstSeen) || r.State != "accepted" || r.PayloadSHA256 != h {
			t.Errorf("delivery %d: record changed: %+v", i+2, r)
		}
		last = r.LastSeen
	}
	if want := []string{m1, m2, m3}; !slices.Equal(r.MessageIDs, want) {
		t.Errorf("MessageIDs %q, want each id once, oldest first: %q", r.MessageIDs, want)
	}
	if r.Interchange != ic {
		t.Errorf("record interchange\n got %+v\nwant %+v", r.Interchange, ic)
	}
}

func (k ledgerKit) duplicateHash(t T) {
	l, c := k.ledger(t, dedup.Options{}), ctx(t)
	ic, stored := NewInterchange(t), PayloadHash("original")
	claimAcceptIC(t, c, l, ic, stored, NewMessageID(t), 0)
	d := claimIC(t, c, l, ic, PayloadHash("drifted"), NewMessageID(t), 0)
	mustLedgerDuplicate(t, d, stored, 1, "delivery with another payload")
	if r := record(t, c, l, ic.Key); r.PayloadSHA256 != stored {
		t.Errorf("record PayloadSHA256 %q after a drifted delivery, want the stored %q", r.PayloadSHA256, stored)
	}
}

func (k ledgerKit) messageIDCap(t T) {
	l, c := k.ledger(t, dedup.Options{}), ctx(t)
	ic, h := NewInterchange(t), PayloadHash("p")
	ids := []string{NewMessageID(t)}
	claimAcceptIC(t, c, l, ic, h, ids[0], 0)
	const more = dedup.MaxLedgerMessageIDs + 6
	for i := range more {
		ids = append(ids, NewMessageID(t))
		d := claimIC(t, c, l, ic, h, ids[len(ids)-1], 0)
		if d.Outcome != dedup.Duplicate || d.Retries != i+1 {
			t.Fatalf("delivery %d: %v, Retries %d; want duplicate, %d", i+2, d.Outcome, d.Retries, i+1)
		}
	}
	r := record(t, c, l, ic.Key)
	if r.Retries != more {
		t.Errorf("Retries %d, want %d", r.Retries, more)
	}
	if !slices.Equal(r.MessageIDs, ids[:dedup.MaxLedgerMessageIDs]) {
		t.Errorf("MessageIDs: %d kept, want the oldest %d (first %q, last %q)", len(r.MessageIDs),
			dedup.MaxLedgerMessageIDs, ids[0], ids[dedup.MaxLedgerMessageIDs-1])
	}
}

func (k ledgerKit) inFlight(t T) {
	l, c := k.ledger(t, dedup.Options{}), ctx(t)
	ic := NewInterchange(t)
	mustClaimed(t, claimIC(t, c, l, ic, PayloadHash("a"), NewMessageID(t), 0), "first claim")
	d := claimIC(t, c, l, ic, PayloadHash("a"), NewMessageID(t), 0)
	mustInFlight(t, d, "second delivery within the lease")
	if d.RetryAfter < dedup.DefaultLease-10*time.Second || d.RetryAfter > dedup.DefaultLease || d.RetryAfter%time.Second != 0 {
		t.Errorf("RetryAfter %v, want the rest of the %v lease in whole seconds", d.RetryAfter, dedup.DefaultLease)
	}
}

// icStart is an interchange claimed under ShortLease before the lease group
// sleeps once for all its subtests.
type icStart struct {
	l         dedup.Ledger
	ic        dedup.Interchange
	msgID     string
	first     dedup.Decision
	firstErr  error
	within    dedup.Decision
	withinErr error
}

func (k ledgerKit) startICLease(t T, c context.Context) *icStart {
	t.Helper()
	st := &icStart{l: k.ledger(t, dedup.Options{Lease: ShortLease}), ic: NewInterchange(t), msgID: NewMessageID(t)}
	st.first, st.firstErr = st.l.ClaimInterchange(c, dedup.InterchangeClaim{
		Interchange: st.ic, PayloadSHA256: PayloadHash("first"), MessageID: st.msgID, Window: time.Hour})
	st.within, st.withinErr = st.l.ClaimInterchange(c, dedup.InterchangeClaim{
		Interchange: st.ic, PayloadSHA256: PayloadHash("first"), MessageID: "<within@lease>", Window: time.Hour})
	return st
}

func (st *icStart) check(t T) {
	t.Helper()
	mustOK(t, st.firstErr, "first claim")
	mustClaimed(t, st.first, "first claim")
	mustOK(t, st.withinErr, "claim within the lease")
	mustInFlight(t, st.within, "claim within the lease")
}

func (k ledgerKit) lease(t T) {
	c := ctx(t)
	takeover, late := k.startICLease(t, c), k.startICLease(t, c)
	time.Sleep(ShortLease + 300*time.Millisecond)

	t.Run("takeover", func(t T) {
		st := takeover
		st.check(t)
		m2, h2 := NewMessageID(t), PayloadHash("second")
		d := claimIC(t, c, st.l, st.ic, h2, m2, 24*time.Hour)
		mustClaimed(t, d, "claim after the lease ran out")
		if d.Token == st.first.Token {
			t.Fatalf("takeover reused the old token")
		}
		if d.Reused {
			t.Errorf("takeover of a claim: Reused set")
		}
		mustFresh(t, record(t, c, st.l, st.ic.Key), st.ic, d, h2, m2, 24*time.Hour, "record after takeover")
		mustStale(t, st.l.AcceptInterchange(c, st.ic.Key, st.first.Token), "old holder's Accept after takeover")
		mustStale(t, st.l.AbandonInterchange(c, st.ic.Key, st.first.Token), "old holder's Abandon after takeover")
		mustInFlight(t, claimIC(t, c, st.l, st.ic, h2, NewMessageID(t), 0), "claim after the old holder's failed calls")
		mustOK(t, st.l.AcceptInterchange(c, st.ic.Key, d.Token), "new holder's Accept")
		mustLedgerDuplicate(t, claimIC(t, c, st.l, st.ic, PayloadHash("third"), NewMessageID(t), 0), h2, 1,
			"delivery after the new holder accepted")
	})
	t.Run("late-accept", func(t T) {
		st := late
		st.check(t)
		mustOK(t, st.l.AcceptInterchange(c, st.ic.Key, st.first.Token), "Accept after the lease ran out, no takeover")
		mustLedgerDuplicate(t, claimIC(t, c, st.l, st.ic, PayloadHash("x"), NewMessageID(t), 0), PayloadHash("first"), 1,
			"delivery after the late Accept")
	})
}

func (k ledgerKit) abandonReclaim(t T) {
	l, c := k.ledger(t, dedup.Options{}), ctx(t)
	ic := NewInterchange(t)
	d1 := claimIC(t, c, l, ic, PayloadHash("1"), NewMessageID(t), 0)
	mustClaimed(t, d1, "first claim")
	mustInFlight(t, claimIC(t, c, l, ic, PayloadHash("1"), NewMessageID(t), 0), "second delivery while held")
	mustOK(t, l.AbandonInterchange(c, ic.Key, d1.Token), "Abandon")
	mustStale(t, l.AcceptInterchange(c, ic.Key, d1.Token), "Accept after Abandon")
	mustStale(t, l.AbandonInterchange(c, ic.Key, d1.Token), "second Abandon")
	tick()
	m3, h3 := NewMessageID(t), PayloadHash("3")
	d3 := claimIC(t, c, l, ic, h3, m3, time.Hour)
	mustClaimed(t, d3, "claim after Abandon")
	if d3.Token == d1.Token || d3.Reused {
		t.Errorf("reclaim after Abandon: token reused %v, Reused %v", d3.Token == d1.Token, d3.Reused)
	}
	mustFresh(t, record(t, c, l, ic.Key), ic, d3, h3, m3, time.Hour, "record after reclaim")
	mustOK(t, l.AcceptInterchange(c, ic.Key, d3.Token), "Accept of the reclaim")
	mustLedgerDuplicate(t, claimIC(t, c, l, ic, PayloadHash("4"), NewMessageID(t), 0), h3, 1, "delivery after Accept")
}

func (k ledgerKit) staleToken(t T) {
	l, c := k.ledger(t, dedup.Options{}), ctx(t)
	ic, h := NewInterchange(t), PayloadHash("1")
	d := claimIC(t, c, l, ic, h, NewMessageID(t), 0)
	mustClaimed(t, d, "first claim")
	bogus, err := dedup.NewToken()
	mustOK(t, err, "NewToken")
	mustStale(t, l.AcceptInterchange(c, ic.Key, bogus), "Accept with a foreign token")
	mustStale(t, l.AbandonInterchange(c, ic.Key, bogus), "Abandon with a foreign token")
	mustStale(t, l.AcceptInterchange(c, ic.Key, ""), "Accept with an empty token")
	mustStale(t, l.AcceptInterchange(c, NewKey(t), d.Token), "Accept of a key never claimed")
	mustStale(t, l.AbandonInterchange(c, NewKey(t), d.Token), "Abandon of a key never claimed")
	if r := record(t, c, l, ic.Key); r.State != "claimed" {
		t.Fatalf("state %q after forged calls, want claimed", r.State)
	}
	mustOK(t, l.AcceptInterchange(c, ic.Key, d.Token), "holder's Accept")
	mustStale(t, l.AcceptInterchange(c, ic.Key, d.Token), "second Accept")
	mustStale(t, l.AbandonInterchange(c, ic.Key, d.Token), "Abandon after Accept")
	if r := record(t, c, l, ic.Key); r.State != "accepted" {
		t.Errorf("state %q, want accepted", r.State)
	}
	mustLedgerDuplicate(t, claimIC(t, c, l, ic, h, NewMessageID(t), 0), h, 1, "delivery after the failed calls")
}

func (k ledgerKit) concurrentOneClaim(t T) {
	l, c := k.ledger(t, dedup.Options{}), ctx(t)
	ic, h := NewInterchange(t), PayloadHash("race")
	ids := make([]string, goroutines)
	for i := range ids {
		ids[i] = NewMessageID(t)
	}
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
			decisions[i], errs[i] = l.ClaimInterchange(c, dedup.InterchangeClaim{
				Interchange: ic, PayloadSHA256: h, MessageID: ids[i], Window: time.Hour})
		}()
	}
	close(start)
	wg.Wait()
	claimed, inFlight, winner := 0, 0, -1
	for i, d := range decisions {
		if errs[i] != nil {
			t.Errorf("goroutine %d: ClaimInterchange: %v", i, errs[i])
			continue
		}
		switch d.Outcome {
		case dedup.Claimed:
			claimed++
			winner = i
		case dedup.InFlight:
			inFlight++
		default:
			t.Errorf("goroutine %d: outcome %v", i, d.Outcome)
		}
	}
	if claimed != 1 || inFlight != goroutines-1 {
		t.Fatalf("%d concurrent deliveries of one interchange: %d claimed, %d in-flight; want 1 and %d",
			goroutines, claimed, inFlight, goroutines-1)
	}
	mustFresh(t, record(t, c, l, ic.Key), ic, decisions[winner], h, ids[winner], time.Hour, "record after the race")
	mustOK(t, l.AcceptInterchange(c, ic.Key, decisions[winner].Token), "winner's Accept")
	mustLedgerDuplicate(t, claimIC(t, c, l, ic, h, NewMessageID(t), time.Hour), h, 1, "delivery after the race")
}

func (k ledgerKit) concurrentDuplicates(t T) {
	l, c := k.ledger(t, dedup.Options{}), ctx(t)
	ic, h := NewInterchange(t), PayloadHash("dup")
	first := NewMessageID(t)
	claimAcceptIC(t, c, l, ic, h, first, 0)
	ids := make([]string, goroutines)
	for i := range ids {
		ids[i] = NewMessageID(t)
	}
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
			decisions[i], errs[i] = l.ClaimInterchange(c, dedup.InterchangeClaim{
				Interchange: ic, PayloadSHA256: h, MessageID: ids[i]})
		}()
	}
	close(start)
	wg.Wait()
	var retries []int
	for i, d := range decisions {
		if errs[i] != nil || d.Outcome != dedup.Duplicate {
			t.Errorf("goroutine %d: %v, %v; want duplicate", i, d.Outcome, errs[i])
			continue
		}
		retries = append(retries, d.Retries)
	}
	sort.Ints(retries)
	for i, n := range retries {
		if n != i+1 {
			t.Errorf("concurrent duplicates got Retries %v, want each of 1…%d once", retries, goroutines)
			break
		}
	}
	r := record(t, c, l, ic.Key)
	if r.Retries != goroutines {
		t.Errorf("record Retries %d after %d concurrent duplicates", r.Retries, goroutines)
	}
	if len(r.MessageIDs) != goroutines+1 || len(r.MessageIDs) > 0 && r.MessageIDs[0] != first {
		t.Errorf("record has %d message ids (first %q), want %d starting with %q",
			len(r.MessageIDs), firstOf(r.MessageIDs), goroutines+1, first)
	} else {
		got := slices.Sorted(slices.Values(r.MessageIDs[1:]))
		if !slices.Equal(got, slices.Sorted(slices.Values(ids))) {
			t.Errorf("record message ids differ from the delivered ones")
		}
	}
}

func firstOf(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// agedRow is an interchange claimed (and usually accepted) before the window
// group sleeps.
type agedRow struct {
	ic    dedup.Interchange
	msgID string
	hash  string
	first dedup.Decision
	err   error
}

func startAged(t T, c context.Context, l dedup.Ledger, window time.Duration, accept bool) *agedRow {
	t.Helper()
	a := &agedRow{ic: NewInterchange(t), msgID: NewMessageID(t), hash: PayloadHash("aged " + randomHex(t, 4))}
	a.first, a.err = l.ClaimInterchange(c, dedup.InterchangeClaim{
		Interchange: a.ic, PayloadSHA256: a.hash, MessageID: a.msgID, Window: window})
	if a.err == nil && a.first.Outcome != dedup.Claimed {
		a.err = fmt.Errorf("first claim: %v, want claimed", a.first.Outcome)
	}
	if a.err == nil && accept {
		a.err = l.AcceptInterchange(c, a.ic.Key, a.first.Token)
	}
	return a
}

func (a *agedRow) check(t T) {
	t.Helper()
	mustOK(t, a.err, "set-up of the aged interchange")
}

// expired lists the expired rows and keeps those whose key is in keys.
func expired(t T, c context.Context, l dedup.Ledger, before time.Time, limit int) map[dedup.Key][]dedup.InterchangeRecord {
	t.Helper()
	recs, err := l.ExpiredInterchanges(c, before, limit)
	if err != nil {
		t.Fatalf("ExpiredInterchanges: %v", err)
	}
	out := map[dedup.Key][]dedup.InterchangeRecord{}
	for _, r := range recs {
		out[r.Key] = append(out[r.Key], r)
	}
	return out
}

// windowGroup checks the interchange windows: reuse after the window,
// ExpiredInterchanges, the history of replaced rows and their deletion, on
// interchanges aged together.
func (k ledgerKit) windowGroup(t T) {
	g := k.startAgedInterchanges(t)
	t.Run("window", g.windowChecks)
	t.Run("expired", g.expiredChecks)
	t.Run("history", g.historyChecks)
	t.Run("delete", g.deleteChecks)
}

// agedInterchanges are the interchanges of windowGroup, set up at once and
// then aged past the short window W together, with what their set-up
// reported.
type agedInterchanges struct {
	c context.Context
	l dedup.Ledger
	W time.Duration

	reuse, forever, aged, young, held, spare, remove, longer, recForevr, hist, histDel *agedRow
	// recent and extended got a duplicate inside their window W.
	recent, extended        *agedRow
	recentMid, setUpDone    time.Time
	recentDupErr, extendErr error
}

// startAgedInterchanges sets up the interchanges of windowGroup and waits
// until the window W of those that have it has passed.
func (k ledgerKit) startAgedInterchanges(t T) *agedInterchanges {
	c := ctx(t)
	l := k.ledger(t, dedup.Options{})
	W := LedgerWindow
	g := &agedInterchanges{c: c, l: l, W: W,
		reuse:     startAged(t, c, l, W, true),
		forever:   startAged(t, c, l, 0, true),
		aged:      startAged(t, c, l, W, true),
		young:     startAged(t, c, l, time.Hour, true),
		held:      startAged(t, c, l, W, false),
		spare:     startAged(t, c, l, W, true),
		remove:    startAged(t, c, l, W, true),
		longer:    startAged(t, c, l, time.Hour, true),
		recForevr: startAged(t, c, l, 0, true),
		hist:      startAged(t, c, l, W, true),
		histDel:   startAged(t, c, l, W, true),
	}
	// recent and extended get a duplicate inside their window W below:
	// created last, right before it, so that a slow set-up of the
	// others cannot let their window pass first.
	g.recent = startAged(t, c, l, W, true)
	g.extended = startAged(t, c, l, W, true)
	recent, extended := g.recent, g.extended
	// A duplicate inside the window moves recent's LastSeen past
	// recentMid; one with a longer window extends extended's.
	tick()
	g.recentMid = time.Now()
	tick()
	recentDup, recentDupErr := l.ClaimInterchange(c, dedup.InterchangeClaim{Interchange: recent.ic, PayloadSHA256: recent.hash,
		MessageID: NewMessageID(t), Window: W})
	extendDup, extendErr := l.ClaimInterchange(c, dedup.InterchangeClaim{Interchange: extended.ic, PayloadSHA256: extended.hash,
		MessageID: NewMessageID(t), Window: time.Hour})
	// The window is short (W); a set-up slower than it turns the
	// duplicates into reuses, and the checks below would blame the store.
	if recentDupErr == nil && recentDup.Outcome != dedup.Duplicate {
		recentDupErr = fmt.Errorf("set-up slower than the %v window: the delivery inside it was %v, not a duplicate", W, recentDup.Outcome)
	}
	if extendErr == nil && extendDup.Outcome != dedup.Duplicate {
		extendErr = fmt.Errorf("set-up slower than the %v window: the delivery inside it was %v, not a duplicate", W, extendDup.Outcome)
	}
	g.recentDupErr, g.extendErr = recentDupErr, extendErr
	g.setUpDone = time.Now()
	time.Sleep(2 * W)
	return g
}

// windowChecks: a delivery after the window reuses the interchange; one inside the longest window that applies is a duplicate.
func (g *agedInterchanges) windowChecks(t T) {
	c, l, W := g.c, g.l, g.W
	reuse, longer, extended, recForevr, forever, extendErr := g.reuse, g.longer, g.extended, g.recForevr, g.forever, g.extendErr
	t.Run("reuse", func(t T) {
		reuse.check(t)
		m2, h2 := NewMessageID(t), PayloadHash("reuse")
		d := claimIC(t, c, l, reuse.ic, h2, m2, W)
		mustClaimed(t, d, "delivery after the window passed")
		if !d.Reused {
			t.Errorf("delivery after the window passed: Reused not set")
		}
		if d.Token == reuse.first.Token {
			t.Errorf("window reuse kept the old token")
		}
		mustFresh(t, record(t, c, l, reuse.ic.Key), reuse.ic, d, h2, m2, W, "record after reuse")
		mustInFlight(t, claimIC(t, c, l, reuse.ic, h2, NewMessageID(t), W), "delivery while the reuse holds it")
		mustOK(t, l.AcceptInterchange(c, reuse.ic.Key, d.Token), "Accept of the reuse")
		mustLedgerDuplicate(t, claimIC(t, c, l, reuse.ic, PayloadHash("x"), NewMessageID(t), W), h2, 1,
			"delivery after the reuse was accepted")
	})
	t.Run("keeps-young", func(t T) {
		ic, h := NewInterchange(t), PayloadHash("young")
		claimAcceptIC(t, c, l, ic, h, NewMessageID(t), time.Hour)
		mustLedgerDuplicate(t, claimIC(t, c, l, ic, h, NewMessageID(t), time.Hour), h, 1, "delivery within a 1h window")
	})
	t.Run("recorded-longer", func(t T) {
		longer.check(t)
		mustLedgerDuplicate(t, claimIC(t, c, l, longer.ic, longer.hash, NewMessageID(t), W), longer.hash, 1,
			"delivery with a shorter window of an interchange accepted with a 1h window")
		if r := record(t, c, l, longer.ic.Key); r.Window != time.Hour || r.State != "accepted" {
			t.Errorf("record after the shorter-window delivery: window %v, state %s; want 1h, accepted", r.Window, r.State)
		}
	})
	t.Run("extended-by-duplicate", func(t T) {
		extended.check(t)
		mustOK(t, extendErr, "set-up: duplicate delivery with a 1h window")
		if r := record(t, c, l, extended.ic.Key); r.Window != time.Hour {
			t.Errorf("window after a duplicate delivery with a 1h window: %v, want 1h (the longest that applies)", r.Window)
		}
		if got := expired(t, c, l, time.Now().Add(time.Second), 0)[extended.ic.Key]; len(got) != 0 {
			t.Errorf("ExpiredInterchanges listed an interchange whose window a later delivery extended to 1h")
		}
		mustLedgerDuplicate(t, claimIC(t, c, l, extended.ic, extended.hash, NewMessageID(t), W), extended.hash, 2,
			"delivery with the first, passed window of an interchange a later delivery extended to 1h")
	})
	t.Run("recorded-forever", func(t T) {
		recForevr.check(t)
		mustLedgerDuplicate(t, claimIC(t, c, l, recForevr.ic, recForevr.hash, NewMessageID(t), W), recForevr.hash, 1,
			"delivery with a window of an interchange accepted with window 0 (unique forever)")
	})
	t.Run("supersede", func(t T) {
		ic, h := NewInterchange(t), PayloadHash("superseded")
		first := claimAcceptIC(t, c, l, ic, h, NewMessageID(t), time.Hour)
		m2, h2 := NewMessageID(t), PayloadHash("supersedes")
		d, err := l.ClaimInterchange(c, dedup.InterchangeClaim{Interchange: ic, PayloadSHA256: h2, TransportKey: NewKey(t),
			MessageID: m2, Window: W, Supersede: true})
		mustOK(t, err, "ClaimInterchange with Supersede")
		mustClaimed(t, d, "Supersede of an accepted interchange inside its window")
		if !d.Reused || d.Token == first.Token {
			t.Errorf("Supersede: Reused %v, same token %v; want a reuse with a new token", d.Reused, d.Token == first.Token)
		}
		mustFresh(t, record(t, c, l, ic.Key), ic, d, h2, m2, W, "record after Supersede")
		d2, err := l.ClaimInterchange(c, dedup.InterchangeClaim{Interchange: ic, PayloadSHA256: h2, TransportKey: NewKey(t),
			MessageID: NewMessageID(t), Window: W, Supersede: true})
		mustOK(t, err, "ClaimInterchange with Supersede of a claim in flight")
		mustInFlight(t, d2, "Supersede of a claim in flight")
		mustOK(t, l.AcceptInterchange(c, ic.Key, d.Token), "Accept of the superseding claim")
		mustLedgerDuplicate(t, claimIC(t, c, l, ic, h2, NewMessageID(t), W), h2, 1, "delivery after the superseding claim was accepted")
	})
	t.Run("forever", func(t T) {
		forever.check(t)
		mustLedgerDuplicate(t, claimIC(t, c, l, forever.ic, forever.hash, NewMessageID(t), 0), forever.hash, 1,
			"delivery with window 0 of an old interchange")
	})
}

// expiredChecks: ExpiredInterchanges lists accepted interchanges whose window passed, and only those.
func (g *agedInterchanges) expiredChecks(t T) {
	c, l, W := g.c, g.l, g.W
	aged, forever, young, held, recent := g.aged, g.forever, g.young, g.held, g.recent
	recentMid, setUpDone, recentDupErr := g.recentMid, g.setUpDone, g.recentDupErr
	t.Run("lists-passed-window", func(t T) {
		aged.check(t)
		got := expired(t, c, l, time.Now().Add(time.Second), 0)[aged.ic.Key]
		if len(got) != 1 {
			t.Fatalf("ExpiredInterchanges listed the interchange whose window passed %d times, want once", len(got))
		}
		r := got[0]
		if r.Interchange != aged.ic || r.State != "accepted" || r.Window != W || !r.FirstSeen.Equal(aged.first.FirstSeen) ||
			r.PayloadSHA256 != aged.hash || !slices.Equal(r.MessageIDs, []string{aged.msgID}) {
			t.Errorf("listed record %+v does not match the interchange", r)
		}
		recs, err := l.ExpiredInterchanges(c, time.Now().Add(time.Second), 1)
		mustOK(t, err, "ExpiredInterchanges with limit 1")
		if len(recs) != 1 {
			t.Errorf("ExpiredInterchanges with limit 1 returned %d records", len(recs))
		}
	})
	t.Run("never-forever", func(t T) {
		forever.check(t)
		if got := expired(t, c, l, time.Now().Add(time.Hour), 0)[forever.ic.Key]; len(got) != 0 {
			t.Errorf("ExpiredInterchanges listed an interchange with window 0 (unique forever)")
		}
	})
	t.Run("keeps-inside-window", func(t T) {
		young.check(t)
		if got := expired(t, c, l, time.Now().Add(time.Hour), 0)[young.ic.Key]; len(got) != 0 {
			t.Errorf("ExpiredInterchanges listed an interchange inside its 1h window")
		}
	})
	t.Run("never-claims", func(t T) {
		held.check(t)
		if got := expired(t, c, l, time.Now().Add(time.Hour), 0)[held.ic.Key]; len(got) != 0 {
			t.Errorf("ExpiredInterchanges listed a claim in progress")
		}
		mustOK(t, l.AcceptInterchange(c, held.ic.Key, held.first.Token), "Accept of the claim")
	})
	t.Run("last-seen-before", func(t T) {
		recent.check(t)
		mustOK(t, recentDupErr, "set-up: duplicate delivery inside the window")
		if got := expired(t, c, l, setUpDone.Add(-time.Hour), 0)[recent.ic.Key]; len(got) != 0 {
			t.Errorf("ExpiredInterchanges(an hour before it was seen) listed the interchange")
		}
		if got := expired(t, c, l, recentMid, 0)[recent.ic.Key]; len(got) != 0 {
			t.Errorf("ExpiredInterchanges listed an interchange last seen after before")
		}
		if got := expired(t, c, l, time.Now().Add(time.Second), 0)[recent.ic.Key]; len(got) != 1 {
			t.Errorf("ExpiredInterchanges(now+1s) did not list the interchange whose stored window passed")
		}
	})
}

// historyChecks: a reused or superseded accepted row is kept as history until DeleteReplaced.
func (g *agedInterchanges) historyChecks(t T) {
	c, l, W := g.c, g.l, g.W
	hist, histDel := g.hist, g.histDel
	t.Run("keeps-replaced", func(t T) {
		hist.check(t)
		q := dedup.InterchangeQuery{Reference: hist.ic.Reference}
		if got := replaced(t, c, l, q); len(got) != 0 {
			t.Fatalf("ReplacedInterchanges before any reuse: %s", keysOf(got))
		}
		m2, h2 := NewMessageID(t), PayloadHash("reuse of a kept row")
		d := claimIC(t, c, l, hist.ic, h2, m2, W)
		mustClaimed(t, d, "reuse after the window passed")
		got := replaced(t, c, l, q)
		if len(got) != 1 {
			t.Fatalf("ReplacedInterchanges after the reuse listed %d rows, want the replaced one", len(got))
		}
		mustReplaced(t, got[0], hist, d, "the replaced row")
		for _, q := range []dedup.InterchangeQuery{{Partner: hist.ic.Partner}, {MessageID: hist.msgID},
			{Reference: hist.ic.Reference, From: hist.first.FirstSeen, To: time.Now().Add(time.Hour)}} {
			if got := replaced(t, c, l, q); len(got) != 1 || got[0].Key != hist.ic.Key {
				t.Errorf("ReplacedInterchanges(%+v) listed %s, want the replaced row", q, keysOf(got))
			}
		}
		for _, q := range []dedup.InterchangeQuery{{Partner: "other-" + randomHex(t, 4)}, {MessageID: m2},
			{Reference: hist.ic.Reference, To: hist.first.FirstSeen}} {
			if got := replaced(t, c, l, q); len(got) != 0 {
				t.Errorf("ReplacedInterchanges(%+v) listed %s, want nothing", q, keysOf(got))
			}
		}
		mustFresh(t, record(t, c, l, hist.ic.Key), hist.ic, d, h2, m2, W, "the current row after the reuse")
		mustOK(t, l.AcceptInterchange(c, hist.ic.Key, d.Token), "Accept of the reuse")
		if got := replaced(t, c, l, q); len(got) != 1 {
			t.Errorf("ReplacedInterchanges after the reuse was accepted listed %d rows, want 1", len(got))
		}
	})
	t.Run("supersede", func(t T) {
		ic, h, m := NewInterchange(t), PayloadHash("kept on supersede"), NewMessageID(t)
		first := claimAcceptIC(t, c, l, ic, h, m, time.Hour)
		d, err := l.ClaimInterchange(c, dedup.InterchangeClaim{Interchange: ic, PayloadSHA256: PayloadHash("drift"),
			TransportKey: NewKey(t), MessageID: NewMessageID(t), Window: time.Hour, Supersede: true})
		mustOK(t, err, "ClaimInterchange with Supersede")
		mustClaimed(t, d, "Supersede")
		got := replaced(t, c, l, dedup.InterchangeQuery{Reference: ic.Reference})
		if len(got) != 1 {
			t.Fatalf("ReplacedInterchanges after Supersede listed %d rows, want the superseded one", len(got))
		}
		mustReplaced(t, got[0], &agedRow{ic: ic, msgID: m, hash: h, first: first}, d, "the superseded row")
	})
	t.Run("only-accepted", func(t T) {
		ic, h := NewInterchange(t), PayloadHash("abandoned")
		d := claimIC(t, c, l, ic, h, NewMessageID(t), W)
		mustClaimed(t, d, "first claim")
		mustOK(t, l.AbandonInterchange(c, ic.Key, d.Token), "Abandon")
		mustClaimed(t, claimIC(t, c, l, ic, h, NewMessageID(t), W), "reclaim after abandon")
		if got := replaced(t, c, l, dedup.InterchangeQuery{Reference: ic.Reference}); len(got) != 0 {
			t.Errorf("ReplacedInterchanges listed %d rows after a reclaim of an abandoned row, want none (it was never accepted)", len(got))
		}
	})
	t.Run("delete", func(t T) {
		histDel.check(t)
		d := claimIC(t, c, l, histDel.ic, histDel.hash, NewMessageID(t), W)
		mustClaimed(t, d, "reuse after the window passed")
		q := dedup.InterchangeQuery{Reference: histDel.ic.Reference}
		listed := replaced(t, c, l, q)
		if len(listed) != 1 {
			t.Fatalf("ReplacedInterchanges listed %d rows, want 1", len(listed))
		}
		n, err := l.DeleteReplaced(c, append(listed, listed...))
		mustOK(t, err, "DeleteReplaced")
		if n != 1 {
			t.Errorf("DeleteReplaced removed %d rows, want 1", n)
		}
		if got := replaced(t, c, l, q); len(got) != 0 {
			t.Errorf("ReplacedInterchanges after DeleteReplaced listed %d rows", len(got))
		}
		if r := record(t, c, l, histDel.ic.Key); !r.FirstSeen.Equal(d.FirstSeen) {
			t.Errorf("DeleteReplaced touched the current row: %+v", r)
		}
	})
}

// deleteChecks: DeleteInterchanges removes the listed rows, never one reused since it was listed.
func (g *agedInterchanges) deleteChecks(t T) {
	c, l, W := g.c, g.l, g.W
	spare, remove := g.spare, g.remove
	t.Run("spares-reuse", func(t T) {
		spare.check(t)
		listed := expired(t, c, l, time.Now().Add(time.Second), 0)[spare.ic.Key]
		if len(listed) != 1 {
			t.Fatalf("ExpiredInterchanges did not list the interchange (%d times)", len(listed))
		}
		m2, h2 := NewMessageID(t), PayloadHash("reused meanwhile")
		d := claimIC(t, c, l, spare.ic, h2, m2, W)
		mustClaimed(t, d, "reuse after listing")
		n, err := l.DeleteInterchanges(c, listed)
		mustOK(t, err, "DeleteInterchanges of the listed row, reused meanwhile")
		mustOK(t, l.AcceptInterchange(c, spare.ic.Key, d.Token), "Accept of the reuse")
		n2, err := l.DeleteInterchanges(c, listed)
		mustOK(t, err, "DeleteInterchanges after the reuse was accepted")
		if n != 0 || n2 != 0 {
			t.Errorf("DeleteInterchanges removed %d, then %d rows; want 0 (the row was reused meanwhile)", n, n2)
		}
		r, err := l.Interchange(c, spare.ic.Key)
		if err != nil {
			t.Fatalf("the reuse is gone: %v", err)
		}
		if r.State != "accepted" || !r.FirstSeen.Equal(d.FirstSeen) || !slices.Equal(r.MessageIDs, []string{m2}) {
			t.Errorf("the reuse changed: %+v", r)
		}
	})
	t.Run("removes-listed", func(t T) {
		remove.check(t)
		listed := expired(t, c, l, time.Now().Add(time.Second), 0)[remove.ic.Key]
		if len(listed) != 1 {
			t.Fatalf("ExpiredInterchanges did not list the interchange (%d times)", len(listed))
		}
		n, err := l.DeleteInterchanges(c, append(listed, listed...))
		mustOK(t, err, "DeleteInterchanges")
		if n != 1 {
			t.Errorf("DeleteInterchanges removed %d rows, want 1", n)
		}
		if _, err := l.Interchange(c, remove.ic.Key); !errors.Is(err, dedup.ErrNotFound) {
			t.Errorf("Interchange after delete: %v, want ErrNotFound", err)
		}
		d := claimIC(t, c, l, remove.ic, remove.hash, NewMessageID(t), W)
		mustClaimed(t, d, "delivery after delete")
		if d.Reused {
			t.Errorf("delivery after delete: Reused set")
		}
	})
}

func replaced(t T, c context.Context, l dedup.Ledger, q dedup.InterchangeQuery) []dedup.InterchangeRecord {
	t.Helper()
	recs, err := l.ReplacedInterchanges(c, q)
	if err != nil {
		t.Fatalf("ReplacedInterchanges(%+v): %v", q, err)
	}
	return recs
}

// mustReplaced checks a row of ReplacedInterchanges against the accepted
// row a was and the claim d that replaced it.
func mustReplaced(t T, r dedup.InterchangeRecord, a *agedRow, d dedup.Decision, what string) {
	t.Helper()
	if r.Interchange != a.ic || r.State != "accepted" || r.PayloadSHA256 != a.hash || !r.FirstSeen.Equal(a.first.FirstSeen) ||
		!slices.Equal(r.MessageIDs, []string{a.msgID}) || r.Retries != 0 {
		t.Errorf("%s: %+v\nwant the accepted row %+v first seen %v with hash %s and ids [%s]", what, r, a.ic, a.first.FirstSeen, a.hash, a.msgID)
	}
	if !r.Replaced.Equal(d.FirstSeen) {
		t.Errorf("%s: Replaced %v, want the replacing claim's first seen %v", what, r.Replaced, d.FirstSeen)
	}
}

func (k ledgerKit) find(t T) {
	l, c := k.ledger(t, dedup.Options{}), ctx(t)
	p1, p2 := "partner-"+randomHex(t, 6), "partner-"+randomHex(t, 6)
	ref, ref2 := "REF"+randomHex(t, 7), "REF"+randomHex(t, 7)
	ia, ib, ic := NewInterchange(t), NewInterchange(t), NewInterchange(t)
	ia.Partner, ia.Reference = p1, ref
	ib.Partner, ib.Reference = p1, ref2
	ic.Partner, ic.Reference = p2, ref
	ma1, ma2, mb, mc := NewMessageID(t), NewMessageID(t), NewMessageID(t), NewMessageID(t)
	h := PayloadHash("find")
	claimAcceptIC(t, c, l, ia, h, ma1, 0)
	tick()
	claimAcceptIC(t, c, l, ib, h, mb, 0)
	tick()
	mustClaimed(t, claimIC(t, c, l, ic, h, mc, 0), "claim of c")
	tick()
	mustLedgerDuplicate(t, claimIC(t, c, l, ia, h, ma2, 0), h, 1, "second delivery of a")
	a, b, cc := record(t, c, l, ia.Key), record(t, c, l, ib.Key), record(t, c, l, ic.Key)
	if !(a.FirstSeen.Before(b.FirstSeen) && b.FirstSeen.Before(cc.FirstSeen) && cc.LastSeen.Before(a.LastSeen)) {
		t.Fatalf("set-up: first seen a %v, b %v, c %v; last seen c %v, a %v", a.FirstSeen, b.FirstSeen, cc.FirstSeen,
			cc.LastSeen, a.LastSeen)
	}
	for _, tc := range []struct {
		name string
		q    dedup.InterchangeQuery
		want []dedup.InterchangeRecord
	}{
		{"partner", dedup.InterchangeQuery{Partner: p1}, []dedup.InterchangeRecord{a, b}},
		{"partner and reference", dedup.InterchangeQuery{Partner: p1, Reference: ref}, []dedup.InterchangeRecord{a}},
		{"reference across partners", dedup.InterchangeQuery{Reference: ref}, []dedup.InterchangeRecord{a, cc}},
		{"first message id", dedup.InterchangeQuery{MessageID: ma1}, []dedup.InterchangeRecord{a}},
		{"retry's message id", dedup.InterchangeQuery{MessageID: ma2}, []dedup.InterchangeRecord{a}},
		{"message id of a claim", dedup.InterchangeQuery{MessageID: mc}, []dedup.InterchangeRecord{cc}},
		{"unknown message id", dedup.InterchangeQuery{MessageID: NewMessageID(t)}, nil},
		{"message id of another partner", dedup.InterchangeQuery{MessageID: ma2, Partner: p2}, nil},
		{"from inclusive, to exclusive", dedup.InterchangeQuery{Partner: p1, From: b.LastSeen, To: a.LastSeen},
			[]dedup.InterchangeRecord{b}},
		{"from the last", dedup.InterchangeQuery{Partner: p1, From: a.LastSeen}, []dedup.InterchangeRecord{a}},
		{"to the first", dedup.InterchangeQuery{Reference: ref, To: cc.LastSeen}, nil},
		{"window around c", dedup.InterchangeQuery{Reference: ref, From: cc.LastSeen, To: cc.LastSeen.Add(time.Millisecond)},
			[]dedup.InterchangeRecord{cc}},
		{"limit", dedup.InterchangeQuery{Partner: p1, Limit: 1}, []dedup.InterchangeRecord{a}},
	} {
		got, err := l.FindInterchanges(c, tc.q)
		if err != nil {
			t.Errorf("%s: FindInterchanges: %v", tc.name, err)
			continue
		}
		if !equalRecords(got, tc.want) {
			t.Errorf("%s: FindInterchanges(%+v) returned %s, want %s", tc.name, tc.q, keysOf(got), keysOf(tc.want))
		}
	}
}

func equalRecords(a, b []dedup.InterchangeRecord) bool {
	return slices.EqualFunc(a, b, func(x, y dedup.InterchangeRecord) bool {
		return x.Interchange == y.Interchange && x.State == y.State && x.PayloadSHA256 == y.PayloadSHA256 &&
			x.FirstSeen.Equal(y.FirstSeen) && x.LastSeen.Equal(y.LastSeen) && x.Retries == y.Retries &&
			slices.Equal(x.MessageIDs, y.MessageIDs) && x.Window == y.Window
	})
}

func keysOf(recs []dedup.InterchangeRecord) string {
	s := "["
	for i, r := range recs {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%.8s…(%s, %s)", r.Key, r.Partner, r.Reference)
	}
	return s + "]"
}

func (k ledgerKit) notFound(t T) {
	l, c := k.ledger(t, dedup.Options{}), ctx(t)
	if _, err := l.Interchange(c, NewKey(t)); !errors.Is(err, dedup.ErrNotFound) {
		t.Errorf("Interchange of an unknown key: %v, want ErrNotFound", err)
	}
}
