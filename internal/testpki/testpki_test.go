package testpki

import (
	"bytes"
	"crypto/sha1"
	"crypto/x509"
	"encoding/asn1"
	"encoding/pem"
	"os"
	"testing"
	"time"
)

func TestRSAKeyCachedPerIndex(t *testing.T) {
	a, b := RSAKey(t, 0), RSAKey(t, 1)
	if a != RSAKey(t, 0) {
		t.Fatal("key 0 generated twice")
	}
	if a.Equal(b) {
		t.Fatal("keys 0 and 1 are the same key")
	}
	if a.N.BitLen() != KeyBits {
		t.Fatalf("key is %d bits, want %d", a.N.BitLen(), KeyBits)
	}
	ks := RSAKeys(t, 3)
	if ks[0] != a || ks[1] != b || ks[2] == nil || ks[2].Equal(a) || ks[2].Equal(b) {
		t.Fatal("RSAKeys does not return the cached keys 0..2")
	}
}

func TestSelfSignedDefaults(t *testing.T) {
	key := RSAKey(t, 0)
	c := SelfSigned(t, key, Cert{CommonName: "defaults"})
	if c.SerialNumber.Int64() != 1 || c.Subject.CommonName != "defaults" || len(c.Subject.Organization) != 0 {
		t.Fatalf("serial %v subject %v", c.SerialNumber, c.Subject)
	}
	if !c.NotBefore.Equal(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)) || !c.NotAfter.Equal(time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("validity %v .. %v", c.NotBefore, c.NotAfter)
	}
	if c.KeyUsage != x509.KeyUsageDigitalSignature|x509.KeyUsageKeyEncipherment || len(c.ExtKeyUsage) != 0 {
		t.Fatalf("key usage %v, ext %v", c.KeyUsage, c.ExtKeyUsage)
	}
	if len(c.SubjectKeyId) != 0 {
		t.Fatalf("subject key id %x set without asking", c.SubjectKeyId)
	}
	if err := c.CheckSignature(c.SignatureAlgorithm, c.RawTBSCertificate, c.Signature); err != nil {
		t.Fatalf("not self-signed: %v", err)
	}
}

func TestSelfSignedOptions(t *testing.T) {
	key := RSAKey(t, 1)
	nb, na := time.Date(2021, 2, 3, 4, 5, 6, 0, time.UTC), time.Date(2031, 2, 3, 4, 5, 6, 0, time.UTC)
	c := SelfSigned(t, key, Cert{
		CommonName: "opts", Organization: []string{"org"}, Serial: 77, NotBefore: nb, NotAfter: na,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageEmailProtection},
		SubjectKeyID: true,
	})
	if c.SerialNumber.Int64() != 77 || c.Subject.Organization[0] != "org" || !c.NotBefore.Equal(nb) || !c.NotAfter.Equal(na) {
		t.Fatalf("serial %v subject %v validity %v .. %v", c.SerialNumber, c.Subject, c.NotBefore, c.NotAfter)
	}
	if c.KeyUsage != x509.KeyUsageDigitalSignature || len(c.ExtKeyUsage) != 1 || c.ExtKeyUsage[0] != x509.ExtKeyUsageEmailProtection {
		t.Fatalf("key usage %v, ext %v", c.KeyUsage, c.ExtKeyUsage)
	}
	// For RSA the subject public key bits are the PKCS#1 RSAPublicKey.
	pkcs1, err := asn1.Marshal(key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	want := sha1.Sum(pkcs1)
	if !bytes.Equal(c.SubjectKeyId, want[:]) {
		t.Fatalf("subject key id %x, want %x", c.SubjectKeyId, want)
	}
}

func TestPEMRoundTrip(t *testing.T) {
	key := RSAKey(t, 0)
	a := SelfSigned(t, key, Cert{CommonName: "a", Serial: 1})
	b := SelfSigned(t, key, Cert{CommonName: "b", Serial: 2})
	rest := CertPEM(a, b)
	for _, want := range []*x509.Certificate{a, b} {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil || blk.Type != "CERTIFICATE" || !bytes.Equal(blk.Bytes, want.Raw) {
			t.Fatalf("PEM block for %s: %v", want.Subject.CommonName, blk)
		}
	}
	if len(rest) != 0 {
		t.Fatalf("%d trailing bytes", len(rest))
	}

	certPath, keyPath := WriteKeyPair(t, t.TempDir(), "pair", a, key)
	cb, err := os.ReadFile(certPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(cb, CertPEM(a)) {
		t.Fatal("certificate file differs from CertPEM")
	}
	kb, err := os.ReadFile(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(kb)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		t.Fatalf("key file block %v", blk)
	}
	parsed, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !key.Equal(parsed) {
		t.Fatal("key file holds another key")
	}
}
