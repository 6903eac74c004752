package as4

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/internal/interop"
)

// holodeckContentType is the Content-Type the origin's unit test uses for
// as4-encrypted-signed-issuerserial.as4 (interop README).
const holodeckContentType = `multipart/related; boundary="MIMEBoundary_416ba07b9ac392cc88fdb1c2ed23ba5e2e6d64fdf13325f1"; type="application/soap+xml"; start="<0.716ba07b9ac392cc88fdb1c2ed23ba5e2e6d64fdf13325f1@apache.org>"`

const (
	holodeckCID1 = "b545c3a0-e57f-46aa-862f-381eb4b7009-291596031@CLT-SMOREELS.mshome.net"
	holodeckCID2 = "b545c3a0-e57f-46aa-862f-381eb4b7009-1650194442@CLT-SMOREELS.mshome.net"
)

// splitHTTP drops the HTTP header block of a captured response (LF or CRLF).
func splitHTTP(t testing.TB, raw []byte) (contentType string, body []byte) {
	t.Helper()
	sep := []byte("\n\n")
	i := bytes.Index(raw, sep)
	if j := bytes.Index(raw, []byte("\r\n\r\n")); j >= 0 && (i < 0 || j < i) {
		i, sep = j, []byte("\r\n\r\n")
	}
	if i < 0 {
		t.Fatal("no header block")
	}
	for _, line := range strings.Split(string(raw[:i]), "\n") {
		k, v, ok := strings.Cut(strings.TrimRight(line, "\r"), ":")
		if ok && strings.EqualFold(k, "Content-Type") {
			contentType = strings.TrimSpace(v)
		}
	}
	return contentType, raw[i+len(sep):]
}

func TestReadHolodeckMessage(t *testing.T) {
	raw := interop.Read(t, "as4/as4-encrypted-signed-issuerserial.as4")
	env, err := ReadMessage(holodeckContentType, bytes.NewReader(raw), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	if env.SOAPVersion != SOAP12 {
		t.Errorf("SOAP version %s", env.SOAPVersion)
	}
	if env.Root.ContentID != "0.716ba07b9ac392cc88fdb1c2ed23ba5e2e6d64fdf13325f1@apache.org" {
		t.Errorf("root Content-ID %q", env.Root.ContentID)
	}
	if len(env.Root.Body) != 8335 {
		t.Errorf("root part %d bytes, want 8335", len(env.Root.Body))
	}
	if got := env.Root.ContentType(); got != "application/soap+xml; charset=UTF-8" {
		t.Errorf("root Content-Type %q", got)
	}
	if len(env.Attachments) != 2 {
		t.Fatalf("%d attachments, want 2", len(env.Attachments))
	}
	for i, want := range []struct {
		cid  string
		size int
	}{{holodeckCID1, 296413}, {holodeckCID2, 192}} {
		a := env.Attachments[i]
		if a.ContentID != want.cid || len(partBytes(t, &a)) != want.size {
			t.Errorf("attachment %d: <%s> %d bytes, want <%s> %d", i, a.ContentID, len(partBytes(t, &a)), want.cid, want.size)
		}
		if a.ContentType() != "application/octet-stream" || a.Header.Get("Content-Transfer-Encoding") != "binary" {
			t.Errorf("attachment %d headers %v", i, a.Header)
		}
	}
	// 12-byte IV + ciphertext + 16-byte tag (quirk 7): the body bytes are
	// exactly those between the part headers and the next boundary.
	idx := bytes.Index(raw, []byte("Content-ID: <"+holodeckCID2+">\r\n\r\n"))
	if idx < 0 || !bytes.Equal(raw[idx+len("Content-ID: <"+holodeckCID2+">\r\n\r\n"):][:192], partBytes(t, &env.Attachments[1])) {
		t.Error("second attachment bytes differ from the file")
	}

	el, err := env.Messaging()
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := Attr(el, NSWSU, "Id"); id != "id-501d4b2b-029fbe44-c3b9-4956-8cab-dc1edff20247" {
		t.Errorf("Messaging wsu:Id %q", id)
	}
	if mu, _ := Attr(el, NSSOAP12, "mustUnderstand"); mu != "true" {
		t.Errorf("mustUnderstand %q", mu)
	}
	m, err := ParseMessaging(el)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.SignalMessages) != 0 || m.UserMessage == nil {
		t.Fatalf("want one user message, got %+v", m)
	}
	um := m.UserMessage
	want := &UserMessage{
		Element: um.Element,
		MessageInfo: MessageInfo{
			Timestamp: time.Date(2018, 12, 19, 8, 56, 26, 657e6, time.UTC),
			MessageID: "b545c3a0-e57f-46aa-862f-381eb4b70097@CLT-SMOREELS.mshome.net",
		},
		From: Party{PartyIDs: []PartyID{{Value: "org:holodeckb2b:example:company:A"}}, Role: "Sender"},
		To:   Party{PartyIDs: []PartyID{{Value: "org:eu:europa:as4:example"}}, Role: "Receiver"},
		CollaborationInfo: CollaborationInfo{
			AgreementRef:   AgreementRef{Value: "http://agreements.holodeckb2b.org/examples/agreement0", PMode: "8.3.8-pmode"},
			Service:        Service{Value: "Test", Type: "org:holodeckb2b:services"},
			Action:         "StoreMessage",
			ConversationID: "org:holodeckb2b:test:conversation",
		},
		PayloadInfo: []PartInfo{
			{
				Href:            "cid:" + holodeckCID1,
				Properties:      []Property{{Name: "CompressionType", Value: "application/gzip"}, {Name: "MimeType", Value: "image/jpeg"}},
				MimeType:        "image/jpeg",
				CompressionType: "application/gzip",
			},
			{
				Href:            "cid:" + holodeckCID2,
				Properties:      []Property{{Name: "CompressionType", Value: "application/gzip"}, {Name: "MimeType", Value: "application/xml"}},
				MimeType:        "application/xml",
				CompressionType: "application/gzip",
			},
		},
	}
	if !reflect.DeepEqual(um, want) {
		t.Errorf("user message\n got %+v\nwant %+v", *um, *want)
	}
	if um.IsTest() {
		t.Error("not a test message")
	}
	if !Is(um.Element, NSEbMS, "UserMessage") || um.Element.Parent() != el {
		t.Error("Element does not point into the parsed eb:Messaging")
	}

	pls, err := ResolvePayloads(env, um)
	if err != nil {
		t.Fatal(err)
	}
	if len(pls) != 2 || pls[0].Part != &env.Attachments[0] || pls[1].Part != &env.Attachments[1] {
		t.Errorf("payloads %+v", pls)
	}

	pm, err := Match([]PMode{
		{ID: "other", Service: "Test", Action: "Other"},
		{ID: "holodeck", Agreement: "http://agreements.holodeckb2b.org/examples/agreement0", Service: "Test",
			ServiceType: "org:holodeckb2b:services", Action: "StoreMessage",
			FromPartyID: "org:holodeckb2b:example:company:A", ToPartyID: "org:eu:europa:as4:example",
			FromRole: "Sender", ToRole: "Receiver"},
	}, um)
	if err != nil || pm.ID != "holodeck" {
		t.Fatalf("Match = %v, %v", pm, err)
	}
}

func TestReadPhase4Receipts(t *testing.T) {
	cases := []struct {
		file, contentType                         string
		messageID, refTo, messagingID, nriFirstID string
		ts                                        time.Time
	}{
		{"as4/helger.as4in", "", "1384cf77-2de9-4303-a4e7-ca935a20f4fd@phase4", "3b3775c9-e88d-47f9-be5a-8e045ca2bc07@phase4",
			"phase4-msg-a9255f87-075b-4348-b125-beb6cee397e9", "#phase4-msg-9cb62f4d-7132-4b52-93cf-79aa82d8c12f",
			time.Date(2022, 3, 7, 17, 36, 50, 173e6, time.UTC)},
		{"as4/TestReceipt12.xml", "application/soap+xml", "d36e26c0-5d4d-4950-ad81-dc620681b5f9@phase4", "035e0a83-6dc5-427b-bcee-483475c65153@phase4",
			"phase4-msg-16a44d96-0b9d-4752-a7f5-53bff8b33cb3", "#phase4-msg-3adda884-f9be-419a-b918-f4fb3e97f9c4",
			time.Date(2025, 12, 5, 14, 3, 40, 878e6, time.UTC)},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			raw := interop.Read(t, c.file)
			ct, body := c.contentType, raw
			if ct == "" {
				ct, body = splitHTTP(t, raw)
				if ct != "application/soap+xml;charset=UTF-8" || len(body) != 6772 {
					t.Fatalf("captured Content-Type %q, body %d bytes", ct, len(body))
				}
			}
			env, err := ReadMessage(ct, bytes.NewReader(body), Limits{})
			if err != nil {
				t.Fatal(err)
			}
			defer env.Close()
			if len(env.Attachments) != 0 || env.SOAPVersion != SOAP12 {
				t.Fatalf("attachments %d, version %s", len(env.Attachments), env.SOAPVersion)
			}
			el, err := env.Messaging()
			if err != nil {
				t.Fatal(err)
			}
			if id, _ := Attr(el, NSWSU, "Id"); id != c.messagingID {
				t.Errorf("Messaging wsu:Id %q", id)
			}
			m, err := ParseMessaging(el)
			if err != nil {
				t.Fatal(err)
			}
			if m.UserMessage != nil || len(m.SignalMessages) != 1 {
				t.Fatalf("want one signal, got %+v", m)
			}
			sm := m.SignalMessages[0]
			want := MessageInfo{Timestamp: c.ts, MessageID: c.messageID, RefToMessageID: c.refTo}
			if sm.MessageInfo != want {
				t.Errorf("MessageInfo %+v, want %+v", sm.MessageInfo, want)
			}
			if sm.Receipt == nil || len(sm.Errors) != 0 || sm.PullRequest != nil {
				t.Fatalf("signal %+v", sm)
			}
			nri := Children(sm.Receipt, NSEbbp, "NonRepudiationInformation")
			if len(nri) != 1 || len(Children(nri[0], NSEbbp, "MessagePartNRInformation")) != 3 {
				t.Fatal("want one NonRepudiationInformation with 3 entries")
			}
			ref := Children(Children(nri[0], NSEbbp, "MessagePartNRInformation")[0], NSDSig, "Reference")
			if len(ref) != 1 || ref[0].SelectAttrValue("URI", "") != c.nriFirstID {
				t.Errorf("first NRI reference %v", ref)
			}
		})
	}
}
