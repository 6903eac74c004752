package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"fmt"
	"html"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	as2client "github.com/edigateway/gateway/as2/client"
	"github.com/edigateway/gateway/as4"
	as4client "github.com/edigateway/gateway/as4/client"
	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/internal/testpki"
	"github.com/edigateway/gateway/internal/trust"
	"github.com/edigateway/gateway/internal/trust/trusttest"
	"github.com/edigateway/gateway/partners"
)

// trustTexts is a live gateway (both protocols) with, besides the demo
// partner, "oldco" (AS2 OLDCO, AS4 urn:oldco) pinned to an expired
// certificate of serial 0x0A1B2C (662316), and "caco" (AS2 CACO, AS4
// urn:caco) under trust: ca with OCSP checking by a running responder,
// whose CA issued an expired certificate and one with an RSA-1024 key.
type trustTexts struct {
	g              *liveGateway
	logs           *syncBuf
	dir            string            // the partner directory
	gw             *x509.Certificate // the gateway's (demo) certificate
	old, expired   trusttest.Issued
	weak           trusttest.Issued
	root           *trusttest.CA
	expiredAt      time.Time
	as2Seq, as4Seq int
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func newSyncBuf() *syncBuf { return &syncBuf{} }
func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startTrustTexts(t *testing.T) *trustTexts {
	t.Helper()
	x := &trustTexts{logs: newSyncBuf(), dir: t.TempDir(), expiredAt: time.Date(2022, 1, 1, 0, 0, 0, 0, time.UTC)}
	demo := filepath.Dir(demoConfig(t))
	for _, f := range []string{"demo.yaml", "demo-partner.pem"} {
		b, err := os.ReadFile(filepath.Join(demo, "partners", f))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(x.dir, f), b)
	}
	oldKey := testpki.RSAKey(t, 90)
	old := testpki.SelfSigned(t, oldKey, testpki.Cert{CommonName: "OLDCO AS2/AS4", Organization: []string{"Old Co"}, Serial: 0x0A1B2C,
		NotAfter: x.expiredAt})
	x.old = trusttest.Issued{Cert: old, Key: oldKey}
	writeFile(t, filepath.Join(x.dir, "oldco.pem"), testpki.CertPEM(old))
	const pmode = "  pmodes:\n    - id: demo-invoice\n      service: urn:demo:invoicing\n      action: Deliver\n"
	const ptype = "urn:oasis:names:tc:ebcore:partyid-type:unregistered"
	writeFile(t, filepath.Join(x.dir, "oldco.yaml"), []byte("id: oldco\nas2:\n  as2_id: OLDCO\n  certificates: [oldco.pem]\n  require_signature: true\n"+
		"as4:\n  party_id: urn:oldco\n  party_type: "+ptype+"\n  certificates: [oldco.pem]\n"+pmode))

	x.root = trusttest.NewRoot(t, "CACO Root CA")
	weakKey, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	x.expired = x.root.Issue(t, trusttest.Leaf{CommonName: "CACO Old", Organization: []string{"CA Co"}, NotAfter: x.expiredAt})
	x.weak = x.root.Issue(t, trusttest.Leaf{CommonName: "CACO Weak", Organization: []string{"CA Co"}, Key: weakKey})
	responder := x.root.StartOCSP(t, nil, 60)
	writeFile(t, filepath.Join(x.dir, "caco-root.pem"), testpki.CertPEM(x.root.Cert))
	ca := "  trust: ca\n  ca_certificates: [caco-root.pem]\n  revocation: {mode: ocsp, ocsp_responder: \"" + responder.URL + "\"}\n"
	writeFile(t, filepath.Join(x.dir, "caco.yaml"), []byte("id: caco\nas2:\n  as2_id: CACO\n  require_signature: true\n"+ca+
		"as4:\n  party_id: urn:caco\n  party_type: "+ptype+"\n"+ca+pmode))

	x.g = startLiveLog(t, func(c *config.Config) { c.Partners = x.dir }, x.logs)
	x.gw = readKeyPair(t, filepath.Join(x.g.demo, "keys", "gateway.pem"), filepath.Join(x.g.demo, "keys", "gateway.key")).Cert
	return x
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// sendAS2 sends a message from as2ID signed by s and returns the reason of
// the negative MDN (the human text between "not processed: " and the
// incident).
func (x *trustTexts) sendAS2(t *testing.T, as2ID string, s trusttest.Issued) string {
	t.Helper()
	x.as2Seq++
	c := &as2client.Client{URL: x.g.partner + "/as2", From: as2ID, To: "GATEWAY", SignCert: s.Cert, SignKey: s.Key,
		SignDigest: "sha256", RecipientCerts: []*x509.Certificate{x.gw}, Cipher: "aes128-cbc", MDN: as2client.MDNSync}
	m, err := c.Prepare([]byte(fmt.Sprintf("UNA:+.? 'UNB+UNOA:2+%s:14+GATEWAY:14+261130:1200+T%d'UNZ+0+T%d'", as2ID, x.as2Seq, x.as2Seq)),
		"application/edifact", "a.edi")
	if err != nil {
		t.Fatal(err)
	}
	res := postAS2(t, c, m)
	if res.OK() || res.MDN == nil || res.MDN.MDN == nil {
		t.Fatalf("AS2 from %s signed by %s: %+v, want a negative MDN", as2ID, s.Cert.Subject, res)
	}
	text := strings.ReplaceAll(res.MDN.MDN.Report.HumanText, "\r\n", "\n")
	_, reason, ok := strings.Cut(text, "was not processed: ")
	reason, _, ok2 := strings.Cut(reason, ".\nIncident")
	if !ok || !ok2 {
		t.Fatalf("AS2 MDN text: %q", text)
	}
	return reason
}

var errorDetail = regexp.MustCompile(`ErrorDetail>([^<]*)<`)

// sendAS4 sends a message from party signed by s and returns the
// eb:ErrorDetail of the answer without its incident note.
func (x *trustTexts) sendAS4(t *testing.T, party string, s trusttest.Issued) string {
	t.Helper()
	x.as4Seq++
	c := &as4client.Client{Signer: s.Key, Certificate: s.Cert, Encryption: &as4client.Encryption{Recipient: x.gw},
		ReceiptSigners: []*x509.Certificate{x.gw}}
	m := &as4client.Message{MessageID: fmt.Sprintf("texts-%d@%s", x.as4Seq, strings.TrimPrefix(party, "urn:")),
		From:    as4.PartyID{Value: party, Type: "urn:oasis:names:tc:ebcore:partyid-type:unregistered"},
		To:      as4.PartyID{Value: "urn:demo:gateway", Type: "urn:oasis:names:tc:ebcore:partyid-type:unregistered"},
		Service: "urn:demo:invoicing", Action: "Deliver",
		Payloads: []as4client.Payload{{ContentID: "invoice@oldco", MimeType: "application/edifact", Data: []byte("UNA:+.? 'UNB+UNOA:2+X:14+GATEWAY:14+261130:1200+A'UNZ+0+A'")}}}
	_, resp, err := c.Send(context.Background(), x.g.partner+"/as4", m)
	if err == nil || resp == nil {
		t.Fatalf("AS4 from %s signed by %s accepted (%v)", party, s.Cert.Subject, err)
	}
	d := errorDetail.FindSubmatch(resp.Body)
	if d == nil {
		t.Fatalf("AS4 from %s: no eb:ErrorDetail in HTTP %d %s", party, resp.Status, resp.Body)
	}
	detail := html.UnescapeString(string(d[1]))
	if i := strings.LastIndex(detail, " (incident "); i >= 0 {
		detail = detail[:i]
	}
	return detail
}

// serialMention finds a serial number where a text names one: "serial
// 0A1B2C", `"serial":"0A1B2C"`, `serial="0A1B2C"`.
var serialMention = regexp.MustCompile(`(?i)serial\W{1,4}(-?[0-9a-f:]+)\b`)

// Issue 22 item 18: a certificate's serial number is written in one form,
// trust.Serial's (openssl x509 -serial: upper-case hex in whole bytes),
// in every place an operator or partner reads it: AS2 MDN texts, AS4
// eb:Error details, audit records, log lines, the certificate expiry
// metric's serial label and `gateway partners list`.
func TestCertificateSerialIsOneFormEverywhere(t *testing.T) {
	x := startTrustTexts(t)
	places := map[string]string{}
	// Replies: the pinned expired certificate (checked by cms on AS2 and by
	// trust.CheckSigner on AS4) and CA trust refusals.
	places["replies"] = strings.Join([]string{
		x.sendAS2(t, "OLDCO", x.old), x.sendAS4(t, "urn:oldco", x.old),
		x.sendAS2(t, "CACO", x.expired), x.sendAS4(t, "urn:caco", x.weak),
	}, "\n")
	b, err := os.ReadFile(x.g.cfg.Audit.File)
	if err != nil {
		t.Fatal(err)
	}
	places["audit"] = string(b)
	places["metrics"] = scrape(t, x.g.admin)
	var out, errb bytes.Buffer
	if code := run([]string{"partners", "list", "-dir", x.dir}, &out, &errb); code != 0 {
		t.Fatalf("partners list: exit %d: %s", code, errb.String())
	}
	places["partners list"] = out.String()
	places["logs"] = x.logs.String()

	demo, err := os.ReadFile(filepath.Join(x.dir, "demo-partner.pem"))
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, c := range []*x509.Certificate{x.old.Cert, x.expired.Cert, x.weak.Cert, x.root.Cert, x.gw, parseCert(t, demo)} {
		known[trust.Serial(c)] = true
	}
	oldSerial := trust.Serial(x.old.Cert)
	if oldSerial != "0A1B2C" {
		t.Fatalf("trust.Serial = %q, want 0A1B2C (openssl x509 -serial)", oldSerial)
	}
	for place, text := range places {
		found := 0
		for _, m := range serialMention.FindAllStringSubmatch(text, -1) {
			if !known[m[1]] {
				t.Errorf("%s: serial written as %q (%q), not in trust.Serial's form", place, m[1], m[0])
			}
			found++
		}
		if !strings.Contains(text, oldSerial) {
			t.Errorf("%s does not name the expired certificate's serial %s", place, oldSerial)
		}
		if strings.Contains(text, "662316") {
			t.Errorf("%s names the serial 0x0A1B2C in decimal", place)
		}
		if found == 0 {
			t.Errorf("%s names no serial", place)
		}
	}
}

func parseCert(t *testing.T, pemBytes []byte) *x509.Certificate {
	t.Helper()
	path := filepath.Join(t.TempDir(), "c.pem")
	writeFile(t, path, pemBytes)
	certs, err := partners.ReadCertificates(path)
	if err != nil {
		t.Fatal(err)
	}
	return certs[0]
}
