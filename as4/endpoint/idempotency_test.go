package endpoint_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/edigateway/gateway/exchange"
)

// Through the real endpoint: a retransmission after a handler failure sees
// the same idempotency keys, and the same interchange resent under a new
// eb:MessageId keeps its payload key; a payload without an envelope is
// keyed by message and position.
func TestIdempotencyKeysOverAS4(t *testing.T) {
	t.Parallel()
	k := getKeys(t)
	h := newHarness(t, harnessOptions{ledger: true})
	c := rsaClient(k)
	ctx := context.Background()
	var mu sync.Mutex
	var runs [][]string // message key, then payload keys
	h.handler.observe = func(m *exchange.Message) {
		keys := []string{m.IdempotencyKey}
		for _, p := range m.Payloads {
			keys = append(keys, p.IdempotencyKey)
		}
		mu.Lock()
		runs = append(runs, keys)
		mu.Unlock()
	}
	h.handler.before = func(call int) error {
		if call == 1 || call == 3 {
			return errors.New("ERP booked the invoice, then timed out")
		}
		return nil
	}
	out, err := c.Build(testMessage("idem-1@acme.test"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Post(ctx, h.url, out); err == nil {
		t.Fatal("handler failure answered positively")
	}
	if r, err := c.Post(ctx, h.url, out); err != nil || r.Receipt == nil { // the sender's MSH retransmits
		t.Fatalf("retransmission: %v", err)
	}
	m2 := testMessage("idem-2@acme.test")
	m2.Payloads[0].Data = bytes.Replace(invoiceXML, []byte("INV-4711"), []byte("INV-4712"), 1)
	if _, _, err := c.Send(ctx, h.url, m2); err == nil {
		t.Fatal("handler failure answered positively")
	}
	m3 := testMessage("idem-3@acme.test") // the business system resends the invoice under a new id
	m3.Payloads = m2.Payloads
	if _, _, err := c.Send(ctx, h.url, m3); err != nil {
		t.Fatalf("resend under a new id: %v", err)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(runs) != 4 || len(runs[0]) != 3 {
		t.Fatalf("handler runs %q", runs)
	}
	for i := range runs[0] {
		if runs[0][i] == "" || runs[0][i] != runs[1][i] {
			t.Errorf("retransmission after a failure, key %d: %q vs %q", i, runs[0][i], runs[1][i])
		}
	}
	if runs[2][1] != runs[3][1] || runs[2][0] == runs[3][0] || runs[2][1] == runs[0][1] {
		t.Errorf("invoice under a new eb:MessageId: %q vs %q", runs[2], runs[3])
	}
	if runs[2][2] == runs[3][2] {
		t.Errorf("the envelope-less payload of two messages has one key %q", runs[2][2])
	}
}
