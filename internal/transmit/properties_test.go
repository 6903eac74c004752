package transmit_test

import (
	"bytes"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/beevik/etree"

	"github.com/edigateway/gateway/internal/testrelay"
	"github.com/edigateway/gateway/internal/transmit"
	"github.com/edigateway/gateway/outbound"
)

// recordingProxy forwards every POST to url, keeping the bodies; with
// tamper set it replaces old by new in the body it forwards.
type recordingProxy struct {
	mu       sync.Mutex
	bodies   [][]byte
	types    []string // the bodies' Content-Type
	old, new []byte
}

func (p *recordingProxy) serve(t *testing.T, url string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		p.mu.Lock()
		p.bodies = append(p.bodies, b)
		p.types = append(p.types, r.Header.Get("Content-Type"))
		if p.old != nil {
			b = bytes.Replace(b, p.old, p.new, 1)
		}
		p.mu.Unlock()
		testrelay.Forward(w, r, url, b)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// messaging parses the SOAP envelope of a multipart AS4 request body and
// returns its eb:Messaging header, and whether the WS-Security signature
// has a ds:Reference to it.
func messaging(t *testing.T, contentType string, body []byte) (*etree.Element, bool) {
	t.Helper()
	_, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		t.Fatalf("content type %q: %v", contentType, err)
	}
	part, err := multipart.NewReader(bytes.NewReader(body), params["boundary"]).NextPart()
	if err != nil {
		t.Fatalf("first MIME part: %v", err)
	}
	doc := etree.NewDocument()
	if _, err := doc.ReadFrom(part); err != nil {
		t.Fatalf("SOAP envelope: %v", err)
	}
	ms := doc.FindElement("//Messaging")
	if ms == nil {
		t.Fatal("no eb:Messaging in the SOAP envelope")
	}
	id := ""
	for _, a := range ms.Attr {
		if a.Key == "Id" {
			id = a.Value
		}
	}
	signed := false
	for _, ref := range doc.FindElements("//Signature/SignedInfo/Reference") {
		signed = signed || (id != "" && ref.SelectAttrValue("URI", "") == "#"+id)
	}
	return ms, signed
}

// A queued message's part properties travel in the signed eb:Messaging,
// in the order given after the ones the sender writes (MimeType,
// CompressionType), and reach the partner's handler; the signature covers
// them: a property changed on the way makes the partner refuse the
// message.
func TestAS4PartProperties(t *testing.T) {
	gw := serveGateway(t, gatewayOptions{})
	proxy := &recordingProxy{}
	front := proxy.serve(t, gw.URL+"/as4")
	tr := as4To(t, front.URL, nil)
	m := as4Message(t)
	m.Properties = []outbound.Property{
		{Name: "BDEWDocumentType", Value: "UTILMD"},
		{Name: "BDEWDocumentNo", Value: "DOC-4711"},
		{Name: "BDEWDocumentDate", Value: "2026-12-05"},
		{Name: "CharacterSet", Value: "utf-8"},
		{Name: "app:Note", Value: "Grüße <&> \"x\""},
	}
	a := attempt(t, tr, m, []byte(edi))
	if a.Outcome != outbound.Deliver {
		t.Fatalf("attempt: %+v", a)
	}
	got := gw.received()
	if len(got) != 1 {
		t.Fatalf("handler received %d payloads, want 1", len(got))
	}
	for _, p := range m.Properties {
		if v, ok := got[0].props[p.Name]; !ok || v != p.Value {
			t.Errorf("the partner read property %s = %q (present %v), want %q", p.Name, v, ok, p.Value)
		}
	}

	proxy.mu.Lock()
	body, contentType := proxy.bodies[0], proxy.types[0]
	proxy.mu.Unlock()
	ms, signed := messaging(t, contentType, body)
	if !signed {
		t.Error("the signature has no ds:Reference to eb:Messaging")
	}
	var names, values []string
	for _, el := range ms.FindElements(".//PartInfo/PartProperties/Property") {
		names = append(names, el.SelectAttrValue("name", ""))
		values = append(values, el.Text())
	}
	wantNames := []string{"MimeType", "CompressionType"}
	wantValues := []string{"application/edifact", "application/gzip"}
	for _, p := range m.Properties {
		wantNames, wantValues = append(wantNames, p.Name), append(wantValues, p.Value)
	}
	if strings.Join(names, "|") != strings.Join(wantNames, "|") || strings.Join(values, "|") != strings.Join(wantValues, "|") {
		t.Errorf("eb:PartProperties sent\n got %q = %q\nwant %q = %q", names, values, wantNames, wantValues)
	}

	// The same message with one property changed on the way (a new
	// eb:MessageId, so it is no duplicate): the signature no longer
	// verifies, the partner refuses it, its handler never sees it.
	proxy.mu.Lock()
	proxy.old, proxy.new = []byte(">DOC-4711<"), []byte(">DOC-4712<")
	proxy.mu.Unlock()
	m2 := as4Message(t)
	m2.Properties = m.Properties
	a = attempt(t, tr, m2, []byte(edi))
	if a.Outcome == outbound.Deliver {
		t.Fatalf("a message whose property was changed on the way was delivered: %+v", a)
	}
	proxy.mu.Lock()
	tampered := len(proxy.bodies) == 2 && bytes.Contains(proxy.bodies[1], []byte(">DOC-4711<"))
	proxy.mu.Unlock()
	if !tampered {
		t.Fatal("the second message did not carry the property the proxy changes")
	}
	if n := len(gw.received()); n != 1 {
		t.Errorf("handler received %d payloads, want still 1", n)
	}
}

// A message property named like the file-name property the partner's
// settings write is refused (not sent) when the message has a file name.
func TestAS4PartPropertyFilenameClash(t *testing.T) {
	proxy := &recordingProxy{}
	front := proxy.serve(t, "http://127.0.0.1:1/as4")
	tr := as4To(t, front.URL, func(s *transmit.AS4Settings) { s.FilenameProperty = "FileName" })
	m := as4Message(t)
	m.Filename = "order.edi"
	m.Properties = []outbound.Property{{Name: "filename", Value: "other.edi"}}
	if a := attempt(t, tr, m, []byte(edi)); a.Outcome != outbound.Refuse || !contains(a.Reason, "file name") || m.Attempts != 0 {
		t.Fatalf("attempt %+v after %d attempts", a, m.Attempts)
	}
	if len(proxy.bodies) != 0 {
		t.Errorf("%d requests sent, want none", len(proxy.bodies))
	}
}
