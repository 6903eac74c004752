package as4

import (
	"strings"
	"testing"
)

func testUserMessage(t *testing.T, m testMessage) *UserMessage {
	t.Helper()
	_, el := messagingOf(t, m.envelope())
	msg, err := ParseMessaging(el)
	if err != nil {
		t.Fatal(err)
	}
	return msg.UserMessage
}

func TestMatch(t *testing.T) {
	m := defaultTestMessage()
	um := testUserMessage(t, m)
	const (
		isoType = "urn:oasis:names:tc:ebcore:partyid-type:iso6523"
		sender  = "0088:5790000436033"
	)
	peppol := PMode{ID: "peppol", Agreement: m.agreement, Service: m.service, ServiceType: m.serviceType, Action: m.action,
		FromPartyID: sender, FromPartyType: isoType, ToPartyID: "0088:5790000436040"}
	cases := []struct {
		name   string
		pmodes []PMode
		want   string
	}{
		{"exact", []PMode{peppol}, "peppol"},
		{"wildcard", []PMode{{ID: "any"}}, "any"},
		{"most specific wins", []PMode{{ID: "any"}, {ID: "by-sender", FromPartyID: sender}, peppol}, "peppol"},
		{"first of equals", []PMode{{ID: "a", FromPartyID: sender}, {ID: "b", ToPartyID: "0088:5790000436040"}}, "a"},
		{"party type only", []PMode{{ID: "t", FromPartyType: isoType}}, "t"},
		{"roles", []PMode{{ID: "roles", FromRole: "http://docs.oasis-open.org/ebxml-msg/ebms/v3.0/ns/core/200704/initiator",
			ToRole: "http://docs.oasis-open.org/ebxml-msg/ebms/v3.0/ns/core/200704/responder"}}, "roles"},
		{"wrong action", []PMode{{ID: "x", Action: "other"}}, ""},
		{"wrong service type", []PMode{{ID: "x", Service: m.service, ServiceType: "other"}}, ""},
		{"wrong agreement", []PMode{{ID: "x", Agreement: "urn:other"}}, ""},
		{"wrong sender", []PMode{{ID: "x", FromPartyID: "0088:1"}}, ""},
		{"wrong sender type", []PMode{{ID: "x", FromPartyID: sender, FromPartyType: "urn:other"}}, ""},
		{"sender id is not receiver", []PMode{{ID: "x", ToPartyID: sender}}, ""},
		{"wrong role", []PMode{{ID: "x", FromRole: "Buyer"}}, ""},
		{"none", nil, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pm, err := Match(c.pmodes, um)
			if c.want == "" {
				e := AsError(err)
				if err == nil || e.Code != CodeProcessingModeMismatch || e.RefToMessageID != "a1b2c3@sender.example" {
					t.Fatalf("got %+v, %v; want EBMS:0010", pm, err)
				}
				if !strings.Contains(e.Detail, `action "busdox-docid-qns::`) {
					t.Errorf("detail %q", e.Detail)
				}
				return
			}
			if err != nil || pm.ID != c.want {
				t.Fatalf("got %+v, %v; want %s", pm, err, c.want)
			}
		})
	}
}

func TestMatchPModeHintAndTestMessages(t *testing.T) {
	m := defaultTestMessage()
	m.extra = ""
	um := testUserMessage(t, m)
	um.CollaborationInfo.AgreementRef.PMode = "second"
	pm, err := Match([]PMode{{ID: "first", FromPartyID: "0088:5790000436033"}, {ID: "second", ToPartyID: "0088:5790000436040"}}, um)
	if err != nil || pm.ID != "second" {
		t.Fatalf("pmode hint: %+v, %v", pm, err)
	}
	// The hint never beats a more specific P-Mode.
	pm, err = Match([]PMode{{ID: "second"}, {ID: "first", FromPartyID: "0088:5790000436033"}}, um)
	if err != nil || pm.ID != "first" {
		t.Fatalf("pmode hint over specificity: %+v, %v", pm, err)
	}

	m.service, m.serviceType, m.action = TestService, "", TestAction
	test := testUserMessage(t, m)
	if !test.IsTest() {
		t.Fatal("not a test message")
	}
	pmodes := []PMode{{ID: "invoice", Agreement: m.agreement, Service: "urn:fdc:peppol.eu:2017:poacc:billing:01:1.0",
		Action: "invoice", FromPartyID: "0088:5790000436033"}}
	if pm, err := Match(pmodes, test); err != nil || pm.ID != "invoice" {
		t.Fatalf("test message: %+v, %v", pm, err)
	}
	// A test message still has to come from a configured party.
	pmodes[0].FromPartyID = "0088:1"
	if _, err := Match(pmodes, test); CodeOf(err) != CodeProcessingModeMismatch {
		t.Fatalf("test message from unknown party: %v", err)
	}
	if _, err := Match(pmodes, nil); CodeOf(err) != CodeProcessingModeMismatch {
		t.Fatalf("nil user message: %v", err)
	}
}
