package wssec

import (
	"crypto/x509"
	"errors"

	"github.com/edigateway/gateway/internal/brainpool"
)

// SignerInfo is what VerifyOptions.CheckSigner decides on.
type SignerInfo struct {
	// Cert is the certificate whose key verified the signature.
	Cert *x509.Certificate
	// Presented are the certificates of the security header's
	// wsse:BinarySecurityTokens (X509v3 and X509PKIPathv1): chain material.
	Presented []*x509.Certificate
	// DirectReference is true when ds:KeyInfo names the signer with a
	// wsse:SecurityTokenReference/wsse:Reference to an X509v3
	// BinarySecurityToken (the PEPPOL AS4 profile's requirement).
	DirectReference bool
}

// TrustError is a refusal by VerifyOptions.CheckSigner; it is
// ErrFailedAuthentication (EBMS:0101), and Reason gives the check's own
// reason (Cause is the checker's error, for errors.As).
type TrustError struct {
	Reason string
	Cause  error
}

func (e *TrustError) Error() string   { return ErrFailedAuthentication.Error() + ": " + e.Cause.Error() }
func (e *TrustError) Unwrap() []error { return []error{ErrFailedAuthentication, e.Cause} }

// presented returns the certificates of the BinarySecurityTokens of the
// security header; tokens that do not parse are skipped (a signer that
// names one is then unknown).
func (s *Signature) presented() []*x509.Certificate {
	var out []*x509.Certificate
	for _, bst := range childElements(s.Security, NamespaceWSSE, "BinarySecurityToken") {
		vt, _ := attrValue(bst, "", "ValueType")
		der, err := decodeBase64(bst.Text())
		if err != nil {
			continue
		}
		switch vt {
		case ValueTypeX509v3:
			if c, err := brainpool.ParseCertificate(der); err == nil {
				out = append(out, c)
			}
		case ValueTypeX509PKIPathv1:
			path, err := parsePKIPath(der)
			if err != nil {
				continue
			}
			for _, raw := range path {
				// brainpool.ParseCertificate reads the BDEW PKI's
				// brainpoolP256r1 keys too.
				if c, err := brainpool.ParseCertificate(raw); err == nil {
					out = append(out, c)
				}
			}
		}
	}
	return out
}

// directReference reports whether ds:KeyInfo is a SecurityTokenReference
// with a wsse:Reference to an X509v3 BinarySecurityToken.
func (s *Signature) directReference() bool {
	ki, err := childElement(s.Element, NamespaceDSig, "KeyInfo")
	if err != nil || ki == nil || len(ki.ChildElements()) != 1 {
		return false
	}
	str := ki.ChildElements()[0]
	if !isElement(str, NamespaceWSSE, "SecurityTokenReference") || len(str.ChildElements()) != 1 {
		return false
	}
	r := str.ChildElements()[0]
	if !isElement(r, NamespaceWSSE, "Reference") {
		return false
	}
	uri, _ := attrValue(r, "", "URI")
	if len(uri) < 2 || uri[0] != '#' {
		return false
	}
	bst := s.ids[uri[1:]]
	if bst == nil || !isElement(bst, NamespaceWSSE, "BinarySecurityToken") {
		return false
	}
	vt, _ := attrValue(bst, "", "ValueType")
	return vt == ValueTypeX509v3
}

// checkSigner runs opts.CheckSigner, mapping its refusal to a TrustError.
func (s *Signature) checkSigner(opts VerifyOptions, signer *x509.Certificate, presented []*x509.Certificate) error {
	err := opts.CheckSigner(SignerInfo{Cert: signer, Presented: presented, DirectReference: s.directReference()})
	if err == nil {
		return nil
	}
	reason := err.Error()
	var r interface{ PartnerReason() string }
	if errors.As(err, &r) {
		reason = r.PartnerReason()
	}
	return &TrustError{Reason: reason, Cause: err}
}
