package as2

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	as2client "github.com/edigateway/gateway/as2/client"
	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/mdn"
)

// incidentRE matches an incident reference (exchange.NewIncident).
var incidentRE = regexp.MustCompile(`GW-[0-9A-HJKMNP-TV-Z]{6}`)

// goErrorMarkers are fragments of error texts of Go's standard library and
// of our parsers' internal chains; none may reach a partner.
var goErrorMarkers = []string{"invalid BER", "asn1:", "x509:", "crypto/", "illegal base64", "XML syntax error",
	"unexpected EOF", "gzip:", "flate:", "zlib:", "multipart:", "mime:", "verification error", "cms:", "smime:", "Detail:"}

// noLeak asserts that a refusal's text carries an incident reference and
// no Go error text, and that a log line and an audit record carry the same
// incident with the detail.
func noLeak(t *testing.T, e *env, text string) string {
	t.Helper()
	for _, m := range goErrorMarkers {
		if strings.Contains(text, m) {
			t.Errorf("refusal carries Go error text %q:\n%s", m, text)
		}
	}
	inc := incidentRE.FindString(text)
	if inc == "" {
		t.Fatalf("refusal has no incident reference:\n%s", text)
	}
	var line map[string]any
	for _, l := range strings.Split(e.logs.String(), "\n") {
		if strings.Contains(l, inc) {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	if line == nil || line["incident"] != inc {
		t.Fatalf("no log line carries incident %s", inc)
	}
	if line["err"] == nil && line["reason"] == nil && line["what"] == nil {
		t.Errorf("the log line of %s holds no detail: %v", inc, line)
	}
	recs, err := e.store.Audit().Query(context.Background(), audit.Query{Incident: inc})
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
	return inc
}

// TestDamagedPayloadIsRefused: with business dedup, a damaged envelope, a
// UBL document cut inside its root start tag and a payload declared XML
// that is not XML get a negative MDN naming the problem; nothing is
// delivered.
func TestDamagedPayloadIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{ledger: true})
	c := e.client()
	ubl := `<?xml version="1.0" encoding="UTF-8"?>` + "\n" + `<Invoice xmlns="urn:oasis:names:specification:ubl:schema:xsd:Invoice-2" xmlns:cbc="urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2"><cbc:ID>INV-1</cbc:ID></Invoice>`
	cases := []struct {
		name, ct, payload, want string
	}{
		{"UBL cut inside its root start tag", "application/xml", ubl[:strings.Index(ubl, "xmlns:cbc")+8], "XML: malformed XML before the root element (line 2)"},
		{"UBL malformed", "application/xml", strings.Replace(ubl, "</cbc:ID>", "</cbc:Id>", 1), "UBL: malformed XML (line 2)"},
		{"declared XML but not XML", "text/xml", "INVOICE 4711", "declared text/xml"},
		{"UNZ reference differs", "application/edifact",
			"UNB+UNOC:3+4000001000002:14+4000001000003:14+260101:1200+REF1'UNH+1+ORDERS:D:96A:UN'UNT+2+1'UNZ+1+REF2'", `UNZ 0020 "REF2" does not match UNB 0020 "REF1"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := c.Prepare([]byte(tc.payload), tc.ct, "doc")
			if err != nil {
				t.Fatal(err)
			}
			resp, body := e.post(t, m.Header, m.Body)
			p := expectMDN(t, resp, body, mdn.DispUnexpectedProcessingError)
			txt := strings.Join(strings.Fields(p.Report.HumanText), " ")
			if !strings.Contains(txt, "business envelope is damaged") || !strings.Contains(txt, tc.want) {
				t.Errorf("text %q lacks %q", txt, tc.want)
			}
			noLeak(t, e, txt)
			if n := e.handler.count(m.ID); n != 0 {
				t.Fatalf("handler ran %d times", n)
			}
		})
	}
}

// TestOnDriftQuarantineAS2: under on_drift: quarantine the drifted payload
// and its description are kept under quarantine_dir/<partner>/ and the
// negative MDN says so, for a changed interchange under a new Message-ID and
// for a changed payload under an accepted Message-ID.
func TestOnDriftQuarantineAS2(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{ledger: true, onDrift: "quarantine"})
	c := e.client()
	edi := func(body string) string {
		return "UNB+UNOC:3+4000001000002:14+4000001000003:14+260101:1200+REF00077'UNH+1+ORDERS:D:96A:UN'BGM+220+" + body + "'UNT+3+1'UNZ+1+REF00077'"
	}
	send := func(m *as2client.Message, want mdn.Disposition) string {
		t.Helper()
		resp, body := e.post(t, m.Header, m.Body)
		return strings.Join(strings.Fields(expectMDN(t, resp, body, want).Report.HumanText), " ")
	}
	send(prepare(t, c, edi("1")), mdn.DispProcessed)
	txt := send(prepare(t, c, edi("2")), mdn.DispUnexpectedProcessingError)
	for _, w := range []string{"quarantined", "EDIFACT interchange reference REF00077", sha256hex(edi("1")), sha256hex(edi("2"))} {
		if !strings.Contains(txt, w) {
			t.Errorf("text lacks %q: %s", w, txt)
		}
	}
	noLeak(t, e, txt)
	first := prepare(t, c, "PLAIN 1")
	send(first, mdn.DispProcessed)
	changed := prepare(t, c, "PLAIN 2")
	changed.Header.Set("Message-Id", first.ID)
	txt = send(changed, mdn.DispUnexpectedProcessingError)
	if !strings.Contains(txt, "quarantined") || !strings.Contains(txt, strings.Trim(first.ID, "<>")) {
		t.Errorf("transport drift text %q", txt)
	}
	dir := filepath.Join(e.root, "quarantine", "acme")
	for _, want := range []string{edi("2"), "PLAIN 2"} {
		if !quarantinedAS2(dir, []byte(want)) {
			t.Errorf("%q not quarantined in %s", want, dir)
		}
	}
}

func quarantinedAS2(dir string, payload []byte) bool {
	files, _ := filepath.Glob(filepath.Join(dir, "*.payload"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil || !bytes.Equal(b, payload) {
			continue
		}
		meta, err := os.ReadFile(strings.TrimSuffix(f, ".payload") + ".json")
		var m map[string]any
		if err == nil && json.Unmarshal(meta, &m) == nil && m["payload_sha256"] == sha256hex(string(payload)) && m["partner"] == "acme" {
			return true
		}
	}
	return false
}

// TestRefusalsOfMalformedInputLeakNoGoErrorsAS2: negative MDNs (and the
// plain HTTP answer when no MDN was asked for) give our reason and an
// incident reference, never the BER, CMS or MIME parser's error chain; the
// incident leads to the detail in the log and the audit.
func TestRefusalsOfMalformedInputLeakNoGoErrorsAS2(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{partnerYAML: "  require_signature: true\n"})
	cases := []struct {
		name   string
		tweak  func(c *as2client.Client)
		mangle func(m *as2client.Message)
		want   mdn.Disposition
	}{
		{"garbage CMS", nil, func(m *as2client.Message) { m.Body = []byte("this is not DER at all") }, mdn.DispUnexpectedProcessingError},
		{"truncated CMS", nil, func(m *as2client.Message) { m.Body = m.Body[:len(m.Body)/2] }, mdn.DispUnexpectedProcessingError},
		{"corrupt ciphertext", nil, func(m *as2client.Message) { m.Body[len(m.Body)-20] ^= 0xff }, mdn.DispDecryptionFailed},
		{"multipart/signed without parts", func(c *as2client.Client) { c.Cipher = "" }, func(m *as2client.Message) {
			m.Body = []byte("no boundary here\r\n")
		}, mdn.DispIntegrityCheckFailed},
		{"signature not DER", func(c *as2client.Client) { c.Cipher = "" }, func(m *as2client.Message) {
			i := bytes.Index(m.Body, []byte("filename=smime.p7s\r\n\r\n")) + len("filename=smime.p7s\r\n\r\n")
			copy(m.Body[i:], "AAAA")
		}, mdn.DispIntegrityCheckFailed},
	}
	for i, tc := range cases {
		for _, mode := range []as2client.MDNMode{as2client.MDNSync, as2client.MDNNone} {
			t.Run(fmt.Sprintf("%s/%s", tc.name, mode), func(t *testing.T) {
				c := e.client()
				c.MDN = mode
				if tc.tweak != nil {
					tc.tweak(c)
				}
				m := prepare(t, c, fmt.Sprintf("ISA*payload %d %s", i, mode))
				tc.mangle(m)
				resp, body := e.post(t, m.Header, m.Body)
				text := string(body)
				if mode == as2client.MDNSync {
					text = expectMDN(t, resp, body, tc.want).Report.HumanText
				} else if resp.StatusCode < 400 {
					t.Fatalf("HTTP %d without an MDN", resp.StatusCode)
				}
				noLeak(t, e, text)
				if e.handler.count(m.ID) != 0 {
					t.Fatal("handler ran")
				}
			})
		}
	}
	if !strings.Contains(e.logs.String(), `"incident"`) {
		t.Fatal("no incident logged")
	}
}

// TestRandomBinaryStartingWithLTIsProcessed: with business dedup, an
// application/octet-stream payload of '<' and 10,000 random bytes is an
// opaque payload, not a damaged XML envelope: it is processed, and its
// retransmission is a duplicate (it was processed/error "malformed XML
// before the root element", every retransmission too). The same payload
// declared application/xml is still refused.
func TestRandomBinaryStartingWithLTIsProcessed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{ledger: true})
	c := e.client()
	payload := make([]byte, 10_001)
	r := rand.New(rand.NewPCG(22, 0))
	for i := range payload {
		payload[i] = byte(r.Uint32())
	}
	payload[0] = '<'
	m, err := c.Prepare(payload, "application/octet-stream", "blob.bin")
	if err != nil {
		t.Fatal(err)
	}
	resp, body := e.post(t, m.Header, m.Body)
	expectMDN(t, resp, body, mdn.DispProcessed)
	resp, body = e.post(t, m.Header, m.Body)
	expectMDN(t, resp, body, mdn.DispDuplicateDocument)
	if n := e.handler.count(m.ID); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	declared, err := c.Prepare(payload, "application/xml", "blob.xml")
	if err != nil {
		t.Fatal(err)
	}
	resp, body = e.post(t, declared.Header, declared.Body)
	p := expectMDN(t, resp, body, mdn.DispUnexpectedProcessingError)
	if txt := strings.Join(strings.Fields(p.Report.HumanText), " "); !strings.Contains(txt, "its business envelope is damaged: payload 1: XML: malformed XML before the root element (line 1)") {
		t.Errorf("declared application/xml: %s", txt)
	}
}
