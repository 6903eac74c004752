// Package trust is the one place where a certificate is judged at the
// moment it is used: a partner's signer (AS2 and AS4, and the receiver of
// an AS4 message we send), a partner's encryption certificate, and our own
// identity keys at start and on reload. Both protocols call it, so that a
// certificate is refused for the same reasons, in the same words, whatever
// the protocol.
//
// It checks validity dates and RSA key size (this file) and, for trust: ca
// partners and the Peppol AP, chains, key usage, names and revocation
// (ca.go, revocation.go: Checker, CAPolicy).
package trust

import (
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"errors"
	"fmt"
	"time"
)

// MinRSABits is the smallest RSA modulus accepted unless a policy allows
// weak keys.
const MinRSABits = 2048

// WeakRSAFloor is the smallest RSA modulus accepted even when a policy
// allows weak keys (legacy peers still on 1024-bit keys).
const WeakRSAFloor = 1024

// Reasons a certificate is refused; CertError wraps one of them.
var (
	ErrExpired     = errors.New("certificate expired")
	ErrNotYetValid = errors.New("certificate not yet valid")
	ErrWeakKey     = errors.New("key too short")
)

// Policy says what CheckSigner accepts.
type Policy struct {
	// AllowWeakKeys admits RSA keys from WeakRSAFloor up to MinRSABits
	// (the partner file's as2/as4 allow_weak_keys, identity.allow_weak_keys).
	AllowWeakKeys bool
}

// CertError names the certificate a check refused and why.
type CertError struct {
	// Err is ErrExpired, ErrNotYetValid or ErrWeakKey.
	Err error
	// Subject is the certificate subject (RFC 2253), Serial the serial
	// number as Serial writes it.
	Subject, Serial     string
	NotBefore, NotAfter time.Time
	// At is the time the certificate was judged at.
	At time.Time
	// Bits is the RSA modulus size (ErrWeakKey).
	Bits int
}

func (e *CertError) Unwrap() error { return e.Err }

// Error is Reason: it holds no secret and is fit for a partner.
func (e *CertError) Error() string { return e.Reason() }

// Reason is the sentence both protocols send a partner and log.
func (e *CertError) Reason() string {
	name := fmt.Sprintf("certificate %q (serial %s)", e.Subject, e.Serial)
	dates := fmt.Sprintf("valid from %s to %s", rfc3339(e.NotBefore), rfc3339(e.NotAfter))
	switch {
	case errors.Is(e.Err, ErrExpired):
		return fmt.Sprintf("%s expired on %s (%s; checked at %s)", name, rfc3339(e.NotAfter), dates, rfc3339(e.At))
	case errors.Is(e.Err, ErrNotYetValid):
		return fmt.Sprintf("%s is not valid before %s (%s; checked at %s)", name, rfc3339(e.NotBefore), dates, rfc3339(e.At))
	case errors.Is(e.Err, ErrWeakKey):
		return fmt.Sprintf("%s has a %d-bit RSA key; at least %d bits are required", name, e.Bits, MinRSABits)
	}
	return fmt.Sprintf("%s: %v", name, e.Err)
}

func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func newError(err error, c *x509.Certificate, at time.Time) *CertError {
	return &CertError{Err: err, Subject: c.Subject.String(), Serial: Serial(c), NotBefore: c.NotBefore, NotAfter: c.NotAfter, At: at}
}

// CheckValidity refuses a certificate that is expired or not yet valid at
// now (a *CertError wrapping ErrExpired or ErrNotYetValid).
func CheckValidity(c *x509.Certificate, now time.Time) error {
	switch {
	case now.After(c.NotAfter):
		return newError(ErrExpired, c, now)
	case now.Before(c.NotBefore):
		return newError(ErrNotYetValid, c, now)
	}
	return nil
}

// CheckKeySize refuses an RSA key below MinRSABits (below WeakRSAFloor
// when p allows weak keys). Weak reports an accepted key that is only
// accepted because p allows weak keys, so that the caller can log it.
func CheckKeySize(c *x509.Certificate, p Policy) (weak bool, err error) {
	bits := KeyBits(c)
	if _, ok := c.PublicKey.(*rsa.PublicKey); !ok || bits >= MinRSABits {
		return false, nil
	}
	if p.AllowWeakKeys && bits >= WeakRSAFloor {
		return true, nil
	}
	e := newError(ErrWeakKey, c, time.Time{})
	e.Bits = bits
	return false, e
}

// KeyBits is the size of the certificate's RSA modulus or EC curve (0 for
// other keys).
func KeyBits(c *x509.Certificate) int {
	switch k := c.PublicKey.(type) {
	case *rsa.PublicKey:
		return k.N.BitLen()
	case *ecdsa.PublicKey:
		return k.Curve.Params().BitSize
	}
	return 0
}

// CheckSigner judges the certificate whose key verified a partner's
// signature (or that we encrypt to): valid at now, key size per p. The
// error is a *CertError.
func CheckSigner(c *x509.Certificate, now time.Time, p Policy) error {
	if err := CheckValidity(c, now); err != nil {
		return err
	}
	if _, err := CheckKeySize(c, p); err != nil {
		var ce *CertError
		if errors.As(err, &ce) {
			ce.At = now
		}
		return err
	}
	return nil
}

// CheckOwn judges one of our own identity certificates at start and on
// reload: an expired certificate or a short RSA key is refused. A
// certificate that is not yet valid is accepted (a key added ahead of a
// rollover decrypts once partners use it); certcheck warns about it.
func CheckOwn(c *x509.Certificate, now time.Time, p Policy) error {
	if now.After(c.NotAfter) {
		return newError(ErrExpired, c, now)
	}
	_, err := CheckKeySize(c, p)
	return err
}
