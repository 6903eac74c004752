package as4

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/beevik/etree"
)

// parseEnvelope parses soap and returns its eb:Messaging element.
func messagingOf(t *testing.T, soap string) (*Envelope, *etree.Element) {
	t.Helper()
	env, err := ReadMessage("application/soap+xml", strings.NewReader(soap), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	el, err := env.Messaging()
	if err != nil {
		t.Fatal(err)
	}
	return env, el
}

func TestParseMessagingGenerated(t *testing.T) {
	_, el := messagingOf(t, defaultTestMessage().envelope())
	m, err := ParseMessaging(el)
	if err != nil {
		t.Fatal(err)
	}
	um := m.UserMessage
	if um.MessageInfo.MessageID != "a1b2c3@sender.example" ||
		!um.MessageInfo.Timestamp.Equal(time.Date(2024, 5, 1, 10, 0, 0, 123e6, time.UTC)) {
		t.Errorf("MessageInfo %+v", um.MessageInfo)
	}
	if want := (PartyID{Value: "0088:5790000436033", Type: "urn:oasis:names:tc:ebcore:partyid-type:iso6523"}); !reflect.DeepEqual(um.From.PartyIDs, []PartyID{want}) {
		t.Errorf("From %+v", um.From)
	}
	wantProps := []Property{{Name: "originalSender", Type: "iso6523-actorid-upis", Value: "0088:5790000436033"}, {Name: "finalRecipient", Value: "0088:5790000436040"}}
	if !reflect.DeepEqual(um.MessageProperties, wantProps) {
		t.Errorf("MessageProperties %+v", um.MessageProperties)
	}
	pi := um.PayloadInfo[0]
	if pi.Href != "cid:payload-1@sender.example" || pi.MimeType != "application/xml" || pi.CharacterSet != "UTF-8" ||
		pi.CompressionType != "application/gzip" {
		t.Errorf("PartInfo %+v", pi)
	}
	if got := pi.PropertyMap(); !reflect.DeepEqual(got, map[string]string{"MimeType": "application/xml",
		"CompressionType": "application/gzip", "CharacterSet": "UTF-8", "OriginalFileName": "invoice.xml"}) {
		t.Errorf("PropertyMap %v", got)
	}
	if pi.Properties[3].Type != "string" {
		t.Errorf("property type %+v", pi.Properties[3])
	}
}

func TestParseMessagingDefaultNamespaceAndWhitespace(t *testing.T) {
	// Unprefixed elements in the ebMS namespace, pretty-printed text and a
	// comment splitting a value: matched by namespace, text joined as
	// canonical XML sees it.
	soap := `<Envelope xmlns="http://www.w3.org/2003/05/soap-envelope"><Header>
<Messaging xmlns="http://docs.oasis-open.org/ebxml-msg/ebms/v3.0/ns/core/200704/" mpc="urn:mpc:1">
  <UserMessage mpc="urn:mpc:2">
    <MessageInfo>
      <Timestamp> 2024-05-01T12:00:00+02:00 </Timestamp>
      <MessageId>
        abc<!-- split -->def@x
      </MessageId>
    </MessageInfo>
    <PartyInfo>
      <From><PartyId>urn:a</PartyId><PartyId type="t2">b</PartyId><Role>r1</Role></From>
      <To><PartyId>urn:c</PartyId><Role>r2</Role></To>
    </PartyInfo>
    <CollaborationInfo>
      <Service>` + TestService + `</Service><Action>` + TestAction + `</Action><ConversationId>c</ConversationId>
    </CollaborationInfo>
  </UserMessage>
</Messaging></Header><Body/></Envelope>`
	_, el := messagingOf(t, soap)
	m, err := ParseMessaging(el)
	if err != nil {
		t.Fatal(err)
	}
	um := m.UserMessage
	if um.MessageInfo.MessageID != "abcdef@x" || um.MPC != "urn:mpc:2" {
		t.Errorf("MessageId %q, mpc %q", um.MessageInfo.MessageID, um.MPC)
	}
	if !um.MessageInfo.Timestamp.Equal(time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)) || um.MessageInfo.Timestamp.Location() != time.UTC {
		t.Errorf("Timestamp %v", um.MessageInfo.Timestamp)
	}
	if len(um.From.PartyIDs) != 2 || um.From.PartyIDs[1] != (PartyID{Value: "b", Type: "t2"}) {
		t.Errorf("From %+v", um.From)
	}
	if !um.IsTest() {
		t.Error("test service/action not recognised")
	}
	if um.CollaborationInfo.AgreementRef != (AgreementRef{}) {
		t.Errorf("AgreementRef %+v", um.CollaborationInfo.AgreementRef)
	}
}

func TestParseMessagingErrorSignal(t *testing.T) {
	soap := envelopeXML(`<eb:SignalMessage><eb:MessageInfo><eb:Timestamp>2024-05-01T10:00:00Z</eb:Timestamp>`+
		`<eb:MessageId>err-1@x</eb:MessageId><eb:RefToMessageId>orig@y</eb:RefToMessageId></eb:MessageInfo>`+
		`<eb:Error errorCode="EBMS:0101" severity="failure" category="Processing" shortDescription="FailedAuthentication" `+
		`refToMessageInError="orig@y" origin="security"><eb:Description xml:lang="en">bad signature</eb:Description>`+
		`<eb:ErrorDetail>digest of cid:a mismatched</eb:ErrorDetail></eb:Error>`+
		`<eb:Error errorCode="EBMS:0002" severity="warning"/></eb:SignalMessage>`, "")
	_, el := messagingOf(t, soap)
	m, err := ParseMessaging(el)
	if err != nil {
		t.Fatal(err)
	}
	sm := m.SignalMessages[0]
	want := []*Error{
		{Code: "EBMS:0101", Severity: "failure", Category: "Processing", ShortDescription: "FailedAuthentication",
			RefToMessageID: "orig@y", Origin: "security", Description: "bad signature", Detail: "digest of cid:a mismatched"},
		{Code: "EBMS:0002", Severity: "warning"},
	}
	if !reflect.DeepEqual(sm.Errors, want) {
		t.Errorf("errors %+v", sm.Errors)
	}
	if sm.Receipt != nil || sm.MessageInfo.RefToMessageID != "orig@y" {
		t.Errorf("signal %+v", sm)
	}
}

func TestParseMessagingRejects(t *testing.T) {
	mod := func(f func(*testMessage)) string {
		m := defaultTestMessage()
		f(&m)
		return m.envelope()
	}
	repl := func(old, new string) string {
		s := defaultTestMessage().envelope()
		if !strings.Contains(s, old) {
			t.Fatalf("generator lacks %q", old)
		}
		return strings.Replace(s, old, new, 1)
	}
	replAll := func(old, new string) string {
		return strings.ReplaceAll(defaultTestMessage().envelope(), old, new)
	}
	um := defaultTestMessage().userMessageXML()
	signal := func(inner string) string {
		return envelopeXML(`<eb:SignalMessage>`+inner+`</eb:SignalMessage>`, "")
	}
	mi := `<eb:MessageInfo><eb:Timestamp>2024-05-01T10:00:00Z</eb:Timestamp><eb:MessageId>s@x</eb:MessageId></eb:MessageInfo>`
	cases := []struct {
		name, soap, code, ref string
	}{
		{"missing MessageId", mod(func(m *testMessage) { m.messageID = "-" }), CodeInvalidHeader, ""},
		{"empty MessageId", mod(func(m *testMessage) { m.messageID = " " }), CodeInvalidHeader, ""},
		{"MessageId with brackets", mod(func(m *testMessage) { m.messageID = "&lt;a@b&gt;" }), CodeInvalidHeader, ""},
		{"missing Timestamp", mod(func(m *testMessage) { m.timestamp = "-" }), CodeInvalidHeader, "a1b2c3@sender.example"},
		{"bad Timestamp", mod(func(m *testMessage) { m.timestamp = "yesterday" }), CodeInvalidHeader, "a1b2c3@sender.example"},
		{"PartyId without type not URI", mod(func(m *testMessage) { m.fromType = "" }), CodeValueInconsistent, "a1b2c3@sender.example"},
		{"Service without type not URI", mod(func(m *testMessage) { m.serviceType = ""; m.service = "Invoice" }), CodeValueInconsistent, "a1b2c3@sender.example"},
		{"AgreementRef not URI", mod(func(m *testMessage) { m.agreement = "agreement 1" }), CodeValueInconsistent, "a1b2c3@sender.example"},
		{"empty Action", mod(func(m *testMessage) { m.action = "" }), CodeInvalidHeader, "a1b2c3@sender.example"},
		{"missing Role", repl(`<eb:Role>http://docs.oasis-open.org/ebxml-msg/ebms/v3.0/ns/core/200704/initiator</eb:Role>`, ""), CodeInvalidHeader, "a1b2c3@sender.example"},
		{"missing PartyId", repl(`<eb:PartyId type="urn:oasis:names:tc:ebcore:partyid-type:iso6523">0088:5790000436040</eb:PartyId>`, ""), CodeInvalidHeader, "a1b2c3@sender.example"},
		{"missing To", replAll(`eb:To>`, `eb:Foo>`), CodeInvalidHeader, "a1b2c3@sender.example"},
		{"missing PartyInfo", replAll(`eb:PartyInfo>`, `eb:PartyInfoX>`), CodeInvalidHeader, "a1b2c3@sender.example"},
		{"missing ConversationId", repl(`<eb:ConversationId>conv-1</eb:ConversationId>`, ""), CodeInvalidHeader, "a1b2c3@sender.example"},
		{"two Actions", repl(`<eb:ConversationId>`, `<eb:Action>x</eb:Action><eb:ConversationId>`), CodeInvalidHeader, "a1b2c3@sender.example"},
		{"two MessageInfo", repl(`<eb:PartyInfo>`, `<eb:MessageInfo/><eb:PartyInfo>`), CodeInvalidHeader, ""},
		{"Property without name", repl(`<eb:Property name="finalRecipient">`, `<eb:Property>`), CodeInvalidHeader, "a1b2c3@sender.example"},
		{"empty PayloadInfo", mod(func(m *testMessage) { m.partInfo = ""; m.extra = "<eb:PayloadInfo/>" }), CodeInvalidHeader, "a1b2c3@sender.example"},
		{"duplicate href", mod(func(m *testMessage) { m.partInfo = `<eb:PartInfo href="cid:a"/><eb:PartInfo href="cid:a"/>` }), CodeValueInconsistent, "a1b2c3@sender.example"},
		{"foreign element in UserMessage", mod(func(m *testMessage) { m.extra = `<x:Evil xmlns:x="urn:x"/>` }), CodeInvalidHeader, "a1b2c3@sender.example"},
		{"two UserMessages", envelopeXML(um+um, ""), CodeInvalidHeader, ""},
		{"empty Messaging", envelopeXML("", ""), CodeInvalidHeader, ""},
		{"unknown ebMS child", envelopeXML(`<eb:Bogus/>`, ""), CodeInvalidHeader, ""},
		{"too many extension elements", envelopeXML(um+strings.Repeat(`<x:e xmlns:x="urn:x"/>`, maxUnits), ""), CodeInvalidHeader, ""},
		{"signal without MessageInfo", signal(`<eb:Receipt/>`), CodeInvalidHeader, ""},
		{"receipt without RefToMessageId", signal(mi + `<eb:Receipt/>`), CodeInvalidHeader, "s@x"},
		{"two receipts", signal(mi + `<eb:Receipt/><eb:Receipt/>`), CodeInvalidHeader, ""},
		{"error without code", signal(mi + `<eb:Error severity="failure"/>`), CodeInvalidHeader, ""},
		{"error bad severity", signal(mi + `<eb:Error errorCode="EBMS:0004" severity="fatal"/>`), CodeInvalidHeader, ""},
		// Same local names in a look-alike namespace are not ebMS elements.
		{"UserMessage in other namespace", envelopeXML(strings.ReplaceAll(um, "eb:", "ev:"), ""), CodeInvalidHeader, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			soap := c.soap
			if c.name == "UserMessage in other namespace" {
				soap = strings.Replace(soap, `<eb:Messaging `, `<eb:Messaging xmlns:ev="http://docs.oasis-open.org/ebxml-msg/ebms/v3.0/ns/core/200704"  `, 1)
			}
			_, el := messagingOf(t, soap)
			m, err := ParseMessaging(el)
			if err == nil {
				t.Fatalf("accepted: %+v", m)
			}
			e := AsError(err)
			if e.Code != c.code {
				t.Errorf("code %s, want %s (%v)", e.Code, c.code, err)
			}
			if e.RefToMessageID != c.ref {
				t.Errorf("RefToMessageID %q, want %q", e.RefToMessageID, c.ref)
			}
		})
	}
	if _, err := ParseMessaging(etree.NewElement("Messaging")); CodeOf(err) != CodeInvalidHeader {
		t.Errorf("element without namespace: %v", err)
	}
}

func TestResolvePayloads(t *testing.T) {
	bodyPayload := `<inv:Invoice xmlns:inv="urn:inv" xmlns:wsu="` + NSWSU + `" wsu:Id="inv-1"><inv:ID>1</inv:ID></inv:Invoice>`
	att := testPart{cid: "a@x", contentType: "application/octet-stream", body: []byte("A")}
	cases := []struct {
		name, partInfo, body string
		parts                []testPart
		code                 string
	}{
		{"cid ok", `<eb:PartInfo href="cid:a@x"/>`, "", []testPart{att}, ""},
		{"cid case-insensitive scheme", `<eb:PartInfo href="CID:a@x"/>`, "", []testPart{att}, ""},
		{"body by id", `<eb:PartInfo href="#inv-1"/>`, bodyPayload, nil, ""},
		{"body without href", `<eb:PartInfo/>`, bodyPayload, nil, ""},
		{"body and attachment", `<eb:PartInfo/><eb:PartInfo href="cid:a@x"/>`, bodyPayload, []testPart{att}, ""},
		{"missing attachment", `<eb:PartInfo href="cid:b@x"/>`, "", []testPart{att}, CodeExternalPayloadError},
		{"unreferenced attachment", `<eb:PartInfo href="cid:a@x"/>`, "", []testPart{att, {cid: "extra@x", contentType: "x/y", body: []byte("E")}}, CodeExternalPayloadError},
		{"attachments without PayloadInfo", "", "", []testPart{att}, CodeExternalPayloadError},
		{"external http", `<eb:PartInfo href="http://evil.example/payload"/>`, "", nil, CodeExternalPayloadError},
		{"empty body", `<eb:PartInfo/>`, "", nil, CodeExternalPayloadError},
		{"unknown id", `<eb:PartInfo href="#nope"/>`, bodyPayload, nil, CodeExternalPayloadError},
		{"body not referenced", `<eb:PartInfo href="cid:a@x"/>`, bodyPayload, []testPart{att}, CodeValueInconsistent},
		{"duplicate id", `<eb:PartInfo href="#inv-1"/>`, bodyPayload + bodyPayload, nil, CodeExternalPayloadError},
		{"bad escape", `<eb:PartInfo href="cid:a%zz"/>`, "", nil, CodeExternalPayloadError},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := defaultTestMessage()
			m.partInfo, m.body = c.partInfo, c.body
			ct, raw := multipartMessage("rb", m.envelope(), c.parts...)
			env, err := ReadMessage(ct, strings.NewReader(string(raw)), Limits{})
			if err != nil {
				t.Fatal(err)
			}
			defer env.Close()
			el, _ := env.Messaging()
			msg, err := ParseMessaging(el)
			if err != nil {
				t.Fatal(err)
			}
			pls, err := ResolvePayloads(env, msg.UserMessage)
			if got := CodeOf(err); got != c.code {
				t.Fatalf("code %q, want %q (%v)", got, c.code, err)
			}
			if err != nil {
				if AsError(err).RefToMessageID != "a1b2c3@sender.example" {
					t.Errorf("RefToMessageID %q", AsError(err).RefToMessageID)
				}
				return
			}
			for _, p := range pls {
				switch {
				case p.Part != nil:
					if string(partBytes(t, p.Part)) != "A" {
						t.Errorf("attachment %q", partBytes(t, p.Part))
					}
				case p.Element == nil || p.Element.Tag != "Invoice":
					t.Errorf("body payload %v", p.Element)
				}
			}
		})
	}
}

func TestErrorConstructors(t *testing.T) {
	cases := []struct {
		make                       func(string, error) *Error
		code, short, sev, category string
	}{
		{ValueNotRecognized, "EBMS:0001", "ValueNotRecognized", "failure", "Content"},
		{FeatureNotSupported, "EBMS:0002", "FeatureNotSupported", "warning", "Content"},
		{ValueInconsistent, "EBMS:0003", "ValueInconsistent", "failure", "Content"},
		{Other, "EBMS:0004", "Other", "failure", "Content"},
		{ConnectionFailure, "EBMS:0005", "ConnectionFailure", "failure", "Communication"},
		{EmptyMessagePartitionChannel, "EBMS:0006", "EmptyMessagePartitionChannel", "warning", "Communication"},
		{MimeInconsistency, "EBMS:0007", "MimeInconsistency", "failure", "Unpackaging"},
		{FeatureNotSupportedInconsistency, "EBMS:0008", "FeatureNotSupported", "failure", "Unpackaging"},
		{InvalidHeader, "EBMS:0009", "InvalidHeader", "failure", "Unpackaging"},
		{ProcessingModeMismatch, "EBMS:0010", "ProcessingModeMismatch", "failure", "Processing"},
		{ExternalPayloadError, "EBMS:0011", "ExternalPayloadError", "failure", "Content"},
		{FailedAuthentication, "EBMS:0101", "FailedAuthentication", "failure", "Processing"},
		{FailedDecryption, "EBMS:0102", "FailedDecryption", "failure", "Processing"},
		{PolicyNoncompliance, "EBMS:0103", "PolicyNoncompliance", "failure", "Processing"},
		{DysfunctionalReliability, "EBMS:0201", "DysfunctionalReliability", "failure", "Processing"},
		{DeliveryFailure, "EBMS:0202", "DeliveryFailure", "failure", "Communication"},
		{MissingReceipt, "EBMS:0301", "MissingReceipt", "failure", "Communication"},
		{InvalidReceipt, "EBMS:0302", "InvalidReceipt", "failure", "Communication"},
		{DecompressionFailure, "EBMS:0303", "DecompressionFailure", "failure", "Communication"},
	}
	for _, c := range cases {
		e := c.make("detail", errEOF)
		if e.Code != c.code || e.ShortDescription != c.short || e.Severity != c.sev || e.Category != c.category || e.Description == "" {
			t.Errorf("%s: %+v", c.code, e)
		}
		if e.Error() != "as4: "+c.code+" "+c.short+": detail: EOF" || e.Unwrap() != errEOF {
			t.Errorf("%s: Error() %q", c.code, e.Error())
		}
	}
	if AsError(nil) != nil || AsError(errEOF).Code != CodeOther || CodeOf(errEOF) != "" {
		t.Error("AsError/CodeOf on plain errors")
	}
}
