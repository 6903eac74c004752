package receipt

import (
	"bytes"
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/beevik/etree"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/internal/interop"
)

const (
	algExcC14N = "http://www.w3.org/2001/10/xml-exc-c14n#"
	algSHA256  = "http://www.w3.org/2001/04/xmlenc#sha256"
	algSwA     = "http://docs.oasis-open.org/wss/oasis-wss-SwAProfile-1.1#Attachment-Content-Signature-Transform"
)

var fixedOpts = Options{
	Now:   func() time.Time { return time.Date(2024, 1, 2, 3, 4, 5, 6e6, time.FixedZone("CET", 3600)) },
	NewID: func() string { return "id1" },
	Host:  "gw.example",
}

// phase4Body returns the SOAP envelope of an interop receipt.
func phase4Body(t testing.TB, file string) []byte {
	t.Helper()
	raw := interop.Read(t, "as4/"+file)
	if strings.HasSuffix(file, ".as4in") {
		i := bytes.Index(raw, []byte("\n\n"))
		if i < 0 {
			t.Fatal("no header block")
		}
		raw = raw[i+2:]
	}
	return raw
}

func parseDoc(t testing.TB, b []byte) *etree.Document {
	t.Helper()
	env, err := as4.ReadMessage("application/soap+xml", bytes.NewReader(b), as4.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return env.Doc
}

func TestParsePhase4Receipts(t *testing.T) {
	cases := []struct {
		file, messageID, refTo string
		ts                     time.Time
		refs                   []Reference
	}{
		{"helger.as4in", "1384cf77-2de9-4303-a4e7-ca935a20f4fd@phase4", "3b3775c9-e88d-47f9-be5a-8e045ca2bc07@phase4",
			time.Date(2022, 3, 7, 17, 36, 50, 173e6, time.UTC), []Reference{
				{"#phase4-msg-9cb62f4d-7132-4b52-93cf-79aa82d8c12f", algSHA256, "eBoEt57eL9ZtoOKfIC472DZMSSvngRaCoECibk7bKdU=", []Transform{{Algorithm: algExcC14N}}},
				{"#id-0895ace8-af3b-410f-85ec-0227b4f97cd9", algSHA256, "CNchdLyH1dNC8hfy4BzJRm3ftCfbOZc8nyGrnshGqcw=", []Transform{{Algorithm: algExcC14N}}},
				{"cid:phase4-att-8f153eee-52ce-4a39-96a6-2a13296991bb@cid", algSHA256, "QqSdtJKU3B3E1EoRPoVrCfgkGhfUaGNDmKdyA4WdJ+A=", []Transform{{Algorithm: algSwA}}},
			}},
		{"TestReceipt12.xml", "d36e26c0-5d4d-4950-ad81-dc620681b5f9@phase4", "035e0a83-6dc5-427b-bcee-483475c65153@phase4",
			time.Date(2025, 12, 5, 14, 3, 40, 878e6, time.UTC), []Reference{
				{"#phase4-msg-3adda884-f9be-419a-b918-f4fb3e97f9c4", algSHA256, "oIh7yNKoasQ6p5MN/n7xCtrcZ0NNqjBm2j5GDoeBgH8=", []Transform{{Algorithm: algExcC14N, PrefixList: "S12"}}},
				{"#id-ed836bb0-6951-469a-9ffb-320390ae439d", algSHA256, "UvmB8GV6dfPXLWE6KiZ21jWhJSYwxfn6p0k5NTSgO0A=", []Transform{{Algorithm: algExcC14N}}},
				{"cid:phase4-att-a9297596-e9df-4740-9245-2c069712326f@cid", algSHA256, "5lPGsYkVCwAcvC3VbzAfez3nffzw59rtK/SvFM9W1eI=", []Transform{{Algorithm: algSwA}}},
			}},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			r, err := ParseReceipt(parseDoc(t, phase4Body(t, c.file)))
			if err != nil {
				t.Fatal(err)
			}
			if r.MessageID != c.messageID || r.RefToMessageID != c.refTo || !r.Timestamp.Equal(c.ts) {
				t.Errorf("MessageInfo %q %q %v", r.MessageID, r.RefToMessageID, r.Timestamp)
			}
			if !reflect.DeepEqual(r.References, c.refs) {
				t.Errorf("references\n got %+v\nwant %+v", r.References, c.refs)
			}
			if r.UserMessage != nil || r.Signal == nil || r.Signal.Receipt == nil {
				t.Error("signal fields")
			}
			if err := r.Covers(c.refs); err != nil {
				t.Errorf("Covers(own refs): %v", err)
			}
			if err := r.Covers(c.refs[:1]); err != nil {
				t.Errorf("Covers(subset): %v", err)
			}
			changed := append([]Reference{}, c.refs...)
			changed[2].DigestValue = "AAAA" + changed[2].DigestValue[4:]
			err = r.Covers(changed)
			if as4.CodeOf(err) != as4.CodeInvalidReceipt || !strings.Contains(err.Error(), changed[2].URI) {
				t.Errorf("Covers(changed digest) = %v", err)
			}
			if as4.AsError(err).RefToMessageID != c.refTo {
				t.Errorf("InvalidReceipt RefToMessageID %q", as4.AsError(err).RefToMessageID)
			}
		})
	}
}

// TestBuildReceiptMatchesPhase4 rebuilds the NonRepudiationInformation of
// helger.as4in from its references: the bytes must equal phase4's.
func TestBuildReceiptMatchesPhase4(t *testing.T) {
	body := phase4Body(t, "helger.as4in")
	r, err := ParseReceipt(parseDoc(t, body))
	if err != nil {
		t.Fatal(err)
	}
	um := &as4.UserMessage{MessageInfo: as4.MessageInfo{MessageID: r.RefToMessageID}}
	s, err := BuildReceipt(um, r.References, fixedOpts)
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.Doc.WriteToBytes()
	if err != nil {
		t.Fatal(err)
	}
	nri := regexp.MustCompile(`<ebbp:NonRepudiationInformation>.*</ebbp:NonRepudiationInformation>`)
	want, got := nri.Find(body), nri.Find(out)
	if want == nil || !bytes.Equal(got, want) {
		t.Errorf("NonRepudiationInformation differs\n got %s\nwant %s", got, want)
	}
}

func TestBuildReceiptExact(t *testing.T) {
	um := &as4.UserMessage{MessageInfo: as4.MessageInfo{MessageID: "orig@x"}}
	refs := []Reference{
		{URI: "#msg-1", DigestMethod: algSHA256, DigestValue: "AAAA", Transforms: []Transform{{Algorithm: algExcC14N, PrefixList: "S12"}}},
		{URI: "cid:a@x", DigestMethod: algSHA256, DigestValue: "BBBB", Transforms: []Transform{{Algorithm: algSwA}}},
	}
	s, err := BuildReceipt(um, refs, fixedOpts)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Doc.WriteToString()
	if err != nil {
		t.Fatal(err)
	}
	want := `<?xml version="1.0" encoding="UTF-8"?><S12:Envelope xmlns:S12="http://www.w3.org/2003/05/soap-envelope"><S12:Header>` +
		`<eb:Messaging xmlns:eb="http://docs.oasis-open.org/ebxml-msg/ebms/v3.0/ns/core/200704/" xmlns:ebbp="http://docs.oasis-open.org/ebxml-bp/ebbp-signals-2.0" ` +
		`xmlns:ds="http://www.w3.org/2000/09/xmldsig#" xmlns:wsu="http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd" ` +
		`S12:mustUnderstand="true" wsu:Id="msg-id1"><eb:SignalMessage><eb:MessageInfo><eb:Timestamp>2024-01-02T02:04:05.006Z</eb:Timestamp>` +
		`<eb:MessageId>id1@gw.example</eb:MessageId><eb:RefToMessageId>orig@x</eb:RefToMessageId></eb:MessageInfo><eb:Receipt>` +
		`<ebbp:NonRepudiationInformation><ebbp:MessagePartNRInformation><ds:Reference URI="#msg-1"><ds:Transforms>` +
		`<ds:Transform Algorithm="http://www.w3.org/2001/10/xml-exc-c14n#"><ec:InclusiveNamespaces xmlns:ec="http://www.w3.org/2001/10/xml-exc-c14n#" PrefixList="S12"/>` +
		`</ds:Transform></ds:Transforms><ds:DigestMethod Algorithm="http://www.w3.org/2001/04/xmlenc#sha256"/><ds:DigestValue>AAAA</ds:DigestValue></ds:Reference>` +
		`</ebbp:MessagePartNRInformation><ebbp:MessagePartNRInformation><ds:Reference URI="cid:a@x"><ds:Transforms>` +
		`<ds:Transform Algorithm="http://docs.oasis-open.org/wss/oasis-wss-SwAProfile-1.1#Attachment-Content-Signature-Transform"/></ds:Transforms>` +
		`<ds:DigestMethod Algorithm="http://www.w3.org/2001/04/xmlenc#sha256"/><ds:DigestValue>BBBB</ds:DigestValue></ds:Reference>` +
		`</ebbp:MessagePartNRInformation></ebbp:NonRepudiationInformation></eb:Receipt></eb:SignalMessage></eb:Messaging></S12:Header>` +
		`<S12:Body xmlns:wsu="http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd" wsu:Id="body-id1"/></S12:Envelope>`
	if got != want {
		t.Errorf("receipt\n got %s\nwant %s", got, want)
	}
	if s.MessageID != "id1@gw.example" || s.MessagingID != "msg-id1" || s.BodyID != "body-id1" {
		t.Errorf("ids %+v", s)
	}

	// Round trip through bytes, the MIME reader and ParseReceipt.
	r, err := ParseReceipt(parseDoc(t, []byte(got)))
	if err != nil {
		t.Fatal(err)
	}
	if r.MessageID != "id1@gw.example" || r.RefToMessageID != "orig@x" || !r.Timestamp.Equal(time.Date(2024, 1, 2, 2, 4, 5, 6e6, time.UTC)) {
		t.Errorf("parsed %+v", r)
	}
	if !reflect.DeepEqual(r.References, refs) {
		t.Errorf("references %+v", r.References)
	}
	if err := r.Covers(refs); err != nil {
		t.Error(err)
	}
	// Digest text is compared as bytes: line breaks in base64 do not matter.
	if err := r.Covers([]Reference{{URI: "cid:a@x", DigestMethod: algSHA256, DigestValue: "BB\n BB"}}); err != nil {
		t.Error(err)
	}
	for name, ref := range map[string]Reference{
		"other uri":    {URI: "cid:b@x", DigestMethod: algSHA256, DigestValue: "BBBB"},
		"other method": {URI: "cid:a@x", DigestMethod: "http://www.w3.org/2001/04/xmlenc#sha512", DigestValue: "BBBB"},
		"bad base64":   {URI: "cid:a@x", DigestMethod: algSHA256, DigestValue: "!!!!"},
	} {
		if err := r.Covers([]Reference{refs[0], ref}); as4.CodeOf(err) != as4.CodeInvalidReceipt {
			t.Errorf("%s: %v", name, err)
		}
	}

	// Same inputs, same bytes.
	s2, _ := BuildReceipt(um, refs, fixedOpts)
	if again, _ := s2.Doc.WriteToString(); again != got {
		t.Error("BuildReceipt is not deterministic")
	}
}

func TestBuildReceiptUnsignedMessage(t *testing.T) {
	// An unsigned user message whose prefix (eb3) is declared on the
	// envelope: the copy must keep its namespace in the receipt.
	soap := `<S:Envelope xmlns:S="http://www.w3.org/2003/05/soap-envelope" xmlns:eb3="` + as4.NSEbMS + `"><S:Header><eb3:Messaging>` +
		`<eb3:UserMessage><eb3:MessageInfo><eb3:Timestamp>2024-01-01T00:00:00Z</eb3:Timestamp><eb3:MessageId>u@x</eb3:MessageId></eb3:MessageInfo>` +
		`<eb3:PartyInfo><eb3:From><eb3:PartyId>urn:a</eb3:PartyId><eb3:Role>r</eb3:Role></eb3:From><eb3:To><eb3:PartyId>urn:b</eb3:PartyId><eb3:Role>r</eb3:Role></eb3:To></eb3:PartyInfo>` +
		`<eb3:CollaborationInfo><eb3:Service>urn:s</eb3:Service><eb3:Action>a</eb3:Action><eb3:ConversationId>c</eb3:ConversationId></eb3:CollaborationInfo>` +
		`</eb3:UserMessage></eb3:Messaging></S:Header><S:Body/></S:Envelope>`
	env, err := as4.ReadMessage("application/soap+xml", strings.NewReader(soap), as4.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	el, _ := env.Messaging()
	m, err := as4.ParseMessaging(el)
	if err != nil {
		t.Fatal(err)
	}
	s, err := BuildReceipt(m.UserMessage, nil, fixedOpts)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := s.Doc.WriteToBytes()
	if !bytes.Contains(out, []byte(`<eb:Receipt><eb3:UserMessage xmlns:eb3="`+as4.NSEbMS+`">`)) {
		t.Errorf("receipt %s", out)
	}
	r, err := ParseReceipt(parseDoc(t, out))
	if err != nil {
		t.Fatal(err)
	}
	if r.UserMessage == nil || len(r.References) != 0 || r.RefToMessageID != "u@x" {
		t.Fatalf("parsed %+v", r)
	}
	if um, err := as4.ParseMessaging(wrapMessaging(r.UserMessage)); err != nil || um.UserMessage.MessageInfo.MessageID != "u@x" {
		t.Errorf("copied user message does not parse: %v", err)
	}
	if err := r.Covers(nil); err != nil {
		t.Errorf("Covers(nil): %v", err)
	}
	if err := r.Covers([]Reference{{URI: "#x", DigestMethod: algSHA256, DigestValue: "AAAA"}}); as4.CodeOf(err) != as4.CodeInvalidReceipt {
		t.Errorf("receipt without NRI covers a reference: %v", err)
	}
}

// wrapMessaging puts a copy of el in a fresh eb:Messaging element.
func wrapMessaging(el *etree.Element) *etree.Element {
	m := etree.NewElement("eb:Messaging")
	m.CreateAttr("xmlns:eb", as4.NSEbMS)
	m.AddChild(copyWithNamespaces(el))
	return m
}

func TestBuildErrorExact(t *testing.T) {
	errs := []*as4.Error{
		as4.FailedAuthentication("digest mismatch for cid:a@x", errors.New("internal: do not send")),
		as4.ValueInconsistent("", nil).WithRef("other@x"),
	}
	s, err := BuildError(errs, "orig@x", fixedOpts)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := s.Doc.WriteToString()
	want := `<?xml version="1.0" encoding="UTF-8"?><S12:Envelope xmlns:S12="http://www.w3.org/2003/05/soap-envelope"><S12:Header>` +
		`<eb:Messaging xmlns:eb="http://docs.oasis-open.org/ebxml-msg/ebms/v3.0/ns/core/200704/" xmlns:ebbp="http://docs.oasis-open.org/ebxml-bp/ebbp-signals-2.0" ` +
		`xmlns:ds="http://www.w3.org/2000/09/xmldsig#" xmlns:wsu="http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd" ` +
		`S12:mustUnderstand="true" wsu:Id="msg-id1"><eb:SignalMessage><eb:MessageInfo><eb:Timestamp>2024-01-02T02:04:05.006Z</eb:Timestamp>` +
		`<eb:MessageId>id1@gw.example</eb:MessageId><eb:RefToMessageId>orig@x</eb:RefToMessageId></eb:MessageInfo>` +
		`<eb:Error errorCode="EBMS:0101" severity="failure" shortDescription="FailedAuthentication" category="Processing" refToMessageInError="orig@x">` +
		`<eb:Description xml:lang="en">The signature in the WS-Security header could not be validated.</eb:Description>` +
		`<eb:ErrorDetail>digest mismatch for cid:a@x</eb:ErrorDetail></eb:Error>` +
		`<eb:Error errorCode="EBMS:0003" severity="failure" shortDescription="ValueInconsistent" category="Content" refToMessageInError="other@x">` +
		`<eb:Description xml:lang="en">The message is well formed and schema valid, but an element or attribute value is inconsistent with other values, with the processing mode, or with the rules of ebMS 3.0.</eb:Description>` +
		`</eb:Error></eb:SignalMessage></eb:Messaging></S12:Header>` +
		`<S12:Body xmlns:wsu="http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd" wsu:Id="body-id1"/></S12:Envelope>`
	if got != want {
		t.Errorf("error signal\n got %s\nwant %s", got, want)
	}
	if strings.Contains(got, "internal") {
		t.Error("internal cause leaked")
	}

	// Parsed back, the errors are what was built (minus the internal cause).
	doc := parseDoc(t, []byte(got))
	env, _ := as4.EnvelopeFromDocument(doc)
	el, _ := env.Messaging()
	m, err := as4.ParseMessaging(el)
	if err != nil {
		t.Fatal(err)
	}
	parsed := m.SignalMessages[0].Errors
	for i, e := range errs {
		w := *e
		w.Err = nil
		if w.RefToMessageID == "" {
			w.RefToMessageID = "orig@x"
		}
		if !reflect.DeepEqual(*parsed[i], w) {
			t.Errorf("error %d\n got %+v\nwant %+v", i, *parsed[i], w)
		}
	}
	_, err = ParseReceipt(doc)
	var se *SignalError
	if !errors.As(err, &se) || len(se.Errors) != 2 || se.RefToMessageID != "orig@x" ||
		!strings.Contains(err.Error(), "EBMS:0101 FailedAuthentication") {
		t.Errorf("ParseReceipt on error signal: %v", err)
	}

	// Without a reference the MessageInfo has no RefToMessageId.
	s, err = BuildError([]*as4.Error{as4.InvalidHeader("unreadable", nil)}, "", fixedOpts)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := s.Doc.WriteToString()
	if strings.Contains(out, "RefToMessageId") || strings.Contains(out, "refToMessageInError") {
		t.Errorf("unexpected reference: %s", out)
	}
}

func TestBuildRejects(t *testing.T) {
	um := &as4.UserMessage{MessageInfo: as4.MessageInfo{MessageID: "orig@x"}}
	ref := []Reference{{URI: "#a", DigestMethod: algSHA256, DigestValue: "AAAA"}}
	if _, err := BuildReceipt(nil, ref, fixedOpts); err == nil {
		t.Error("nil user message")
	}
	if _, err := BuildReceipt(&as4.UserMessage{}, ref, fixedOpts); err == nil {
		t.Error("no message id")
	}
	if _, err := BuildReceipt(um, nil, fixedOpts); err == nil {
		t.Error("no refs and no element")
	}
	if _, err := BuildReceipt(um, []Reference{{URI: "#a", DigestMethod: algSHA256}}, fixedOpts); err == nil {
		t.Error("reference without digest")
	}
	bad := fixedOpts
	bad.NewID = func() string { return "a:b" }
	if _, err := BuildReceipt(um, ref, bad); err == nil {
		t.Error("id that is not an NCName part")
	}
	if _, err := BuildError(nil, "x", fixedOpts); err == nil {
		t.Error("no errors")
	}
	if _, err := BuildError([]*as4.Error{{Code: "EBMS:0004"}}, "x", fixedOpts); err == nil {
		t.Error("error without severity")
	}
	// Defaults: random UUID ids, current time.
	s, err := BuildReceipt(um, ref, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}@gateway$`).MatchString(s.MessageID) {
		t.Errorf("default message id %q", s.MessageID)
	}
	s2, _ := BuildReceipt(um, ref, Options{})
	if s2.MessageID == s.MessageID {
		t.Error("default ids repeat")
	}
}

func TestParseReceiptRejects(t *testing.T) {
	head := `<S:Envelope xmlns:S="http://www.w3.org/2003/05/soap-envelope"><S:Header><eb:Messaging xmlns:eb="` + as4.NSEbMS +
		`" xmlns:ebbp="` + as4.NSEbbp + `" xmlns:ds="` + as4.NSDSig + `">`
	tail := `</eb:Messaging></S:Header><S:Body/></S:Envelope>`
	mi := `<eb:MessageInfo><eb:Timestamp>2024-01-01T00:00:00Z</eb:Timestamp><eb:MessageId>r@x</eb:MessageId><eb:RefToMessageId>o@x</eb:RefToMessageId></eb:MessageInfo>`
	ref := `<ds:Reference URI="#a"><ds:DigestMethod Algorithm="` + algSHA256 + `"/><ds:DigestValue>AAAA</ds:DigestValue></ds:Reference>`
	signal := func(receipt string) string {
		return head + `<eb:SignalMessage>` + mi + receipt + `</eb:SignalMessage>` + tail
	}
	cases := map[string]struct {
		soap     string
		sentinel error
		code     string
	}{
		"pull request only":  {head + `<eb:SignalMessage>` + mi + `<eb:PullRequest/></eb:SignalMessage>` + tail, ErrNotReceipt, ""},
		"empty receipt":      {signal(`<eb:Receipt/>`), ErrNotReceipt, ""},
		"vendor only":        {signal(`<eb:Receipt><x xmlns="urn:x"/></eb:Receipt>`), ErrNotReceipt, ""},
		"empty NRI":          {signal(`<eb:Receipt><ebbp:NonRepudiationInformation/></eb:Receipt>`), ErrNotReceipt, ""},
		"two NRI":            {signal(`<eb:Receipt><ebbp:NonRepudiationInformation><ebbp:MessagePartNRInformation>` + ref + `</ebbp:MessagePartNRInformation></ebbp:NonRepudiationInformation><ebbp:NonRepudiationInformation/></eb:Receipt>`), ErrNotReceipt, ""},
		"two refs in entry":  {signal(`<eb:Receipt><ebbp:NonRepudiationInformation><ebbp:MessagePartNRInformation>` + ref + ref + `</ebbp:MessagePartNRInformation></ebbp:NonRepudiationInformation></eb:Receipt>`), ErrNotReceipt, ""},
		"reference no URI":   {signal(`<eb:Receipt><ebbp:NonRepudiationInformation><ebbp:MessagePartNRInformation><ds:Reference><ds:DigestMethod Algorithm="a"/><ds:DigestValue>AAAA</ds:DigestValue></ds:Reference></ebbp:MessagePartNRInformation></ebbp:NonRepudiationInformation></eb:Receipt>`), ErrNotReceipt, ""},
		"reference no value": {signal(`<eb:Receipt><ebbp:NonRepudiationInformation><ebbp:MessagePartNRInformation><ds:Reference URI="#a"><ds:DigestMethod Algorithm="a"/></ds:Reference></ebbp:MessagePartNRInformation></ebbp:NonRepudiationInformation></eb:Receipt>`), ErrNotReceipt, ""},
		"two receipts":       {head + `<eb:SignalMessage>` + mi + `<eb:Receipt/></eb:SignalMessage><eb:SignalMessage>` + mi + `<eb:Receipt/></eb:SignalMessage>` + tail, ErrNotReceipt, ""},
		"no RefToMessageId":  {strings.Replace(signal(`<eb:Receipt/>`), `<eb:RefToMessageId>o@x</eb:RefToMessageId>`, "", 1), nil, as4.CodeInvalidHeader},
		"user message":       {head + `<eb:UserMessage/>` + tail, nil, as4.CodeInvalidHeader},
		"no messaging":       {`<S:Envelope xmlns:S="http://www.w3.org/2003/05/soap-envelope"><S:Header/><S:Body/></S:Envelope>`, nil, as4.CodeInvalidHeader},
		"too many entries": {signal(`<eb:Receipt><ebbp:NonRepudiationInformation>` +
			strings.Repeat(`<ebbp:MessagePartNRInformation>`+ref+`</ebbp:MessagePartNRInformation>`, maxChildren+1) +
			`</ebbp:NonRepudiationInformation></eb:Receipt>`), ErrNotReceipt, ""},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			r, err := ParseReceipt(parseDoc(t, []byte(c.soap)))
			if err == nil {
				t.Fatalf("accepted %+v", r)
			}
			if c.sentinel != nil && !errors.Is(err, c.sentinel) {
				t.Errorf("%v does not wrap %v", err, c.sentinel)
			}
			if c.code != "" && as4.CodeOf(err) != c.code {
				t.Errorf("code %q (%v), want %s", as4.CodeOf(err), err, c.code)
			}
		})
	}
	if _, err := ParseReceipt(etree.NewDocument()); as4.CodeOf(err) != as4.CodeInvalidHeader {
		t.Errorf("empty document: %v", err)
	}
	// A MessagePartIdentifier entry next to a reference is skipped.
	r, err := ParseReceipt(parseDoc(t, []byte(signal(`<eb:Receipt><ebbp:NonRepudiationInformation><ebbp:MessagePartNRInformation>`+
		`<ebbp:MessagePartIdentifier>x</ebbp:MessagePartIdentifier></ebbp:MessagePartNRInformation><ebbp:MessagePartNRInformation>`+ref+
		`</ebbp:MessagePartNRInformation></ebbp:NonRepudiationInformation></eb:Receipt>`))))
	if err != nil || len(r.References) != 1 {
		t.Fatalf("MessagePartIdentifier entry: %+v, %v", r, err)
	}
}
