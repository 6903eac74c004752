package as4

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/beevik/etree"

	"github.com/edigateway/gateway/internal/spooltest"
)

func TestReadMessageGenerated(t *testing.T) {
	m := defaultTestMessage()
	m.partInfo = `<eb:PartInfo href="cid:payload-1@sender.example"/><eb:PartInfo href="cid:payload%202@sender.example"/>` +
		`<eb:PartInfo href="cid:payload-3@sender.example"/>`
	payload := bytes.Repeat([]byte("line with = sign and \xc3\xa9\r\n"), 100)
	b64 := base64.StdEncoding.EncodeToString(payload)
	var wrapped strings.Builder
	for len(b64) > 76 {
		wrapped.WriteString(b64[:76] + "\r\n")
		b64 = b64[76:]
	}
	wrapped.WriteString(b64)
	qp := "Soft=\r\n break and =3D equals =C3=A9"
	ct, body := multipartMessage("b1", m.envelope(),
		testPart{cid: "payload-1@sender.example", contentType: "application/octet-stream", cte: "binary", body: []byte("bin\x00\xff\r\n--b1x")},
		testPart{cid: "payload 2@sender.example", contentType: "application/xml", cte: "base64", body: []byte(wrapped.String())},
		testPart{cid: "payload-3@sender.example", contentType: "text/plain", cte: "quoted-printable", body: []byte(qp)},
	)
	env, err := ReadMessage(ct, bytes.NewReader(body), Limits{MaxParts: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	if len(env.Attachments) != 3 {
		t.Fatalf("%d attachments", len(env.Attachments))
	}
	if got := partBytes(t, &env.Attachments[0]); !bytes.Equal(got, []byte("bin\x00\xff\r\n--b1x")) {
		t.Errorf("binary part %q", got)
	}
	if got := partBytes(t, &env.Attachments[1]); !bytes.Equal(got, payload) {
		t.Errorf("base64 part decoded to %d bytes", len(got))
	}
	if got := string(partBytes(t, &env.Attachments[2])); got != "Soft break and = equals \xc3\xa9" {
		t.Errorf("quoted-printable part %q", got)
	}
	if env.Attachments[2].Header.Get("Content-Transfer-Encoding") != "quoted-printable" {
		t.Error("raw part headers must be kept")
	}
	if env.Attachment("payload 2@sender.example") != &env.Attachments[1] || env.Attachment("nope") != nil {
		t.Error("Attachment lookup")
	}
	el, err := env.Messaging()
	if err != nil {
		t.Fatal(err)
	}
	msg, err := ParseMessaging(el)
	if err != nil {
		t.Fatal(err)
	}
	pls, err := ResolvePayloads(env, msg.UserMessage)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range pls {
		if p.Part != &env.Attachments[i] {
			t.Errorf("payload %d resolved to %v", i, p.Part)
		}
	}

	// Root chosen by start even when it is not the first part.
	ct2 := `multipart/related; boundary=b2; type="application/soap+xml"; start="<root@x>"`
	body2 := "--b2\r\nContent-Type: application/octet-stream\r\nContent-ID: <att@x>\r\n\r\nATT\r\n" +
		"--b2\r\nContent-Type: application/soap+xml\r\nContent-ID: <root@x>\r\n\r\n" + envelopeXML(m.userMessageXML(), "") + "\r\n--b2--"
	env2, err := ReadMessage(ct2, strings.NewReader(body2), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer env2.Close()
	if env2.Root.ContentID != "root@x" || len(env2.Attachments) != 1 || string(partBytes(t, &env2.Attachments[0])) != "ATT" {
		t.Errorf("root %q, attachments %+v", env2.Root.ContentID, env2.Attachments)
	}
	// Without start the first part is the root.
	ct3 := `multipart/related; boundary=b3`
	body3 := "--b3\r\nContent-Type: application/soap+xml\r\n\r\n" + envelopeXML(m.userMessageXML(), "") + "\r\n--b3--\r\n"
	env3, err := ReadMessage(ct3, strings.NewReader(body3), Limits{})
	if err != nil {
		t.Fatalf("first-part root: %v", err)
	}
	defer env3.Close()
	if len(env3.Attachments) != 0 {
		t.Fatalf("first-part root: %d attachments", len(env3.Attachments))
	}
}

func TestReadBareSOAP(t *testing.T) {
	soap11 := `<S:Envelope xmlns:S="http://schemas.xmlsoap.org/soap/envelope/"><S:Header>` +
		`<Messaging xmlns="http://docs.oasis-open.org/ebxml-msg/ebms/v3.0/ns/core/200704/"><SignalMessage><MessageInfo>` +
		`<Timestamp>2024-01-01T00:00:00</Timestamp><MessageId>m@x</MessageId></MessageInfo><PullRequest mpc="urn:mpc:a"/>` +
		`</SignalMessage></Messaging></S:Header><S:Body/></S:Envelope>`
	env, err := ReadMessage("text/xml; charset=utf-8", strings.NewReader(soap11), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	if env.SOAPVersion != SOAP11 || env.Root.ContentID != "" || env.Root.ContentType() != "text/xml; charset=utf-8" {
		t.Errorf("version %s, root %+v", env.SOAPVersion, env.Root.Header)
	}
	el, err := env.Messaging()
	if err != nil {
		t.Fatal(err)
	}
	m, err := ParseMessaging(el)
	if err != nil {
		t.Fatal(err)
	}
	sm := m.SignalMessages[0]
	if sm.PullRequest == nil || sm.PullRequest.MPC != "urn:mpc:a" || sm.MessageInfo.Timestamp.Location().String() != "UTC" ||
		sm.MessageInfo.Timestamp.Year() != 2024 {
		t.Errorf("signal %+v", sm)
	}
}

func TestReadMessageRejects(t *testing.T) {
	good := defaultTestMessage().envelope()
	deep := strings.Repeat("<a>", 70) + strings.Repeat("</a>", 70)
	ctOK := `multipart/related; boundary=bb; type="application/soap+xml"`
	part := func(soap string) string {
		return "--bb\r\nContent-Type: application/soap+xml\r\n\r\n" + soap + "\r\n--bb--\r\n"
	}
	var manyAttrs string
	for i := 0; i <= MaxXMLAttrs; i++ {
		manyAttrs += fmt.Sprintf(` a%d="v"`, i)
	}
	many := strings.Repeat("--bb\r\nContent-Type: application/octet-stream\r\n\r\nx\r\n", 5)
	cases := []struct {
		name, contentType, body string
		limits                  Limits
		code                    string
		sentinel                error
	}{
		{"doctype", "application/soap+xml", `<!DOCTYPE x [<!ENTITY a "b">]>` + good, Limits{}, CodeInvalidHeader, ErrDTD},
		{"entity in multipart", ctOK, part(`<?xml version="1.0"?><!DOCTYPE e SYSTEM "http://evil/x.dtd"><e/>`), Limits{}, CodeInvalidHeader, ErrDTD},
		{"undefined entity", "application/soap+xml", strings.Replace(good, "conv-1", "&xxe;", 1), Limits{}, CodeInvalidHeader, nil},
		{"too deep", "application/soap+xml", envelopeXML("", deep), Limits{}, CodeInvalidHeader, ErrXMLDepth},
		{"depth limit set", "application/soap+xml", good, Limits{MaxXMLDepth: 4}, CodeInvalidHeader, ErrXMLDepth},
		{"too many attributes", "application/soap+xml", envelopeXML("", "<a"+manyAttrs+"/>"), Limits{}, CodeInvalidHeader, ErrLimit},
		{"too many parts", ctOK, "--bb\r\nContent-Type: application/soap+xml\r\n\r\n" + good + "\r\n" + many + "--bb--", Limits{MaxParts: 5}, CodeOther, ErrLimit},
		{"message too large", "application/soap+xml", good, Limits{MaxMessageSize: 100}, CodeOther, ErrLimit},
		{"part too large", ctOK, "--bb\r\nContent-Type: application/soap+xml\r\n\r\n" + good + "\r\n--bb\r\nContent-Type: x/y\r\n\r\n" + strings.Repeat("z", 5000) + "\r\n--bb--", Limits{MaxPartSize: 4096}, CodeOther, ErrLimit},
		{"no closing boundary", ctOK, "--bb\r\nContent-Type: application/soap+xml\r\n\r\n" + good, Limits{}, CodeMimeInconsistency, nil},
		{"no boundary param", "multipart/related", part(good), Limits{}, CodeMimeInconsistency, nil},
		{"no parts", ctOK, "just text, no boundary\r\n", Limits{}, CodeMimeInconsistency, nil},
		{"wrong boundary", `multipart/related; boundary=other`, part(good), Limits{}, CodeMimeInconsistency, nil},
		{"start not found", ctOK + `; start="<nope@x>"`, part(good), Limits{}, CodeMimeInconsistency, nil},
		{"type not soap", `multipart/related; boundary=bb; type="text/plain"`, part(good), Limits{}, CodeMimeInconsistency, nil},
		{"root not soap", ctOK, "--bb\r\nContent-Type: text/plain\r\n\r\n" + good + "\r\n--bb--", Limits{}, CodeMimeInconsistency, nil},
		{"duplicate content-id", ctOK, "--bb\r\nContent-Type: application/soap+xml\r\nContent-ID: <a>\r\n\r\n" + good + "\r\n--bb\r\nContent-Type: x/y\r\nContent-ID: <a>\r\n\r\nq\r\n--bb--", Limits{}, CodeMimeInconsistency, nil},
		{"unknown cte", ctOK, "--bb\r\nContent-Type: application/soap+xml\r\nContent-Transfer-Encoding: x-uuencode\r\n\r\n" + good + "\r\n--bb--", Limits{}, CodeMimeInconsistency, nil},
		{"bad base64", ctOK, "--bb\r\nContent-Type: application/soap+xml\r\n\r\n" + good + "\r\n--bb\r\nContent-Type: x/y\r\nContent-Transfer-Encoding: base64\r\n\r\n!!!!\r\n--bb--", Limits{}, CodeMimeInconsistency, nil},
		{"bad content type", "application/soap+xml; charset", good, Limits{}, CodeMimeInconsistency, nil},
		{"latin-1 charset", "application/soap+xml; charset=ISO-8859-1", good, Limits{}, CodeMimeInconsistency, nil},
		{"latin-1 root part", ctOK, "--bb\r\nContent-Type: text/xml; charset=windows-1252\r\n\r\n" + good + "\r\n--bb--", Limits{}, CodeMimeInconsistency, nil},
		{"not soap content type", "application/json", good, Limits{}, CodeMimeInconsistency, nil},
		{"not xml", "application/soap+xml", "hello", Limits{}, CodeInvalidHeader, nil},
		{"two roots", "application/soap+xml", good + "<x/>", Limits{}, CodeInvalidHeader, nil},
		{"mismatched tags", "application/soap+xml", "<a><b></a></b>", Limits{}, CodeInvalidHeader, nil},
		{"undeclared prefix", "application/soap+xml", strings.Replace(good, "<eb:UserMessage>", "<eb:UserMessage><zz:x/>", 1), Limits{}, CodeInvalidHeader, nil},
		{"duplicate attribute", "application/soap+xml", strings.Replace(good, `wsu:Id="msg-1"`, `wsu:Id="msg-1" wsu:Id="msg-2"`, 1), Limits{}, CodeInvalidHeader, nil},
		{"duplicate attribute by namespace", "application/soap+xml", strings.Replace(good, `wsu:Id="msg-1"`, `wsu:Id="msg-1" xmlns:w2="http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd" w2:Id="msg-2"`, 1), Limits{}, CodeInvalidHeader, nil},
		{"latin-1", "application/soap+xml", strings.Replace(good, `encoding="UTF-8"`, `encoding="ISO-8859-1"`, 1), Limits{}, CodeInvalidHeader, nil},
		{"not an envelope", "application/soap+xml", `<Envelope xmlns="urn:other"><Body/></Envelope>`, Limits{}, CodeInvalidHeader, nil},
		{"no body", "application/soap+xml", `<e:Envelope xmlns:e="http://www.w3.org/2003/05/soap-envelope"><e:Header/></e:Envelope>`, Limits{}, CodeInvalidHeader, nil},
		{"body before header", "application/soap+xml", `<e:Envelope xmlns:e="http://www.w3.org/2003/05/soap-envelope"><e:Body/><e:Header/></e:Envelope>`, Limits{}, CodeInvalidHeader, nil},
		{"two bodies", "application/soap+xml", `<e:Envelope xmlns:e="http://www.w3.org/2003/05/soap-envelope"><e:Body/><e:Body/></e:Envelope>`, Limits{}, CodeInvalidHeader, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env, err := ReadMessage(c.contentType, strings.NewReader(c.body), c.limits)
			if err == nil {
				env.Close()
				t.Fatalf("accepted: %+v", env)
			}
			if got := CodeOf(err); got != c.code {
				t.Errorf("code %s, want %s (%v)", got, c.code, err)
			}
			if c.sentinel != nil && !errors.Is(err, c.sentinel) {
				t.Errorf("%v does not wrap %v", err, c.sentinel)
			}
		})
	}
}

func TestEnvelopeMessagingHeader(t *testing.T) {
	m := defaultTestMessage()
	two := strings.Replace(m.envelope(), "</env:Header>",
		`<eb:Messaging xmlns:eb="http://docs.oasis-open.org/ebxml-msg/ebms/v3.0/ns/core/200704/"/></env:Header>`, 1)
	for name, soap := range map[string]string{
		"two":       two,
		"none":      `<e:Envelope xmlns:e="http://www.w3.org/2003/05/soap-envelope"><e:Header/><e:Body/></e:Envelope>`,
		"no header": `<e:Envelope xmlns:e="http://www.w3.org/2003/05/soap-envelope"><e:Body/></e:Envelope>`,
		// eb:Messaging must sit directly in the header, not deeper.
		"nested": `<e:Envelope xmlns:e="http://www.w3.org/2003/05/soap-envelope"><e:Header><w><eb:Messaging xmlns:eb="` + NSEbMS + `"/></w></e:Header><e:Body/></e:Envelope>`,
		// Same local name under a prefix bound to another namespace.
		"other namespace": strings.Replace(m.envelope(), `xmlns:eb="`+NSEbMS+`"`, `xmlns:eb="urn:evil"`, 1),
	} {
		env, err := ReadMessage("application/soap+xml", strings.NewReader(soap), Limits{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		defer env.Close()
		if _, err := env.Messaging(); CodeOf(err) != CodeInvalidHeader {
			t.Errorf("%s: %v, want EBMS:0009", name, err)
		}
	}
}

// slowReader returns one byte per Read, to exercise the size cap across
// many short reads.
type slowReader struct{ b []byte }

func (s *slowReader) Read(p []byte) (int, error) {
	if len(s.b) == 0 {
		return 0, errEOF
	}
	p[0] = s.b[0]
	s.b = s.b[1:]
	return 1, nil
}

var errEOF = errors.New("EOF")

func TestCapReaderExactSize(t *testing.T) {
	good := defaultTestMessage().envelope()
	// A body of exactly the limit passes; one byte more fails.
	if _, err := ReadMessage("application/soap+xml", strings.NewReader(good), Limits{MaxMessageSize: int64(len(good))}); err != nil {
		t.Fatalf("exact size: %v", err)
	}
	if _, err := ReadMessage("application/soap+xml", strings.NewReader(good+" "), Limits{MaxMessageSize: int64(len(good))}); !errors.Is(err, ErrLimit) {
		t.Fatalf("one byte over: %v", err)
	}
	c := &capReader{r: &slowReader{b: []byte("abcdef")}, n: 3}
	buf := make([]byte, 10)
	var got []byte
	var err error
	for {
		var n int
		n, err = c.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			break
		}
	}
	if string(got) != "abc" || !errors.Is(err, ErrLimit) {
		t.Errorf("got %q, %v", got, err)
	}
}

func TestEnvelopeFromDocument(t *testing.T) {
	doc, err := ParseXML([]byte(defaultTestMessage().envelope()), 0)
	if err != nil {
		t.Fatal(err)
	}
	env, err := EnvelopeFromDocument(doc)
	if err != nil || env.SOAPVersion != SOAP12 || env.Body() == nil || env.Header() == nil {
		t.Fatalf("%+v, %v", env, err)
	}
	if _, err := env.Messaging(); err != nil {
		t.Fatal(err)
	}
	other, _ := ParseXML([]byte(`<a:Envelope xmlns:a="urn:x"><a:Body/></a:Envelope>`), 0)
	for name, d := range map[string]*etree.Document{"nil": nil, "empty": etree.NewDocument(), "not SOAP": other} {
		if _, err := EnvelopeFromDocument(d); CodeOf(err) != CodeInvalidHeader {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// partBytes reads a part's content (spooled or in memory).
func partBytes(t testing.TB, p *Part) []byte {
	t.Helper()
	rc, err := p.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Attachments are spooled to files in SpoolDir as they arrive and removed
// by Close; AfterEnvelope sees the parsed envelope before the attachments
// are read, and the limit it sets ends the message with ErrMessageLimit as
// soon as it is passed.
func TestReadMessageSpoolsAndAfterEnvelope(t *testing.T) {
	m := defaultTestMessage()
	big := bytes.Repeat([]byte("0123456789"), 50_000)
	ct, body := multipartMessage("b9", m.envelope(),
		testPart{cid: "a@x", contentType: "application/octet-stream", cte: "binary", body: big})
	dir := t.TempDir()
	var sawID string
	env, err := ReadMessage(ct, bytes.NewReader(body), Limits{SpoolDir: dir, AfterEnvelope: func(env *Envelope) (int64, error) {
		mel, err := env.Messaging()
		if err != nil {
			return 0, err
		}
		msg, err := ParseMessaging(mel)
		if err != nil {
			return 0, err
		}
		sawID = msg.UserMessage.MessageInfo.MessageID
		return 0, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if sawID == "" || !bytes.Equal(partBytes(t, &env.Attachments[0]), big) || env.Attachments[0].Body != nil {
		t.Fatalf("AfterEnvelope saw %q; attachment not spooled", sawID)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("%d files in the spool directory, want 1", len(ents))
	}
	if err := env.Close(); err != nil {
		t.Fatal(err)
	}
	if left := spooltest.Leftovers(t, dir); len(left) != 0 {
		t.Fatalf("files left after Close: %v", left)
	}
	_, err = ReadMessage(ct, bytes.NewReader(body), Limits{SpoolDir: dir, AfterEnvelope: func(*Envelope) (int64, error) { return 100_000, nil }})
	if !errors.Is(err, ErrMessageLimit) {
		t.Fatalf("over the limit AfterEnvelope set: %v", err)
	}
	if left := spooltest.Leftovers(t, dir); len(left) != 0 {
		t.Fatalf("files left after a refused message: %v", left)
	}
}
