package as2

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	as2client "github.com/edigateway/gateway/as2/client"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/internal/cms"
	"github.com/edigateway/gateway/mdn"
)

// expectMDN parses a sync MDN response and checks its disposition.
func expectMDN(t *testing.T, resp *http.Response, body []byte, want mdn.Disposition) *mdn.Parsed {
	t.Helper()
	if resp.StatusCode != 200 {
		t.Fatalf("HTTP %d %s", resp.StatusCode, body)
	}
	p, err := mdn.ParseHTTP(resp.Header, body)
	if err != nil {
		t.Fatalf("no MDN: %v\n%s", err, body)
	}
	if got := p.Report.Disposition.String(); got != want.String() {
		t.Fatalf("disposition %q, want %q\n%s", got, want, p.Report.HumanText)
	}
	return p
}

// verifyMDN checks that an MDN is signed by the gateway's first key.
func verifyMDN(t *testing.T, p *mdn.Parsed) {
	t.Helper()
	err := p.Verify(func(sig, content []byte) error {
		_, err := cms.VerifyDetached(sig, content, []*x509.Certificate{keys.gw1.Cert}, time.Now())
		return err
	})
	if err != nil {
		t.Fatalf("MDN signature: %v", err)
	}
}

func prepare(t *testing.T, c *as2client.Client, payload string) *as2client.Message {
	t.Helper()
	m, err := c.Prepare([]byte(payload), "application/edi-x12", "po.x12")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestRejectionsReachNoHandler(t *testing.T) {
	t.Parallel()
	k := getKeys(t)
	e := newEnv(t, envOptions{partnerYAML: "  require_signature: true\n  allowed_ciphers: [aes128-cbc, aes256-cbc, aes128-gcm]\n  allowed_digests: [sha256, sha512]\n"})
	payload := "ISA*00*          *00*          *ZZ*ACME*ZZ*GATEWAY~"

	cases := []struct {
		name   string
		tweak  func(c *as2client.Client)
		mangle func(m *as2client.Message)
		want   mdn.Disposition
		text   string
		signed bool
	}{
		{name: "unknown AS2-From", tweak: func(c *as2client.Client) { c.From = "NOBODY" }, want: mdn.DispUnknownTradingPartner, text: `AS2-From "NOBODY"`},
		{name: "unknown AS2-To", tweak: func(c *as2client.Client) { c.To = "SOMEONE ELSE" }, want: mdn.DispUnknownTradingPartner, text: `AS2-To "SOMEONE ELSE"`},
		{name: "signer not configured for AS2-From", tweak: func(c *as2client.Client) { c.SignCert, c.SignKey = k.gw2.Cert, k.gw2.Key },
			want: mdn.DispAuthenticationFailed, text: `certificate configured for AS2-From "ACME"`, signed: true},
		{name: "unsigned where required", tweak: func(c *as2client.Client) { c.SignDigest = "" }, want: mdn.DispInsufficientMessageSecurity, text: "requires signed messages", signed: true},
		{name: "3des refused by policy", tweak: func(c *as2client.Client) { c.Cipher = "3des" }, want: mdn.DispInsufficientMessageSecurity, text: "content cipher 3des is not allowed", signed: true},
		{name: "sha1 refused by policy", tweak: func(c *as2client.Client) { c.SignDigest = "sha1" }, want: mdn.DispInsufficientMessageSecurity, text: "signature digest sha1 is not allowed", signed: true},
		{name: "encrypted for another certificate", tweak: func(c *as2client.Client) { c.RecipientCerts = []*x509.Certificate{k.p1.Cert} },
			want: mdn.DispDecryptionFailed, text: "not encrypted for any of our certificates", signed: true},
		{name: "tampered content", tweak: func(c *as2client.Client) { c.Cipher = "" }, mangle: func(m *as2client.Message) {
			m.Body = bytes.Replace(m.Body, []byte("ZZ*ACME"), []byte("ZZ*EVIL"), 1)
		}, want: mdn.DispIntegrityCheckFailed, text: "signature does not match", signed: true},
		{name: "tampered signature", tweak: func(c *as2client.Client) { c.Cipher = "" }, mangle: func(m *as2client.Message) {
			i := bytes.Index(m.Body, []byte("filename=smime.p7s\r\n\r\n")) + 200
			m.Body[i] ^= 'A' ^ 'B'
			if m.Body[i] == '\r' || m.Body[i] == '\n' {
				m.Body[i] = 'Q'
			}
		}, want: mdn.DispIntegrityCheckFailed, signed: true},
		{name: "corrupt ciphertext", mangle: func(m *as2client.Message) { m.Body[len(m.Body)-20] ^= 0xff },
			want: mdn.DispDecryptionFailed, signed: true},
		{name: "garbage CMS", mangle: func(m *as2client.Message) { m.Body = []byte("this is not DER at all") },
			want: mdn.DispUnexpectedProcessingError, signed: true},
		{name: "multipart/signed without parts", tweak: func(c *as2client.Client) { c.Cipher = "" }, mangle: func(m *as2client.Message) {
			m.Body = []byte("no boundary here\r\n")
		}, want: mdn.DispIntegrityCheckFailed, signed: true},
		{name: "required micalg unsupported", mangle: func(m *as2client.Message) {
			m.Header.Set("Disposition-Notification-Options", "signed-receipt-protocol=optional, pkcs7-signature; signed-receipt-micalg=required, md2, sha1")
		}, want: mdn.DispUnsupportedMICAlgorithms},
		{name: "required protocol unsupported", mangle: func(m *as2client.Message) {
			m.Header.Set("Disposition-Notification-Options", "signed-receipt-protocol=required, pgp-signature; signed-receipt-micalg=optional, sha256")
		}, want: mdn.DispUnsupportedFormat},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cl := e.client()
			cl.Cipher = "aes256-cbc"
			if c.tweak != nil {
				c.tweak(cl)
			}
			m := prepare(t, cl, payload)
			if c.mangle != nil {
				c.mangle(m)
			}
			resp, body := e.post(t, m.Header, m.Body)
			p := expectMDN(t, resp, body, c.want)
			if p.Signed != c.signed {
				t.Errorf("MDN signed = %v, want %v", p.Signed, c.signed)
			}
			if c.signed {
				verifyMDN(t, p)
			}
			if !strings.Contains(p.Report.HumanText, c.text) || !strings.Contains(p.Report.HumanText, m.ID) {
				t.Errorf("human text lacks %q / the Message-ID: %s", c.text, p.Report.HumanText)
			}
			if p.Report.OriginalMessageID != m.ID || p.Report.MIC != "" {
				t.Errorf("MDN %+v", p.Report)
			}
			if n := e.handler.count(m.ID); n != 0 {
				t.Fatalf("handler ran %d times", n)
			}
			recs := e.auditFor(t, cl.From, m.ID)
			if len(recs) != 1 || recs[0].Decision != "rejected" || recs[0].Disposition != dispositionText(c.want) || recs[0].Error == "" || recs[0].Protocol != "as2" {
				t.Fatalf("audit %+v", recs)
			}
			if (recs[0].Partner == "acme") == (c.want.Description == mdn.DescUnknownTradingPartner) {
				t.Errorf("audit partner %q", recs[0].Partner)
			}
		})
	}
}

func TestUnknownPartnerIsAnsweredSyncEvenWhenAsyncAsked(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	c := e.client()
	c.From, c.MDN = "STRANGER", as2client.MDNAsync
	m := prepare(t, c, "x")
	resp, body := e.post(t, m.Header, m.Body)
	p := expectMDN(t, resp, body, mdn.DispUnknownTradingPartner)
	if p.Signed {
		t.Fatal("MDN to an unknown partner is signed")
	}
	if got, _ := e.outbox.Lease(context.Background(), 10, time.Millisecond); len(got) != 0 {
		t.Fatalf("queued %d MDNs for an unknown partner", len(got))
	}
}

func TestUnauthenticatedFailureIsAnsweredSyncEvenWhenAsyncAsked(t *testing.T) {
	t.Parallel()
	k := getKeys(t)
	e := newEnv(t, envOptions{partnerYAML: "  require_signature: true\n"})
	for name, tweak := range map[string]func(c *as2client.Client){
		"wrong signer": func(c *as2client.Client) { c.SignCert, c.SignKey = k.gw2.Cert, k.gw2.Key },
		"unsigned":     func(c *as2client.Client) { c.SignDigest = "" },
	} {
		c := e.client()
		c.MDN = as2client.MDNAsync
		tweak(c)
		m := prepare(t, c, "x")
		resp, body := e.post(t, m.Header, m.Body)
		if resp.StatusCode != 200 || len(body) == 0 {
			t.Fatalf("%s: HTTP %d with %d bytes, want the MDN on the response", name, resp.StatusCode, len(body))
		}
		if _, err := mdn.ParseHTTP(resp.Header, body); err != nil {
			t.Fatalf("%s: no MDN on the response: %v", name, err)
		}
		if got, _ := e.outbox.Lease(context.Background(), 10, time.Millisecond); len(got) != 0 {
			t.Fatalf("%s: queued %d MDNs to an unauthenticated address", name, len(got))
		}
	}
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{maxBody: 4096})
	c := e.client()
	m := prepare(t, c, "small")
	big := prepare(t, c, strings.Repeat("0123456789", 1000))

	for _, tc := range []struct {
		name   string
		header func(h http.Header)
		body   []byte
		status int
		text   string
	}{
		{"too large", nil, big.Body, http.StatusRequestEntityTooLarge, "exceeds the limit of 4096 bytes"},
		{"no AS2-From", func(h http.Header) { h.Del("AS2-From") }, m.Body, 400, "AS2-From header missing"},
		{"no AS2-To", func(h http.Header) { h.Set("AS2-To", `""`) }, m.Body, 400, "AS2-To"},
		{"no Message-ID", func(h http.Header) { h.Del("Message-Id") }, m.Body, 400, "Message-ID header missing"},
		{"Message-ID <>", func(h http.Header) { h.Set("Message-Id", "<>") }, m.Body, 400, "Message-ID"},
		{"empty body", nil, nil, 400, "no body"},
		{"unterminated quoted AS2-From", func(h http.Header) { h.Set("AS2-From", `"ACME`) }, m.Body, 400, "unterminated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := m.Header.Clone()
			if tc.header != nil {
				tc.header(h)
			}
			resp, body := e.post(t, h, tc.body)
			if resp.StatusCode != tc.status || !strings.Contains(string(body), tc.text) {
				t.Fatalf("HTTP %d %q, want %d containing %q", resp.StatusCode, body, tc.status, tc.text)
			}
		})
	}
	resp, err := http.Get(e.srv.URL + "/as2")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" {
		t.Fatalf("GET: %d", resp.StatusCode)
	}
	if n := e.handler.count(m.ID) + e.handler.count(big.ID); n != 0 {
		t.Fatalf("handler ran %d times", n)
	}
}

func TestHandlerErrorThenRetransmissionIsProcessed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	e.handler.setFail(func(*exchange.Message) error { return errors.New("ERP unreachable at /internal/path") })
	c := e.client()
	m := prepare(t, c, "ORDERS")
	resp, body := e.post(t, m.Header, m.Body)
	expectHandler503(t, resp, body)
	if strings.Contains(string(body), "/internal/path") {
		t.Errorf("503 body %q names the handler's error", body)
	}
	e.handler.setFail(nil)
	resp, body = e.post(t, m.Header, m.Body)
	p := expectMDN(t, resp, body, mdn.DispProcessed)
	verifyMDN(t, p)
	if !p.Report.MICEquals(m.MIC, m.MICAlg) {
		t.Errorf("MIC %s", p.Report.MIC)
	}
	resp, body = e.post(t, m.Header, m.Body)
	expectMDN(t, resp, body, mdn.DispDuplicateDocument)
	if n := e.handler.count(m.ID); n != 2 {
		t.Fatalf("handler ran %d times, want 2 (failed, then processed)", n)
	}
}

func TestDriftIsRejectedNamingBothHashes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	c := e.client()
	first := prepare(t, c, "INVOICE 1")
	resp, body := e.post(t, first.Header, first.Body)
	expectMDN(t, resp, body, mdn.DispProcessed)
	changed := prepare(t, c, "INVOICE 1 CHANGED")
	changed.Header.Set("Message-Id", strings.Trim(first.ID, "<>")) // same id, without brackets (IBM Sterling)
	resp, body = e.post(t, changed.Header, changed.Body)
	p := expectMDN(t, resp, body, mdn.DispUnexpectedProcessingError)
	txt := strings.Join(strings.Fields(p.Report.HumanText), " ")
	if !strings.Contains(txt, strings.Trim(first.ID, "<>")) {
		t.Errorf("human text lacks the Message-ID: %s", txt)
	}
	for _, h := range []string{sha256hex("INVOICE 1"), sha256hex("INVOICE 1 CHANGED")} {
		if !strings.Contains(txt, h) {
			t.Errorf("human text lacks hash %s: %s", h, txt)
		}
	}
	if n := e.handler.count(first.ID); n != 1 {
		t.Fatalf("handler ran %d times", n)
	}
}

func TestDuplicateCarriesOriginalMICAndPartnerDisposition(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{partnerYAML: "  duplicate_disposition: processed\n"})
	c := e.client()
	m1 := prepare(t, c, "DESADV")
	resp, body := e.post(t, m1.Header, m1.Body)
	p1 := expectMDN(t, resp, body, mdn.DispProcessed)
	// The partner re-signs the same document with another digest under the
	// same Message-ID: a duplicate whose MIC would differ.
	c.SignDigest = "sha512"
	m2 := prepare(t, c, "DESADV")
	m2.Header.Set("Message-Id", m1.ID)
	resp, body = e.post(t, m2.Header, m2.Body)
	p2 := expectMDN(t, resp, body, mdn.DispProcessed) // duplicate_disposition: processed
	if p2.Fields.Get("Received-Content-MIC") != p1.Fields.Get("Received-Content-MIC") || !p2.Report.MICEquals(m1.MIC, m1.MICAlg) {
		t.Fatalf("duplicate MIC %q, original %q", p2.Fields.Get("Received-Content-MIC"), p1.Fields.Get("Received-Content-MIC"))
	}
	if !strings.Contains(p2.Report.HumanText, "duplicate") || p2.SignatureMICAlg != "sha-512" {
		t.Errorf("duplicate MDN: %q, micalg %q", p2.Report.HumanText, p2.SignatureMICAlg)
	}
	if n := e.handler.count(m1.ID); n != 1 {
		t.Fatalf("handler ran %d times", n)
	}
}

func TestInFlightGets503(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	started := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	e.handler.setFail(func(*exchange.Message) error {
		once.Do(func() { close(started) })
		<-release
		return nil
	})
	c := e.client()
	m := prepare(t, c, "slow")
	done := make(chan *as2client.Result)
	go func() {
		r, _ := c.Send(context.Background(), m)
		done <- r
	}()
	<-started
	resp, body := e.post(t, m.Header, m.Body)
	close(release)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("concurrent delivery: HTTP %d %q", resp.StatusCode, body)
	}
	if r := <-done; r == nil || !r.OK() {
		t.Fatalf("first delivery: %+v", r)
	}
}

func TestMICAlgorithmLeftToRightAndSignedMDN(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	for _, tc := range []struct{ options, micalg, fieldAlg string }{
		{"signed-receipt-protocol=optional, pkcs7-signature; signed-receipt-micalg=optional, md2, sha-512, sha1", "sha-512", "sha-512"},
		{"Signed-Receipt-Protocol=Optional, PKCS7-Signature;\tsigned-receipt-micalg = optional , SHA256", "sha-256", "SHA256"},
		{"signed-receipt-protocol=optional, pkcs7-signature; signed-receipt-micalg=optional, sha1", "sha-1", "sha1"},
	} {
		c := e.client()
		c.SignDigest, c.MICAlg = "", tc.micalg // encrypted, unsigned: MIC over the decrypted entity
		m := prepare(t, c, "unsigned, encrypted")
		m.Header.Set("Disposition-Notification-Options", tc.options)
		resp, body := e.post(t, m.Header, m.Body)
		p := expectMDN(t, resp, body, mdn.DispProcessed)
		verifyMDN(t, p)
		if p.SignatureMICAlg != tc.micalg || p.Fields.Get("Received-Content-MIC") != m.MIC+", "+tc.fieldAlg {
			t.Errorf("%s: micalg %q, Received-Content-MIC %q, want %s, %s", tc.options, p.SignatureMICAlg, p.Fields.Get("Received-Content-MIC"), m.MIC, tc.fieldAlg)
		}
	}
}

func TestNoMDNRequested(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{partnerYAML: "  require_signature: true\n"})
	c := e.client()
	c.MDN = as2client.MDNNone
	m := prepare(t, c, "fire and forget")
	res, err := c.Send(context.Background(), m)
	if err != nil || res.Status != 200 || !res.OK() || res.MDN != nil {
		t.Fatalf("%v %+v", err, res)
	}
	if e.handler.count(m.ID) != 1 {
		t.Fatal("not processed")
	}
	c.SignDigest = ""
	m = prepare(t, c, "unsigned")
	resp, body := e.post(t, m.Header, m.Body)
	if resp.StatusCode != 400 || !strings.Contains(string(body), "requires signed messages") {
		t.Fatalf("refusal without MDN: %d %s", resp.StatusCode, body)
	}
}

func TestRequireSignedMDNSignsUnaskedMDN(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{partnerYAML: "  require_signed_mdn: true\n"})
	c := e.client()
	c.SignedMDN = false
	m := prepare(t, c, "x")
	resp, body := e.post(t, m.Header, m.Body)
	p := expectMDN(t, resp, body, mdn.DispProcessed)
	verifyMDN(t, p)
}

func TestKeyAndCertificateRollover(t *testing.T) {
	t.Parallel()
	k := getKeys(t)
	e := newEnv(t, envOptions{})
	for _, tc := range []struct {
		signer cms.KeyPair
		rcpt   *x509.Certificate
	}{{k.p1, k.gw1.Cert}, {k.p1, k.gw2.Cert}, {k.p2, k.gw1.Cert}} {
		c := e.client()
		c.SignCert, c.SignKey, c.RecipientCerts = tc.signer.Cert, tc.signer.Key, []*x509.Certificate{tc.rcpt}
		m := prepare(t, c, "rollover "+tc.signer.Cert.Subject.CommonName+tc.rcpt.Subject.CommonName)
		res, err := c.Send(context.Background(), m)
		if err != nil || !res.OK() {
			t.Fatalf("%s → %s: %v %+v", tc.signer.Cert.Subject.CommonName, tc.rcpt.Subject.CommonName, err, res)
		}
	}
}

func TestDecompressionFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	inner := "Content-Type: application/edi-consent\r\n\r\n" + strings.Repeat("UNH+1+ORDERS:D:96A:UN'", 50)
	der, err := cms.Compress([]byte(inner))
	if err != nil {
		t.Fatal(err)
	}
	der[len(der)-8] ^= 0xff // inside the zlib stream (its checksum)
	c := e.client()
	m := prepare(t, c, "x")
	h := m.Header.Clone()
	h.Set("Content-Type", "application/pkcs7-mime; smime-type=compressed-data; name=smime.p7z")
	h.Del("Content-Transfer-Encoding")
	resp, body := e.post(t, h, der)
	expectMDN(t, resp, body, mdn.DispDecompressionFailed)
}

func TestLogsCarryIDsButNoPayload(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	c := e.client()
	c.Cipher = ""
	m := prepare(t, c, "SECRET-PAYLOAD-BYTES")
	if res, err := c.Send(context.Background(), m); err != nil || !res.OK() {
		t.Fatal(err, res)
	}
	l := e.logs.String()
	if strings.Contains(l, "SECRET-PAYLOAD-BYTES") {
		t.Fatal("payload logged")
	}
	if !strings.Contains(l, `"partner":"acme"`) || !strings.Contains(l, `"protocol":"as2"`) || !strings.Contains(l, strings.Trim(m.ID, "<>")) {
		t.Fatalf("log lacks partner/protocol/message id: %s", l)
	}
}

func sha256hex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func TestReplyTexts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{memory: true})
	p, _ := e.dir.ByAS2("ACME", "GATEWAY", "GATEWAY")
	x := &inbound{req: &Request{From: "ACME", To: "GATEWAY", MessageID: "<m1@acme>"}, partner: p,
		mic: "q5tlGIHUBJ9U3gCnv38qq2uhZ3CWr2d3IkOfEpN8ABc=", micAlg: micAlg{digest: "sha256", spelled: "sha256"}}
	r := &replies{e: e.ep, x: x}
	parse := func(rep exchange.Reply, err error) *mdn.Parsed {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		pm, err := mdn.ParseHTTP(rep.Header, rep.Body)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Disposition != dispositionText(pm.Report.Disposition) || pm.Fields.Get("Received-Content-MIC") != x.mic+", sha256" {
			t.Fatalf("reply %q, MDN %q, MIC %q", rep.Disposition, pm.Report.Disposition, pm.Fields.Get("Received-Content-MIC"))
		}
		return pm
	}
	first := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	pm := parse(r.DuplicateInterchange(context.Background(), []exchange.InterchangeDuplicate{{
		Interchange: dedup.Interchange{Standard: "edifact", Reference: "REF42", Sender: "14:4000001000002"}, FirstSeen: first}}))
	if pm.Report.Disposition.String() != mdn.DispDuplicateDocument.String() ||
		!strings.Contains(pm.Report.HumanText, "edifact interchange REF42 from 14:4000001000002 (first received 2026-03-01T10:00:00Z)") {
		t.Fatalf("duplicate interchange MDN: %q %q", pm.Report.Disposition, pm.Report.HumanText)
	}
	pm = parse(r.Failed(context.Background(), &exchange.Failure{Kind: exchange.Damaged, Err: errors.New("payload 1: UNZ count 2, UNB has 1"), Reason: "payload 1: UNZ count 2, UNB has 1"}))
	if pm.Report.Disposition.String() != mdn.DispUnexpectedProcessingError.String() || !strings.Contains(pm.Report.HumanText, "UNZ count 2") {
		t.Fatalf("damaged: %q", pm.Report.HumanText)
	}
	pm = parse(r.Failed(context.Background(), &exchange.Failure{Kind: exchange.Quarantined, Err: errors.New("interchange REF42 changed; quarantined"),
		StoredSHA256: "aaaa", PayloadSHA256: "bbbb"}))
	if !strings.Contains(pm.Report.HumanText, "<m1@acme>") || !strings.Contains(pm.Report.HumanText, "aaaa") || !strings.Contains(pm.Report.HumanText, "bbbb") {
		t.Fatalf("quarantined: %q", pm.Report.HumanText)
	}
}

// TestInterchangeResentUnderNewMessageID: with business-level dedup, an
// EDI interchange resent under a new Message-ID gets the duplicate MDN
// with its own MIC and no second handler run; a changed interchange under
// the same reference and a damaged envelope get negative MDNs.
func TestInterchangeResentUnderNewMessageID(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{ledger: true})
	c := e.client()
	edi := "UNB+UNOC:3+4000001000002:14+4000001000003:14+260101:1200+REF00042'UNH+1+ORDERS:D:96A:UN'BGM+220+4711'UNT+3+1'UNZ+1+REF00042'"
	m1 := prepare(t, c, edi)
	resp, body := e.post(t, m1.Header, m1.Body)
	expectMDN(t, resp, body, mdn.DispProcessed)

	m2 := prepare(t, c, edi)
	resp, body = e.post(t, m2.Header, m2.Body)
	p := expectMDN(t, resp, body, mdn.DispDuplicateDocument)
	if !p.Report.MICEquals(m2.MIC, m2.MICAlg) || !strings.Contains(p.Report.HumanText, "REF00042") {
		t.Fatalf("MIC %s (want %s), text %q", p.Report.MIC, m2.MIC, p.Report.HumanText)
	}
	// The resend's own retransmission is a transport duplicate of it.
	resp, body = e.post(t, m2.Header, m2.Body)
	expectMDN(t, resp, body, mdn.DispDuplicateDocument)
	if n1, n2 := e.handler.count(m1.ID), e.handler.count(m2.ID); n1 != 1 || n2 != 0 {
		t.Fatalf("handler runs %d, %d", n1, n2)
	}

	changed := prepare(t, c, strings.Replace(edi, "BGM+220+4711", "BGM+220+4712", 1))
	resp, body = e.post(t, changed.Header, changed.Body)
	p = expectMDN(t, resp, body, mdn.DispUnexpectedProcessingError)
	if !strings.Contains(p.Report.HumanText, sha256hex(edi)) {
		t.Errorf("drift text %q", p.Report.HumanText)
	}
	damaged := prepare(t, c, strings.Replace(edi, "UNZ+1+REF00042", "UNZ+1+REF99999", 1))
	resp, body = e.post(t, damaged.Header, damaged.Body)
	p = expectMDN(t, resp, body, mdn.DispUnexpectedProcessingError)
	if !strings.Contains(p.Report.HumanText, "business envelope is damaged") {
		t.Errorf("damaged text %q", p.Report.HumanText)
	}
	if e.handler.count(changed.ID)+e.handler.count(damaged.ID) != 0 {
		t.Fatal("handler ran for a refused interchange")
	}
}

// Without an MDN the HTTP status is the partner's only signal: a message the
// handler failed on must not be answered 200, or the partner never resends it;
// it gets 503 with Retry-After, as with an MDN requested.
func TestNoMDNRequestedHandlerErrorIsNotOK(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	e.handler.setFail(func(*exchange.Message) error { return errors.New("ERP unreachable") })
	c := e.client()
	c.MDN = as2client.MDNNone
	m := prepare(t, c, "fire and forget")
	resp, body := e.post(t, m.Header, m.Body)
	expectHandler503(t, resp, body)
	e.handler.setFail(nil)
	resp, body = e.post(t, m.Header, m.Body)
	if resp.StatusCode != 200 || len(body) != 0 || e.handler.count(m.ID) != 2 {
		t.Fatalf("retransmission: %d %q, handler ran %d times", resp.StatusCode, body, e.handler.count(m.ID))
	}
}
