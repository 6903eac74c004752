package outboundtest

import (
	"slices"
	"sync"
	"time"

	"github.com/edigateway/gateway/outbound"
)

// tick lets the clock move on, so that messages submitted one after the
// other have different times even in a store keeping milliseconds.
func tick() { time.Sleep(3 * time.Millisecond) }

// tokenOf is the LeaseToken of the message id among leased.
func tokenOf(t T, leased []outbound.Message, id string) string {
	t.Helper()
	for _, m := range leased {
		if m.ID == id {
			if m.LeaseToken == "" {
				t.Fatalf("leased message %s without a LeaseToken", id)
			}
			return m.LeaseToken
		}
	}
	t.Fatalf("message %s was not leased (leased %v)", id, ids(leased))
	return ""
}

func (k kit) dueOrder(t T) {
	s, c := k.store(t), ctx(t)
	var want []outbound.Message
	for range 3 {
		want = append(want, queue(t, c, s, "acme"))
		tick()
	}
	if got := lease(t, c, s, 0, time.Minute); len(got) != 0 {
		t.Errorf("Lease(limit 0) returned %v", ids(got))
	}
	before := time.Now()
	first := lease(t, c, s, 2, time.Minute)
	if got := ids(first); !slices.Equal(got, ids(want[:2])) {
		t.Fatalf("Lease(2) returned %v, want %v (oldest due first)", got, ids(want[:2]))
	}
	for i, m := range first {
		sameSubmitted(t, m, want[i], "leased message")
		if m.State != outbound.Queued || m.Attempts != 0 || m.SHA256 != sha(testPayload) {
			t.Errorf("leased message %s: state %q, attempts %d, sha256 %s", m.ID, m.State, m.Attempts, m.SHA256)
		}
		if m.LeaseToken == "" || !near(m.LeasedUntil, before.Add(time.Minute), ClockSkew) {
			t.Errorf("leased message %s: token %q, leased until %v; want a token, about %v", m.ID, m.LeaseToken,
				m.LeasedUntil, before.Add(time.Minute))
		}
		if g := get(t, c, s, m.ID); g.LeaseToken != m.LeaseToken || !g.Sending(time.Now()) {
			t.Errorf("Get of leased message %s: token %q, leased until %v; want %q and being sent", m.ID,
				g.LeaseToken, g.LeasedUntil, m.LeaseToken)
		}
	}
	if first[0].LeaseToken == first[1].LeaseToken {
		t.Errorf("two messages leased under one token %q", first[0].LeaseToken)
	}
	if got := ids(lease(t, c, s, 2, time.Minute)); !slices.Equal(got, ids(want[2:])) {
		t.Errorf("second Lease(2) returned %v, want %v", got, ids(want[2:]))
	}
	leaseNone(t, c, s, "with every message leased")
}

func (k kit) notDue(t T) {
	s, c := k.store(t), ctx(t)
	var ms []outbound.Message
	for range 5 {
		ms = append(ms, queue(t, c, s, "acme"))
	}
	leased := lease(t, c, s, 10, time.Hour)
	tok := func(i int) string { return tokenOf(t, leased, ms[i].ID) }
	later := time.Now().Add(time.Hour)
	mustOK(t, s.Retry(c, ms[0].ID, tok(0), later, "HTTP 503"), "Retry in an hour")
	mustOK(t, s.Awaiting(c, ms[1].ID, tok(1), later), "Awaiting for an hour")
	mustOK(t, s.Delivered(c, ms[2].ID, tok(2), testEvidence("processed")), "Delivered")
	mustOK(t, s.Failed(c, ms[3].ID, tok(3), "refused", nil), "Failed")
	mustOK(t, s.Cancel(c, ms[4].ID, "operator"), "Cancel")
	leaseNone(t, c, s, "with a retry and an MDN due in an hour, and final messages")
	if m := get(t, c, s, ms[0].ID); !near(m.NextAttempt, later, timeSlack) {
		t.Errorf("retried message due %v, want %v", m.NextAttempt, later)
	}
}

func (k kit) concurrentLease(t T) {
	s, c := k.store(t), ctx(t)
	const n, workers = 30, 8
	for range n {
		queue(t, c, s, "acme")
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
			// A store that hands messages out again never runs dry: stop
			// after as many rounds as there are messages.
			for range n {
				got, err := s.Lease(c, 3, time.Hour)
				if err != nil {
					errs <- err
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, m := range got {
					seen[m.ID]++
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
		t.Errorf("%d distinct messages leased, want %d", len(seen), n)
	}
	for id, times := range seen {
		if times != 1 {
			t.Errorf("message %s handed out %d times", id, times)
		}
	}
}

func (k kit) tokens(t T) {
	s, c := k.store(t), ctx(t)
	a := queue(t, c, s, "acme")
	mustLost(t, s.Renew(c, a.ID, "", time.Hour), "Renew of a message never leased")
	mustLost(t, s.Posting(c, a.ID, "", "digest"), "Posting of a message never leased")
	mustLost(t, s.Delivered(c, a.ID, "", nil), "Delivered of a message never leased")
	tokA := leaseOnly(t, c, s, a.ID, time.Hour)
	b := queue(t, c, s, "acme")
	tokB := leaseOnly(t, c, s, b.ID, time.Hour)
	if tokA == tokB {
		t.Fatalf("two Leases handed out the same token %q", tokA)
	}
	mustLost(t, s.Renew(c, a.ID, tokB, time.Hour), "Renew with another message's token")
	mustLost(t, s.Renew(c, a.ID, "", time.Hour), "Renew without a token")
	mustLost(t, s.Release(c, a.ID, ""), "Release without a token")
	mustLost(t, s.Posting(c, a.ID, tokB, "digest"), "Posting with another message's token")
	mustLost(t, s.Retry(c, a.ID, tokB, time.Now(), "x"), "Retry with another message's token")
	mustLost(t, s.Awaiting(c, a.ID, tokB, time.Now()), "Awaiting with another message's token")
	mustLost(t, s.Delivered(c, a.ID, tokB, nil), "Delivered with another message's token")
	mustLost(t, s.Failed(c, a.ID, tokB, "x", nil), "Failed with another message's token")
	mustState(t, c, s, a.ID, outbound.Queued, 0, "", "", "after the refused calls")
	mustOK(t, s.Delivered(c, a.ID, tokA, nil), "Delivered with its own token")
}

// staleCalls makes every call of a worker with a token that is no longer the
// message's lease and wants ErrLeaseLost from each.
func staleCalls(t T, s outbound.Store, id, token, what string) {
	t.Helper()
	c := ctx(t)
	mustLost(t, s.Renew(c, id, token, time.Hour), what+": Renew")
	mustLost(t, s.Release(c, id, token), what+": Release")
	mustLost(t, s.Posting(c, id, token, "stale digest"), what+": Posting")
	mustLost(t, s.Retry(c, id, token, time.Now().Add(-time.Second), "stale"), what+": Retry")
	mustLost(t, s.Awaiting(c, id, token, time.Now().Add(time.Hour)), what+": Awaiting")
	mustLost(t, s.Delivered(c, id, token, testEvidence("stale")), what+": Delivered")
	mustLost(t, s.Failed(c, id, token, "stale", nil), what+": Failed")
}

func (k kit) expiry(t T) {
	t.Parallel()
	s, c := k.store(t), ctx(t)
	m := queue(t, c, s, "acme")
	stale := leaseOnly(t, c, s, m.ID, ShortLease)
	leaseNone(t, c, s, "within the lease")
	time.Sleep(ShortLease + leaseSlack)
	fresh := leaseOnly(t, c, s, m.ID, time.Hour)
	if fresh == stale {
		t.Fatalf("the takeover got the stale token %q", stale)
	}
	staleCalls(t, s, m.ID, stale, "the first worker after its lease was taken over")
	mustState(t, c, s, m.ID, outbound.Queued, 0, "", "", "after the stale worker's calls")
	if g := get(t, c, s, m.ID); len(g.Sent) != 0 || g.Evidence != nil || g.LeaseToken != fresh {
		t.Errorf("after the stale worker's calls: sent %q, evidence %v, token %q; want none, none, %q", g.Sent,
			g.Evidence, g.LeaseToken, fresh)
	}
	leaseNone(t, c, s, "while the new holder holds it")
	mustOK(t, s.Posting(c, m.ID, fresh, "digest"), "the new holder's Posting")
	mustOK(t, s.Delivered(c, m.ID, fresh, testEvidence("processed")), "the new holder's Delivered")
	mustState(t, c, s, m.ID, outbound.Delivered, 1, "", "", "after the new holder's Delivered")
}

func (k kit) awaitingDue(t T) {
	t.Parallel()
	s, c := k.store(t), ctx(t)
	m := queue(t, c, s, "acme")
	tok := leaseOnly(t, c, s, m.ID, time.Hour)
	mustOK(t, s.Posting(c, m.ID, tok, "mic-1"), "Posting")
	deadline := time.Now().Add(ShortLease)
	mustOK(t, s.Awaiting(c, m.ID, tok, deadline), "Awaiting")
	leaseNone(t, c, s, "before the MDN's deadline")
	time.Sleep(ShortLease + leaseSlack)
	got := lease(t, c, s, 10, time.Hour)
	if len(got) != 1 || got[0].ID != m.ID {
		t.Fatalf("Lease after the MDN's deadline returned %v, want [%s]", ids(got), m.ID)
	}
	if got[0].Attempts != 1 || !slices.Equal(got[0].Sent, []string{"mic-1"}) {
		t.Errorf("message leased after the deadline: attempts %d, sent %q; want 1, [mic-1]", got[0].Attempts, got[0].Sent)
	}
	tok2 := got[0].LeaseToken
	leaseNone(t, c, s, "while the message is leased again")
	mustOK(t, s.Posting(c, m.ID, tok2, "mic-1"), "Posting of the second transmission (same MIC)")
	mustOK(t, s.Retry(c, m.ID, tok2, time.Now().Add(time.Hour), "connection reset"), "Retry")
	g := mustState(t, c, s, m.ID, outbound.Queued, 2, "connection reset", "", "after the second attempt")
	if !slices.Equal(g.Sent, []string{"mic-1"}) {
		t.Errorf("sent %q, want [mic-1]", g.Sent)
	}
}

func (k kit) renewKeeps(t T) {
	t.Parallel()
	s, c := k.store(t), ctx(t)
	m := queue(t, c, s, "acme")
	tok := leaseOnly(t, c, s, m.ID, ShortLease)
	mustOK(t, s.Renew(c, m.ID, tok, time.Hour), "Renew for an hour")
	if g := get(t, c, s, m.ID); !near(g.LeasedUntil, time.Now().Add(time.Hour), ClockSkew) || g.LeaseToken != tok {
		t.Errorf("after Renew: leased until %v under %q, want about %v under %q", g.LeasedUntil, g.LeaseToken,
			time.Now().Add(time.Hour), tok)
	}
	time.Sleep(ShortLease + leaseSlack)
	leaseNone(t, c, s, "after the first lease ran out: Renew did not extend it")
	mustOK(t, s.Posting(c, m.ID, tok, "digest"), "Posting by the renewing worker")
	mustOK(t, s.Delivered(c, m.ID, tok, nil), "Delivered by the renewing worker")
}

func (k kit) renewExpiredNotTaken(t T) {
	s, c := k.store(t), ctx(t)
	m := queue(t, c, s, "acme")
	tok := leaseOnly(t, c, s, m.ID, time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	mustOK(t, s.Renew(c, m.ID, tok, time.Hour), "Renew of a lease that ran out, not taken over")
	leaseNone(t, c, s, "after the renewal")
	mustOK(t, s.Delivered(c, m.ID, tok, nil), "Delivered after the renewal")
}

func (k kit) releaseDueNow(t T) {
	s, c := k.store(t), ctx(t)
	m := queue(t, c, s, "acme")
	tok1 := leaseOnly(t, c, s, m.ID, time.Hour)
	mustOK(t, s.Posting(c, m.ID, tok1, "d1"), "Posting")
	mustOK(t, s.Retry(c, m.ID, tok1, time.Now().Add(-time.Second), "HTTP 503"), "Retry due at once")
	tok2 := leaseOnly(t, c, s, m.ID, time.Hour)
	mustOK(t, s.Release(c, m.ID, tok2), "Release")
	g := mustState(t, c, s, m.ID, outbound.Queued, 1, "HTTP 503", "", "after Release (no attempt)")
	if g.Sending(time.Now()) {
		t.Errorf("after Release the message is still held (token %q until %v)", g.LeaseToken, g.LeasedUntil)
	}
	leased := lease(t, c, s, 10, time.Hour)
	if len(leased) != 1 || leased[0].ID != m.ID {
		t.Fatalf("Lease after Release returned %v, want [%s] at once", ids(leased), m.ID)
	}
	if leased[0].Attempts != 1 || leased[0].LastError != "HTTP 503" {
		t.Errorf("after Release: attempts %d, last error %q; want 1 and %q", leased[0].Attempts, leased[0].LastError, "HTTP 503")
	}
	mustLost(t, s.Release(c, m.ID, tok2), "Release with the released lease's token")
	leaseNone(t, c, s, "after a stale Release: it released the new holder's lease")
}
