package smime

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/internal/cms"
	"github.com/edigateway/gateway/internal/testpki"
)

// An expired signer certificate is the reason a message is refused whether
// its signature verifies over the exact bytes or only after the line-ending
// repair: the outcome is classified over every attempt, not taken from the
// first one.
func TestExpiredSignerReasonDoesNotDependOnLineEndingRepair(t *testing.T) {
	key := testpki.RSAKey(t, 0)
	cert := testpki.SelfSigned(t, key, testpki.Cert{CommonName: "acme-2024", Serial: 4711,
		NotBefore: time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC), NotAfter: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)})
	b, err := Build([]byte("UNB+UNOC:3+ACME+GW+260101:1200+REF1'\nUNZ+0+REF1'\n"), "application/edifact", "",
		BuildOptions{SignCert: cert, SignKey: key, SignDigest: "sha256"})
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	for _, f := range b.Header {
		h.Set(f.Name, f.Value)
	}
	exact := b.Body
	// A proxy turned every CRLF into LF: only the header repair verifies.
	lf := bytes.ReplaceAll(b.Body, []byte("\r\n"), []byte("\n"))
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		body []byte
	}{{"exact bytes verify", exact}, {"verifies only after repair", lf}} {
		// Sanity: inside the validity period the message is accepted.
		ok := Options{Trusted: []*x509.Certificate{cert}, Now: func() time.Time { return time.Date(2024, 6, 1, 0, 0, 0, 0, time.UTC) }}
		res, err := UnwrapEntity(EntityFromHTTP(h, tc.body), ok)
		if err != nil || res.LineEndingsRepaired != (tc.name != "exact bytes verify") {
			t.Fatalf("%s, valid certificate: %v %+v", tc.name, err, res)
		}
		_, err = UnwrapEntity(EntityFromHTTP(h, tc.body), Options{Trusted: []*x509.Certificate{cert}, Now: func() time.Time { return now }})
		if !errors.Is(err, cms.ErrCertificateExpired) || errors.Is(err, cms.ErrBadSignature) {
			t.Errorf("%s: %v, want only ErrCertificateExpired", tc.name, err)
		}
		var ve *cms.CertificateValidityError
		if !errors.As(err, &ve) || ve.Subject != "acme-2024" || !ve.NotAfter.Equal(cert.NotAfter) || !ve.At.Equal(now) {
			t.Errorf("%s: %v does not name the certificate and its dates", tc.name, err)
		}
	}
}

// The classification over attempts is independent of their order.
func TestVerificationErrorOrder(t *testing.T) {
	bad := fmt.Errorf("cms: verify: %w: message digest mismatch", cms.ErrBadSignature)
	expired := fmt.Errorf("cms: verify: %w", &cms.CertificateValidityError{Subject: "acme"})
	unknown := fmt.Errorf("cms: verify: %w", cms.ErrUnknownSigner)
	for _, errs := range [][]error{{bad, expired}, {expired, bad}, {bad, bad, expired}, {expired}} {
		if got := verificationError(errs); got != expired {
			t.Errorf("%v -> %v, want the expiry", errs, got)
		}
	}
	if got := verificationError([]error{bad, bad}); got != bad {
		t.Errorf("digest mismatches -> %v", got)
	}
	if got := verificationError([]error{unknown}); got != unknown {
		t.Errorf("unknown signer -> %v", got)
	}
	if !strings.Contains(expired.Error(), "acme") {
		t.Errorf("validity error text %q", expired)
	}
}
