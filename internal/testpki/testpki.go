// Package testpki makes the RSA keys and self-signed certificates that tests
// sign, encrypt and verify with. It is for _test.go files only.
package testpki

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// KeyBits is the size of every key RSAKey returns.
const KeyBits = 2048

type keyEntry struct {
	once sync.Once
	key  *rsa.PrivateKey
	err  error
}

var (
	keysMu sync.Mutex
	keys   = map[int]*keyEntry{}
)

// RSAKey returns test RSA key index (KeyBits bits), generated once per test
// binary: key generation is the slow part of these tests. Different indexes
// give different keys; calls for different indexes generate in parallel.
func RSAKey(t testing.TB, index int) *rsa.PrivateKey {
	t.Helper()
	k, err := rsaKey(index)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// RSAKeys returns test keys 0 to n-1 (as RSAKey), generating missing ones in
// parallel.
func RSAKeys(t testing.TB, n int) []*rsa.PrivateKey {
	t.Helper()
	out := make([]*rsa.PrivateKey, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { out[i], errs[i] = rsaKey(i) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func rsaKey(index int) (*rsa.PrivateKey, error) {
	keysMu.Lock()
	e, ok := keys[index]
	if !ok {
		e = &keyEntry{}
		keys[index] = e
	}
	keysMu.Unlock()
	e.once.Do(func() {
		e.key, e.err = rsa.GenerateKey(rand.Reader, KeyBits)
		if e.err != nil {
			e.err = fmt.Errorf("testpki: RSA key %d: %w", index, e.err)
		}
	})
	return e.key, e.err
}

// Cert describes a self-signed test certificate. Zero fields take the
// defaults noted.
type Cert struct {
	CommonName   string
	Organization []string // none when nil
	Serial       int64    // 1 when zero
	// NotBefore and NotAfter default to 2020-01-01 and 2040-01-01 UTC.
	NotBefore, NotAfter time.Time
	// KeyUsage defaults to digital signature and key encipherment.
	KeyUsage    x509.KeyUsage
	ExtKeyUsage []x509.ExtKeyUsage
	// SubjectKeyID, when set, adds the RFC 5280 (method 1) key identifier:
	// the SHA-1 of the subject public key bits.
	SubjectKeyID bool
}

// SelfSigned returns a certificate for key, signed by key, as c describes.
func SelfSigned(t testing.TB, key crypto.Signer, c Cert) *x509.Certificate {
	t.Helper()
	if c.Serial == 0 {
		c.Serial = 1
	}
	if c.NotBefore.IsZero() {
		c.NotBefore = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	if c.NotAfter.IsZero() {
		c.NotAfter = time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	if c.KeyUsage == 0 {
		c.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(c.Serial),
		Subject:      pkix.Name{CommonName: c.CommonName, Organization: c.Organization},
		NotBefore:    c.NotBefore,
		NotAfter:     c.NotAfter,
		KeyUsage:     c.KeyUsage,
		ExtKeyUsage:  c.ExtKeyUsage,
	}
	if c.SubjectKeyID {
		ski, err := SubjectKeyID(key.Public())
		if err != nil {
			t.Fatal(err)
		}
		tmpl.SubjectKeyId = ski
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatalf("testpki: certificate %q: %v", c.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("testpki: certificate %q: %v", c.CommonName, err)
	}
	return cert
}

// SubjectKeyID returns the SHA-1 of the subject public key bits of pub
// (RFC 5280 section 4.2.1.2, method 1).
func SubjectKeyID(pub crypto.PublicKey) ([]byte, error) {
	spki, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("testpki: subject key id: %w", err)
	}
	var info struct {
		Algorithm pkix.AlgorithmIdentifier
		PublicKey asn1.BitString
	}
	if _, err := asn1.Unmarshal(spki, &info); err != nil {
		return nil, fmt.Errorf("testpki: subject key id: %w", err)
	}
	sum := sha1.Sum(info.PublicKey.Bytes)
	return sum[:], nil
}

// CertPEM returns certs as concatenated CERTIFICATE PEM blocks.
func CertPEM(certs ...*x509.Certificate) []byte {
	var b []byte
	for _, c := range certs {
		b = append(b, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	return b
}

// KeyPEM returns key as a PKCS#8 PRIVATE KEY PEM block.
func KeyPEM(t testing.TB, key crypto.PrivateKey) []byte {
	t.Helper()
	k8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("testpki: key PEM: %v", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: k8})
}

// WriteKeyPair writes cert and key as PEM files name.crt and name.key in dir
// (mode 0600) and returns their paths.
func WriteKeyPair(t testing.TB, dir, name string, cert *x509.Certificate, key crypto.PrivateKey) (certPath, keyPath string) {
	t.Helper()
	certPath = filepath.Join(dir, name+".crt")
	keyPath = filepath.Join(dir, name+".key")
	if err := os.WriteFile(certPath, CertPEM(cert), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, KeyPEM(t, key), 0o600); err != nil {
		t.Fatal(err)
	}
	return certPath, keyPath
}
