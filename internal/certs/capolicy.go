package certs

import (
	"bytes"
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
//
// The certificate is judged as the gateway judges it: with the section's
// intermediates and nothing else (the section's other listed
// certificates never complete a chain; a message completes it only with
// the certificates it carries). A certificate that chains only through a
// CA certificate listed beside it gets its own warning: messages that do
// not carry that CA are refused.
//
// Revocation is not checked (offline: no fetch); the dates and key size
// are Check's findings. Certificates that do not sign messages (a CA
// certificate that issued another certificate of the section, keys only
// for encryption) are not judged; a self-signed certificate is, CA flag
// or not (openssl req -x509 sets it).
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
		var listed []*x509.Certificate // the section's other certificates
		issuer := false
		for _, o := range certs {
			if o.Partner == c.Partner && o.Use == c.Use && o.Cert != nil && !o.Cert.Equal(x) {
				listed = append(listed, o.Cert)
				issuer = issuer || (x.IsCA && issued(x, o.Cert))
			}
		}
		if issuer {
			continue // a CA certificate listed beside a certificate it issued, not a signer
		}
		offline := *p
		offline.Revocation = trust.Revocation{}
		_, err := checker.Check(context.Background(), &offline, x, nil)
		var te *trust.Error
		var ce *trust.CertError
		if err == nil || errors.As(err, &ce) || !errors.As(err, &te) {
			continue
		}
		msg := fmt.Sprintf("%s: this partner's %s.trust: ca policy refuses it, so a message or reply it signs is refused "+
			"(add its CA to %[2]s.ca_certificates or %[2]s.intermediates, or correct %[2]s.certificate_subject; "+
			"a certificate listed only to encrypt to belongs in %[2]s.send.encryption_certificate)", te.Reason, c.Use)
		if len(listed) > 0 {
			if _, err := checker.Check(context.Background(), &offline, x, listed); err == nil {
				msg = fmt.Sprintf("%s without the CA certificates listed beside it in %s.certificates, which are not used "+
					"to complete chains: a message or reply it signs that does not carry them is refused (list them in %[2]s.intermediates)",
					te.Reason, c.Use)
			}
		}
		out = append(out, Finding{Severity: Warning, Cert: c, Msg: msg})
	}
	return out
}

// issued reports whether ca is the issuer of c by name and, when both
// carry them, by key identifier (crypto/x509 cannot check the
// brainpoolP256r1 signatures of BDEW chains, so the signature is not
// checked).
func issued(ca, c *x509.Certificate) bool {
	if !bytes.Equal(c.RawIssuer, ca.RawSubject) {
		return false
	}
	if len(c.AuthorityKeyId) > 0 && len(ca.SubjectKeyId) > 0 {
		return bytes.Equal(c.AuthorityKeyId, ca.SubjectKeyId)
	}
	return true
}

// canSign reports whether x's key usage (when it has one) allows
// signatures.
func canSign(x *x509.Certificate) bool {
	return x.KeyUsage == 0 || x.KeyUsage&(x509.KeyUsageDigitalSignature|x509.KeyUsageContentCommitment) != 0
}
