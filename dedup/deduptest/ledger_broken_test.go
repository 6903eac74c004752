package deduptest_test

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/outbox"
)

// Deliberately broken ledgers and outboxes. Each wraps a correct one (the
// memory ledger or outbox) and breaks one rule, except racyLedger, which is
// a whole ledger written the wrong way (check, then act).

// ledgerOf is a memory ledger behind the dedup.Ledger interface only.
func ledgerOf(o dedup.Options) dedup.Ledger { return dedup.NewMemoryStore(o) }

// neverDuplicateLedger answers accepted interchanges as new: the handler
// runs again and a second invoice is booked.
type neverDuplicateLedger struct{ dedup.Ledger }

func (l neverDuplicateLedger) ClaimInterchange(ctx context.Context, c dedup.InterchangeClaim) (dedup.Decision, error) {
	d, err := l.Ledger.ClaimInterchange(ctx, c)
	if err == nil && d.Outcome == dedup.Duplicate {
		return dedup.Decision{Outcome: dedup.Claimed, Token: fakeToken(), FirstSeen: time.Now()}, nil
	}
	return d, err
}

// noRetryCount never counts retries (a store that forgot the evidence update).
type noRetryCount struct{ dedup.Ledger }

func (l noRetryCount) ClaimInterchange(ctx context.Context, c dedup.InterchangeClaim) (dedup.Decision, error) {
	d, err := l.Ledger.ClaimInterchange(ctx, c)
	d.Retries = 0
	return d, err
}

func (l noRetryCount) Interchange(ctx context.Context, key dedup.Key) (dedup.InterchangeRecord, error) {
	r, err := l.Ledger.Interchange(ctx, key)
	r.Retries = 0
	return r, err
}

func (l noRetryCount) FindInterchanges(ctx context.Context, q dedup.InterchangeQuery) ([]dedup.InterchangeRecord, error) {
	recs, err := l.Ledger.FindInterchanges(ctx, q)
	for i := range recs {
		recs[i].Retries = 0
	}
	return recs, err
}

// requestHashLedger reports the new delivery's payload hash on a duplicate,
// so drift goes unnoticed.
type requestHashLedger struct{ dedup.Ledger }

func (l requestHashLedger) ClaimInterchange(ctx context.Context, c dedup.InterchangeClaim) (dedup.Decision, error) {
	d, err := l.Ledger.ClaimInterchange(ctx, c)
	if d.Outcome == dedup.Duplicate {
		d.PayloadSHA256 = c.PayloadSHA256
	}
	return d, err
}

// foreverExpires treats window 0 as a short window: PEPPOL instance
// identifiers become reusable.
type foreverExpires struct{ dedup.Ledger }

func (l foreverExpires) ClaimInterchange(ctx context.Context, c dedup.InterchangeClaim) (dedup.Decision, error) {
	if c.Window == 0 {
		c.Window = 100 * time.Millisecond
	}
	return l.Ledger.ClaimInterchange(ctx, c)
}

// ignoresWindowLedger never reuses a reference.
type ignoresWindowLedger struct{ dedup.Ledger }

func (l ignoresWindowLedger) ClaimInterchange(ctx context.Context, c dedup.InterchangeClaim) (dedup.Decision, error) {
	c.Window = 0
	return l.Ledger.ClaimInterchange(ctx, c)
}

// requestWindowOnly judges an accepted interchange by the window of the
// arriving delivery alone: an interchange accepted over AS4 (30 days) and
// resent over AS2 (7 days) on day 8 runs the handler again.
type requestWindowOnly struct{ dedup.Ledger }

func (l requestWindowOnly) ClaimInterchange(ctx context.Context, c dedup.InterchangeClaim) (dedup.Decision, error) {
	if r, err := l.Ledger.Interchange(ctx, c.Key); err == nil && r.State == "accepted" && c.Window > 0 &&
		time.Since(r.FirstSeen) > c.Window {
		c.Supersede = true
	}
	return l.Ledger.ClaimInterchange(ctx, c)
}

// windowNeverExtended keeps the window of the first claim whatever later
// deliveries ask for: an interchange accepted over AS2 (7 days) and resent
// over AS4 (30 days) is purged, and then processed again, after 7 days.
type windowNeverExtended struct{ dedup.Ledger }

func (l windowNeverExtended) ClaimInterchange(ctx context.Context, c dedup.InterchangeClaim) (dedup.Decision, error) {
	if r, err := l.Ledger.Interchange(ctx, c.Key); err == nil && r.State == "accepted" && r.Window > 0 &&
		(c.Window <= 0 || c.Window > r.Window) {
		c.Window = r.Window
	}
	return l.Ledger.ClaimInterchange(ctx, c)
}

// ignoresSupersede answers a drift accepted as new with the stored row.
type ignoresSupersede struct{ dedup.Ledger }

func (l ignoresSupersede) ClaimInterchange(ctx context.Context, c dedup.InterchangeClaim) (dedup.Decision, error) {
	c.Supersede = false
	return l.Ledger.ClaimInterchange(ctx, c)
}

// forgetsReplaced overwrites a reused interchange's row without keeping the
// old one: the evidence of the first acceptance is lost.
type forgetsReplaced struct{ dedup.Ledger }

func (forgetsReplaced) ReplacedInterchanges(context.Context, dedup.InterchangeQuery) ([]dedup.InterchangeRecord, error) {
	return nil, nil
}

// deleteReplacedNoop reports success without deleting: the purge archives
// the same rows on every run.
type deleteReplacedNoop struct{ dedup.Ledger }

func (deleteReplacedNoop) DeleteReplaced(_ context.Context, recs []dedup.InterchangeRecord) (int64, error) {
	return int64(len(recs)), nil
}

// keyTracker remembers the keys claimed with each window.
type keyTracker struct {
	mu      sync.Mutex
	forever []dedup.Key
}

// expireListsForever also lists accepted interchanges with window 0 (unique
// forever), so the purge would delete them.
type expireListsForever struct {
	dedup.Ledger
	tr *keyTracker
}

func (l expireListsForever) ClaimInterchange(ctx context.Context, c dedup.InterchangeClaim) (dedup.Decision, error) {
	d, err := l.Ledger.ClaimInterchange(ctx, c)
	if err == nil && d.Outcome == dedup.Claimed && c.Window == 0 {
		l.tr.mu.Lock()
		l.tr.forever = append(l.tr.forever, c.Key)
		l.tr.mu.Unlock()
	}
	return d, err
}

func (l expireListsForever) ExpiredInterchanges(ctx context.Context, before time.Time, limit int) ([]dedup.InterchangeRecord, error) {
	recs, err := l.Ledger.ExpiredInterchanges(ctx, before, limit)
	l.tr.mu.Lock()
	keys := slices.Clone(l.tr.forever)
	l.tr.mu.Unlock()
	for _, k := range keys {
		if r, err := l.Ledger.Interchange(ctx, k); err == nil && r.State == "accepted" && r.LastSeen.Before(before) {
			recs = append(recs, r)
		}
	}
	return recs, err
}

// expireListsClaims also lists claims whose window passed.
type expireListsClaims struct {
	dedup.Ledger
	mu   sync.Mutex
	held map[dedup.Key]time.Duration
}

func (l *expireListsClaims) ClaimInterchange(ctx context.Context, c dedup.InterchangeClaim) (dedup.Decision, error) {
	d, err := l.Ledger.ClaimInterchange(ctx, c)
	if err == nil && d.Outcome == dedup.Claimed && c.Window > 0 {
		l.mu.Lock()
		l.held[c.Key] = c.Window
		l.mu.Unlock()
	}
	return d, err
}

func (l *expireListsClaims) ExpiredInterchanges(ctx context.Context, before time.Time, limit int) ([]dedup.InterchangeRecord, error) {
	recs, err := l.Ledger.ExpiredInterchanges(ctx, before, limit)
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, w := range l.held {
		if r, err := l.Ledger.Interchange(ctx, k); err == nil && r.State == "claimed" && time.Since(r.FirstSeen) > w {
			recs = append(recs, r)
		}
	}
	return recs, err
}

// deleteIgnoresFirstSeen deletes whatever row holds the key now, so a reuse
// claimed after the purge listed the old row is deleted with it.
type deleteIgnoresFirstSeen struct{ dedup.Ledger }

func (l deleteIgnoresFirstSeen) DeleteInterchanges(ctx context.Context, recs []dedup.InterchangeRecord) (int64, error) {
	var current []dedup.InterchangeRecord
	for _, r := range recs {
		if now, err := l.Ledger.Interchange(ctx, r.Key); err == nil {
			current = append(current, now)
		}
	}
	return l.Ledger.DeleteInterchanges(ctx, current)
}

// findIgnoresMessageID ignores the message id filter.
type findIgnoresMessageID struct{ dedup.Ledger }

func (l findIgnoresMessageID) FindInterchanges(ctx context.Context, q dedup.InterchangeQuery) ([]dedup.InterchangeRecord, error) {
	q.MessageID = ""
	return l.Ledger.FindInterchanges(ctx, q)
}

// racyLedger is a whole ledger with the classic bugs: a claim reads the row,
// decides and writes in separate steps (SELECT, then INSERT), and a
// duplicate's evidence is read, incremented in Go and written back. Its
// single-threaded behaviour is right.
type racyLedger struct {
	lease time.Duration
	mu    sync.Mutex
	rows  map[dedup.Key]racyIC
}

type racyIC struct {
	rec   dedup.InterchangeRecord
	token dedup.Token
	until time.Time
}

func newRacyLedger(opts dedup.Options) *racyLedger {
	return &racyLedger{lease: opts.WithDefaults().Lease, rows: map[dedup.Key]racyIC{}}
}

func (l *racyLedger) read(key dedup.Key) (racyIC, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.rows[key]
	r.rec.MessageIDs = slices.Clone(r.rec.MessageIDs)
	return r, ok
}

func (l *racyLedger) write(r racyIC) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rows[r.rec.Key] = r
}

func (l *racyLedger) ClaimInterchange(ctx context.Context, c dedup.InterchangeClaim) (dedup.Decision, error) {
	r, ok := l.read(c.Key) // check …
	now := time.Now()
	if ok {
		switch {
		case r.rec.State == "claimed" && now.Before(r.until):
			return dedup.Decision{Outcome: dedup.InFlight, FirstSeen: r.rec.FirstSeen, RetryAfter: dedup.RetryAfter(r.until.Sub(now))}, nil
		case r.rec.State == "accepted" && (c.Window <= 0 || !r.rec.FirstSeen.Before(now.Add(-c.Window))):
			time.Sleep(2 * time.Millisecond) // the round trip between SELECT and UPDATE
			r.rec.LastSeen = now
			r.rec.Retries++
			r.rec.MessageIDs = dedup.AppendMessageID(r.rec.MessageIDs, c.MessageID)
			l.write(r) // … then act
			return dedup.Decision{Outcome: dedup.Duplicate, FirstSeen: r.rec.FirstSeen, PayloadSHA256: r.rec.PayloadSHA256, Retries: r.rec.Retries}, nil
		}
	}
	time.Sleep(5 * time.Millisecond) // the round trip between SELECT and INSERT
	tok := fakeToken()
	l.write(racyIC{rec: dedup.InterchangeRecord{
		Interchange: c.Interchange, State: "claimed", PayloadSHA256: c.PayloadSHA256, FirstSeen: now, LastSeen: now,
		MessageIDs: dedup.FirstMessageIDs(c.MessageID), Window: c.Window,
	}, token: tok, until: now.Add(l.lease)})
	return dedup.Decision{Outcome: dedup.Claimed, Token: tok, Reused: ok && r.rec.State == "accepted", FirstSeen: now}, nil
}

func (l *racyLedger) transition(key dedup.Key, tok dedup.Token, state string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.rows[key]
	if !ok || r.rec.State != "claimed" || r.token != tok {
		return dedup.ErrStaleClaim
	}
	r.rec.State = state
	l.rows[key] = r
	return nil
}

func (l *racyLedger) AcceptInterchange(_ context.Context, key dedup.Key, tok dedup.Token) error {
	return l.transition(key, tok, "accepted")
}

func (l *racyLedger) AbandonInterchange(_ context.Context, key dedup.Key, tok dedup.Token) error {
	return l.transition(key, tok, "abandoned")
}

func (l *racyLedger) Interchange(_ context.Context, key dedup.Key) (dedup.InterchangeRecord, error) {
	r, ok := l.read(key)
	if !ok {
		return dedup.InterchangeRecord{}, dedup.ErrNotFound
	}
	return r.rec, nil
}

func (l *racyLedger) all(keep func(dedup.InterchangeRecord) bool) []dedup.InterchangeRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []dedup.InterchangeRecord
	for _, r := range l.rows {
		if keep(r.rec) {
			rec := r.rec
			rec.MessageIDs = slices.Clone(rec.MessageIDs)
			out = append(out, rec)
		}
	}
	slices.SortFunc(out, func(a, b dedup.InterchangeRecord) int { return a.FirstSeen.Compare(b.FirstSeen) })
	return out
}

func (l *racyLedger) FindInterchanges(_ context.Context, q dedup.InterchangeQuery) ([]dedup.InterchangeRecord, error) {
	out := l.all(func(r dedup.InterchangeRecord) bool {
		return (q.Partner == "" || r.Partner == q.Partner) && (q.Reference == "" || r.Reference == q.Reference) &&
			(q.MessageID == "" || slices.Contains(r.MessageIDs, q.MessageID)) &&
			(q.From.IsZero() || !r.LastSeen.Before(q.From)) && (q.To.IsZero() || r.LastSeen.Before(q.To))
	})
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[:q.Limit]
	}
	return out, nil
}

func (l *racyLedger) ExpiredInterchanges(_ context.Context, before time.Time, limit int) ([]dedup.InterchangeRecord, error) {
	now := time.Now()
	out := l.all(func(r dedup.InterchangeRecord) bool {
		return r.State != "claimed" && r.Window > 0 && r.FirstSeen.Add(r.Window).Before(now) && r.LastSeen.Before(before)
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// ReplacedInterchanges: the racy ledger overwrites rows and keeps no history.
func (l *racyLedger) ReplacedInterchanges(context.Context, dedup.InterchangeQuery) ([]dedup.InterchangeRecord, error) {
	return nil, nil
}

func (l *racyLedger) DeleteReplaced(context.Context, []dedup.InterchangeRecord) (int64, error) {
	return 0, nil
}

func (l *racyLedger) DeleteInterchanges(_ context.Context, recs []dedup.InterchangeRecord) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n int64
	for _, rec := range recs {
		if r, ok := l.rows[rec.Key]; ok && r.rec.State != "claimed" && r.rec.FirstSeen.Equal(rec.FirstSeen) {
			delete(l.rows, rec.Key)
			n++
		}
	}
	return n, nil
}

// Broken outboxes.

// leaseIgnoresDuration leases for no time at all: a second worker gets the
// same delivery at once.
type leaseIgnoresDuration struct{ outbox.Store }

func (o leaseIgnoresDuration) Lease(ctx context.Context, limit int, _ time.Duration) ([]outbox.Delivery, error) {
	return o.Store.Lease(ctx, limit, 0)
}

// retryIgnoresNext schedules every retry at once.
type retryIgnoresNext struct{ outbox.Store }

func (o retryIgnoresNext) Retry(ctx context.Context, id, token string, _ time.Time, lastErr string) error {
	return o.Store.Retry(ctx, id, token, time.Now().Add(-time.Second), lastErr)
}

// deliveredNoop reports success without marking the delivery: the MDN is
// posted again and again.
type deliveredNoop struct{ outbox.Store }

func (deliveredNoop) Delivered(context.Context, string, string) error { return nil }

// giveUpRetries turns a give-up into another retry.
type giveUpRetries struct{ outbox.Store }

func (o giveUpRetries) GiveUp(ctx context.Context, id, token string, lastErr string) error {
	return o.Store.Retry(ctx, id, token, time.Now(), lastErr)
}

// renewNoop reports a renewal without extending the lease: a slow attempt
// loses its delivery to another worker.
type renewNoop struct{ outbox.Store }

func (renewNoop) Renew(context.Context, string, string, time.Duration) error { return nil }

// releaseNoop keeps the lease of a released delivery: a stopped gateway's
// deliveries wait for the lease to run out.
type releaseNoop struct{ outbox.Store }

func (releaseNoop) Release(context.Context, string, string) error { return nil }

// unfenced records any worker's outcome, whatever lease it holds (Renew
// and Release are checked).
type unfenced struct{ outbox.Store }

func (o unfenced) Delivered(ctx context.Context, id, _ string) error {
	return o.Store.Delivered(ctx, id, "")
}

func (o unfenced) Retry(ctx context.Context, id, _ string, next time.Time, lastErr string) error {
	return o.Store.Retry(ctx, id, "", next, lastErr)
}

func (o unfenced) GiveUp(ctx context.Context, id, _ string, lastErr string) error {
	return o.Store.GiveUp(ctx, id, "", lastErr)
}
