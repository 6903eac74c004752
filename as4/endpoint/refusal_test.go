package endpoint_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/beevik/etree"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/as4/client"
	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/internal/wssec"
)

// goErrorMarkers are fragments of error texts of Go's standard library and
// of our parsers' internal chains; none may reach a partner.
var goErrorMarkers = []string{"invalid BER", "asn1:", "x509:", "crypto/", "illegal base64", "XML syntax error",
	"unexpected EOF", "gzip:", "flate:", "multipart:", "mime:", "verification error", "parsing time", "wssec: read envelope:"}

func edifact(ref, body string) []byte {
	return []byte("UNB+UNOC:3+4000001000002:14+4000001000003:14+260101:1200+" + ref + "'UNH+1+ORDERS:D:96A:UN'BGM+220+" + body + "'UNT+3+1'UNZ+1+" + ref + "'")
}

func x12(isa13, iea02 string) []byte {
	isa := fmt.Sprintf("ISA*00*          *00*          *ZZ*%-15s*ZZ*%-15s*260101*1200*U*00401*%s*0*P*>~", "ACME", "GATEWAY", isa13)
	return []byte(isa + "GS*PO*ACME*GATEWAY*20260101*1200*1*X*004010~ST*850*0001~SE*2*0001~GE*1*1~IEA*1*" + iea02 + "~")
}

// ediMessage is a message from acme carrying the given payloads, gzipped
// (as AS4 senders do; the client signs an uncompressed XML attachment with
// an XML transform, so it could not send broken XML uncompressed).
func ediMessage(id string, mime string, payloads ...[]byte) *client.Message {
	m := testMessage(id)
	m.Payloads = nil
	for _, p := range payloads {
		m.Payloads = append(m.Payloads, client.Payload{MimeType: mime, Data: p, Compress: true})
	}
	return m
}

// refusal checks a permanent refusal: a signed EBMS:0004 error signal with
// severity failure and HTTP 200 (the status that stops retries), whose
// detail holds want and an incident reference that the log and the audit
// record carry with the detail, and no Go error text. It returns the detail.
func refusal(t *testing.T, h *harness, resp *client.Response, wantCode string, want ...string) string {
	t.Helper()
	code, ae := signalCode(t, getKeys(t), resp)
	if code != wantCode || ae.Severity != as4.SeverityFailure || resp.Status != http.StatusOK {
		t.Fatalf("answer %s severity %q HTTP %d, want %s failure HTTP 200: %s", code, ae.Severity, resp.Status, wantCode, ae.Detail)
	}
	for _, w := range want {
		if !strings.Contains(ae.Detail, w) {
			t.Errorf("detail lacks %q: %s", w, ae.Detail)
		}
	}
	noLeak(t, h, resp.Body)
	return ae.Detail
}

// describedRefusal is refusal for a message the pipeline refused (drift,
// quarantine, a damaged business envelope): eb:Description states the
// reason too, the sentence eb:ErrorDetail gives before the incident
// reference (as the AS2 MDN's text does), not EBMS:0004's generic "Another
// error occurred.".
func describedRefusal(t *testing.T, h *harness, resp *client.Response, want ...string) string {
	t.Helper()
	detail := refusal(t, h, resp, as4.CodeOther, want...)
	_, ae := signalCode(t, getKeys(t), resp)
	for _, w := range want {
		if !strings.Contains(ae.Description, w) {
			t.Errorf("eb:Description lacks %q: %s", w, ae.Description)
		}
	}
	sentence := strings.TrimSuffix(ae.Description, ".")
	if sentence == "" || !strings.HasPrefix(detail, strings.ToLower(sentence[:1])+sentence[1:]+" (incident ") {
		t.Errorf("eb:Description %q is not eb:ErrorDetail's sentence: %s", ae.Description, detail)
	}
	return detail
}

// noLeak asserts that a reply body carries an incident reference, no Go
// error text, and that the incident is in a log line and an audit record
// that hold the detail.
func noLeak(t *testing.T, h *harness, body []byte) string {
	t.Helper()
	for _, m := range goErrorMarkers {
		if bytes.Contains(body, []byte(m)) {
			t.Errorf("reply carries Go error text %q:\n%s", m, body)
		}
	}
	inc := incidentRE.Find(body)
	if inc == nil {
		t.Fatalf("reply has no incident reference:\n%s", body)
	}
	var line map[string]any
	for _, l := range strings.Split(h.logs.String(), "\n") {
		if strings.Contains(l, string(inc)) {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	if line == nil || line["incident"] != string(inc) {
		t.Fatalf("no log line carries incident %s:\n%s", inc, h.logs.String())
	}
	if e, _ := line["err"].(string); e == "" && line["detail"] == nil && line["what"] == nil {
		t.Errorf("the log line of %s holds no detail: %v", inc, line)
	}
	recs, err := h.store.Audit().Query(context.Background(), audit.Query{Incident: string(inc)})
	if err != nil || len(recs) == 0 {
		t.Fatalf("no audit record for incident %s: %v", inc, err)
	}
	detail := false
	for _, r := range recs {
		detail = detail || r.Error != ""
	}
	if !detail {
		t.Errorf("audit records of %s hold no detail: %+v", inc, recs)
	}
	return string(inc)
}

// TestDamagedEnvelopeIsAPermanentEbMSError: a damaged business envelope, or
// one interchange twice with different bytes, gets a signed EBMS:0004 with
// HTTP 200 naming the problem in eb:Description and eb:ErrorDetail (it was
// HTTP 500 "please retransmit" with no signal, then "Another error
// occurred." in eb:Description); nothing reaches the handler.
func TestDamagedEnvelopeIsAPermanentEbMSError(t *testing.T) {
	t.Parallel()
	k := getKeys(t)
	h := newHarness(t, harnessOptions{ledger: true})
	ubl := string(invoiceXML)
	cases := []struct {
		name     string
		mime     string
		payloads [][]byte
		want     string
	}{
		{"UNZ reference differs from UNB", "application/edifact",
			[][]byte{bytes.Replace(edifact("REF00042", "4711"), []byte("UNZ+1+REF00042"), []byte("UNZ+1+REF00043"), 1)}, `UNZ 0020 "REF00043" does not match UNB 0020 "REF00042"`},
		{"ISA shorter than 106 bytes", "application/edi-x12", [][]byte{[]byte("ISA*00*  *00*  *ZZ*ACME~IEA*1*1~")}, "X12: ISA"},
		{"IEA02 differs from ISA13", "application/edi-x12", [][]byte{x12("000000905", "000000906")}, "IEA02"},
		{"UBL truncated", "application/xml", [][]byte{[]byte(ubl[:len(ubl)-20])}, "UBL: malformed XML (line 2)"},
		{"UBL cut inside its root start tag", "application/xml", [][]byte{[]byte(ubl[:strings.Index(ubl, "xmlns:cbc")+8])}, "XML: malformed XML before the root element"},
		{"UBL malformed", "application/xml", [][]byte{[]byte(strings.Replace(ubl, "</cbc:ID>", "</cbc:Id>", 1))}, "UBL: malformed XML (line 2)"},
		{"declared XML but not XML", "text/xml", [][]byte{[]byte("INVOICE 4711")}, "declared text/xml"},
		{"EDIFACT cut inside UNB", "application/edifact", [][]byte{edifact("REF00044", "1")[:30]}, "EDIFACT:"},
		{"one interchange twice with different bytes", "application/edifact",
			[][]byte{edifact("REF00045", "1"), edifact("REF00045", "2")}, "EDIFACT interchange reference REF00045 appears twice"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, resp, err := rsaClient(k).Send(context.Background(), h.url, ediMessage(fmt.Sprintf("damaged-%d@acme.test", i), tc.mime, tc.payloads...))
			if resp == nil {
				t.Fatalf("not sent: %v", err)
			}
			describedRefusal(t, h, resp, "business envelope is damaged", tc.want)
		})
	}
	if n := h.handler.count(); n != 0 {
		t.Fatalf("handler ran %d times", n)
	}
	if strings.Contains(h.logs.String(), "unknown failure kind") {
		t.Error("a failure kind is unmapped")
	}
}

// TestInterchangeDriftNamesTheInterchange: a new eb:MessageId carrying an
// accepted interchange reference with other bytes is refused naming the
// standard, the reference and both hashes, not "eb:MessageId … was
// accepted before" (the id is new).
func TestInterchangeDriftNamesTheInterchange(t *testing.T) {
	t.Parallel()
	k := getKeys(t)
	h := newHarness(t, harnessOptions{ledger: true})
	c := rsaClient(k)
	first, changed := edifact("REF00042", "4711"), edifact("REF00042", "4712")
	if _, _, err := c.Send(context.Background(), h.url, ediMessage("ic-1@acme.test", "application/edifact", first)); err != nil {
		t.Fatal(err)
	}
	_, resp, err := c.Send(context.Background(), h.url, ediMessage("ic-2@acme.test", "application/edifact", changed))
	if err == nil {
		t.Fatal("changed interchange accepted")
	}
	d := describedRefusal(t, h, resp, "EDIFACT interchange reference REF00042", sha(first), sha(changed))
	if strings.Contains(d, "ic-2@acme.test was accepted") || strings.Contains(d, "eb:MessageId ic-2") {
		t.Errorf("detail claims the new eb:MessageId was accepted before: %s", d)
	}
	if h.handler.count() != 1 {
		t.Fatalf("handler ran %d times", h.handler.count())
	}
}

// TestOnDriftQuarantine: under on_drift: quarantine the drifted payload and
// its JSON description are kept under quarantine_dir/<partner>/ and the
// partner is told it was not processed, for a changed interchange and for a
// changed payload under an accepted eb:MessageId.
func TestOnDriftQuarantine(t *testing.T) {
	t.Parallel()
	k := getKeys(t)
	h := newHarness(t, harnessOptions{ledger: true, onDrift: "quarantine"})
	c := rsaClient(k)
	ctx := context.Background()
	first, changed := edifact("REF00077", "1"), edifact("REF00077", "2")
	if _, _, err := c.Send(ctx, h.url, ediMessage("q-1@acme.test", "application/edifact", first)); err != nil {
		t.Fatal(err)
	}
	_, resp, err := c.Send(ctx, h.url, ediMessage("q-2@acme.test", "application/edifact", changed))
	if err == nil {
		t.Fatal("changed interchange accepted")
	}
	describedRefusal(t, h, resp, "quarantined", "REF00077", sha(changed))
	// Transport drift: the same eb:MessageId with another (non-EDI) payload.
	if _, _, err := c.Send(ctx, h.url, ediMessage("q-3@acme.test", "application/pdf", []byte("%PDF one"))); err != nil {
		t.Fatal(err)
	}
	_, resp, err = c.Send(ctx, h.url, ediMessage("q-3@acme.test", "application/pdf", []byte("%PDF two")))
	if err == nil {
		t.Fatal("changed payload accepted")
	}
	describedRefusal(t, h, resp, "quarantined", "q-3@acme.test", sha([]byte("%PDF two")))
	for _, want := range [][]byte{changed, []byte("%PDF two")} {
		if !quarantined(t, filepath.Join(h.quarantine, "acme"), want) {
			t.Errorf("%q not in the quarantine directory", want)
		}
	}
	if h.handler.count() != 2 {
		t.Fatalf("handler ran %d times", h.handler.count())
	}
}

// quarantined reports whether dir holds payload with its JSON description.
func quarantined(t *testing.T, dir string, payload []byte) bool {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.payload"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil || !bytes.Equal(b, payload) {
			continue
		}
		meta, err := os.ReadFile(strings.TrimSuffix(f, ".payload") + ".json")
		var m map[string]any
		if err == nil && json.Unmarshal(meta, &m) == nil && m["payload_sha256"] == sha(payload) && m["partner"] == "acme" {
			return true
		}
	}
	return false
}

// TestRefusalsOfMalformedInputLeakNoGoErrors: refusals of malformed input
// carry our reason and an incident reference, never a parser's or crypto
// package's error text; the incident leads to the detail in the log and
// the audit.
func TestRefusalsOfMalformedInputLeakNoGoErrors(t *testing.T) {
	t.Parallel()
	k := getKeys(t)
	h := newHarness(t, harnessOptions{ledger: true})
	signedOnly := rsaClient(k)
	signedOnly.Encryption = nil
	build := func(id string) *client.Outgoing {
		out, err := signedOnly.Build(testMessage(id))
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	t.Run("signature value not base64", func(t *testing.T) {
		out := build("leak-1@acme.test")
		m := splitMIME(t, out)
		m.editSOAP(t, func(doc *etree.Document) {
			find(doc.Root(), wssec.NamespaceDSig, "SignatureValue").SetText("!!!not base64!!!")
		})
		resp, err := signedOnly.Post(context.Background(), h.url, m.join(t, out))
		if err == nil {
			t.Fatal("accepted")
		}
		refusal(t, h, resp, as4.CodeFailedAuthentication, "ds:SignatureValue is not base64")
	})
	t.Run("signature value does not verify", func(t *testing.T) {
		out := build("leak-2@acme.test")
		m := splitMIME(t, out)
		m.editSOAP(t, func(doc *etree.Document) {
			sv := find(doc.Root(), wssec.NamespaceDSig, "SignatureValue")
			sv.SetText("AAAA" + strings.TrimSpace(sv.Text())[4:])
		})
		resp, err := signedOnly.Post(context.Background(), h.url, m.join(t, out))
		if err == nil {
			t.Fatal("accepted")
		}
		refusal(t, h, resp, as4.CodeFailedAuthentication, "signature value does not verify")
	})
	t.Run("envelope cut short", func(t *testing.T) {
		body := []byte(`<?xml version="1.0"?><env:Envelope xmlns:env="http://www.w3.org/2003/05/soap-envelope"><env:Header><eb:Messaging`)
		resp, err := http.Post(h.url, "application/soap+xml", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var buf bytes.Buffer
		buf.ReadFrom(resp.Body)
		if !bytes.Contains(buf.Bytes(), []byte("eb:Error")) {
			t.Fatalf("HTTP %d, no ebMS error:\n%s", resp.StatusCode, buf.Bytes())
		}
		noLeak(t, h, buf.Bytes())
	})
	t.Run("malformed UBL payload", func(t *testing.T) {
		bad := []byte(strings.Replace(string(invoiceXML), "</cbc:ID>", "</cbc:Id>", 1))
		_, resp, err := rsaClient(k).Send(context.Background(), h.url, ediMessage("leak-4@acme.test", "application/xml", bad))
		if err == nil {
			t.Fatal("accepted")
		}
		refusal(t, h, resp, as4.CodeOther, "UBL: malformed XML (line 2)")
	})
	if h.handler.count() != 0 {
		t.Fatalf("handler ran %d times", h.handler.count())
	}
}

// TestRandomBinaryStartingWithLTIsProcessed: with business dedup, an
// application/octet-stream attachment of '<' and 10,000 random bytes is an
// opaque payload, not a damaged XML envelope: it gets a receipt, and its
// retransmission the same receipt without the handler running again (it was
// EBMS:0004 "malformed XML before the root element", every retransmission
// too). The same attachment declared application/xml is still refused.
func TestRandomBinaryStartingWithLTIsProcessed(t *testing.T) {
	t.Parallel()
	k := getKeys(t)
	h := newHarness(t, harnessOptions{ledger: true})
	payload := make([]byte, 10_001)
	r := rand.New(rand.NewPCG(22, 0))
	for i := range payload {
		payload[i] = byte(r.Uint32())
	}
	payload[0] = '<'
	c := rsaClient(k)
	out, err := c.Build(ediMessage("random-lt@acme.test", "application/octet-stream", payload))
	if err != nil {
		t.Fatal(err)
	}
	first, err := c.Post(context.Background(), h.url, out)
	if err != nil || first.Receipt == nil {
		t.Fatalf("first post: %v", err)
	}
	second, err := c.Post(context.Background(), h.url, out)
	if err != nil || !bytes.Equal(first.Body, second.Body) {
		t.Fatalf("retransmission: %v", err)
	}
	if n := h.handler.count(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	_, resp, err := c.Send(context.Background(), h.url, ediMessage("random-lt-xml@acme.test", "application/xml", payload))
	if resp == nil {
		t.Fatalf("not sent: %v", err)
	}
	describedRefusal(t, h, resp, "its business envelope is damaged: payload 1: XML: malformed XML before the root element (line 1)")
}
