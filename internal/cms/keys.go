package cms

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"

	"golang.org/x/crypto/pkcs12"
)

// ParseCertificates reads every certificate in data: one or more PEM
// "CERTIFICATE" blocks (other blocks are skipped), or a single DER
// certificate.
func ParseCertificates(data []byte) ([]*x509.Certificate, error) {
	if !bytes.Contains(data, []byte("-----BEGIN")) {
		c, err := x509.ParseCertificate(data)
		if err != nil {
			return nil, fmt.Errorf("cms: certificate: %w", err)
		}
		return []*x509.Certificate{c}, nil
	}
	var certs []*x509.Certificate
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("cms: certificate %d: %w", len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("cms: certificate: no CERTIFICATE PEM block")
	}
	return certs, nil
}

// ParsePrivateKey reads an unencrypted RSA private key: PEM "PRIVATE KEY"
// (PKCS#8) or "RSA PRIVATE KEY" (PKCS#1), or the same in DER. Encrypted PEM
// is not supported (decrypt it with openssl pkey first).
func ParsePrivateKey(data []byte) (PrivateKey, error) {
	der := data
	if bytes.Contains(data, []byte("-----BEGIN")) {
		der = nil
		for rest := data; ; {
			var b *pem.Block
			b, rest = pem.Decode(rest)
			if b == nil {
				break
			}
			if b.Type == "PRIVATE KEY" || b.Type == "RSA PRIVATE KEY" {
				der = b.Bytes
				break
			}
			if b.Type == "ENCRYPTED PRIVATE KEY" {
				return nil, errors.New("cms: private key: encrypted PKCS#8 is not supported")
			}
		}
		if der == nil {
			return nil, errors.New("cms: private key: no PRIVATE KEY PEM block")
		}
	}
	if k, err := x509.ParsePKCS8PrivateKey(der); err == nil {
		pk, ok := k.(PrivateKey)
		if !ok {
			return nil, fmt.Errorf("cms: private key %T: %w", k, ErrUnsupportedAlgorithm)
		}
		return pk, nil
	}
	k, err := x509.ParsePKCS1PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("cms: private key: not PKCS#8 or PKCS#1: %w", err)
	}
	return k, nil
}

// ParseKeyPair reads a certificate and its private key (see
// ParseCertificates and ParsePrivateKey; the first certificate is used) and
// checks that they belong together.
func ParseKeyPair(certPEM, keyPEM []byte) (KeyPair, error) {
	certs, err := ParseCertificates(certPEM)
	if err != nil {
		return KeyPair{}, err
	}
	key, err := ParsePrivateKey(keyPEM)
	if err != nil {
		return KeyPair{}, err
	}
	kp := KeyPair{Cert: certs[0], Key: key}
	if err := kp.check(); err != nil {
		return KeyPair{}, err
	}
	return kp, nil
}

// ParsePKCS12 reads a PKCS#12 file holding one private key and its
// certificate (3DES or RC2-40 bags, SHA-1 MAC, as golang.org/x/crypto/pkcs12
// supports; AES-encrypted PKCS#12 from OpenSSL 3 defaults is not).
func ParsePKCS12(data []byte, password string) (KeyPair, error) {
	k, cert, err := pkcs12.Decode(data, password)
	if err != nil {
		return KeyPair{}, fmt.Errorf("cms: pkcs12: %w", err)
	}
	pk, ok := k.(PrivateKey)
	if !ok {
		return KeyPair{}, fmt.Errorf("cms: pkcs12: key %T: %w", k, ErrUnsupportedAlgorithm)
	}
	kp := KeyPair{Cert: cert, Key: pk}
	if err := kp.check(); err != nil {
		return KeyPair{}, err
	}
	return kp, nil
}

type publicKeyEqualer interface {
	Equal(x crypto.PublicKey) bool
}

func (kp KeyPair) check() error {
	pub, ok := kp.Key.Public().(publicKeyEqualer)
	if !ok || !pub.Equal(kp.Cert.PublicKey) {
		return fmt.Errorf("cms: key pair: private key does not match certificate %q", kp.Cert.Subject.String())
	}
	return nil
}
