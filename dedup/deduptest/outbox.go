package deduptest

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/edigateway/gateway/outbox"
)

// NewOutbox returns an empty outbox for one subtest of ExerciseOutbox. Unlike
// ledgers, outboxes must not be shared between subtests: Lease hands out any
// due delivery. The kit never closes it: register cleanups on t.
type NewOutbox func(t testing.TB) outbox.Store

// OutboxLease is the lease of the outbox checks that wait for a lease (or a
// retry) to come due.
const OutboxLease = time.Second

// timeSlack is how far a stored time may be from the one given: SQL stores
// keep milliseconds (SQLite) or microseconds (PostgreSQL).
const timeSlack = 2 * time.Millisecond

// ExerciseOutbox runs the outbox contract against the outboxes newOutbox
// returns, as subtests of t.
func ExerciseOutbox(t *testing.T, newOutbox NewOutbox) {
	t.Helper()
	ExerciseOutboxT(Std(t), newOutbox)
}

// ExerciseOutboxT is ExerciseOutbox for any T. The subtests, by name:
//
//	enqueue/round-trip        Get returns the enqueued delivery byte for byte (header values, binary body),
//	                          pending, 0 attempts, due now, Created now (or as given)
//	enqueue/duplicate-id      a second Enqueue of an id fails and changes nothing
//	enqueue/invalid           an empty id or URL is refused
//	lease/due                 Lease returns a due delivery whole; limit 0 returns nothing
//	lease/limit-order         Lease returns at most limit deliveries, oldest due first
//	lease/hides-leased        a leased delivery is not leased again until its lease ran out, then it is
//	lease/concurrent          8 workers leasing 40 deliveries: each handed out exactly once
//	delivered/done            Delivered: state delivered, attempts + 1, never leased again, later
//	                          Delivered/Retry/GiveUp fail
//	retry/schedules           Retry: attempts + 1, LastError, not due before next, due after, still pending
//	retry/clears-lease        a retry due at once is leased again at once (the lease is released)
//	lease/tokens              every leased delivery carries a LeaseToken; another Lease hands out another
//	renew/extends             Renew with the lease's token holds the delivery past its first lease
//	renew/expired-not-taken   a lease that ran out but nobody took over may still be renewed
//	release/hands-back        Release: leased again at once, attempts and last error unchanged; a stale
//	                          token's Release fails with ErrLeaseLost and changes nothing
//	fencing/stale-token       after a lease ran out and another worker leased the delivery, the first
//	                          worker's Renew, Release, Delivered, Retry and GiveUp fail with ErrLeaseLost and
//	                          change nothing; the new holder's Delivered succeeds
//	give-up/final             GiveUp: state gave-up, attempts + 1, LastError, never leased again
//	get/unknown               Get, Delivered, Retry and GiveUp of an unknown id fail with ErrNotFound
//	get/copies                changing a returned delivery's body or header changes nothing stored
func ExerciseOutboxT(t T, newOutbox NewOutbox) {
	t.Helper()
	k := outboxKit{newOutbox: newOutbox}
	tm := k.startTimed(t)
	t.Run("enqueue", func(t T) {
		t.Run("round-trip", k.roundTrip)
		t.Run("duplicate-id", k.duplicateID)
		t.Run("invalid", k.invalid)
	})
	t.Run("lease", func(t T) {
		t.Run("due", k.leaseDue)
		t.Run("limit-order", k.limitOrder)
		t.Run("concurrent", k.concurrentLease)
		t.Run("hides-leased", tm.hidesLeased)
		t.Run("tokens", k.leaseTokens)
	})
	t.Run("renew", func(t T) {
		t.Run("extends", tm.renewExtends)
		t.Run("expired-not-taken", k.renewExpiredNotTaken)
	})
	t.Run("release", func(t T) {
		t.Run("hands-back", k.releaseHandsBack)
	})
	t.Run("fencing", func(t T) {
		t.Run("stale-token", k.fencingStaleToken)
	})
	t.Run("delivered", func(t T) {
		t.Run("done", k.delivered)
	})
	t.Run("retry", func(t T) {
		t.Run("schedules", tm.retrySchedules)
		t.Run("clears-lease", k.retryClearsLease)
	})
	t.Run("give-up", func(t T) {
		t.Run("final", k.giveUp)
	})
	t.Run("get", func(t T) {
		t.Run("unknown", k.unknown)
		t.Run("copies", k.copies)
	})
	t.Run("operator", func(t T) {
		t.Run("retry-now", k.retryNow)
	})
}

type outboxKit struct{ newOutbox NewOutbox }

func (k outboxKit) outbox(t T) outbox.Store {
	t.Helper()
	o := k.newOutbox(t)
	if o == nil {
		t.Fatalf("newOutbox returned nil")
	}
	return o
}

// testBody is an MDN-like body with NUL bytes and invalid UTF-8.
var testBody = []byte("--b\r\nContent-Type: message/disposition-notification\r\n\r\n\x00\xff\xfe\xc3\x28 processed\r\n--b--\r\n")

// NewDelivery returns a delivery with a random id, a multi-valued header and
// a binary body.
func NewDelivery(t testing.TB) outbox.Delivery {
	t.Helper()
	id := randomHex(t, 8)
	return outbox.Delivery{
		ID:        id,
		Partner:   "partner-" + id[:4],
		MessageID: "<" + id + "@partner.example>",
		URL:       "https://partner.example/as2/mdn?id=" + id,
		Header: http.Header{
			"Content-Type": {`multipart/signed; protocol="application/pkcs7-signature"; boundary="b"`},
			"As2-From":     {`"Gateway ünï"`},
			"X-Multi":      {"one", "two"},
		},
		Body: bytes.Clone(testBody),
	}
}

func enqueue(t T, c context.Context, o outbox.Store, d outbox.Delivery) {
	t.Helper()
	if err := o.Enqueue(c, d); err != nil {
		t.Fatalf("Enqueue(%s): %v", d.ID, err)
	}
}

func get(t T, c context.Context, o outbox.Store, id string) (outbox.Delivery, outbox.State) {
	t.Helper()
	d, st, err := o.Get(c, id)
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	return d, st
}

func lease(t T, c context.Context, o outbox.Store, limit int, d time.Duration) []outbox.Delivery {
	t.Helper()
	got, err := o.Lease(c, limit, d)
	if err != nil {
		t.Fatalf("Lease: %v", err)
	}
	return got
}

func ids(ds []outbox.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.ID
	}
	return out
}

func near(a, b time.Time, slack time.Duration) bool {
	d := a.Sub(b)
	return d > -slack && d < slack
}

// sameDelivery compares the enqueued fields of a delivery.
func sameDelivery(t T, got, want outbox.Delivery, what string) {
	t.Helper()
	if got.ID != want.ID || got.Partner != want.Partner || got.MessageID != want.MessageID || got.URL != want.URL {
		t.Errorf("%s: delivery %s/%s/%s/%s, want %s/%s/%s/%s", what, got.ID, got.Partner, got.MessageID, got.URL,
			want.ID, want.Partner, want.MessageID, want.URL)
	}
	if !reflect.DeepEqual(got.Header, want.Header) {
		t.Errorf("%s: header %v, want %v", what, got.Header, want.Header)
	}
	if !bytes.Equal(got.Body, want.Body) {
		t.Errorf("%s: body %q, want %q", what, got.Body, want.Body)
	}
}

func mustState(t T, c context.Context, o outbox.Store, id string, state outbox.State, attempts int, lastErr string, what string) outbox.Delivery {
	t.Helper()
	d, st := get(t, c, o, id)
	if st != state || d.Attempts != attempts || d.LastError != lastErr {
		t.Errorf("%s: state %q, attempts %d, last error %q; want %q, %d, %q", what, st, d.Attempts, d.LastError,
			state, attempts, lastErr)
	}
	return d
}

func (k outboxKit) roundTrip(t T) {
	o, c := k.outbox(t), ctx(t)
	d := NewDelivery(t)
	enqueue(t, c, o, d)
	got := mustState(t, c, o, d.ID, outbox.Pending, 0, "", "after Enqueue")
	sameDelivery(t, got, d, "Get after Enqueue")
	if !near(got.Created, time.Now(), ClockSkew) || !near(got.NextAttempt, time.Now(), ClockSkew) {
		t.Errorf("Created %v, NextAttempt %v; want both now", got.Created, got.NextAttempt)
	}
	if got.NextAttempt.Before(got.Created.Add(-timeSlack)) {
		t.Errorf("NextAttempt %v before Created %v", got.NextAttempt, got.Created)
	}
	// A given creation time is kept; attempts, due time and error are the
	// store's.
	d2 := NewDelivery(t)
	d2.Created = time.Date(2026, 2, 28, 23, 59, 58, 123456000, time.UTC)
	d2.Attempts, d2.LastError, d2.NextAttempt = 7, "forged", d2.Created.Add(24*time.Hour)
	d2.Header = nil
	d2.Body = nil
	enqueue(t, c, o, d2)
	got2 := mustState(t, c, o, d2.ID, outbox.Pending, 0, "", "after Enqueue with Created")
	if !near(got2.Created, d2.Created, timeSlack) {
		t.Errorf("Created %v, want the given %v", got2.Created, d2.Created)
	}
	if !near(got2.NextAttempt, time.Now(), ClockSkew) {
		t.Errorf("NextAttempt %v, want now", got2.NextAttempt)
	}
	if len(got2.Header) != 0 || len(got2.Body) != 0 {
		t.Errorf("empty delivery came back with header %v, body %q", got2.Header, got2.Body)
	}
}

func (k outboxKit) duplicateID(t T) {
	o, c := k.outbox(t), ctx(t)
	d := NewDelivery(t)
	enqueue(t, c, o, d)
	other := NewDelivery(t)
	other.ID = d.ID
	if err := o.Enqueue(c, other); err == nil {
		t.Errorf("a second Enqueue of id %s succeeded", d.ID)
	}
	got, _ := get(t, c, o, d.ID)
	sameDelivery(t, got, d, "after the refused Enqueue")
	if n := len(lease(t, c, o, 10, time.Minute)); n != 1 {
		t.Errorf("Lease after the refused Enqueue: %d deliveries, want 1", n)
	}
}

func (k outboxKit) invalid(t T) {
	o, c := k.outbox(t), ctx(t)
	d := NewDelivery(t)
	d.ID = ""
	if err := o.Enqueue(c, d); err == nil {
		t.Errorf("Enqueue without id succeeded")
	}
	d = NewDelivery(t)
	d.URL = ""
	if err := o.Enqueue(c, d); err == nil {
		t.Errorf("Enqueue without URL succeeded")
	}
	if n := len(lease(t, c, o, 10, time.Minute)); n != 0 {
		t.Errorf("Lease after refused Enqueues: %d deliveries, want 0", n)
	}
}

func (k outboxKit) leaseDue(t T) {
	o, c := k.outbox(t), ctx(t)
	d := NewDelivery(t)
	enqueue(t, c, o, d)
	if got := lease(t, c, o, 0, time.Minute); len(got) != 0 {
		t.Errorf("Lease(limit 0) returned %v", ids(got))
	}
	got := lease(t, c, o, 10, time.Minute)
	if len(got) != 1 {
		t.Fatalf("Lease returned %v, want [%s]", ids(got), d.ID)
	}
	sameDelivery(t, got[0], d, "leased delivery")
	if got[0].Attempts != 0 || got[0].LastError != "" || got[0].Created.IsZero() {
		t.Errorf("leased delivery: attempts %d, last error %q, created %v", got[0].Attempts, got[0].LastError, got[0].Created)
	}
	mustState(t, c, o, d.ID, outbox.Pending, 0, "", "leased delivery")
}

func (k outboxKit) limitOrder(t T) {
	o, c := k.outbox(t), ctx(t)
	var want []string
	for range 3 {
		d := NewDelivery(t)
		enqueue(t, c, o, d)
		want = append(want, d.ID)
		tick()
	}
	if got := ids(lease(t, c, o, 2, time.Minute)); !equalStrings(got, want[:2]) {
		t.Errorf("Lease(2) returned %v, want %v (oldest due first)", got, want[:2])
	}
	if got := ids(lease(t, c, o, 2, time.Minute)); !equalStrings(got, want[2:]) {
		t.Errorf("second Lease(2) returned %v, want %v", got, want[2:])
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// timed holds the set-up of the checks that wait for a lease or a retry to
// come due: both start before the other checks run, and wait only for what
// is left of OutboxLease when their turn comes.
type timed struct {
	c     context.Context
	ready time.Time

	hide                  outbox.Store
	hideD                 outbox.Delivery
	hideFirst, hideSecond []outbox.Delivery
	hideErr               error

	renew      outbox.Store
	renewD     outbox.Delivery
	renewFirst []outbox.Delivery
	renewErr   error

	retry                  outbox.Store
	retryD                 outbox.Delivery
	next                   time.Time
	retryFirst, retryEarly []outbox.Delivery
	retryErr               error
}

func (k outboxKit) startTimed(t T) *timed {
	t.Helper()
	tm := &timed{c: ctx(t)}
	c := tm.c
	tm.hide, tm.hideD = k.outbox(t), NewDelivery(t)
	tm.hideErr = tm.hide.Enqueue(c, tm.hideD)
	if tm.hideErr == nil {
		tm.hideFirst, tm.hideErr = tm.hide.Lease(c, 10, OutboxLease)
	}
	if tm.hideErr == nil {
		tm.hideSecond, tm.hideErr = tm.hide.Lease(c, 10, OutboxLease)
	}

	tm.renew, tm.renewD = k.outbox(t), NewDelivery(t)
	tm.renewErr = tm.renew.Enqueue(c, tm.renewD)
	if tm.renewErr == nil {
		tm.renewFirst, tm.renewErr = tm.renew.Lease(c, 10, OutboxLease)
	}
	if tm.renewErr == nil && len(tm.renewFirst) == 1 {
		tm.renewErr = tm.renew.Renew(c, tm.renewD.ID, tm.renewFirst[0].LeaseToken, time.Hour)
	}

	tm.retry, tm.retryD = k.outbox(t), NewDelivery(t)
	tm.retryErr = tm.retry.Enqueue(c, tm.retryD)
	tm.next = time.Now().Add(OutboxLease)
	if tm.retryErr == nil {
		tm.retryFirst, tm.retryErr = tm.retry.Lease(c, 10, time.Hour)
	}
	if tm.retryErr == nil && len(tm.retryFirst) == 1 {
		tm.retryErr = tm.retry.Retry(c, tm.retryD.ID, tm.retryFirst[0].LeaseToken, tm.next, "HTTP 500: busy")
	}
	if tm.retryErr == nil {
		tm.retryEarly, tm.retryErr = tm.retry.Lease(c, 10, time.Hour)
	}
	tm.ready = time.Now().Add(OutboxLease + 300*time.Millisecond)
	return tm
}

func (tm *timed) wait() { time.Sleep(time.Until(tm.ready)) }

func (tm *timed) hidesLeased(t T) {
	c := tm.c
	mustOK(t, tm.hideErr, "set-up")
	if len(tm.hideFirst) != 1 {
		t.Fatalf("first Lease returned %v, want [%s]", ids(tm.hideFirst), tm.hideD.ID)
	}
	if len(tm.hideSecond) != 0 {
		t.Fatalf("a second Lease within the lease returned %v, want nothing", ids(tm.hideSecond))
	}
	tm.wait()
	got := lease(t, c, tm.hide, 10, time.Minute)
	if len(got) != 1 || got[0].ID != tm.hideD.ID {
		t.Fatalf("Lease after the lease ran out returned %v, want [%s] (its worker died)", ids(got), tm.hideD.ID)
	}
	sameDelivery(t, got[0], tm.hideD, "delivery leased again")
	if got := lease(t, c, tm.hide, 10, time.Minute); len(got) != 0 {
		t.Errorf("Lease within the second lease returned %v", ids(got))
	}
}

func (tm *timed) retrySchedules(t T) {
	c := tm.c
	mustOK(t, tm.retryErr, "set-up")
	if len(tm.retryFirst) != 1 {
		t.Fatalf("first Lease returned %v", ids(tm.retryFirst))
	}
	if len(tm.retryEarly) != 0 {
		t.Errorf("Lease before the retry was due returned %v", ids(tm.retryEarly))
	}
	d := mustState(t, c, tm.retry, tm.retryD.ID, outbox.Pending, 1, "HTTP 500: busy", "after Retry")
	if !near(d.NextAttempt, tm.next, timeSlack) {
		t.Errorf("NextAttempt %v, want %v", d.NextAttempt, tm.next)
	}
	tm.wait()
	got := lease(t, c, tm.retry, 10, time.Minute)
	if len(got) != 1 || got[0].ID != tm.retryD.ID {
		t.Fatalf("Lease after the retry came due returned %v, want [%s]", ids(got), tm.retryD.ID)
	}
	if got[0].Attempts != 1 || got[0].LastError != "HTTP 500: busy" {
		t.Errorf("leased retry: attempts %d, last error %q", got[0].Attempts, got[0].LastError)
	}
	sameDelivery(t, got[0], tm.retryD, "leased retry")
}

func (k outboxKit) concurrentLease(t T) {
	o, c := k.outbox(t), ctx(t)
	const n, workers = 40, 8
	for range n {
		enqueue(t, c, o, NewDelivery(t))
	}
	var (
		mu    sync.Mutex
		seen  = map[string]int{}
		wg    sync.WaitGroup
		start = make(chan struct{})
		errs  = make(chan error, workers)
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			// An outbox that hands deliveries out again never runs dry:
			// stop after as many rounds as there are deliveries.
			for range n {
				got, err := o.Lease(c, 3, time.Hour)
				if err != nil {
					errs <- err
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, d := range got {
					seen[d.ID]++
				}
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("Lease: %v", err)
	}
	if len(seen) != n {
		t.Errorf("%d distinct deliveries leased, want %d", len(seen), n)
	}
	for id, times := range seen {
		if times != 1 {
			t.Errorf("delivery %s handed out %d times", id, times)
		}
	}
}

func (k outboxKit) delivered(t T) {
	o, c := k.outbox(t), ctx(t)
	d := NewDelivery(t)
	enqueue(t, c, o, d)
	first := lease(t, c, o, 10, time.Minute)
	mustOK(t, o.Retry(c, d.ID, token(t, first, d.ID), time.Now().Add(-time.Second), "HTTP 503"), "Retry")
	got2 := lease(t, c, o, 10, time.Minute)
	if len(got2) != 1 {
		t.Fatalf("Lease of the retry: %v", ids(got2))
	}
	mustOK(t, o.Delivered(c, d.ID, got2[0].LeaseToken), "Delivered")
	got := mustState(t, c, o, d.ID, outbox.Delivered, 2, "", "after Delivered")
	sameDelivery(t, got, d, "delivered delivery")
	if got := lease(t, c, o, 10, time.Minute); len(got) != 0 {
		t.Errorf("Lease after Delivered returned %v", ids(got))
	}
	mustFail(t, o.Delivered(c, d.ID, got2[0].LeaseToken), "second Delivered")
	mustFail(t, o.Retry(c, d.ID, "", time.Now(), "x"), "Retry after Delivered")
	mustFail(t, o.GiveUp(c, d.ID, "", "x"), "GiveUp after Delivered")
	mustState(t, c, o, d.ID, outbox.Delivered, 2, "", "after the refused calls")
}

// mustFail wants an error that is not ErrNotFound (the delivery exists).
func mustFail(t T, err error, what string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s succeeded", what)
	} else if errors.Is(err, outbox.ErrNotFound) {
		t.Errorf("%s: %v; the delivery exists, want another error", what, err)
	}
}

func (k outboxKit) retryClearsLease(t T) {
	o, c := k.outbox(t), ctx(t)
	d := NewDelivery(t)
	enqueue(t, c, o, d)
	first := lease(t, c, o, 10, time.Hour)
	if len(first) != 1 {
		t.Fatalf("Lease: %v", ids(first))
	}
	mustOK(t, o.Retry(c, d.ID, first[0].LeaseToken, time.Now().Add(-time.Second), "connection refused"), "Retry due at once")
	got := lease(t, c, o, 10, time.Hour)
	if len(got) != 1 || got[0].ID != d.ID {
		t.Fatalf("Lease after a Retry due at once returned %v, want [%s]: Retry must release the lease", ids(got), d.ID)
	}
}

func (k outboxKit) giveUp(t T) {
	o, c := k.outbox(t), ctx(t)
	d := NewDelivery(t)
	enqueue(t, c, o, d)
	first := lease(t, c, o, 10, time.Minute)
	mustOK(t, o.Retry(c, d.ID, token(t, first, d.ID), time.Now().Add(-time.Second), "HTTP 500"), "Retry")
	second := lease(t, c, o, 10, time.Minute)
	mustOK(t, o.GiveUp(c, d.ID, token(t, second, d.ID), "HTTP 404: no such endpoint"), "GiveUp")
	mustState(t, c, o, d.ID, outbox.GaveUp, 2, "HTTP 404: no such endpoint", "after GiveUp")
	if got := lease(t, c, o, 10, time.Minute); len(got) != 0 {
		t.Errorf("Lease after GiveUp returned %v", ids(got))
	}
	mustFail(t, o.Delivered(c, d.ID, ""), "Delivered after GiveUp")
	mustFail(t, o.Retry(c, d.ID, "", time.Now(), "x"), "Retry after GiveUp")
	mustFail(t, o.GiveUp(c, d.ID, token(t, second, d.ID), "x"), "second GiveUp")
	mustState(t, c, o, d.ID, outbox.GaveUp, 2, "HTTP 404: no such endpoint", "after the refused calls")
}

func (k outboxKit) unknown(t T) {
	o, c := k.outbox(t), ctx(t)
	enqueue(t, c, o, NewDelivery(t))
	id := randomHex(t, 8)
	for name, err := range map[string]error{
		"Get":       func() error { _, _, err := o.Get(c, id); return err }(),
		"Delivered": o.Delivered(c, id, ""),
		"Retry":     o.Retry(c, id, "", time.Now(), "x"),
		"GiveUp":    o.GiveUp(c, id, "", "x"),
		"Renew":     o.Renew(c, id, "t", time.Minute),
		"Release":   o.Release(c, id, "t"),
	} {
		if !errors.Is(err, outbox.ErrNotFound) {
			t.Errorf("%s of an unknown id: %v, want ErrNotFound", name, err)
		}
	}
}

func (k outboxKit) copies(t T) {
	o, c := k.outbox(t), ctx(t)
	d := NewDelivery(t)
	orig := NewDelivery(t)
	orig.ID, orig.Partner, orig.MessageID, orig.URL = d.ID, d.Partner, d.MessageID, d.URL
	enqueue(t, c, o, d)
	d.Body[0] = 'X' // the caller reuses its buffers
	d.Header.Set("Content-Type", "changed")
	got := lease(t, c, o, 10, time.Minute)
	if len(got) != 1 {
		t.Fatalf("Lease: %v", ids(got))
	}
	sameDelivery(t, got[0], orig, "after the caller changed its delivery")
	got[0].Body[1] = 'Y'
	got[0].Header.Add("X-Multi", "three")
	g, _ := get(t, c, o, d.ID)
	sameDelivery(t, g, orig, "after the caller changed a leased delivery")
	g.Body[2] = 'Z'
	g, _ = get(t, c, o, d.ID)
	sameDelivery(t, g, orig, "after the caller changed a delivery from Get")
}

// retryNow checks outbox.Operator (stores without it skip): a delivery
// retried an hour ahead is listed pending and, after RetryNow, leased at
// once with its attempts kept; RetryNow refuses unknown and finished ones.
func (k outboxKit) retryNow(t T) {
	o, c := k.outbox(t), ctx(t)
	op, ok := o.(outbox.Operator)
	if !ok {
		t.Skip("the outbox does not implement outbox.Operator")
	}
	d, other := NewDelivery(t), NewDelivery(t)
	enqueue(t, c, o, d)
	enqueue(t, c, o, other)
	both := lease(t, c, o, 10, time.Hour)
	if len(both) != 2 {
		t.Fatalf("Lease returned %v", ids(both))
	}
	mustOK(t, o.Retry(c, d.ID, token(t, both, d.ID), time.Now().Add(time.Hour), "HTTP 502"), "Retry")
	mustOK(t, o.Delivered(c, other.ID, token(t, both, other.ID)), "Delivered")
	pending, err := op.ListPending(c, 10)
	mustOK(t, err, "ListPending")
	if len(pending) != 1 || pending[0].ID != d.ID || pending[0].Attempts != 1 {
		t.Fatalf("ListPending returned %v, want [%s] with 1 attempt", ids(pending), d.ID)
	}
	if got := lease(t, c, o, 10, time.Minute); len(got) != 0 {
		t.Fatalf("Lease before RetryNow returned %v", ids(got))
	}
	mustOK(t, op.RetryNow(c, d.ID), "RetryNow")
	got := lease(t, c, o, 10, time.Minute)
	if len(got) != 1 || got[0].ID != d.ID {
		t.Fatalf("Lease after RetryNow returned %v, want [%s]", ids(got), d.ID)
	}
	if got[0].Attempts != 1 || got[0].LastError != "HTTP 502" {
		t.Errorf("after RetryNow: attempts %d, last error %q, want 1 and the last error kept", got[0].Attempts, got[0].LastError)
	}
	if err := op.RetryNow(c, other.ID); err == nil {
		t.Errorf("RetryNow of a delivered delivery succeeded")
	}
	if err := op.RetryNow(c, "no-such-delivery"); !errors.Is(err, outbox.ErrNotFound) {
		t.Errorf("RetryNow(unknown) = %v, want ErrNotFound", err)
	}
}

// token is the LeaseToken of the delivery id among leased.
func token(t T, leased []outbox.Delivery, id string) string {
	t.Helper()
	for _, d := range leased {
		if d.ID == id {
			return d.LeaseToken
		}
	}
	t.Fatalf("delivery %s was not leased (leased %v)", id, ids(leased))
	return ""
}

// mustLost wants ErrLeaseLost.
func mustLost(t T, err error, what string) {
	t.Helper()
	if !errors.Is(err, outbox.ErrLeaseLost) {
		t.Errorf("%s: %v, want ErrLeaseLost", what, err)
	}
}

func (k outboxKit) leaseTokens(t T) {
	o, c := k.outbox(t), ctx(t)
	a, b := NewDelivery(t), NewDelivery(t)
	enqueue(t, c, o, a)
	first := lease(t, c, o, 10, time.Hour)
	enqueue(t, c, o, b)
	second := lease(t, c, o, 10, time.Hour)
	if len(first) != 1 || len(second) != 1 {
		t.Fatalf("Leases returned %v and %v", ids(first), ids(second))
	}
	if first[0].LeaseToken == "" || second[0].LeaseToken == "" {
		t.Fatalf("leased deliveries without a LeaseToken: %q, %q", first[0].LeaseToken, second[0].LeaseToken)
	}
	if first[0].LeaseToken == second[0].LeaseToken {
		t.Errorf("two Leases handed out the same token %q", first[0].LeaseToken)
	}
	mustLost(t, o.Renew(c, a.ID, second[0].LeaseToken, time.Hour), "Renew with another lease's token")
	mustLost(t, o.Renew(c, a.ID, "", time.Hour), "Renew without a token")
	mustLost(t, o.Release(c, a.ID, ""), "Release without a token")
}

func (tm *timed) renewExtends(t T) {
	c := tm.c
	mustOK(t, tm.renewErr, "set-up (Lease, then Renew for an hour)")
	if len(tm.renewFirst) != 1 {
		t.Fatalf("first Lease returned %v", ids(tm.renewFirst))
	}
	tm.wait()
	if got := lease(t, c, tm.renew, 10, time.Minute); len(got) != 0 {
		t.Fatalf("Lease after the first lease ran out returned %v: Renew did not extend it", ids(got))
	}
	mustState(t, c, tm.renew, tm.renewD.ID, outbox.Pending, 0, "", "renewed delivery")
	mustOK(t, tm.renew.Delivered(c, tm.renewD.ID, tm.renewFirst[0].LeaseToken), "Delivered by the renewing worker")
}

// expire leases d for a millisecond and waits until that ran out.
func expire(t T, c context.Context, o outbox.Store, id string) string {
	t.Helper()
	got := lease(t, c, o, 10, time.Millisecond)
	tok := token(t, got, id)
	time.Sleep(20 * time.Millisecond)
	return tok
}

func (k outboxKit) renewExpiredNotTaken(t T) {
	o, c := k.outbox(t), ctx(t)
	d := NewDelivery(t)
	enqueue(t, c, o, d)
	tok := expire(t, c, o, d.ID)
	mustOK(t, o.Renew(c, d.ID, tok, time.Hour), "Renew of a lease that ran out, not taken over")
	if got := lease(t, c, o, 10, time.Minute); len(got) != 0 {
		t.Errorf("Lease after the renewal returned %v", ids(got))
	}
}

func (k outboxKit) releaseHandsBack(t T) {
	o, c := k.outbox(t), ctx(t)
	d := NewDelivery(t)
	enqueue(t, c, o, d)
	first := lease(t, c, o, 10, time.Hour)
	mustOK(t, o.Retry(c, d.ID, token(t, first, d.ID), time.Now().Add(-time.Second), "HTTP 503"), "Retry")
	second := lease(t, c, o, 10, time.Hour)
	tok := token(t, second, d.ID)
	mustOK(t, o.Release(c, d.ID, tok), "Release")
	third := lease(t, c, o, 10, time.Hour)
	if len(third) != 1 || third[0].ID != d.ID {
		t.Fatalf("Lease after Release returned %v, want [%s] at once", ids(third), d.ID)
	}
	if third[0].Attempts != 1 || third[0].LastError != "HTTP 503" {
		t.Errorf("after Release: attempts %d, last error %q; want 1 and %q (a release is no attempt)",
			third[0].Attempts, third[0].LastError, "HTTP 503")
	}
	mustLost(t, o.Release(c, d.ID, tok), "Release with the released lease's token")
	if got := lease(t, c, o, 10, time.Hour); len(got) != 0 {
		t.Errorf("Lease after a stale Release returned %v: it released the new holder's lease", ids(got))
	}
}

func (k outboxKit) fencingStaleToken(t T) {
	o, c := k.outbox(t), ctx(t)
	d := NewDelivery(t)
	enqueue(t, c, o, d)
	stale := expire(t, c, o, d.ID)
	taken := lease(t, c, o, 10, time.Hour)
	fresh := token(t, taken, d.ID)
	if fresh == stale {
		t.Fatalf("the takeover got the stale token %q", stale)
	}
	mustLost(t, o.Renew(c, d.ID, stale, time.Hour), "stale Renew")
	mustLost(t, o.Release(c, d.ID, stale), "stale Release")
	mustLost(t, o.Delivered(c, d.ID, stale), "stale Delivered")
	mustLost(t, o.Retry(c, d.ID, stale, time.Now().Add(-time.Second), "stale"), "stale Retry")
	mustLost(t, o.GiveUp(c, d.ID, stale, "stale"), "stale GiveUp")
	mustState(t, c, o, d.ID, outbox.Pending, 0, "", "after the stale worker's calls")
	if got := lease(t, c, o, 10, time.Hour); len(got) != 0 {
		t.Errorf("Lease while the new holder holds it returned %v", ids(got))
	}
	mustOK(t, o.Renew(c, d.ID, fresh, time.Hour), "the new holder's Renew")
	mustOK(t, o.Delivered(c, d.ID, fresh), "the new holder's Delivered")
	mustState(t, c, o, d.ID, outbox.Delivered, 1, "", "after the new holder's Delivered")
}
