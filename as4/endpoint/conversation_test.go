package endpoint_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/edigateway/gateway/as4/client"
	"github.com/edigateway/gateway/as4/endpoint"
)

// emptyConversationForms are the two spellings of an empty
// eb:ConversationId: the one our client (and phase4's BDEW sender) writes and
// the open/close pair. Exclusive C14N makes both the same signed bytes.
var emptyConversationForms = map[string]func([]byte) []byte{
	"self-closing": func(b []byte) []byte { return b },
	"open-close": func(b []byte) []byte {
		return bytes.Replace(b, []byte("<eb:ConversationId/>"), []byte("<eb:ConversationId></eb:ConversationId>"), 1)
	},
}

func withEmptyConversation(t *testing.T, out *client.Outgoing, form func([]byte) []byte) *client.Outgoing {
	t.Helper()
	if !bytes.Contains(out.Body, []byte("<eb:ConversationId/>")) {
		t.Fatalf("the client wrote no empty eb:ConversationId")
	}
	c := *out
	c.Body = form(out.Body)
	return &c
}

// TestEmptyConversationIdAcceptedFromBDEWPartner: phase4's BDEW sender
// always writes an empty eb:ConversationId (the ENTSOG profile under BDEW's
// says so); it was refused with EBMS:0009.
func TestEmptyConversationIdAcceptedFromBDEWPartner(t *testing.T) {
	s := newBDEW(t)
	for name, form := range emptyConversationForms {
		t.Run(name, func(t *testing.T) {
			m := s.message("conv-" + name + "@9900000000002")
			m.EmptyConversationID = true
			out, err := s.client.Build(m)
			if err != nil {
				t.Fatal(err)
			}
			before := s.calls.Load()
			resp, err := s.client.Post(context.Background(), s.url, withEmptyConversation(t, out, form))
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if resp.Receipt == nil || resp.Receipt.RefToMessageID != m.MessageID || s.calls.Load() != before+1 {
				t.Fatalf("no receipt or no delivery: %+v, handler calls %d", resp.Receipt, s.calls.Load()-before)
			}
		})
	}
}

// TestEmptyConversationIdAcceptedFromAnyPartner: the schema allows the
// empty value for every partner, not only BDEW ones.
func TestEmptyConversationIdAcceptedFromAnyPartner(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	c := rsaClient(getKeys(t))
	for name, form := range emptyConversationForms {
		t.Run(name, func(t *testing.T) {
			m := testMessage("conv-" + name + "@acme.test")
			m.ConversationID, m.EmptyConversationID = "", true
			out, err := c.Build(m)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := c.Post(context.Background(), h.url, withEmptyConversation(t, out, form))
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if resp.Receipt == nil || resp.Receipt.RefToMessageID != m.MessageID {
				t.Fatalf("no receipt: %+v", resp.Receipt)
			}
			var got *recorded
			for _, d := range h.handler.delivered() {
				if d.msg.MessageID == m.MessageID {
					got = &d
				}
			}
			if got == nil {
				t.Fatal("message not delivered")
			}
			if v, ok := got.msg.Headers[endpoint.HeaderConversationID]; ok {
				t.Fatalf("empty conversation id handed on as header %q", v)
			}
		})
	}
}
