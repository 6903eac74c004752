package exchange

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/edigateway/gateway/dedup"
)

// keyLog records the idempotency keys every handler run saw.
type keyLog struct {
	mu   sync.Mutex
	runs []seenKeys
}

type seenKeys struct {
	id, msg  string
	payloads []string
}

func (l *keyLog) observe(m *Message) {
	s := seenKeys{id: m.MessageID, msg: m.IdempotencyKey}
	for _, p := range m.Payloads {
		s.payloads = append(s.payloads, p.IdempotencyKey)
	}
	l.mu.Lock()
	l.runs = append(l.runs, s)
	l.mu.Unlock()
}

// A retransmission after a handler failure sees the same message and
// payload keys; the same interchange under a new message id has the same
// payload key (its interchange key) but a new message key; a payload
// without an envelope is keyed by message and position.
func TestIdempotencyKeysAreStable(t *testing.T) {
	f := newLedgerFixture(t)
	var log keyLog
	fail := 1
	f.h.fn = func(m *Message) error {
		log.observe(m)
		if fail > 0 {
			fail--
			return errors.New("ERP timed out after booking the invoice")
		}
		return nil
	}
	free := "free text without envelope"
	f.send("m1", 0, "", invoic("REF1", "A"), free) // handler fails
	f.send("m1", 0, "", invoic("REF1", "A"), free) // retransmission: processed
	fail = 1
	f.send("m2", 0, "", invoic("REF2", "B")) // fails
	f.send("m3", 0, "", invoic("REF2", "B")) // the EDI system resends REF2 under a new id
	if len(log.runs) != 4 {
		t.Fatalf("handler runs %+v", log.runs)
	}
	a, b, c, d := log.runs[0], log.runs[1], log.runs[2], log.runs[3]
	want := dedup.TransportKey("test", "t", "acme", "m1")
	if a.msg != string(want) || b.msg != a.msg || strings.Join(b.payloads, ",") != strings.Join(a.payloads, ",") {
		t.Errorf("retransmission keys differ: %+v vs %+v", a, b)
	}
	ic1 := dedup.Interchange{}
	recs, _ := f.st.FindInterchanges(context.Background(), dedup.InterchangeQuery{Reference: "REF1"})
	if len(recs) == 1 {
		ic1 = recs[0].Interchange
	}
	if len(a.payloads) != 2 || a.payloads[0] != string(ic1.Key) || !dedup.Key(a.payloads[1]).Valid() || a.payloads[1] == a.msg || a.payloads[1] == a.payloads[0] {
		t.Errorf("payload keys %q (interchange key %s)", a.payloads, ic1.Key)
	}
	if c.msg == d.msg || len(c.payloads) != 1 || len(d.payloads) != 1 || c.payloads[0] != d.payloads[0] {
		t.Errorf("interchange resent under a new id: %+v vs %+v", c, d)
	}
	// A restarted gateway (fresh pipeline and store, as after kill -9)
	// gives the retransmission the same keys: they are derived from the
	// message alone.
	g := newLedgerFixture(t)
	g.h.fn = func(m *Message) error { log.observe(m); return nil }
	g.send("m1", 0, "", invoic("REF1", "A"), free)
	if r := log.runs[len(log.runs)-1]; r.msg != a.msg || strings.Join(r.payloads, ",") != strings.Join(a.payloads, ",") {
		t.Errorf("after a restart: %+v, before: %+v", r, a)
	}
	// The free-text payload of another message id has another key.
	f.h.fn = func(m *Message) error { log.observe(m); return nil }
	f.send("m4", 0, "", free)
	if e := log.runs[len(log.runs)-1]; e.payloads[0] == a.payloads[1] {
		t.Errorf("position keys of different messages collide: %q", e.payloads[0])
	}
}

// Keys are assigned in the order sent, before duplicate payloads are moved
// out, so a payload's key does not depend on which other payloads were new.
func TestIdempotencyKeysIgnoreDuplicatePayloads(t *testing.T) {
	f := newLedgerFixture(t)
	var log keyLog
	f.h.fn = func(m *Message) error { log.observe(m); return nil }
	f.send("m1", 0, "", invoic("REF1", "A"))
	f.send("m2", 0, "", invoic("REF1", "A"), "free text")
	if len(log.runs) != 2 || len(log.runs[1].payloads) != 1 {
		t.Fatalf("runs %+v", log.runs)
	}
	want := string(dedup.HashFields(payloadKeyTag, string(dedup.TransportKey("test", "t", "acme", "m2")), "2"))
	if got := log.runs[1].payloads[0]; got != want {
		t.Errorf("free-text payload key %s, want the key of position 2 (%s)", got, want)
	}
}
