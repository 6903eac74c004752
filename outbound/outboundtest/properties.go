package outboundtest

import (
	"fmt"
	"time"

	"github.com/edigateway/gateway/outbound"
)

// testProperties are part properties in an order that is not sorted, with
// non-ASCII, XML-special and JSON-special text, an empty value and names
// that differ only in case from no other.
var testProperties = []outbound.Property{
	{Name: "BDEWDocumentType", Value: "UTILMD"},
	{Name: "BDEWDocumentNo", Value: "4711-ü-\"<&>'"},
	{Name: "BDEWDocumentDate", Value: "2026-12-05"},
	{Name: "CharacterSet", Value: "utf-8"},
	{Name: "app:Empty", Value: ""},
	{Name: "A.b_c-D", Value: "Grüße, 日本 \\ / {}[]"},
}

// properties: a message's properties come back whole and in order from
// Submit, Get, Lease, List and FindByMessageID, and stay through Failed
// and Resend; a message without properties has none.
func (k kit) properties(t T) {
	s, c := k.store(t), ctx(t)
	m := NewMessage(t, "acme")
	m.Protocol = outbound.AS4
	m.Properties = append([]outbound.Property(nil), testProperties...)
	plain := NewMessage(t, "acme")
	plain.Protocol = outbound.AS4
	stored := submit(t, c, s, m, testPayload)
	// The caller's slice may change after Submit: the store keeps its own.
	m.Properties[0].Value = "changed by the caller"
	submit(t, c, s, plain, testPayload)
	want := func(what string, got outbound.Message) {
		t.Helper()
		if !outbound.EqualProperties(got.Properties, testProperties) {
			t.Errorf("%s: properties\n got %q\nwant %q", what, got.Properties, testProperties)
		}
	}
	none := func(what string, got outbound.Message) {
		t.Helper()
		if len(got.Properties) != 0 {
			t.Errorf("%s: properties %q of a message submitted without any", what, got.Properties)
		}
	}
	want("Submit", stored)
	want("Get", get(t, c, s, m.ID))
	none("Get (no properties)", get(t, c, s, plain.ID))
	found, err := s.FindByMessageID(c, "acme", m.MessageID)
	mustOK(t, err, "FindByMessageID")
	want("FindByMessageID", found)
	listed, err := s.List(c, outbound.Filter{Partner: "acme"})
	mustOK(t, err, "List")
	seen := 0
	for _, l := range listed {
		switch l.ID {
		case m.ID:
			want("List", l)
			seen++
		case plain.ID:
			none("List (no properties)", l)
			seen++
		}
	}
	if seen != 2 {
		t.Fatalf("List returned %v, want both messages", ids(listed))
	}
	leased := lease(t, c, s, 10, time.Hour)
	if len(leased) != 2 {
		t.Fatalf("Lease returned %v, want both messages", ids(leased))
	}
	for _, l := range leased {
		if l.ID == m.ID {
			want("Lease", l)
		} else {
			none("Lease (no properties)", l)
		}
	}
	mustOK(t, s.Failed(c, m.ID, tokenOf(t, leased, m.ID), "refused", nil), "Failed")
	want("Get after Failed", get(t, c, s, m.ID))
	mustOK(t, s.Resend(c, m.ID), "Resend")
	want("Get after Resend", get(t, c, s, m.ID))
	again := lease(t, c, s, 10, time.Hour)
	if len(again) != 1 || again[0].ID != m.ID {
		t.Fatalf("Lease after Resend returned %v, want [%s]", ids(again), m.ID)
	}
	want("Lease after Resend", again[0])

	// The most a submission may carry: MaxProperties of the longest name
	// and value.
	big := NewMessage(t, "acme")
	big.Protocol = outbound.AS4
	for i := range outbound.MaxProperties {
		name := fmt.Sprintf("%0*d", outbound.MaxPropertyName, i)
		value := make([]byte, outbound.MaxPropertyValueSize)
		for j := range value {
			value[j] = 'a' + byte((i+j)%26)
		}
		big.Properties = append(big.Properties, outbound.Property{Name: name, Value: string(value)})
	}
	submit(t, c, s, big, testPayload)
	if got := get(t, c, s, big.ID); !outbound.EqualProperties(got.Properties, big.Properties) {
		t.Errorf("Get: %d properties of %d-byte values came back as %d (or changed)", len(big.Properties),
			outbound.MaxPropertyValueSize, len(got.Properties))
	}
}
