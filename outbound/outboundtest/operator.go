package outboundtest

import (
	"bytes"
	"slices"
	"strings"
	"time"

	"github.com/edigateway/gateway/outbound"
)

func (k kit) findByMessageID(t T) {
	s, c := k.store(t), ctx(t)
	a, b := queue(t, c, s, "acme"), queue(t, c, s, "acme")
	got, err := s.FindByMessageID(c, "acme", b.MessageID)
	mustOK(t, err, "FindByMessageID")
	sameSubmitted(t, got, b, "FindByMessageID")
	if got.SHA256 != sha(testPayload) || got.State != outbound.Queued {
		t.Errorf("FindByMessageID: sha256 %s, state %q", got.SHA256, got.State)
	}
	_, err = s.FindByMessageID(c, "globex", a.MessageID)
	mustNotFound(t, err, "FindByMessageID for another partner")
	_, err = s.FindByMessageID(c, "acme", "<unknown@gateway.example>")
	mustNotFound(t, err, "FindByMessageID of an unknown Message-ID")
	_, err = s.FindByMessageID(c, "acme", a.ID)
	mustNotFound(t, err, "FindByMessageID by the queue id")
}

// list calls List and returns the ids.
func list(t T, s outbound.Store, f outbound.Filter) []string {
	t.Helper()
	got, err := s.List(ctx(t), f)
	if err != nil {
		t.Fatalf("List(%+v): %v", f, err)
	}
	return ids(got)
}

func (k kit) listFilters(t T) {
	s, c := k.store(t), ctx(t)
	var a1, g1, a2, a3, g2 outbound.Message
	for _, m := range []*outbound.Message{&a1, &g1, &a2, &a3, &g2} {
		partner := "acme"
		if m == &g1 || m == &g2 {
			partner = "globex"
		}
		*m = queue(t, c, s, partner)
		tick()
	}
	mustOK(t, s.Delivered(c, a2.ID, tokenOf(t, lease(t, c, s, 10, time.Hour), a2.ID), nil), "Delivered")
	mustOK(t, s.Cancel(c, g2.ID, "operator"), "Cancel")
	for _, m := range []outbound.Message{a1, g1, a3} {
		mustOK(t, s.Release(c, m.ID, get(t, c, s, m.ID).LeaseToken), "Release")
	}
	all, err := s.List(c, outbound.Filter{})
	mustOK(t, err, "List")
	for _, tc := range []struct {
		name string
		f    outbound.Filter
		want []outbound.Message
	}{
		{"everything", outbound.Filter{}, []outbound.Message{g2, a3, a2, g1, a1}},
		{"partner", outbound.Filter{Partner: "acme"}, []outbound.Message{a3, a2, a1}},
		{"queued", outbound.Filter{States: []outbound.State{outbound.Queued}}, []outbound.Message{a3, g1, a1}},
		{"final", outbound.Filter{States: []outbound.State{outbound.Delivered, outbound.Cancelled}}, []outbound.Message{g2, a2}},
		{"partner and state", outbound.Filter{Partner: "acme", States: []outbound.State{outbound.Delivered}}, []outbound.Message{a2}},
		{"no match", outbound.Filter{Partner: "initech"}, nil},
		{"limit", outbound.Filter{Limit: 2}, []outbound.Message{g2, a3}},
	} {
		if got := list(t, s, tc.f); !slices.Equal(got, ids(tc.want)) {
			t.Errorf("List %s (%+v) returned %v, want %v (newest first)", tc.name, tc.f, got, ids(tc.want))
		}
	}
	if len(all) != 5 {
		t.Fatalf("List returned %v", ids(all))
	}
	// Before: created before the given time (the last Created of a page).
	if got := list(t, s, outbound.Filter{Before: all[2].Created}); !slices.Equal(got, ids([]outbound.Message{g1, a1})) {
		t.Errorf("List before %s's Created returned %v, want %v", a2.ID, got, ids([]outbound.Message{g1, a1}))
	}
	if got := list(t, s, outbound.Filter{Before: all[0].Created, Partner: "globex"}); !slices.Equal(got, []string{g1.ID}) {
		t.Errorf("List of globex before %s's Created returned %v, want [%s]", g2.ID, got, g1.ID)
	}
	var paged []string
	f := outbound.Filter{Limit: 2}
	for range 5 {
		page, err := s.List(c, f)
		mustOK(t, err, "List page")
		if len(page) == 0 {
			break
		}
		paged = append(paged, ids(page)...)
		f.Before = page[len(page)-1].Created
	}
	if !slices.Equal(paged, ids(all)) {
		t.Errorf("paging by 2 returned %v, want %v", paged, ids(all))
	}
	if all[1].State != outbound.Queued || all[2].State != outbound.Delivered || all[0].Reason != "operator" {
		t.Errorf("List returned states %q, %q, %q (reason %q)", all[0].State, all[1].State, all[2].State, all[0].Reason)
	}
}

func (k kit) listDefaultLimit(t T) {
	s, c := k.store(t), ctx(t)
	for range 101 {
		queue(t, c, s, "acme")
	}
	if got := list(t, s, outbound.Filter{}); len(got) != 100 {
		t.Errorf("List with no limit returned %d messages, want 100", len(got))
	}
	if got := list(t, s, outbound.Filter{Limit: 101}); len(got) != 101 {
		t.Errorf("List with limit 101 returned %d messages, want 101", len(got))
	}
}

// listSameCreated pages through 25 messages of acme and 5 of globex
// created at 3 instants (as a bulk of submissions lands many in one
// millisecond), 4 a page, with the keyset cursor (Before, BeforeID) of each
// page's last message: every message exactly once, newest first (Created,
// then ID), for every kind of filter. Before alone still bounds by time.
func (k kit) listSameCreated(t T) {
	s, c := k.store(t), ctx(t)
	b, ok := s.(Backdater)
	if !ok {
		t.Skipf("the store (%T) is not an outboundtest.Backdater: cannot queue messages created in one instant", s)
	}
	t0 := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	at := []time.Time{t0, t0.Add(time.Millisecond), t0.Add(2 * time.Millisecond)}
	var all []outbound.Message
	for i := range 30 {
		partner := "acme"
		if i%6 == 5 {
			partner = "globex"
		}
		// Created disagrees with submission order (and so with the
		// time-ordered IDs): 0, 1, 2, 0, 1, 2, …
		m, created, err := b.SubmitAt(c, at[i%3], NewMessage(t, partner), bytes.NewReader(testPayload))
		if err != nil || !created {
			t.Fatalf("SubmitAt(%s): created %v, %v", at[i%3], created, err)
		}
		if !m.Created.Equal(at[i%3]) {
			t.Fatalf("SubmitAt(%s): Created %s", at[i%3], m.Created)
		}
		all = append(all, m)
	}
	// Some cancelled: a list of one state, and of several, skips them.
	for _, i := range []int{4, 9, 16, 27} {
		mustOK(t, s.Cancel(c, all[i].ID, "operator"), "Cancel")
		all[i].State = outbound.Cancelled
	}
	newestFirst := func(keep func(m outbound.Message) bool) []string {
		var ms []outbound.Message
		for _, m := range all {
			if keep(m) {
				ms = append(ms, m)
			}
		}
		slices.SortFunc(ms, func(a, b outbound.Message) int {
			if c := b.Created.Compare(a.Created); c != 0 {
				return c
			}
			return strings.Compare(b.ID, a.ID)
		})
		return ids(ms)
	}
	for _, tc := range []struct {
		name string
		f    outbound.Filter
		keep func(m outbound.Message) bool
	}{
		{"everything", outbound.Filter{}, func(outbound.Message) bool { return true }},
		{"partner", outbound.Filter{Partner: "acme"}, func(m outbound.Message) bool { return m.Partner == "acme" }},
		{"one state", outbound.Filter{States: []outbound.State{outbound.Queued}},
			func(m outbound.Message) bool { return m.State == outbound.Queued }},
		{"states", outbound.Filter{States: []outbound.State{outbound.Queued, outbound.Cancelled}},
			func(outbound.Message) bool { return true }},
		{"partner and state", outbound.Filter{Partner: "acme", States: []outbound.State{outbound.Queued}},
			func(m outbound.Message) bool { return m.Partner == "acme" && m.State == outbound.Queued }},
	} {
		want := newestFirst(tc.keep)
		var paged []string
		f := tc.f
		f.Limit = 4
		for range len(all) {
			page, err := s.List(c, f)
			mustOK(t, err, "List page")
			paged = append(paged, ids(page)...)
			if len(page) < f.Limit {
				break
			}
			f.Before, f.BeforeID = page[len(page)-1].Created, page[len(page)-1].ID
		}
		if !slices.Equal(paged, want) {
			var missed []string
			for _, id := range want {
				if !slices.Contains(paged, id) {
					missed = append(missed, id)
				}
			}
			t.Errorf("paging %s by 4 with (Before, BeforeID) returned %d messages, want %d (newest first, each "+
				"once); missed %v;\n got %v\nwant %v", tc.name, len(paged), len(want), missed, paged, want)
		}
	}
	// Before alone: created before it, whatever their IDs; BeforeID
	// without Before: no bound.
	want := newestFirst(func(m outbound.Message) bool { return m.Created.Before(at[1]) })
	if got := list(t, s, outbound.Filter{Before: at[1]}); !slices.Equal(got, want) {
		t.Errorf("List before %s returned %v, want %v", at[1], got, want)
	}
	if got := list(t, s, outbound.Filter{BeforeID: all[0].ID}); len(got) != len(all) {
		t.Errorf("List with BeforeID and no Before returned %d messages, want %d", len(got), len(all))
	}
}

func (k kit) stats(t T) {
	s, c := k.store(t), ctx(t)
	if st, err := s.Stats(c); err != nil || len(st) != 0 {
		t.Errorf("Stats of an empty queue: %+v, %v", st, err)
	}
	oldest := queue(t, c, s, "acme")
	tick()
	var ms []outbound.Message
	for range 5 {
		ms = append(ms, queue(t, c, s, "acme"))
	}
	g := NewMessage(t, "globex")
	g.Protocol = outbound.AS4
	submit(t, c, s, g, testPayload)
	in := queue(t, c, s, "initech")
	leased := lease(t, c, s, 20, time.Hour)
	mustOK(t, s.Awaiting(c, ms[0].ID, tokenOf(t, leased, ms[0].ID), time.Now().Add(time.Hour)), "Awaiting")
	mustOK(t, s.Delivered(c, ms[1].ID, tokenOf(t, leased, ms[1].ID), nil), "Delivered")
	mustOK(t, s.Failed(c, ms[2].ID, tokenOf(t, leased, ms[2].ID), "refused", nil), "Failed")
	mustOK(t, s.Cancel(c, ms[3].ID, "operator"), "Cancel")
	mustOK(t, s.Delivered(c, in.ID, tokenOf(t, leased, in.ID), nil), "Delivered")
	mustOK(t, s.Retry(c, oldest.ID, tokenOf(t, leased, oldest.ID), time.Now().Add(time.Hour), "HTTP 503"), "Retry")
	// ms[4] and globex's message stay leased: queued all the same.
	st, err := s.Stats(c)
	mustOK(t, err, "Stats")
	want := map[string]outbound.Stats{
		"acme":    {Partner: "acme", Protocol: outbound.AS2, Queued: 2, Awaiting: 1, Delivered: 1, Failed: 1, Cancelled: 1},
		"globex":  {Partner: "globex", Protocol: outbound.AS4, Queued: 1},
		"initech": {Partner: "initech", Protocol: outbound.AS2, Delivered: 1},
	}
	if len(st) != len(want) {
		t.Errorf("Stats returned %d entries, want %d: %+v", len(st), len(want), st)
	}
	oldestCreated := get(t, c, s, oldest.ID).Created
	for _, got := range st {
		w, ok := want[got.Partner]
		if !ok {
			t.Errorf("Stats has an entry for %q", got.Partner)
			continue
		}
		o := got.OldestQueued
		got.OldestQueued = time.Time{}
		if got != w {
			t.Errorf("Stats of %s:\n got %+v\nwant %+v", got.Partner, got, w)
		}
		switch got.Partner {
		case "acme":
			if !near(o, oldestCreated, timeSlack) {
				t.Errorf("acme's OldestQueued %v, want the oldest queued message's Created %v", o, oldestCreated)
			}
		case "globex":
			if o.IsZero() {
				t.Errorf("globex's OldestQueued is zero with a message queued")
			}
		default:
			if !o.IsZero() {
				t.Errorf("%s's OldestQueued %v, want zero (nothing queued)", got.Partner, o)
			}
		}
	}
}

func (k kit) cancelNotFinal(t T) {
	s, c := k.store(t), ctx(t)
	q, aw := queue(t, c, s, "acme"), queue(t, c, s, "acme")
	tok := tokenOf(t, lease(t, c, s, 10, time.Hour), aw.ID)
	mustOK(t, s.Awaiting(c, aw.ID, tok, time.Now().Add(-time.Second)), "Awaiting, due at once")
	mustOK(t, s.Release(c, q.ID, get(t, c, s, q.ID).LeaseToken), "Release")
	mustOK(t, s.Cancel(c, q.ID, "wrong file"), "Cancel of a queued message")
	mustOK(t, s.Cancel(c, aw.ID, "partner asked"), "Cancel of a message awaiting its MDN")
	mustState(t, c, s, q.ID, outbound.Cancelled, 0, "", "wrong file", "after Cancel")
	mustState(t, c, s, aw.ID, outbound.Cancelled, 0, "", "partner asked", "after Cancel")
	leaseNone(t, c, s, "after Cancel")
	mustIs(t, s.Cancel(c, q.ID, "again"), outbound.ErrFinal, "a second Cancel")
	mustState(t, c, s, q.ID, outbound.Cancelled, 0, "", "wrong file", "after the second Cancel")
}

func (k kit) cancelLeased(t T) {
	s, c := k.store(t), ctx(t)
	m := queue(t, c, s, "acme")
	tok := leaseOnly(t, c, s, m.ID, time.Hour)
	mustOK(t, s.Posting(c, m.ID, tok, "mic"), "Posting")
	mustOK(t, s.Cancel(c, m.ID, "operator: stop it"), "Cancel of a leased message")
	staleCalls(t, s, m.ID, tok, "the worker after its message was cancelled")
	g := mustState(t, c, s, m.ID, outbound.Cancelled, 1, "", "operator: stop it", "after the worker's refused calls")
	if g.Evidence != nil || g.Sending(time.Now()) {
		t.Errorf("cancelled message: evidence %v, held %v", g.Evidence, g.Sending(time.Now()))
	}
	leaseNone(t, c, s, "after Cancel")
}

func (k kit) cancelFinal(t T) {
	s, c := k.store(t), ctx(t)
	d, f := queue(t, c, s, "acme"), queue(t, c, s, "acme")
	leased := lease(t, c, s, 10, time.Hour)
	ev := testEvidence("processed")
	mustOK(t, s.Delivered(c, d.ID, tokenOf(t, leased, d.ID), ev), "Delivered")
	mustOK(t, s.Failed(c, f.ID, tokenOf(t, leased, f.ID), "refused", nil), "Failed")
	mustIs(t, s.Cancel(c, d.ID, "too late"), outbound.ErrFinal, "Cancel of a delivered message")
	mustIs(t, s.Cancel(c, f.ID, "too late"), outbound.ErrFinal, "Cancel of a failed message")
	g := mustState(t, c, s, d.ID, outbound.Delivered, 0, "", "", "after the refused Cancel")
	sameEvidence(t, g.Evidence, ev, "after the refused Cancel")
	mustState(t, c, s, f.ID, outbound.Failed, 0, "", "refused", "after the refused Cancel")
}

func (k kit) resendFinal(t T) {
	s, c := k.store(t), ctx(t)
	f, x := queue(t, c, s, "acme"), queue(t, c, s, "acme")
	time.Sleep(50 * time.Millisecond) // so that a Created left unchanged is told from a new one
	tok := tokenOf(t, lease(t, c, s, 10, time.Hour), f.ID)
	mustOK(t, s.Posting(c, f.ID, tok, "mic"), "Posting")
	mustOK(t, s.Failed(c, f.ID, tok, "authentication-failed", testEvidence("failed")), "Failed")
	mustOK(t, s.Cancel(c, x.ID, "operator"), "Cancel")
	for _, m := range []outbound.Message{f, x} {
		before := time.Now()
		mustOK(t, s.Resend(c, m.ID), "Resend")
		g := get(t, c, s, m.ID)
		if g.State != outbound.Queued || g.MessageID != m.MessageID || !near(g.NextAttempt, before, ClockSkew) {
			t.Errorf("after Resend: state %q, Message-ID %s, due %v; want queued, %s, now", g.State, g.MessageID,
				g.NextAttempt, m.MessageID)
		}
		if g.Sending(time.Now()) {
			t.Errorf("after Resend the message is held")
		}
		// Queued anew: the give-up age starts again.
		if !near(g.Created, before, ClockSkew) || !g.Created.After(m.Created) {
			t.Errorf("after Resend Created is %v, want now (%v): the give-up age must start again", g.Created, before)
		}
		if got, err := s.FindByMessageID(c, "acme", m.MessageID); err != nil || got.ID != m.ID {
			t.Errorf("FindByMessageID after Resend: %s, %v", got.ID, err)
		}
	}
	got := lease(t, c, s, 10, time.Hour)
	slices.SortFunc(got, func(a, b outbound.Message) int { return strings.Compare(a.ID, b.ID) })
	want := []string{f.ID, x.ID}
	slices.Sort(want)
	if !slices.Equal(ids(got), want) {
		t.Errorf("Lease after Resend returned %v, want %v at once", ids(got), want)
	}
}

func (k kit) resendRefused(t T) {
	s, c := k.store(t), ctx(t)
	q, aw, d := queue(t, c, s, "acme"), queue(t, c, s, "acme"), queue(t, c, s, "acme")
	leased := lease(t, c, s, 10, time.Hour)
	mustOK(t, s.Awaiting(c, aw.ID, tokenOf(t, leased, aw.ID), time.Now().Add(time.Hour)), "Awaiting")
	mustOK(t, s.Delivered(c, d.ID, tokenOf(t, leased, d.ID), nil), "Delivered")
	mustIs(t, s.Resend(c, q.ID), outbound.ErrNotFinal, "Resend of a queued (leased) message")
	mustIs(t, s.Resend(c, aw.ID), outbound.ErrNotFinal, "Resend of a message awaiting its MDN")
	mustIs(t, s.Resend(c, d.ID), outbound.ErrFinal, "Resend of a delivered message")
	mustState(t, c, s, aw.ID, outbound.AwaitingMDN, 0, "", "", "after the refused Resend")
	mustState(t, c, s, d.ID, outbound.Delivered, 0, "", "", "after the refused Resend")
	if g := get(t, c, s, q.ID); g.LeaseToken != tokenOf(t, leased, q.ID) || g.State != outbound.Queued {
		t.Errorf("after the refused Resend: %q under %q, want queued and still held", g.State, g.LeaseToken)
	}
	leaseNone(t, c, s, "after the refused Resends")
}

func (k kit) unknown(t T) {
	s, c := k.store(t), ctx(t)
	m := queue(t, c, s, "acme")
	tok := leaseOnly(t, c, s, m.ID, time.Hour)
	id := outbound.NewID(time.Now())
	for name, err := range map[string]error{
		"Get":         func() error { _, err := s.Get(c, id); return err }(),
		"OpenPayload": func() error { _, err := s.OpenPayload(c, id); return err }(),
		"Renew":       s.Renew(c, id, tok, time.Hour),
		"Release":     s.Release(c, id, tok),
		"Posting":     s.Posting(c, id, tok, "d"),
		"Retry":       s.Retry(c, id, tok, time.Now(), "x"),
		"Awaiting":    s.Awaiting(c, id, tok, time.Now()),
		"Delivered":   s.Delivered(c, id, tok, nil),
		"Failed":      s.Failed(c, id, tok, "x", nil),
		"Cancel":      s.Cancel(c, id, "x"),
		"Resend":      s.Resend(c, id),
	} {
		mustNotFound(t, err, name+" of an unknown id")
	}
	mustState(t, c, s, m.ID, outbound.Queued, 0, "", "", "after calls on an unknown id")
}

func (k kit) copies(t T) {
	s, c := k.store(t), ctx(t)
	m := queue(t, c, s, "acme")
	leased := lease(t, c, s, 10, time.Hour)
	tok := tokenOf(t, leased, m.ID)
	mustOK(t, s.Posting(c, m.ID, tok, "mic-1"), "Posting")
	ev := testEvidence("processed")
	want := testEvidence("processed")
	mustOK(t, s.Delivered(c, m.ID, tok, ev), "Delivered")
	ev.Body[0], ev.Signer = 'X', "changed" // the caller reuses its buffers
	g := get(t, c, s, m.ID)
	sameEvidence(t, g.Evidence, want, "after the caller changed the evidence it gave")
	g.Evidence.Body[1] = 'Y'
	g.Sent[0] = "changed"
	g = get(t, c, s, m.ID)
	sameEvidence(t, g.Evidence, want, "after the caller changed a message from Get")
	if !slices.Equal(g.Sent, []string{"mic-1"}) {
		t.Errorf("after the caller changed a message from Get: sent %q", g.Sent)
	}
	all, err := s.List(c, outbound.Filter{})
	mustOK(t, err, "List")
	all[0].Evidence.Body[2] = 'Z'
	got, _, err := s.Settle(c, "acme", m.MessageID, true, "", nil)
	mustOK(t, err, "Settle")
	got.Evidence.Body[3] = 'W'
	f, err := s.FindByMessageID(c, "acme", m.MessageID)
	mustOK(t, err, "FindByMessageID")
	sameEvidence(t, f.Evidence, want, "after the caller changed messages from List and Settle")
}
