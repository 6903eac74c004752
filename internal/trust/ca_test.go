package trust_test

import (
	"context"
	"crypto/x509"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/internal/trust"
	"github.com/edigateway/gateway/internal/trust/trusttest"
)

type pki struct {
	root, ica *trusttest.CA
	files     *trusttest.Files
}

func newPKI(t *testing.T) *pki {
	root := trusttest.NewRoot(t, "Test Root CA")
	return &pki{root: root, ica: root.NewIntermediate(t, "Test Issuing CA"), files: trusttest.ServeFiles(t)}
}

func (p *pki) policy(rev trust.Revocation) *trust.CAPolicy {
	return &trust.CAPolicy{Roots: []*x509.Certificate{p.root.Cert}, Intermediates: []*x509.Certificate{p.ica.Cert}, Revocation: rev}
}

func TestChainKeyUsageAndSubject(t *testing.T) {
	p := newPKI(t)
	c := &trust.Checker{}
	ctx := context.Background()
	good := p.ica.Issue(t, trusttest.Leaf{CommonName: "AS2 ACME Prod", Organization: []string{"ACME Corp"}})
	if _, err := c.Check(ctx, p.policy(trust.Revocation{}), good.Cert, nil); err != nil {
		t.Fatalf("good: %v", err)
	}
	// Intermediate sent in the message instead of configured.
	pol := &trust.CAPolicy{Roots: []*x509.Certificate{p.root.Cert}}
	if _, err := c.Check(ctx, pol, good.Cert, nil); !errors.Is(err, trust.ErrUntrusted) {
		t.Fatalf("without intermediate: %v", err)
	}
	if _, err := c.Check(ctx, pol, good.Cert, []*x509.Certificate{p.ica.Cert}); err != nil {
		t.Fatalf("presented intermediate: %v", err)
	}
	// A presented certificate never becomes a root.
	other := trusttest.NewRoot(t, "Other Root")
	stranger := other.Issue(t, trusttest.Leaf{CommonName: "AS2 ACME Prod", Organization: []string{"ACME Corp"}})
	_, err := c.Check(ctx, p.policy(trust.Revocation{}), stranger.Cert, []*x509.Certificate{other.Cert})
	if !errors.Is(err, trust.ErrUntrusted) || !strings.Contains(err.Error(), "does not chain to a configured CA") || !strings.Contains(err.Error(), "AS2 ACME Prod") {
		t.Fatalf("unknown CA: %v", err)
	}
	pat := p.policy(trust.Revocation{})
	pat.Subject = "CN=AS2 ACME*,O=ACME*"
	if _, err := c.Check(ctx, pat, good.Cert, nil); err != nil {
		t.Fatalf("pattern: %v", err)
	}
	wrong := p.ica.Issue(t, trusttest.Leaf{CommonName: "AS2 Globex", Organization: []string{"ACME Corp"}})
	if _, err := c.Check(ctx, pat, wrong.Cert, nil); !errors.Is(err, trust.ErrUntrusted) || !strings.Contains(err.Error(), "does not match") {
		t.Fatalf("wrong name: %v", err)
	}
	noSig := p.ica.Issue(t, trusttest.Leaf{CommonName: "AS2 ACME Enc", Organization: []string{"ACME"}, KeyUsage: x509.KeyUsageKeyEncipherment})
	if _, err := c.Check(ctx, p.policy(trust.Revocation{}), noSig.Cert, nil); !errors.Is(err, trust.ErrUntrusted) || !strings.Contains(err.Error(), "digitalSignature") {
		t.Fatalf("key usage: %v", err)
	}
	eku := p.policy(trust.Revocation{})
	eku.ExtKeyUsages = []x509.ExtKeyUsage{x509.ExtKeyUsageEmailProtection}
	tls := p.ica.Issue(t, trusttest.Leaf{CommonName: "tls", ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	if _, err := c.Check(ctx, eku, tls.Cert, nil); !errors.Is(err, trust.ErrUntrusted) {
		t.Fatalf("eku: %v", err)
	}
	expired := p.ica.Issue(t, trusttest.Leaf{CommonName: "old", NotAfter: time.Date(2022, 1, 1, 0, 0, 0, 0, time.UTC)})
	if _, err = c.Check(ctx, p.policy(trust.Revocation{}), expired.Cert, nil); !errors.Is(err, trust.ErrExpired) || !strings.Contains(err.Error(), `the signer's certificate "CN=old" (serial 69) expired on 2022-01-01T00:00:00Z`) {
		t.Fatalf("expired: %v", err)
	}
	if d, _ := trust.AuditDecision(expired.Cert, nil, err); d != "refused/expired" {
		t.Fatalf("expired: audited %q", d)
	}
	if !trust.MatchSubject("SAN:*.acme.example", p.ica.Issue(t, trusttest.Leaf{CommonName: "x", DNSNames: []string{"as2.acme.example"}}).Cert) {
		t.Fatal("SAN pattern")
	}
	if !trust.MatchSubject("AS2 ACME Prod", good.Cert) || trust.MatchSubject("AS2 ACME", good.Cert) {
		t.Fatal("exact CN")
	}
}

func TestOCSPWithOpenSSL(t *testing.T) {
	p := newPKI(t)
	ctx := context.Background()
	good := p.ica.Issue(t, trusttest.Leaf{CommonName: "good"})
	revoked := p.ica.Issue(t, trusttest.Leaf{CommonName: "revoked"})
	responder := p.ica.Issue(t, trusttest.Leaf{CommonName: "OCSP responder", ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageOCSPSigning}})
	noEKU := p.ica.Issue(t, trusttest.Leaf{CommonName: "not a responder"})

	for _, tc := range []struct {
		name      string
		responder *trusttest.Issued
	}{{"issuer-signed", nil}, {"delegated", &responder}} {
		t.Run(tc.name, func(t *testing.T) {
			o := p.ica.StartOCSP(t, tc.responder, 60, revoked.Cert)
			c := &trust.Checker{}
			pol := p.policy(trust.Revocation{Mode: trust.ModeOCSP, OCSPResponder: o.URL})
			d, err := c.Check(ctx, pol, good.Cert, nil)
			if err != nil || d.Status != trust.StatusGood {
				t.Fatalf("good: %+v %v", d, err)
			}
			_, err = c.Check(ctx, pol, revoked.Cert, nil)
			var te *trust.Error
			if !errors.As(err, &te) || !errors.Is(err, trust.ErrRevoked) || te.Status != trust.StatusRevoked || !strings.Contains(te.Reason, `"CN=revoked"`) {
				t.Fatalf("revoked: %v", err)
			}
			// Cached until nextUpdate: no second request.
			n := c.Fetches()
			d, err = c.Check(ctx, pol, good.Cert, nil)
			if err != nil || c.Fetches() != n || !strings.Contains(d.Source, "cached") {
				t.Fatalf("cache: %+v %v fetches %d→%d", d, err, n, c.Fetches())
			}
		})
	}
	t.Run("responder-without-ocspsigning", func(t *testing.T) {
		o := p.ica.StartOCSP(t, &noEKU, 60)
		c := &trust.Checker{}
		_, err := c.Check(ctx, p.policy(trust.Revocation{Mode: trust.ModeOCSP, OCSPResponder: o.URL}), good.Cert, nil)
		if !errors.Is(err, trust.ErrUndetermined) || !strings.Contains(err.Error(), "OCSPSigning") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("forged-response", func(t *testing.T) {
		// A responder of another CA, even one that claims the serial is good.
		other := trusttest.NewRoot(t, "Other Root")
		other.Issue(t, trusttest.Leaf{CommonName: "x"})
		o := other.StartOCSP(t, nil, 60)
		_, err := (&trust.Checker{}).Check(ctx, p.policy(trust.Revocation{Mode: trust.ModeOCSP, OCSPResponder: o.URL}), good.Cert, nil)
		if !errors.Is(err, trust.ErrUndetermined) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("aia-url", func(t *testing.T) {
		url := trusttest.DownURL(t)
		viaAIA2 := p.ica.Issue(t, trusttest.Leaf{CommonName: "aia", OCSP: url})
		o := p.ica.StartOCSPAt(t, nil, url, 0)
		c := &trust.Checker{}
		d, err := c.Check(ctx, p.policy(trust.Revocation{Mode: trust.ModeOCSP}), viaAIA2.Cert, nil)
		if err != nil || d.Status != trust.StatusGood || !strings.Contains(d.Source, o.URL) {
			t.Fatalf("aia: %+v %v", d, err)
		}
		// No nextUpdate: not cached.
		n := c.Fetches()
		if _, err := c.Check(ctx, p.policy(trust.Revocation{Mode: trust.ModeOCSP}), viaAIA2.Cert, nil); err != nil || c.Fetches() != n+1 {
			t.Fatalf("uncached: %v fetches %d→%d", err, n, c.Fetches())
		}
	})
	t.Run("down", func(t *testing.T) {
		down := trusttest.DownURL(t)
		hard := p.policy(trust.Revocation{Mode: trust.ModeOCSP, Policy: trust.PolicyHard, OCSPResponder: down})
		_, err := (&trust.Checker{}).Check(ctx, hard, good.Cert, nil)
		var te *trust.Error
		if !errors.As(err, &te) || te.Status != trust.StatusUndetermined || !errors.Is(err, trust.ErrUnavailable) || !strings.Contains(te.Reason, "cannot be checked right now") {
			t.Fatalf("hard: %v", err)
		}
		soft := p.policy(trust.Revocation{Mode: trust.ModeOCSP, Policy: trust.PolicySoft, OCSPResponder: down})
		d, err := (&trust.Checker{}).Check(ctx, soft, good.Cert, nil)
		if err != nil || d.Status != trust.StatusUndetermined || d.Detail == "" {
			t.Fatalf("soft: %+v %v", d, err)
		}
	})
}

func TestCRL(t *testing.T) {
	p := newPKI(t)
	ctx := context.Background()
	now := time.Now()
	good := p.ica.Issue(t, trusttest.Leaf{CommonName: "good", CRL: p.files.URL + "/ica.crl"})
	revoked := p.ica.Issue(t, trusttest.Leaf{CommonName: "revoked", CRL: p.files.URL + "/ica.crl"})
	p.files.Set("/ica.crl", p.ica.CRL(t, now.Add(-time.Hour), now.Add(time.Hour), revoked.Cert))
	c := &trust.Checker{}
	pol := p.policy(trust.Revocation{Mode: trust.ModeCRL})
	d, err := c.Check(ctx, pol, good.Cert, nil)
	if err != nil || d.Status != trust.StatusGood {
		t.Fatalf("good: %+v %v", d, err)
	}
	if _, err := c.Check(ctx, pol, revoked.Cert, nil); !errors.Is(err, trust.ErrRevoked) || !strings.Contains(err.Error(), "revoked at") {
		t.Fatalf("revoked: %v", err)
	}
	if h := p.files.Hits("/ica.crl"); h != 1 {
		t.Fatalf("CRL fetched %d times, want 1 (cached until nextUpdate)", h)
	}
	// A CRL signed by another CA is not believed.
	other := trusttest.NewRoot(t, "Other")
	p.files.Set("/forged.crl", other.CRL(t, now.Add(-time.Hour), now.Add(time.Hour)))
	forged := p.policy(trust.Revocation{Mode: trust.ModeCRL, CRLURLs: []string{p.files.URL + "/forged.crl"}})
	if _, err := (&trust.Checker{}).Check(ctx, forged, good.Cert, nil); !errors.Is(err, trust.ErrUndetermined) || !strings.Contains(err.Error(), "not signed by") {
		t.Fatalf("forged: %v", err)
	}
	// Stale CRL.
	p.files.Set("/stale.crl", p.ica.CRL(t, now.Add(-2*time.Hour), now.Add(-time.Hour)))
	stale := p.policy(trust.Revocation{Mode: trust.ModeCRL, CRLURLs: []string{p.files.URL + "/stale.crl"}})
	if _, err := (&trust.Checker{}).Check(ctx, stale, good.Cert, nil); !errors.Is(err, trust.ErrUnavailable) || !strings.Contains(err.Error(), "stale") {
		t.Fatalf("stale: %v", err)
	}
	// Server down: hard refuses, soft accepts.
	down := trusttest.DownURL(t) + "ica.crl"
	if _, err := (&trust.Checker{}).Check(ctx, p.policy(trust.Revocation{Mode: trust.ModeCRL, CRLURLs: []string{down}}), good.Cert, nil); !errors.Is(err, trust.ErrUnavailable) {
		t.Fatalf("down hard: %v", err)
	}
	if d, err := (&trust.Checker{}).Check(ctx, p.policy(trust.Revocation{Mode: trust.ModeCRL, Policy: trust.PolicySoft, CRLURLs: []string{down}}), good.Cert, nil); err != nil || d.Status != trust.StatusUndetermined {
		t.Fatalf("down soft: %+v %v", d, err)
	}
	// Both: OCSP down, CRL answers.
	both := p.policy(trust.Revocation{Mode: trust.ModeBoth, OCSPResponder: trusttest.DownURL(t)})
	if _, err := (&trust.Checker{}).Check(ctx, both, revoked.Cert, nil); !errors.Is(err, trust.ErrRevoked) {
		t.Fatalf("both: %v", err)
	}
	// A redirect to a non-http(s) URL is not followed.
	redir := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "file:///etc/passwd", http.StatusFound)
	}))
	defer redir.Close()
	if _, err := (&trust.Checker{}).Check(ctx, p.policy(trust.Revocation{Mode: trust.ModeCRL, CRLURLs: []string{redir.URL + "/x.crl"}}), good.Cert, nil); !errors.Is(err, trust.ErrUndetermined) || !strings.Contains(err.Error(), "only http and https are followed") {
		t.Fatalf("redirect: %v", err)
	}
	// A response over the size limit is refused.
	p.files.Set("/big.crl", make([]byte, 2048))
	small := &trust.Checker{MaxResponseBytes: 1024}
	if _, err := small.Check(ctx, p.policy(trust.Revocation{Mode: trust.ModeCRL, CRLURLs: []string{p.files.URL + "/big.crl"}}), good.Cert, nil); !errors.Is(err, trust.ErrUndetermined) || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("size: %v", err)
	}
}

// Issue 22 item 19: a revocation source that cannot be reached right now
// (refused connection, timeout, HTTP 5xx/408/429, a stale answer) makes
// the status unavailable, a temporary failure; one that answers wrongly
// for good (404, a forged or unknown answer, no responder named) keeps it
// undetermined, a refusal.
func TestRevocationUnavailableOrUndetermined(t *testing.T) {
	p := newPKI(t)
	ctx := context.Background()
	good := p.ica.Issue(t, trusttest.Leaf{CommonName: "good"})
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hang":
			select {
			case <-release:
			case <-r.Context().Done():
			}
		case "/503":
			http.Error(w, "maintenance", http.StatusServiceUnavailable)
		case "/429":
			http.Error(w, "slow down", http.StatusTooManyRequests)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	defer close(release) // before Close, which waits for the hanging handler
	for _, tc := range []struct {
		name string
		rev  trust.Revocation
		want error
	}{
		{"ocsp timeout", trust.Revocation{Mode: trust.ModeOCSP, OCSPResponder: srv.URL + "/hang"}, trust.ErrUnavailable},
		{"ocsp 503", trust.Revocation{Mode: trust.ModeOCSP, OCSPResponder: srv.URL + "/503"}, trust.ErrUnavailable},
		{"crl 429", trust.Revocation{Mode: trust.ModeCRL, CRLURLs: []string{srv.URL + "/429"}}, trust.ErrUnavailable},
		{"crl 404", trust.Revocation{Mode: trust.ModeCRL, CRLURLs: []string{srv.URL + "/gone.crl"}}, trust.ErrUndetermined},
		{"no responder named", trust.Revocation{Mode: trust.ModeOCSP}, trust.ErrUndetermined},
		// One source down, the other wrong for good: asking again may help.
		{"both, ocsp down, crl 404", trust.Revocation{Mode: trust.ModeBoth, OCSPResponder: trusttest.DownURL(t), CRLURLs: []string{srv.URL + "/gone.crl"}}, trust.ErrUnavailable},
	} {
		c := &trust.Checker{Timeout: 300 * time.Millisecond}
		_, err := c.Check(ctx, p.policy(tc.rev), good.Cert, nil)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		d, _ := trust.AuditDecision(good.Cert, nil, err)
		if want := map[error]string{trust.ErrUnavailable: "unavailable/undetermined", trust.ErrUndetermined: "refused/undetermined"}[tc.want]; d != want {
			t.Errorf("%s: audited %q, want %q", tc.name, d, want)
		}
	}
}
