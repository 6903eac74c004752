package trust

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/edigateway/gateway/internal/brainpool"
)

// maxChainLength bounds the chains built for brainpool PKIs (leaf, up to
// six intermediates, root).
const maxChainLength = 8

// hasBrainpoolIssuer reports whether a certificate that may issue others
// in a chain (a root, an intermediate, a certificate the message carried)
// has a brainpoolP256r1 key: crypto/x509 cannot check the signatures such
// a key made (the BDEW AS4 PKI), so Check builds those chains itself.
func hasBrainpoolIssuer(sets ...[]*x509.Certificate) bool {
	for _, set := range sets {
		for _, c := range set {
			if c == nil {
				continue
			}
			if _, ok := c.PublicKey.(*brainpool.PublicKey); ok {
				return true
			}
		}
	}
	return false
}

// brainpoolChains builds the chains from leaf to one of roots through
// intermediates, as crypto/x509's Verify would: every certificate valid at
// now, each issuer a CA (basicConstraints, keyCertSign when key usage is
// present) named by the child's issuer (and key identifier) whose key
// verifies the child's signature (brainpoolP256r1 ECDSA-SHA256, or any
// algorithm crypto/x509 knows), path length constraints kept, no unhandled
// critical extension, and the extended key usages nested as Verify nests
// them. Errors are crypto/x509's (UnknownAuthorityError,
// CertificateInvalidError), so that Check words them the same way. Name
// constraints are not applied: a chain whose CA carries them is refused.
func brainpoolChains(leaf *x509.Certificate, roots, intermediates []*x509.Certificate, now time.Time, ekus []x509.ExtKeyUsage) ([][]*x509.Certificate, error) {
	if err := usable(leaf, now); err != nil {
		return nil, err
	}
	for _, r := range roots {
		if r.Equal(leaf) {
			return [][]*x509.Certificate{{leaf}}, nil
		}
	}
	var found [][]*x509.Certificate
	var lastErr error
	var walk func(chain []*x509.Certificate)
	walk = func(chain []*x509.Certificate) {
		if len(found) > 0 || len(chain) >= maxChainLength {
			return
		}
		child := chain[len(chain)-1]
		try := func(parent *x509.Certificate, root bool) {
			if len(found) > 0 || slices.ContainsFunc(chain, parent.Equal) {
				return
			}
			if err := issued(parent, child, len(chain)-1, now); err != nil {
				lastErr = err
				return
			}
			next := append(slices.Clone(chain), parent)
			if !root {
				walk(next)
				return
			}
			if err := nestedUsage(next, ekus); err != nil {
				lastErr = err
				return
			}
			found = append(found, next)
		}
		for _, r := range roots {
			try(r, true)
		}
		for _, i := range intermediates {
			try(i, false)
		}
	}
	walk([]*x509.Certificate{leaf})
	if len(found) > 0 {
		return found, nil
	}
	var inv x509.CertificateInvalidError
	if errors.As(lastErr, &inv) {
		return nil, inv
	}
	return nil, x509.UnknownAuthorityError{Cert: leaf}
}

// usable checks what a certificate needs wherever it is in a chain.
func usable(c *x509.Certificate, now time.Time) error {
	if now.Before(c.NotBefore) || now.After(c.NotAfter) {
		return x509.CertificateInvalidError{Cert: c, Reason: x509.Expired}
	}
	if len(c.UnhandledCriticalExtensions) > 0 {
		return fmt.Errorf("certificate %q has an unhandled critical extension", c.Subject.String())
	}
	return nil
}

// issued checks that parent issued child; below is the number of
// intermediates between parent and the leaf.
func issued(parent, child *x509.Certificate, below int, now time.Time) error {
	if !bytes.Equal(parent.RawSubject, child.RawIssuer) {
		return errors.New("issuer name differs")
	}
	if len(child.AuthorityKeyId) > 0 && len(parent.SubjectKeyId) > 0 && !bytes.Equal(child.AuthorityKeyId, parent.SubjectKeyId) {
		return errors.New("authority key identifier differs")
	}
	if !parent.BasicConstraintsValid || !parent.IsCA {
		return x509.CertificateInvalidError{Cert: parent, Reason: x509.NotAuthorizedToSign}
	}
	if parent.KeyUsage != 0 && parent.KeyUsage&x509.KeyUsageCertSign == 0 {
		return x509.CertificateInvalidError{Cert: parent, Reason: x509.NotAuthorizedToSign}
	}
	if parent.MaxPathLen >= 0 && (parent.MaxPathLen > 0 || parent.MaxPathLenZero) && below > parent.MaxPathLen {
		return x509.CertificateInvalidError{Cert: parent, Reason: x509.TooManyIntermediates}
	}
	if len(parent.PermittedDNSDomains)+len(parent.ExcludedDNSDomains)+len(parent.PermittedIPRanges)+len(parent.ExcludedIPRanges)+
		len(parent.PermittedEmailAddresses)+len(parent.ExcludedEmailAddresses)+len(parent.PermittedURIDomains)+len(parent.ExcludedURIDomains) > 0 {
		return x509.CertificateInvalidError{Cert: parent, Reason: x509.CANotAuthorizedForThisName}
	}
	if err := usable(parent, now); err != nil {
		return err
	}
	if _, ok := parent.PublicKey.(*brainpool.PublicKey); ok {
		return brainpool.CheckSignatureFrom(child, parent)
	}
	return child.CheckSignatureFrom(parent)
}

// nestedUsage applies crypto/x509's extended key usage rule: each
// certificate of the chain that lists extended key usages (without
// anyExtendedKeyUsage) narrows the usages asked for; none may be left.
func nestedUsage(chain []*x509.Certificate, ekus []x509.ExtKeyUsage) error {
	if slices.Contains(ekus, x509.ExtKeyUsageAny) {
		return nil
	}
	want := slices.Clone(ekus)
	for i := len(chain) - 1; i >= 0; i-- {
		c := chain[i]
		if len(c.ExtKeyUsage) == 0 && len(c.UnknownExtKeyUsage) == 0 || slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageAny) {
			continue
		}
		want = slices.DeleteFunc(want, func(u x509.ExtKeyUsage) bool { return !slices.Contains(c.ExtKeyUsage, u) })
		if len(want) == 0 {
			return x509.CertificateInvalidError{Cert: chain[0], Reason: x509.IncompatibleUsage}
		}
	}
	return nil
}

// checkCRLSignature checks that issuer signed rl: crypto/x509's check, or
// ECDSA-SHA256 with a brainpoolP256r1 key, whose certificate must then
// allow cRLSign when it has a key usage (as crypto/x509 asks).
func checkCRLSignature(rl *x509.RevocationList, issuer *x509.Certificate) error {
	pub, ok := issuer.PublicKey.(*brainpool.PublicKey)
	if !ok {
		return rl.CheckSignatureFrom(issuer)
	}
	if issuer.KeyUsage != 0 && issuer.KeyUsage&x509.KeyUsageCRLSign == 0 {
		return errors.New("the issuer's key usage does not allow cRLSign")
	}
	if rl.SignatureAlgorithm != x509.ECDSAWithSHA256 {
		return fmt.Errorf("signature algorithm %v, want ECDSA-SHA256 with brainpoolP256r1", rl.SignatureAlgorithm)
	}
	sum := sha256.Sum256(rl.RawTBSRevocationList)
	if !brainpool.VerifyASN1(pub, sum[:], rl.Signature) {
		return errors.New("brainpoolP256r1 signature invalid")
	}
	return nil
}
