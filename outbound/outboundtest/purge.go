package outboundtest

import (
	"bytes"
	"time"

	"github.com/edigateway/gateway/outbound"
)

// purgeFinalOnly: Purge deletes final messages last updated before the
// bound, with their payloads, up to limit per call, and never a queued,
// awaiting or leased one, whatever its age.
//
// The kit cannot set the store's clock: the old messages are ended, then
// the bound is taken just after the latest Updated the store gave them,
// and the recent ones are ended a little later.
func (k kit) purgeFinalOnly(t T) {
	s, c := k.store(t), ctx(t)
	keyed := NewMessage(t, "acme")
	keyed.IdempotencyKey = "order-42"
	delivered := submit(t, c, s, keyed, testPayload)
	mustOK(t, s.Delivered(c, delivered.ID, leaseOnly(t, c, s, delivered.ID, time.Hour), &outbound.Evidence{Kind: "mdn",
		Body: []byte("mdn"), Disposition: "processed"}), "Delivered")
	failed := queue(t, c, s, "globex")
	mustOK(t, s.Failed(c, failed.ID, leaseOnly(t, c, s, failed.ID, time.Hour), "gave up", nil), "Failed")
	cancelled := queue(t, c, s, "acme")
	mustOK(t, s.Cancel(c, cancelled.ID, "operator"), "Cancel")
	awaiting := queue(t, c, s, "acme")
	mustOK(t, s.Awaiting(c, awaiting.ID, leaseOnly(t, c, s, awaiting.ID, time.Hour), time.Now().Add(time.Hour)), "Awaiting")
	leased := queue(t, c, s, "acme")
	leasedToken := leaseOnly(t, c, s, leased.ID, time.Hour)
	retrying := queue(t, c, s, "globex")
	mustOK(t, s.Retry(c, retrying.ID, leaseOnly(t, c, s, retrying.ID, time.Hour), time.Now().Add(time.Hour), "503"), "Retry")
	queued := queue(t, c, s, "acme") // due, not leased
	old := []outbound.Message{delivered, failed, cancelled}
	kept := []outbound.Message{awaiting, leased, retrying, queued}

	var cut time.Time
	for _, m := range append(old, kept...) {
		if u := get(t, c, s, m.ID).Updated; u.After(cut) {
			cut = u
		}
	}
	cut = cut.Add(5 * time.Millisecond)
	time.Sleep(15 * time.Millisecond)
	recent := queue(t, c, s, "acme")
	mustOK(t, s.Cancel(c, recent.ID, "operator"), "Cancel")
	if u := get(t, c, s, recent.ID).Updated; !u.After(cut) {
		t.Fatalf("setup: the recent message's Updated %s is not after the bound %s", u, cut)
	}
	kept = append(kept, recent)

	n, err := s.Purge(c, cut, 0)
	mustOK(t, err, "Purge limit 0")
	if n != 0 {
		t.Errorf("Purge with limit 0 purged %d", n)
	}
	n, err = s.Purge(c, cut, 2)
	mustOK(t, err, "Purge limit 2")
	if n != 2 {
		t.Errorf("Purge limit 2 of 3 old final messages returned %d, want 2", n)
	}
	gone := 0
	for _, m := range old {
		if _, err := s.Get(c, m.ID); err == nil {
			continue
		}
		gone++
	}
	if gone != 2 {
		t.Errorf("after Purge limit 2, %d of the 3 old final messages are gone, want 2", gone)
	}
	n, err = s.Purge(c, cut, 10)
	mustOK(t, err, "Purge")
	if n != 1 {
		t.Errorf("second Purge returned %d, want the 1 old final message left", n)
	}
	n, err = s.Purge(c, cut, 10)
	mustOK(t, err, "Purge")
	if n != 0 {
		t.Errorf("third Purge returned %d, want 0 (nothing old and final left)", n)
	}
	for _, m := range old {
		_, err := s.Get(c, m.ID)
		mustNotFound(t, err, "Get of a purged "+string(m.State)+" message")
		_, err = s.OpenPayload(c, m.ID)
		mustNotFound(t, err, "OpenPayload of a purged message")
		_, err = s.FindByMessageID(c, m.Partner, m.MessageID)
		mustNotFound(t, err, "FindByMessageID of a purged message")
	}
	// Whatever their age, only final messages go.
	n, err = s.Purge(c, time.Now().Add(ClockSkew+time.Hour), 100)
	mustOK(t, err, "Purge of everything old")
	if n != 1 {
		t.Errorf("Purge with a bound in the future returned %d, want 1 (the recent cancelled message)", n)
	}
	for _, m := range kept[:len(kept)-1] {
		got, err := s.Get(c, m.ID)
		if err != nil {
			t.Errorf("Get of a kept message (not final): %v", err)
			continue
		}
		if got.State.Final() {
			t.Errorf("kept message %s is %s", m.ID, got.State)
		}
		if p := payloadOf(t, c, s, m.ID); !bytes.Equal(p, testPayload) {
			t.Errorf("payload of kept message %s changed: %q", m.ID, p)
		}
	}
	_, err = s.Get(c, recent.ID)
	mustNotFound(t, err, "Get of the recent cancelled message purged with a bound in the future")
	mustOK(t, s.Delivered(c, leased.ID, leasedToken, nil), "Delivered of the message leased through the purges")
	// The purged message's idempotency key is free again.
	m2 := NewMessage(t, "acme")
	m2.IdempotencyKey = keyed.IdempotencyKey
	got, created, err := s.Submit(c, m2, bytes.NewReader(testPayload))
	mustOK(t, err, "Submit with a purged message's idempotency key")
	if !created || got.ID != m2.ID {
		t.Errorf("Submit with a purged message's idempotency key: created %v, id %s; want a new message %s", created, got.ID, m2.ID)
	}
}
