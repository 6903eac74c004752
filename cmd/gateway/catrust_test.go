package main

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	as2client "github.com/edigateway/gateway/as2/client"
	"github.com/edigateway/gateway/as4"
	as4client "github.com/edigateway/gateway/as4/client"
	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/internal/testpki"
	"github.com/edigateway/gateway/internal/trust"
	"github.com/edigateway/gateway/internal/trust/trusttest"
)

// auditRecords reads the gateway's audit file.
func (x *trustTexts) auditRecords(t *testing.T) []audit.Record {
	t.Helper()
	f, err := os.Open(x.g.cfg.Audit.File)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []audit.Record
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r audit.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	return out
}

// checkedAt hides the time a reason was written at (the two protocols'
// messages are a moment apart).
var checkedAt = regexp.MustCompile(`checked at [0-9TZ:-]+`)

func sameText(s string) string { return checkedAt.ReplaceAllString(s, "checked at T") }

// Issue 22 item 18: under trust: ca, a signer certificate that is expired
// or has an RSA-1024 key is refused on AS2 and AS4 with the same reason and
// the same trust and reply audit records, by the trust check before any
// verdict: never audited trusted/good and then refused for its size.
func TestCATrustRefusalsAreTheSameOnBothProtocols(t *testing.T) {
	x := startTrustTexts(t)
	for _, tc := range []struct {
		name     string
		signer   trusttest.Issued
		decision string
		reason   string
	}{
		{"expired", x.expired, "refused/expired", fmt.Sprintf(`the signer's certificate "CN=CACO Old,O=CA Co" (serial %s) expired on 2022-01-01T00:00:00Z (valid from 2020-01-01T00:00:00Z to 2022-01-01T00:00:00Z; checked at T)`,
			trust.Serial(x.expired.Cert))},
		{"rsa-1024", x.weak, "refused/weak-key", fmt.Sprintf(`the signer's certificate "CN=CACO Weak,O=CA Co" (serial %s) has a 1024-bit RSA key; at least 2048 bits are required`,
			trust.Serial(x.weak.Cert))},
	} {
		as2Reason, as4Reason := sameText(x.sendAS2(t, "CACO", tc.signer)), sameText(x.sendAS4(t, "urn:caco", tc.signer))
		if as2Reason != tc.reason || as4Reason != tc.reason {
			t.Errorf("%s: reasons differ:\n AS2  %s\n AS4  %s\n want %s", tc.name, as2Reason, as4Reason, tc.reason)
		}
		// The trust records of each protocol's message, exactly; the reply
		// records: rejected, with the reason first (what follows is each
		// protocol's own wrapping of the cause, for the log).
		trustRecs, replies := map[string][]string{}, map[string][]string{}
		for _, r := range x.auditRecords(t) {
			if r.Partner != "caco" || !strings.Contains(r.Error, `"CN=`+tc.signer.Cert.Subject.CommonName) {
				continue
			}
			switch r.Step {
			case audit.StepTrust:
				trustRecs[r.Protocol] = append(trustRecs[r.Protocol], r.Decision+": "+sameText(r.Error))
			case audit.StepReply:
				reply := r.Decision
				if strings.HasPrefix(sameText(r.Error), tc.reason) {
					reply += ": <reason>…"
				}
				replies[r.Protocol] = append(replies[r.Protocol], reply)
			}
		}
		want := []string{tc.decision + ": " + tc.reason}
		if !slices.Equal(trustRecs["as2"], want) || !slices.Equal(trustRecs["as4"], want) {
			t.Errorf("%s: trust audit records differ:\n AS2  %q\n AS4  %q\n want %q", tc.name, trustRecs["as2"], trustRecs["as4"], want)
		}
		want = []string{"rejected: <reason>…"}
		if !slices.Equal(replies["as2"], want) || !slices.Equal(replies["as4"], want) {
			t.Errorf("%s: reply audit records differ:\n AS2  %q\n AS4  %q\n want %q", tc.name, replies["as2"], replies["as4"], want)
		}
	}
}

// Issue 22 item 19, through the served gateway: a signer whose revocation
// status cannot be had (the OCSP responder is down, policy hard) gets 503
// with Retry-After on both protocols, and the message counts as
// unavailable in gateway_messages_total, like other temporary failures.
func TestRevocationUnavailableCountsAsUnavailable(t *testing.T) {
	dir := t.TempDir()
	root := trusttest.NewRoot(t, "HARDCO Root CA")
	signer := root.Issue(t, trusttest.Leaf{CommonName: "HARDCO Prod", Organization: []string{"Hard Co"}})
	writeFile(t, filepath.Join(dir, "hardco-root.pem"), testpki.CertPEM(root.Cert))
	ca := "  trust: ca\n  ca_certificates: [hardco-root.pem]\n  revocation: {mode: ocsp, policy: hard, ocsp_responder: \"" + trusttest.DownURL(t) + "\"}\n"
	writeFile(t, filepath.Join(dir, "hardco.yaml"), []byte("id: hardco\nas2:\n  as2_id: HARDCO\n  require_signature: true\n"+ca+
		"as4:\n  party_id: urn:hardco\n  party_type: urn:oasis:names:tc:ebcore:partyid-type:unregistered\n"+ca+
		"  pmodes:\n    - id: demo-invoice\n      service: urn:demo:invoicing\n      action: Deliver\n"))
	logs := newSyncBuf()
	g := startLiveLog(t, func(c *config.Config) { c.Partners = dir }, logs)
	gw := readKeyPair(t, filepath.Join(g.demo, "keys", "gateway.pem"), filepath.Join(g.demo, "keys", "gateway.key")).Cert

	c2 := &as2client.Client{URL: g.partner + "/as2", From: "HARDCO", To: "GATEWAY", SignCert: signer.Cert, SignKey: signer.Key,
		SignDigest: "sha256", RecipientCerts: []*x509.Certificate{gw}, Cipher: "aes128-cbc", MDN: as2client.MDNSync}
	m, err := c2.Prepare([]byte("UNA:+.? 'UNB+UNOA:2+HARDCO:14+GATEWAY:14+261130:1200+H1'UNZ+0+H1'"), "application/edifact", "a.edi")
	if err != nil {
		t.Fatal(err)
	}
	if res := postAS2(t, c2, m); res.Status != http.StatusServiceUnavailable || res.RetryAfter != trust.RetryAfter || res.MDN != nil && res.MDN.MDN != nil {
		t.Errorf("AS2: HTTP %d Retry-After %s MDN %v, want 503 with Retry-After %s and no MDN", res.Status, res.RetryAfter, res.MDN != nil, trust.RetryAfter)
	}
	c4 := &as4client.Client{Signer: signer.Key, Certificate: signer.Cert, Encryption: &as4client.Encryption{Recipient: gw}, ReceiptSigners: []*x509.Certificate{gw}}
	_, resp, err := c4.Send(context.Background(), g.partner+"/as4", &as4client.Message{MessageID: "h1@hardco",
		From:    as4.PartyID{Value: "urn:hardco", Type: "urn:oasis:names:tc:ebcore:partyid-type:unregistered"},
		To:      as4.PartyID{Value: "urn:demo:gateway", Type: "urn:oasis:names:tc:ebcore:partyid-type:unregistered"},
		Service: "urn:demo:invoicing", Action: "Deliver",
		Payloads: []as4client.Payload{{ContentID: "invoice@hardco", MimeType: "application/edifact", Data: []byte("UNA:+.? 'UNB+UNOA:2+X:14+GATEWAY:14+261130:1200+A'UNZ+0+A'")}}})
	if resp == nil || resp.Status != http.StatusServiceUnavailable || resp.RetryAfter != "60" {
		t.Errorf("AS4: %v, want 503 with Retry-After 60", err)
	}
	body := scrape(t, g.admin)
	for _, p := range []string{"as2", "as4"} {
		if got, ok := metricValue(body, "gateway_messages_total", map[string]string{"protocol": p, "partner": "hardco", "outcome": "unavailable", "reason": ""}); !ok || got != 1 {
			t.Errorf("gateway_messages_total{%s,hardco,unavailable} = %v (found %v), want 1", p, got, ok)
		}
		if _, ok := metricValue(body, "gateway_messages_total", map[string]string{"protocol": p, "partner": "hardco", "outcome": "rejected", "reason": "authentication-failed"}); ok {
			t.Errorf("%s: counted as rejected", p)
		}
	}
	if n := strings.Count(logs.String(), `"decision":"unavailable"`); n < 2 {
		t.Errorf("%d log lines with decision unavailable, want one per protocol at least", n)
	}
}
