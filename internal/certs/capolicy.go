package certs

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/edigateway/gateway/internal/trust"
)

// CAPolicies is implemented by a Directory whose partners may use
// trust: ca (*partners.Directory): the policy that judges the signers of a
// partner's section, nil for pinned certificates.
type CAPolicies interface {
	// SignerPolicy returns the trust: ca policy of partner's use ("as2" or
	// "as4"), or nil.
	SignerPolicy(partner, use string) *trust.CAPolicy
}

// CheckCAPolicies warns about a signing certificate a trust: ca section
// lists that its own policy refuses (it does not chain to the section's
// CAs, does not match certificate_subject or extended_key_usage): the
// gateway judges a listed certificate by the policy too, so whatever it
// signs is refused, and the operator learns it from partners check and
// the start-up log rather than from a partner's bounced messages.
// Revocation is not checked (offline); the dates and key size are Check's
// findings. Certificates that do not sign messages (a CA certificate that
// issued another certificate of the section, keys only for encryption)
// are not judged; a self-signed certificate is, CA flag or not (openssl
// req -x509 sets it).
func CheckCAPolicies(d CAPolicies, certs []Cert, now time.Time) []Finding {
	checker := &trust.Checker{Now: func() time.Time { return now }}
	var out []Finding
	for _, c := range certs {
		x := c.Cert
		if x == nil || (c.Use != "as2" && c.Use != "as4") || !canSign(x) {
			continue
		}
		p := d.SignerPolicy(c.Partner, c.Use)
		if p == nil {
			continue
		}
		// The section's other certificates complete the chain, as the
		// certificates a message carries do.
		var presented []*x509.Certificate
		issuer := false
		for _, o := range certs {
			if o.Partner == c.Partner && o.Use == c.Use && o.Cert != nil && o.Cert != x {
				presented = append(presented, o.Cert)
				issuer = issuer || (x.IsCA && o.Cert.CheckSignatureFrom(x) == nil)
			}
		}
		if issuer {
			continue // a CA certificate listed to complete a chain, not a signer
		}
		offline := *p
		offline.Revocation = trust.Revocation{}
		_, err := checker.Check(context.Background(), &offline, x, presented)
		var te *trust.Error
		var ce *trust.CertError
		if err == nil || errors.As(err, &ce) || !errors.As(err, &te) {
			continue
		}
		out = append(out, Finding{Severity: Warning, Cert: c, Msg: fmt.Sprintf(
			"%s: this partner's %s.trust: ca policy refuses it, so a message or reply it signs is refused "+
				"(add its CA to %[2]s.ca_certificates or %[2]s.intermediates, correct %[2]s.certificate_subject, or remove it)",
			te.Reason, c.Use)})
	}
	return out
}

// canSign reports whether x's key usage (when it has one) allows
// signatures.
func canSign(x *x509.Certificate) bool {
	return x.KeyUsage == 0 || x.KeyUsage&(x509.KeyUsageDigitalSignature|x509.KeyUsageContentCommitment) != 0
}
