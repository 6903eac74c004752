package transmit_test

import (
	"context"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/edigateway/gateway/internal/testpki"
	"github.com/edigateway/gateway/internal/transmit"
	"github.com/edigateway/gateway/internal/trust"
	"github.com/edigateway/gateway/internal/trust/trusttest"
	"github.com/edigateway/gateway/outbound"
)

// caGateway is a served gateway whose identity is a certificate of a test
// CA (issued by an intermediate), with the revocation answers the cases
// need: OCSP responders and CRLs that say it is good or revoked, and a
// responder that is down.
type caGateway struct {
	*served
	root, ica, other *trusttest.CA
	leaf             trusttest.Issued
	ocspGood         string // responder: the leaf is good
	ocspRevoked      string // responder: the leaf is revoked
	crlGood          string // CRL: the leaf is not listed
	crlRevoked       string // CRL: the leaf is listed
	down             string // nothing answers
	// mdns receives the async MDNs the gateway posts to mdnURL.
	mdns   chan asyncMDN
	mdnURL string
}

type asyncMDN struct {
	h    http.Header
	body []byte
}

// serveCAGateway serves the fixture gateway with a CA-issued identity
// "GATEWAY Prod" (O Gateway Corp), unencrypted AS2 accepted from us (we
// have no certificate of it to encrypt with) and async MDNs posted to a
// loopback receiver.
func serveCAGateway(t *testing.T) *caGateway {
	t.Helper()
	g := &caGateway{root: trusttest.NewRoot(t, "Gateway Root CA"), other: trusttest.NewRoot(t, "Other Root CA"),
		mdns: make(chan asyncMDN, 8)}
	g.ica = g.root.NewIntermediate(t, "Gateway Issuing CA")
	g.leaf = g.ica.Issue(t, trusttest.Leaf{CommonName: "GATEWAY Prod", Organization: []string{"Gateway Corp"}})
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "gw.pem"), filepath.Join(dir, "gw.key")
	// The identity's certificate file carries the intermediate too, so
	// that the MDN's CMS certificates do.
	if err := os.WriteFile(cert, testpki.CertPEM(g.leaf.Cert, g.ica.Cert), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, testpki.KeyPEM(t, g.leaf.Key), 0o600); err != nil {
		t.Fatal(err)
	}
	g.ocspGood = g.ica.StartOCSP(t, nil, 60).URL
	g.ocspRevoked = g.ica.StartOCSP(t, nil, 60, g.leaf.Cert).URL
	files := trusttest.ServeFiles(t)
	now := time.Now()
	files.Set("/good.crl", g.ica.CRL(t, now.Add(-time.Hour), now.Add(time.Hour)))
	files.Set("/revoked.crl", g.ica.CRL(t, now.Add(-time.Hour), now.Add(time.Hour), g.leaf.Cert))
	g.crlGood, g.crlRevoked = files.URL+"/good.crl", files.URL+"/revoked.crl"
	g.down = trusttest.DownURL(t)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		g.mdns <- asyncMDN{r.Header.Clone(), b}
	}))
	t.Cleanup(recv.Close)
	g.mdnURL = recv.URL + "/mdn"
	g.served = serveGateway(t, gatewayOptions{cert: cert, key: key,
		as2: "  require_encryption: false\n  async_mdn_urls: [\"" + g.mdnURL + "\"]\n"})
	return g
}

// policy is the gateway's trust: ca policy as its partner directory would
// have it: the root, the intermediate, the subject pattern, revocation.
func (g *caGateway) policy(tune func(p *trust.CAPolicy)) *transmit.CATrust {
	p := &trust.CAPolicy{Roots: []*x509.Certificate{g.root.Cert}, Intermediates: []*x509.Certificate{g.ica.Cert},
		Subject: "CN=GATEWAY*,O=Gateway*"}
	if tune != nil {
		tune(p)
	}
	return &transmit.CATrust{Policy: p, Checker: &trust.Checker{}}
}

// caCase is one trust: ca policy and what it makes of the gateway's
// signed MDNs and receipts.
type caCase struct {
	name      string
	tune      func(g *caGateway, p *trust.CAPolicy)
	delivered bool
	// phrases the reason (refusals) or Evidence.Signer (deliveries) holds.
	phrases []string
}

func caCases() []caCase {
	return []caCase{
		{"trusted", nil, true, []string{"GATEWAY Prod", "trust: ca trusted/not-checked"}},
		{"ocsp good", func(g *caGateway, p *trust.CAPolicy) {
			p.Revocation = trust.Revocation{Mode: trust.ModeOCSP, OCSPResponder: g.ocspGood}
		}, true, []string{"GATEWAY Prod", "trusted/good from ocsp " + "http"}},
		{"crl good", func(g *caGateway, p *trust.CAPolicy) {
			p.Revocation = trust.Revocation{Mode: trust.ModeCRL, CRLURLs: []string{g.crlGood}}
		}, true, []string{"trusted/good from crl"}},
		{"responder down, soft", func(g *caGateway, p *trust.CAPolicy) {
			p.Revocation = trust.Revocation{Mode: trust.ModeOCSP, Policy: trust.PolicySoft, OCSPResponder: g.down}
		}, true, []string{"trusted/undetermined-soft"}},
		{"another CA", func(g *caGateway, p *trust.CAPolicy) {
			p.Roots, p.Intermediates = []*x509.Certificate{g.other.Cert}, nil
		}, false, []string{"refused/untrusted", `"CN=GATEWAY Prod,O=Gateway Corp"`, "does not chain to a configured CA"}},
		{"subject mismatch", func(g *caGateway, p *trust.CAPolicy) {
			p.Subject = "CN=AS2 ACME*"
		}, false, []string{"refused/untrusted", "GATEWAY Prod", `does not match the partner's certificate subject "CN=AS2 ACME*"`}},
		{"revoked by ocsp", func(g *caGateway, p *trust.CAPolicy) {
			p.Revocation = trust.Revocation{Mode: trust.ModeOCSP, OCSPResponder: g.ocspRevoked}
		}, false, []string{"refused/revoked", "GATEWAY Prod", "ocsp"}},
		{"revoked by crl", func(g *caGateway, p *trust.CAPolicy) {
			p.Revocation = trust.Revocation{Mode: trust.ModeCRL, CRLURLs: []string{g.crlRevoked}}
		}, false, []string{"refused/revoked", "GATEWAY Prod", "crl"}},
		{"responder down, hard", func(g *caGateway, p *trust.CAPolicy) {
			p.Revocation = trust.Revocation{Mode: trust.ModeOCSP, Policy: trust.PolicyHard, OCSPResponder: g.down}
		}, false, []string{"unavailable/undetermined", "GATEWAY Prod"}},
	}
}

func (c caCase) policy(g *caGateway) *transmit.CATrust {
	return g.policy(func(p *trust.CAPolicy) {
		if c.tune != nil {
			c.tune(g, p)
		}
	})
}

// check asserts an attempt's outcome under c.
func (c caCase) check(t *testing.T, a outbound.Attempt) {
	t.Helper()
	if c.delivered {
		if a.Outcome != outbound.Deliver || a.Evidence == nil {
			t.Fatalf("%s: attempt %+v, want delivered", c.name, a)
		}
		for _, p := range c.phrases {
			if !contains(a.Evidence.Signer, p) {
				t.Errorf("%s: evidence signer %q lacks %q", c.name, a.Evidence.Signer, p)
			}
		}
		return
	}
	if a.Outcome != outbound.Retry {
		t.Fatalf("%s: attempt %+v, want a retry", c.name, a)
	}
	for _, p := range append([]string{"not delivered"}, c.phrases...) {
		if !contains(a.Reason, p) {
			t.Errorf("%s: reason %q lacks %q", c.name, a.Reason, p)
		}
	}
}

// A partner under trust: ca with no listed certificate: its sync MDNs,
// signed by a certificate of its CA that the MDN carries, deliver our
// messages when its policy accepts the signer (no revocation check, OCSP
// or CRL good, a responder down under a soft policy), and are
// unverifiable (retried, the reason naming the certificate and the
// policy's decision) when the signer is of another CA, does not match the
// subject pattern, is revoked (OCSP, CRL) or its status cannot be had
// under a hard policy. Before, every attempt was retried with "a signed
// MDN needs the partner's certificates".
func TestAS2CATrustSyncMDN(t *testing.T) {
	g := serveCAGateway(t)
	var ct *transmit.CATrust
	tr := as2To(t, g.URL+"/as2", func(s *transmit.AS2Settings) {
		s.PartnerCerts, s.Cipher, s.CA = nil, "none", ct
	})
	for _, c := range caCases() {
		ct = c.policy(g)
		a := attempt(t, tr, as2Message(t), []byte(edi))
		c.check(t, a)
		if a.Evidence == nil || a.Evidence.Kind != "mdn" {
			t.Errorf("%s: evidence %+v", c.name, a.Evidence)
		}
	}
	// A listed certificate of the CA is judged by the policy as well.
	ct = g.policy(func(p *trust.CAPolicy) { p.Subject = "CN=AS2 ACME*" })
	tr = as2To(t, g.URL+"/as2", func(s *transmit.AS2Settings) {
		s.PartnerCerts, s.Cipher, s.CA = certs(g.leaf.Cert), "none", ct
	})
	if a := attempt(t, tr, as2Message(t), []byte(edi)); a.Outcome != outbound.Retry || !contains(a.Reason, "does not match") {
		t.Errorf("listed signer refused by the policy: %+v", a)
	}
	// Without the policy and with no certificate nothing verifies the MDN.
	tr = as2To(t, g.URL+"/as2", func(s *transmit.AS2Settings) { s.PartnerCerts, s.Cipher = nil, "none" })
	if a := attempt(t, tr, as2Message(t), []byte(edi)); a.Outcome != outbound.Retry || !contains(a.Reason, "needs the partner's certificates") {
		t.Errorf("no certificate, no policy: %+v", a)
	}
}

// The same for an async MDN: the attempt awaits it, and VerifyAsyncMDN
// settles the message delivered when the partner's CA policy accepts the
// MDN's signer, and refuses the MDN (the message stays awaiting, then is
// sent again) naming the certificate and the decision when it does not.
func TestAS2CATrustAsyncMDN(t *testing.T) {
	g := serveCAGateway(t)
	var ct *transmit.CATrust
	tr := as2To(t, g.URL+"/as2", func(s *transmit.AS2Settings) {
		s.PartnerCerts, s.Cipher, s.CA = nil, "none", ct
		s.MDN, s.AsyncMDNURL = "async", g.mdnURL
	})
	ct = g.policy(nil)
	m := as2Message(t)
	if a := attempt(t, tr, m, []byte(edi)); a.Outcome != outbound.Await {
		t.Fatalf("attempt %+v", a)
	}
	var in asyncMDN
	select {
	case in = <-g.mdns:
	case <-time.After(30 * time.Second):
		t.Fatal("no async MDN")
	}
	ctx := context.Background()
	for _, c := range caCases() {
		ct = c.policy(g)
		delivered, reason, ev, err := tr.VerifyAsyncMDN(ctx, *m, in.h, in.body)
		if c.delivered {
			if err != nil || !delivered || reason != "" || ev == nil {
				t.Fatalf("%s: delivered %v reason %q ev %+v err %v", c.name, delivered, reason, ev, err)
			}
			for _, p := range c.phrases {
				if !contains(ev.Signer, p) {
					t.Errorf("%s: evidence signer %q lacks %q", c.name, ev.Signer, p)
				}
			}
			continue
		}
		if err == nil || delivered {
			t.Fatalf("%s: delivered %v err %v, want the MDN refused", c.name, delivered, err)
		}
		for _, p := range c.phrases {
			if !contains(err.Error(), p) {
				t.Errorf("%s: error %q lacks %q", c.name, err, p)
			}
		}
	}
}

// A partner under trust: ca with no listed certificate: its AS4 receipts,
// signed by a certificate of its CA sent as a BinarySecurityToken, deliver
// our messages when its policy accepts the signer, and are unverifiable
// (retried, naming the certificate and the decision) otherwise. Before,
// every receipt was unverifiable ("no certificate to verify the receipt
// with").
func TestAS4CATrustReceipt(t *testing.T) {
	g := serveCAGateway(t)
	var ct *transmit.CATrust
	tr := as4To(t, g.URL+"/as4", func(s *transmit.AS4Settings) {
		s.ReceiptSigners, s.EncryptTo, s.CA = nil, g.leaf.Cert, ct
	})
	for _, c := range caCases() {
		ct = c.policy(g)
		a := attempt(t, tr, as4Message(t), []byte(edi))
		c.check(t, a)
		if c.delivered && a.Evidence.Kind != "receipt" {
			t.Errorf("%s: evidence %+v", c.name, a.Evidence)
		}
	}
	tr = as4To(t, g.URL+"/as4", func(s *transmit.AS4Settings) { s.ReceiptSigners, s.EncryptTo = nil, g.leaf.Cert })
	if a := attempt(t, tr, as4Message(t), []byte(edi)); a.Outcome != outbound.Retry {
		t.Errorf("no certificate, no policy: %+v", a)
	}
}
