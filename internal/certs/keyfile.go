package certs

import (
	"bytes"
	"crypto"
	"crypto/ecdh"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"github.com/edigateway/gateway/config"
	"os"
	"strings"

	"software.sslmate.com/src/go-pkcs12"

	"github.com/edigateway/gateway/internal/brainpool"
)

// What can be wrong with a file.
var (
	ErrWrongPassword = errors.New("wrong password")
	ErrNoKey         = errors.New("no private key in the file")
	ErrNoCertificate = errors.New("no certificate in the file")
	ErrKeyMismatch   = errors.New("the private key does not belong to the certificate")
	ErrEncryptedPEM  = errors.New("encrypted PEM private keys are not supported; use PKCS#12 with a password, or decrypt it (openssl pkey)")
	ErrFormat        = errors.New("not a PEM, DER or PKCS#12 file")
	// ErrCertOnly: a PKCS#12 file without a private key whose
	// certificates cannot be read (RC2 encryption, as openssl -legacy
	// writes it).
	ErrCertOnly = errors.New("the certificates of this PKCS#12 file (no private key) cannot be read: export the certificate as PEM or DER instead (openssl pkcs12 -nokeys | openssl x509)")
)

// Password says where the password of a PKCS#12 file comes from (see
// config.Password, its home: the configuration names it).
type Password = config.Password

// FileError is a problem with one file (named FileError, not Error, since
// the package's finding severity is called Error).
type FileError struct {
	File string
	Err  error
}

func (e *FileError) Error() string { return e.File + ": " + e.Err.Error() }
func (e *FileError) Unwrap() error { return e.Err }

func fileErr(file string, err error) error { return &FileError{File: file, Err: err} }

// isPEM reports whether b looks like PEM text.
func isPEM(b []byte) bool { return bytes.Contains(b, []byte("-----BEGIN")) }

// Certificates reads every certificate of a file: PEM (any number of
// CERTIFICATE blocks), one DER certificate, or PKCS#12 (all its
// certificates; a private key in it is ignored).
func Certificates(path string, pw Password) ([]*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if isPEM(b) {
		certs, err := pemCertificates(b)
		if err != nil {
			return nil, fileErr(path, err)
		}
		if len(certs) == 0 {
			return nil, fileErr(path, fmt.Errorf("%w (no CERTIFICATE block)", ErrNoCertificate))
		}
		return certs, nil
	}
	if c, err := brainpool.ParseCertificate(b); err == nil {
		return []*x509.Certificate{c}, nil
	}
	if !looksLikePKCS12(b) {
		return nil, fileErr(path, ErrFormat)
	}
	password, err := pw.Get()
	if err != nil {
		return nil, fileErr(path, err)
	}
	_, leaf, chain, err := decodePKCS12(b, password)
	var cu *certsUnreadable
	if errors.As(err, &cu) {
		err = fmt.Errorf("%w: %v", ErrCertOnly, cu.cause)
	}
	if err != nil {
		return nil, fileErr(path, err)
	}
	return append([]*x509.Certificate{leaf}, chain...), nil
}

// KeyPair reads one of our certificate/key pairs. keyFile is a PEM key
// (PKCS#8, PKCS#1 or SEC 1), a DER key (the same encodings) or a PKCS#12
// file; certFile is a PEM, DER or PKCS#12 file, or empty when keyFile is a
// PKCS#12 file that holds the certificate. With several certificates, the
// one the key belongs to is taken. The key must belong to the certificate.
func KeyPair(certFile, keyFile string, pw Password) (*x509.Certificate, crypto.PrivateKey, error) {
	kb, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, nil, err
	}
	var key crypto.PrivateKey
	var certs []*x509.Certificate
	switch {
	case isPEM(kb):
		if key, err = pemKey(kb); err != nil {
			return nil, nil, fileErr(keyFile, err)
		}
	default:
		if key, err = derKey(kb); err == nil {
			break
		}
		if !looksLikePKCS12(kb) {
			return nil, nil, fileErr(keyFile, ErrFormat)
		}
		password, err := pw.Get()
		if err != nil {
			return nil, nil, fileErr(keyFile, err)
		}
		var leaf *x509.Certificate
		var chain []*x509.Certificate
		var cu *certsUnreadable
		if key, leaf, chain, err = decodePKCS12(kb, password); errors.As(err, &cu) {
			err = ErrNoKey
		}
		if err != nil {
			return nil, nil, fileErr(keyFile, err)
		}
		if key == nil {
			return nil, nil, fileErr(keyFile, ErrNoKey)
		}
		certs = append([]*x509.Certificate{leaf}, chain...)
	}
	if certFile != "" && certFile != keyFile {
		if certs, err = Certificates(certFile, pw); err != nil {
			return nil, nil, err
		}
	}
	if len(certs) == 0 {
		return nil, nil, fileErr(keyFile, fmt.Errorf("%w, and no certificate file is named", ErrNoCertificate))
	}
	pub, err := publicKey(key)
	if err != nil {
		return nil, nil, fileErr(keyFile, err)
	}
	for _, c := range certs {
		if matches(pub, c) {
			return c, key, nil
		}
	}
	where := keyFile
	if certFile != "" {
		where = certFile
	}
	msg := fmt.Sprintf("the private key does not belong to certificate %s in %s", certs[0].Subject, where)
	if len(certs) > 1 {
		msg = fmt.Sprintf("the private key belongs to none of the %d certificates in %s", len(certs), where)
	}
	return nil, nil, fileErr(keyFile, mismatchError(msg))
}

// mismatchError is ErrKeyMismatch with the certificate named.
type mismatchError string

func (e mismatchError) Error() string        { return string(e) }
func (e mismatchError) Is(target error) bool { return target == ErrKeyMismatch }

// PEM encodes a certificate and key as PEM (CERTIFICATE, PKCS#8 PRIVATE
// KEY), the form the protocol packages' parsers take.
func PEM(cert *x509.Certificate, key crypto.PrivateKey) (certPEM, keyPEM []byte, err error) {
	var k8 []byte
	if bk, ok := key.(*brainpool.PrivateKey); ok {
		k8, err = brainpool.MarshalPKCS8PrivateKey(bk)
	} else {
		k8, err = x509.MarshalPKCS8PrivateKey(key)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("keyfile: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: k8}), nil
}

func pemCertificates(b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return out, nil
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := brainpool.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate: %w", err)
		}
		out = append(out, c)
	}
}

func pemKey(b []byte) (crypto.PrivateKey, error) {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return nil, fmt.Errorf("%w (no PRIVATE KEY block)", ErrNoKey)
		}
		var key crypto.PrivateKey
		var err error
		switch blk.Type {
		case "PRIVATE KEY":
			key, err = x509.ParsePKCS8PrivateKey(blk.Bytes)
			if err != nil {
				// crypto/x509 does not know brainpoolP256r1 (BDEW AS4).
				if bk, berr := brainpool.ParsePrivateKey(blk.Bytes); berr == nil {
					key, err = bk, nil
				}
			}
		case "RSA PRIVATE KEY":
			if _, enc := blk.Headers["DEK-Info"]; enc {
				return nil, ErrEncryptedPEM
			}
			key, err = x509.ParsePKCS1PrivateKey(blk.Bytes)
		case "EC PRIVATE KEY":
			if _, enc := blk.Headers["DEK-Info"]; enc {
				return nil, ErrEncryptedPEM
			}
			key, err = x509.ParseECPrivateKey(blk.Bytes)
			if err != nil {
				if bk, berr := brainpool.ParsePrivateKey(blk.Bytes); berr == nil {
					key, err = bk, nil
				}
			}
		case "ENCRYPTED PRIVATE KEY":
			return nil, ErrEncryptedPEM
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("private key: %w", err)
		}
		return key, nil
	}
}

func derKey(b []byte) (crypto.PrivateKey, error) {
	if k, err := x509.ParsePKCS8PrivateKey(b); err == nil {
		return k, nil
	}
	if k, err := x509.ParsePKCS1PrivateKey(b); err == nil {
		return k, nil
	}
	if k, err := x509.ParseECPrivateKey(b); err == nil {
		return k, nil
	}
	if k, err := brainpool.ParsePrivateKey(b); err == nil {
		return k, nil
	}
	return nil, ErrFormat
}

// looksLikePKCS12 checks the outer structure: SEQUENCE { INTEGER 3, ... }.
func looksLikePKCS12(b []byte) bool {
	if len(b) < 8 || b[0] != 0x30 {
		return false
	}
	i := 2
	if b[1]&0x80 != 0 {
		i += int(b[1] & 0x7f)
	}
	return i+2 < len(b) && b[i] == 0x02 && b[i+1] == 0x01 && b[i+2] == 0x03
}

// certsUnreadable: a PKCS#12 file without a private key whose
// certificates cannot be read either (ErrNoKey for a key pair,
// ErrCertOnly for certificates).
type certsUnreadable struct{ cause error }

func (e *certsUnreadable) Error() string { return "certificate-only PKCS#12 file: " + e.cause.Error() }

// decodePKCS12 returns the private key (nil for a certificate-only file),
// the leaf certificate (the key's, else the first) and the others.
func decodePKCS12(b []byte, password string) (crypto.PrivateKey, *x509.Certificate, []*x509.Certificate, error) {
	key, cert, chain, err := pkcs12.DecodeChain(b, password)
	if err == nil {
		certs := append([]*x509.Certificate{cert}, chain...)
		// Vendors do not always put the leaf first: take the key's.
		if pub, perr := publicKey(key); perr == nil {
			for i, c := range certs {
				if matches(pub, c) {
					certs[0], certs[i] = certs[i], certs[0]
					break
				}
			}
		}
		return key, certs[0], certs[1:], nil
	}
	if errors.Is(err, pkcs12.ErrIncorrectPassword) || errors.Is(err, pkcs12.ErrDecryption) {
		return nil, nil, nil, ErrWrongPassword
	}
	if strings.Contains(err.Error(), "private key missing") || strings.Contains(err.Error(), "authenticated safe") {
		// A certificate-only file: go-pkcs12 (like x/crypto/pkcs12) reads
		// one only as a Java trust store; certOnlyPKCS12 reads what
		// openssl -nokeys writes.
		if certs, terr := pkcs12.DecodeTrustStore(b, password); terr == nil && len(certs) > 0 {
			return nil, certs[0], certs[1:], nil
		}
		certs, cerr := certOnlyPKCS12(b, password)
		switch {
		case cerr == nil:
			return nil, certs[0], certs[1:], nil
		case errors.Is(cerr, ErrWrongPassword):
			return nil, nil, nil, ErrWrongPassword
		}
		if strings.Contains(err.Error(), "private key missing") {
			return nil, nil, nil, &certsUnreadable{cause: cerr}
		}
	}
	if strings.Contains(err.Error(), "certificate missing") {
		return nil, nil, nil, ErrNoCertificate
	}
	return nil, nil, nil, fmt.Errorf("PKCS#12: %w", err)
}

func publicKey(key crypto.PrivateKey) (crypto.PublicKey, error) {
	switch k := key.(type) {
	case crypto.Signer:
		return k.Public(), nil
	case *ecdh.PrivateKey:
		return k.PublicKey(), nil
	}
	return nil, fmt.Errorf("unsupported private key type %T", key)
}

func matches(pub crypto.PublicKey, c *x509.Certificate) bool {
	certPub := c.PublicKey
	if certPub == nil {
		// crypto/x509 leaves X25519 certificate keys unparsed.
		if p, err := x509.ParsePKIXPublicKey(c.RawSubjectPublicKeyInfo); err == nil {
			certPub = p
		}
	}
	eq, ok := pub.(interface{ Equal(crypto.PublicKey) bool })
	return ok && eq.Equal(certPub)
}
