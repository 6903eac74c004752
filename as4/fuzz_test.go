package as4

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/edigateway/gateway/internal/interop"
	"github.com/edigateway/gateway/internal/spooltest"
)

// interopSeeds returns the AS4 interop files when they are present, without
// skipping or failing a fuzz target when they are not.
func interopSeeds(t testing.TB) map[string][]byte {
	out := map[string][]byte{}
	if os.Getenv("GATEWAY_INTEROP_DIR") == "" {
		if _, err := os.Stat(filepath.Join("..", "..", "shared", "interop", "README.md")); err != nil {
			return out
		}
	}
	dir := interop.Dir(t)
	for _, f := range []string{"as4-encrypted-signed-issuerserial.as4", "helger.as4in", "TestReceipt12.xml"} {
		if b, err := os.ReadFile(filepath.Join(dir, "as4", f)); err == nil {
			out[f] = b
		}
	}
	return out
}

func FuzzReadMessage(f *testing.F) {
	m := defaultTestMessage()
	ct, body := multipartMessage("fz", m.envelope(),
		testPart{cid: "payload-1@sender.example", contentType: "application/octet-stream", cte: "binary", body: []byte("x")},
		testPart{cid: "b@x", contentType: "text/plain", cte: "base64", body: []byte("aGVsbG8=")},
		testPart{cid: "q@x", contentType: "text/plain", cte: "quoted-printable", body: []byte("a=3Db=\r\nc")})
	f.Add(ct, body)
	// An attachment over glimits.SmallInMemory: read while it arrives
	// when the target streams it.
	ct, body = multipartMessage("fy", m.envelope(),
		testPart{cid: "payload-1@sender.example", contentType: "application/octet-stream", cte: "binary", body: bytes.Repeat([]byte("LIN+1'"), 20_000)},
		testPart{cid: "b@x", contentType: "text/plain", cte: "base64", body: []byte("aGVsbG8=")})
	f.Add(ct, body)
	f.Add("application/soap+xml", []byte(m.envelope()))
	f.Add("text/xml", []byte(`<S:Envelope xmlns:S="http://schemas.xmlsoap.org/soap/envelope/"><S:Body/></S:Envelope>`))
	f.Add("application/soap+xml", []byte(`<!DOCTYPE a [<!ENTITY b "c">]><a>&b;</a>`))
	f.Add(`multipart/related; boundary=x; start="<r>"`, []byte("--x\r\nContent-ID: <r>\r\n\r\n<a/>\r\n--x--"))
	seeds := interopSeeds(f)
	if b, ok := seeds["as4-encrypted-signed-issuerserial.as4"]; ok {
		f.Add(holodeckContentType, b)
	}
	if b, ok := seeds["TestReceipt12.xml"]; ok {
		f.Add("application/soap+xml", b)
	}
	if b, ok := seeds["helger.as4in"]; ok {
		if i := bytes.Index(b, []byte("\n\n")); i > 0 {
			f.Add("application/soap+xml;charset=UTF-8", b[i+2:])
		}
	}
	// Attachments are spooled; AfterEnvelope lowers the limit once the
	// envelope is read, as the endpoint does for a partner's own limit.
	spool := f.TempDir()
	limits := Limits{MaxMessageSize: 1 << 20, MaxParts: 8, MaxXMLDepth: 32, SpoolDir: spool,
		AfterEnvelope: func(*Envelope) (int64, error) { return 512 << 10, nil }}
	// Every body is read twice: as above, and with its first attachment
	// read while it arrives (Limits.StreamAttachment).
	streaming := limits
	streaming.StreamAttachment = func(env *Envelope, _ string) bool { return len(env.Attachments) == 0 }
	f.Fuzz(func(t *testing.T, contentType string, body []byte) {
		for _, lim := range []Limits{limits, streaming} {
			readMessageFuzzed(t, contentType, body, lim, spool)
		}
	})
}

func readMessageFuzzed(t *testing.T, contentType string, body []byte, limits Limits, spool string) {
	{
		env, err := ReadMessage(contentType, bytes.NewReader(body), limits)
		defer func() {
			env.Close()
			if left := spooltest.Leftovers(t, spool); len(left) != 0 {
				t.Fatalf("spool files left: %v", left)
			}
		}()
		if err == nil && env.Arriving() {
			// The arriving part is read first, as the endpoint decrypts it.
			if rc, oerr := env.Attachments[0].Open(); oerr == nil {
				io.Copy(io.Discard, rc)
				rc.Close()
			}
			err = env.Rest()
		}
		if err != nil {
			if CodeOf(err) == "" {
				t.Fatalf("error without ebMS code: %v", err)
			}
			return
		}
		if env.Doc == nil || env.Body() == nil || len(env.Attachments)+1 > limits.MaxParts {
			t.Fatalf("inconsistent envelope %+v", env)
		}
		for i := range env.Attachments {
			rc, err := env.Attachments[i].Open()
			if err != nil {
				t.Fatal(err)
			}
			n, err := io.Copy(io.Discard, rc)
			rc.Close()
			if err != nil || n > 512<<10 {
				t.Fatalf("attachment %d: %d bytes, %v", i, n, err)
			}
		}
		if el, err := env.Messaging(); err == nil {
			if msg, err := ParseMessaging(el); err == nil && msg.UserMessage != nil {
				_, _ = ResolvePayloads(env, msg.UserMessage)
				_, _ = Match([]PMode{{ID: "a", Service: "s"}, {}}, msg.UserMessage)
			}
		}
	}
}

func FuzzParseMessaging(f *testing.F) {
	m := defaultTestMessage()
	f.Add([]byte(m.userMessageXML()))
	f.Add([]byte(`<eb:SignalMessage><eb:MessageInfo><eb:Timestamp>2024-05-01T10:00:00Z</eb:Timestamp><eb:MessageId>e@x</eb:MessageId>` +
		`<eb:RefToMessageId>o@y</eb:RefToMessageId></eb:MessageInfo><eb:Receipt/><eb:Error errorCode="EBMS:0004" severity="failure">` +
		`<eb:Description xml:lang="en">d</eb:Description></eb:Error><eb:PullRequest mpc="m"/></eb:SignalMessage>`))
	f.Add([]byte(m.userMessageXML() + m.userMessageXML()))
	for _, b := range interopSeeds(f) {
		// The eb:Messaging content of each interop file.
		if i := bytes.Index(b, []byte("Messaging ")); i > 0 {
			if j := bytes.IndexByte(b[i:], '>'); j > 0 {
				if k := bytes.LastIndex(b, []byte("</eb")); k > i+j {
					f.Add(b[i+j+1 : k])
				}
			}
		}
	}
	f.Fuzz(func(t *testing.T, content []byte) {
		soap := envelopeXML(string(content), "")
		doc, err := ParseXML([]byte(soap), 48)
		if err != nil {
			return
		}
		env := &Envelope{Doc: doc, SOAPVersion: SOAP12}
		el, err := env.Messaging()
		if err != nil {
			return
		}
		msg, err := ParseMessaging(el)
		if err != nil {
			if CodeOf(err) == "" {
				t.Fatalf("error without ebMS code: %v", err)
			}
			return
		}
		if msg.UserMessage == nil && len(msg.SignalMessages) == 0 {
			t.Fatal("empty result without error")
		}
		if um := msg.UserMessage; um != nil {
			if um.MessageInfo.MessageID == "" || len(um.From.PartyIDs) == 0 || len(um.To.PartyIDs) == 0 ||
				um.CollaborationInfo.Service.Value == "" || um.CollaborationInfo.Action == "" {
				t.Fatalf("accepted user message lacks required values: %+v", um)
			}
			_, _ = Match([]PMode{{FromPartyID: "a"}, {}}, um)
		}
	})
}
