package outboundtest

import (
	"slices"
	"time"

	"github.com/edigateway/gateway/outbound"
)

func (k kit) postingCounts(t T) {
	s, c := k.store(t), ctx(t)
	m := queue(t, c, s, "acme")
	tok := leaseOnly(t, c, s, m.ID, time.Hour)
	const d1, d2 = "qZ8x2+3fd3NfMuD0/Ic8Lw9FhzfO3wMbMbGxUqpH3vI=, sha-256", "#ref-body sha256=AAAA"
	for i, step := range []struct {
		digest string
		sent   []string
	}{{d1, []string{d1}}, {d1, []string{d1}}, {d2, []string{d1, d2}}} {
		mustOK(t, s.Posting(c, m.ID, tok, step.digest), "Posting")
		g := mustState(t, c, s, m.ID, outbound.Queued, i+1, "", "", "after Posting")
		if !slices.Equal(g.Sent, step.sent) {
			t.Errorf("after Posting %d: sent %q, want %q", i+1, g.Sent, step.sent)
		}
		if g.LeaseToken != tok || !g.Sending(time.Now()) {
			t.Errorf("after Posting %d: token %q until %v; want the lease kept", i+1, g.LeaseToken, g.LeasedUntil)
		}
	}
	leaseNone(t, c, s, "after Posting (the lease is kept)")
	mustOK(t, s.Renew(c, m.ID, tok, time.Hour), "Renew after Posting")
}

func (k kit) retrySchedules(t T) {
	s, c := k.store(t), ctx(t)
	m := queue(t, c, s, "acme")
	tok := leaseOnly(t, c, s, m.ID, time.Hour)
	mustOK(t, s.Posting(c, m.ID, tok, "d1"), "Posting")
	next := time.Now().Add(time.Hour).Truncate(time.Millisecond).Add(123 * time.Microsecond)
	mustOK(t, s.Retry(c, m.ID, tok, next, "HTTP 503: busy"), "Retry")
	g := mustState(t, c, s, m.ID, outbound.Queued, 1, "HTTP 503: busy", "", "after Retry")
	if !near(g.NextAttempt, next, timeSlack) {
		t.Errorf("after Retry: next attempt %v, want %v", g.NextAttempt, next)
	}
	if g.Sending(time.Now()) {
		t.Errorf("after Retry the message is still held (token %q until %v)", g.LeaseToken, g.LeasedUntil)
	}
	mustLost(t, s.Renew(c, m.ID, tok, time.Hour), "Renew after Retry (the lease is released)")
	leaseNone(t, c, s, "before the retry is due")

	// A retry due at once is handed out at once: its lease was released.
	b := queue(t, c, s, "acme")
	tokB := leaseOnly(t, c, s, b.ID, time.Hour)
	mustOK(t, s.Retry(c, b.ID, tokB, time.Now().Add(-time.Second), "connection refused"), "Retry due at once")
	again := lease(t, c, s, 10, time.Hour)
	if len(again) != 1 || again[0].ID != b.ID {
		t.Fatalf("Lease after a Retry due at once returned %v, want [%s]", ids(again), b.ID)
	}
	if again[0].LastError != "connection refused" || again[0].State != outbound.Queued {
		t.Errorf("leased retry: state %q, last error %q", again[0].State, again[0].LastError)
	}
}

func (k kit) awaitingWaits(t T) {
	s, c := k.store(t), ctx(t)
	m := queue(t, c, s, "acme")
	tok := leaseOnly(t, c, s, m.ID, time.Hour)
	mustOK(t, s.Posting(c, m.ID, tok, "mic"), "Posting")
	deadline := time.Now().Add(2 * time.Hour)
	mustOK(t, s.Awaiting(c, m.ID, tok, deadline), "Awaiting")
	g := mustState(t, c, s, m.ID, outbound.AwaitingMDN, 1, "", "", "after Awaiting")
	if !near(g.NextAttempt, deadline, timeSlack) {
		t.Errorf("after Awaiting: next attempt %v, want the deadline %v", g.NextAttempt, deadline)
	}
	if g.LeaseToken == tok && g.Sending(time.Now()) {
		t.Errorf("after Awaiting the message is still held")
	}
	mustLost(t, s.Renew(c, m.ID, tok, time.Hour), "Renew after Awaiting (the lease is released)")
	leaseNone(t, c, s, "while the MDN is awaited")
}

func (k kit) delivered(t T) {
	s, c := k.store(t), ctx(t)
	m := queue(t, c, s, "acme")
	tok := leaseOnly(t, c, s, m.ID, time.Hour)
	mustOK(t, s.Posting(c, m.ID, tok, "mic"), "Posting")
	ev := testEvidence("automatic-action/MDN-sent-automatically; processed")
	mustOK(t, s.Delivered(c, m.ID, tok, ev), "Delivered")
	g := mustState(t, c, s, m.ID, outbound.Delivered, 1, "", "", "after Delivered")
	sameEvidence(t, g.Evidence, ev, "after Delivered")
	sameSubmitted(t, g, m, "after Delivered")
	if !g.State.Final() || g.Sending(time.Now()) {
		t.Errorf("after Delivered: final %v, held %v", g.State.Final(), g.Sending(time.Now()))
	}
	if !g.Updated.After(m.Created) && !near(g.Updated, m.Created, ClockSkew) {
		t.Errorf("after Delivered: updated %v, created %v", g.Updated, m.Created)
	}
	leaseNone(t, c, s, "after Delivered")
	staleCalls(t, s, m.ID, tok, "the worker after its Delivered")
	g = mustState(t, c, s, m.ID, outbound.Delivered, 1, "", "", "after the refused calls")
	sameEvidence(t, g.Evidence, ev, "after the refused calls")
}

func (k kit) failed(t T) {
	s, c := k.store(t), ctx(t)
	a, b := queue(t, c, s, "acme"), queue(t, c, s, "acme")
	leased := lease(t, c, s, 10, time.Hour)
	ev := testEvidence("automatic-action/MDN-sent-automatically; failed/Failure: authentication-failed")
	ev.Kind, ev.Disposition = "error", "EBMS:0101"
	mustOK(t, s.Failed(c, a.ID, tokenOf(t, leased, a.ID), "authentication-failed", ev), "Failed with evidence")
	mustOK(t, s.Failed(c, b.ID, tokenOf(t, leased, b.ID), "gave up after 72h: HTTP 503", nil), "Failed without evidence")
	ga := mustState(t, c, s, a.ID, outbound.Failed, 0, "", "authentication-failed", "after Failed")
	sameEvidence(t, ga.Evidence, ev, "after Failed")
	gb := mustState(t, c, s, b.ID, outbound.Failed, 0, "", "gave up after 72h: HTTP 503", "after Failed (give-up)")
	sameEvidence(t, gb.Evidence, nil, "after Failed (give-up)")
	leaseNone(t, c, s, "after Failed")
	staleCalls(t, s, a.ID, tokenOf(t, leased, a.ID), "the worker after its Failed")
	mustState(t, c, s, a.ID, outbound.Failed, 0, "", "authentication-failed", "after the refused calls")
}

func (k kit) settleAwaiting(t T) {
	s, c := k.store(t), ctx(t)
	a, b := queue(t, c, s, "acme"), queue(t, c, s, "acme")
	leased := lease(t, c, s, 10, time.Hour)
	for _, m := range []outbound.Message{a, b} {
		tok := tokenOf(t, leased, m.ID)
		mustOK(t, s.Posting(c, m.ID, tok, "mic"), "Posting")
		mustOK(t, s.Awaiting(c, m.ID, tok, time.Now().Add(time.Hour)), "Awaiting")
	}
	ev := testEvidence("processed")
	got, changed, err := s.Settle(c, "acme", a.MessageID, true, "", ev)
	mustOK(t, err, "Settle delivered")
	if !changed || got.ID != a.ID || got.State != outbound.Delivered {
		t.Errorf("Settle delivered: changed %v, message %s %q; want true, %s delivered", changed, got.ID, got.State, a.ID)
	}
	sameEvidence(t, got.Evidence, ev, "message returned by Settle")
	g := mustState(t, c, s, a.ID, outbound.Delivered, 1, "", "", "after Settle delivered")
	sameEvidence(t, g.Evidence, ev, "after Settle delivered")

	neg := testEvidence("failed/Failure: decryption-failed")
	got, changed, err = s.Settle(c, "acme", b.MessageID, false, "decryption-failed", neg)
	mustOK(t, err, "Settle failed")
	if !changed || got.ID != b.ID || got.State != outbound.Failed || got.Reason != "decryption-failed" {
		t.Errorf("Settle failed: changed %v, message %s %q %q; want true, %s failed", changed, got.ID, got.State, got.Reason, b.ID)
	}
	g = mustState(t, c, s, b.ID, outbound.Failed, 1, "", "decryption-failed", "after Settle failed")
	sameEvidence(t, g.Evidence, neg, "after Settle failed")
	leaseNone(t, c, s, "after Settle")
}

func (k kit) settleLeased(t T) {
	s, c := k.store(t), ctx(t)
	m := queue(t, c, s, "acme")
	tok := leaseOnly(t, c, s, m.ID, time.Hour)
	mustOK(t, s.Posting(c, m.ID, tok, "mic"), "Posting")
	ev := testEvidence("failed/Failure: unexpected-processing-error")
	got, changed, err := s.Settle(c, "acme", m.MessageID, false, "unexpected-processing-error", ev)
	mustOK(t, err, "Settle of a leased message")
	if !changed || got.State != outbound.Failed {
		t.Errorf("Settle of a leased message: changed %v, state %q; want true, failed", changed, got.State)
	}
	staleCalls(t, s, m.ID, tok, "the worker after an MDN settled its message")
	g := mustState(t, c, s, m.ID, outbound.Failed, 1, "", "unexpected-processing-error", "after the worker's refused calls")
	sameEvidence(t, g.Evidence, ev, "after the worker's refused calls")
	leaseNone(t, c, s, "after Settle")
}

func (k kit) settleFinal(t T) {
	s, c := k.store(t), ctx(t)
	m := queue(t, c, s, "acme")
	tok := leaseOnly(t, c, s, m.ID, time.Hour)
	ev := testEvidence("processed")
	mustOK(t, s.Delivered(c, m.ID, tok, ev), "Delivered")
	before := get(t, c, s, m.ID)
	for _, delivered := range []bool{true, false} {
		got, changed, err := s.Settle(c, "acme", m.MessageID, delivered, "late", testEvidence("duplicate"))
		mustOK(t, err, "Settle of a final message")
		if changed || got.ID != m.ID || got.State != outbound.Delivered || got.Reason != "" {
			t.Errorf("Settle(delivered %v) of a delivered message: changed %v, %s %q %q; want false and it unchanged",
				delivered, changed, got.ID, got.State, got.Reason)
		}
		sameEvidence(t, got.Evidence, ev, "message returned by a duplicate Settle")
	}
	after := mustState(t, c, s, m.ID, outbound.Delivered, 0, "", "", "after duplicate Settles")
	sameEvidence(t, after.Evidence, ev, "after duplicate Settles")
	if !after.Updated.Equal(before.Updated) {
		t.Errorf("a duplicate Settle changed Updated from %v to %v", before.Updated, after.Updated)
	}

	// A failed or cancelled message is final too: a late positive MDN does
	// not change it (an operator may Resend it).
	f := queue(t, c, s, "acme")
	mustOK(t, s.Failed(c, f.ID, leaseOnly(t, c, s, f.ID, time.Hour), "gave up", nil), "Failed")
	x := queue(t, c, s, "acme")
	mustOK(t, s.Cancel(c, x.ID, "operator"), "Cancel")
	for _, m := range []struct {
		m      outbound.Message
		state  outbound.State
		reason string
	}{{f, outbound.Failed, "gave up"}, {x, outbound.Cancelled, "operator"}} {
		got, changed, err := s.Settle(c, "acme", m.m.MessageID, true, "", testEvidence("processed"))
		mustOK(t, err, "Settle of a final message")
		if changed || got.State != m.state {
			t.Errorf("Settle of a %s message: changed %v, state %q; want false, %s", m.state, changed, got.State, m.state)
		}
		g := mustState(t, c, s, m.m.ID, m.state, 0, "", m.reason, "after a late Settle")
		sameEvidence(t, g.Evidence, nil, "after a late Settle")
	}
}

func (k kit) settleNotFound(t T) {
	s, c := k.store(t), ctx(t)
	m := queue(t, c, s, "acme")
	_, _, err := s.Settle(c, "globex", m.MessageID, true, "", testEvidence("processed"))
	mustNotFound(t, err, "Settle for another partner")
	_, _, err = s.Settle(c, "acme", "<no-such-message@gateway.example>", true, "", nil)
	mustNotFound(t, err, "Settle of an unknown Message-ID")
	_, _, err = s.Settle(c, "acme", m.ID, true, "", nil)
	mustNotFound(t, err, "Settle by the queue id instead of the Message-ID")
	mustState(t, c, s, m.ID, outbound.Queued, 0, "", "", "after the refused Settles")
}
