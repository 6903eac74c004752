package endpoint

import (
	"crypto"
	"crypto/ecdh"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"

	"github.com/edigateway/gateway/internal/brainpool"
	"github.com/edigateway/gateway/internal/xmlenc"
)

// LoadKeyPair reads one of our certificate/key pairs: the first CERTIFICATE
// of a PEM file and an unencrypted PEM private key (PKCS#8 "PRIVATE KEY" with
// an RSA, ECDSA (also brainpoolP256r1), Ed25519 or X25519 key, PKCS#1 "RSA
// PRIVATE KEY" or SEC 1 "EC PRIVATE KEY"). The key must belong to the
// certificate.
func LoadKeyPair(certFile, keyFile string) (KeyPair, error) {
	cb, err := os.ReadFile(certFile)
	if err != nil {
		return xmlenc.KeyPair{}, fmt.Errorf("as4 key pair: %w", err)
	}
	kb, err := os.ReadFile(keyFile)
	if err != nil {
		return xmlenc.KeyPair{}, fmt.Errorf("as4 key pair: %w", err)
	}
	kp, err := ParseKeyPair(cb, kb)
	if err != nil {
		return xmlenc.KeyPair{}, fmt.Errorf("as4 key pair %s, %s: %w", certFile, keyFile, err)
	}
	return kp, nil
}

// ParseKeyPair is LoadKeyPair on PEM bytes.
func ParseKeyPair(certPEM, keyPEM []byte) (KeyPair, error) {
	var cert *x509.Certificate
	for rest := certPEM; cert == nil; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return xmlenc.KeyPair{}, errors.New("no CERTIFICATE PEM block")
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := brainpool.ParseCertificate(b.Bytes)
		if err != nil {
			return xmlenc.KeyPair{}, fmt.Errorf("certificate: %w", err)
		}
		cert = c
	}
	var key crypto.PrivateKey
	for rest := keyPEM; key == nil; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return xmlenc.KeyPair{}, errors.New("no PRIVATE KEY PEM block")
		}
		var err error
		switch b.Type {
		case "PRIVATE KEY":
			if key, err = x509.ParsePKCS8PrivateKey(b.Bytes); err != nil {
				// crypto/x509 does not know brainpoolP256r1 (BDEW AS4).
				if bk, berr := brainpool.ParsePrivateKey(b.Bytes); berr == nil {
					key, err = bk, nil
				}
			}
		case "RSA PRIVATE KEY":
			key, err = x509.ParsePKCS1PrivateKey(b.Bytes)
		case "EC PRIVATE KEY":
			if key, err = x509.ParseECPrivateKey(b.Bytes); err != nil {
				if bk, berr := brainpool.ParsePrivateKey(b.Bytes); berr == nil {
					key, err = bk, nil
				}
			}
		case "ENCRYPTED PRIVATE KEY":
			return xmlenc.KeyPair{}, errors.New("encrypted private keys are not supported; decrypt it first (openssl pkey)")
		default:
			continue
		}
		if err != nil {
			return xmlenc.KeyPair{}, fmt.Errorf("private key: %w", err)
		}
	}
	var pub crypto.PublicKey
	switch k := key.(type) {
	case crypto.Signer:
		pub = k.Public()
	case *ecdh.PrivateKey:
		pub = k.PublicKey()
	default:
		return xmlenc.KeyPair{}, fmt.Errorf("unsupported private key type %T", key)
	}
	certPub := cert.PublicKey
	if certPub == nil {
		// crypto/x509 leaves X25519 certificate keys unparsed.
		if p, err := x509.ParsePKIXPublicKey(cert.RawSubjectPublicKeyInfo); err == nil {
			certPub = p
		}
	}
	eq, ok := pub.(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !eq.Equal(certPub) {
		return xmlenc.KeyPair{}, fmt.Errorf("the private key does not belong to certificate %s", cert.Subject)
	}
	return xmlenc.KeyPair{Cert: cert, Key: key}, nil
}
