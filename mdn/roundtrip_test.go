package mdn

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"sync"
	"testing"
	"time"

	"github.com/smallstep/pkcs7"
)

var (
	testKeyOnce sync.Once
	testKey     *rsa.PrivateKey
	testCert    *x509.Certificate
	testKeyErr  error
)

// testSigner returns a generated RSA-2048 key with a self-signed certificate.
func testSigner(t testing.TB) (*rsa.PrivateKey, *x509.Certificate) {
	t.Helper()
	testKeyOnce.Do(func() {
		testKey, testKeyErr = rsa.GenerateKey(rand.Reader, 2048)
		if testKeyErr != nil {
			return
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(4130),
			Subject:      pkix.Name{CommonName: "gateway mdn test"},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &testKey.PublicKey, testKey)
		if err != nil {
			testKeyErr = err
			return
		}
		testCert, testKeyErr = x509.ParseCertificate(der)
	})
	if testKeyErr != nil {
		t.Fatal(testKeyErr)
	}
	return testKey, testCert
}

// sha256Signer signs content as a detached CMS SignedData with SHA-256.
func sha256Signer(t testing.TB) func([]byte) ([]byte, error) {
	key, cert := testSigner(t)
	return func(content []byte) ([]byte, error) {
		sd, err := pkcs7.NewSignedData(content)
		if err != nil {
			return nil, err
		}
		sd.SetDigestAlgorithm(pkcs7.OIDDigestAlgorithmSHA256)
		if err := sd.AddSigner(cert, key, pkcs7.SignerInfoConfig{}); err != nil {
			return nil, err
		}
		sd.Detach()
		return sd.Finish()
	}
}

// certVerifier verifies with the embedded certificate and requires it to be
// cert.
func certVerifier(cert *x509.Certificate) func(sig, content []byte) error {
	return func(sig, content []byte) error {
		p7, err := pkcs7.Parse(sig)
		if err != nil {
			return err
		}
		if s := p7.GetOnlySigner(); s == nil || !s.Equal(cert) {
			return errors.New("unexpected signer")
		}
		p7.Content = content
		return p7.Verify()
	}
}

func TestRoundTripSigned(t *testing.T) {
	_, cert := testSigner(t)
	for _, d := range []Disposition{DispProcessed, DispDuplicateDocument, DispDecryptionFailed,
		DispAuthenticationFailed, DispIntegrityCheckFailed, DispUnexpectedProcessingError,
		DispUnknownTradingPartner, DispUnsupportedMICAlgorithms} {
		r := sampleReport()
		r.Disposition = d
		entity := BuildEntity(r)
		ct, body, err := Sign(entity, "sha-256", sha256Signer(t))
		if err != nil {
			t.Fatal(err)
		}
		h := r.Headers()
		h.Set("Content-Type", ct)
		p, err := ParseHTTP(h, body)
		if err != nil {
			t.Fatalf("%v: %v", d, err)
		}
		if !bytes.Equal(p.SignedContent, entity) {
			t.Fatalf("%v: signed content differs from the built entity", d)
		}
		if err := p.Verify(certVerifier(cert)); err != nil {
			t.Fatalf("%v: verify: %v", d, err)
		}
		want := r
		want.HumanText = "Received.\nThank you."
		if p.Report != want {
			t.Fatalf("%v: report\n%+v\nwant\n%+v", d, p.Report, want)
		}
		if p.SignatureMICAlg != "sha-256" {
			t.Fatalf("micalg %q", p.SignatureMICAlg)
		}
		p7, err := pkcs7.Parse(p.Signature)
		if err != nil {
			t.Fatal(err)
		}
		if !p7.Signers[0].DigestAlgorithm.Algorithm.Equal(pkcs7.OIDDigestAlgorithmSHA256) {
			t.Fatalf("digest algorithm %v", p7.Signers[0].DigestAlgorithm.Algorithm)
		}
	}
}

func TestRoundTripTamperedFailsVerify(t *testing.T) {
	_, cert := testSigner(t)
	r := sampleReport()
	ct, body, err := Sign(BuildEntity(r), "sha-256", sha256Signer(t))
	if err != nil {
		t.Fatal(err)
	}
	tampers := map[string][]byte{
		"disposition": bytes.Replace(body, []byte("; processed\r\n"), []byte("; processed/error: decryption-failed\r\n"), 1),
		"mic":         bytes.Replace(body, []byte("G6Phsh"), []byte("G6PhsH"), 1),
		"human text":  bytes.Replace(body, []byte("Thank you."), []byte("Thank you!"), 1),
		"header":      bytes.Replace(body, []byte("Content-Type: message/disposition-notification"), []byte("Content-type: message/disposition-notification"), 1),
	}
	for name, tb := range tampers {
		if bytes.Equal(tb, body) {
			t.Fatalf("%s: tamper changed nothing", name)
		}
		p, err := Parse(ct, tb)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := p.Verify(certVerifier(cert)); !errors.Is(err, ErrSignature) {
			t.Errorf("%s: tampered MDN verified (%v)", name, err)
		}
	}
	// Bytes outside the signed part (the preamble) are not covered.
	p, err := Parse(ct, append([]byte("preamble\r\n"), body...))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Verify(certVerifier(cert)); err != nil {
		t.Fatalf("preamble broke verification: %v", err)
	}
	// A signature from another key fails.
	otherKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	p.Signature = mustSignWith(t, otherKey, cert, p.SignedContent)
	if err := p.Verify(certVerifier(cert)); !errors.Is(err, ErrSignature) {
		t.Fatalf("signature by another key verified: %v", err)
	}
}

func mustSignWith(t *testing.T, key *rsa.PrivateKey, cert *x509.Certificate, content []byte) []byte {
	t.Helper()
	sd, err := pkcs7.NewSignedData(content)
	if err != nil {
		t.Fatal(err)
	}
	sd.SetDigestAlgorithm(pkcs7.OIDDigestAlgorithmSHA256)
	if err := sd.AddSigner(cert, key, pkcs7.SignerInfoConfig{}); err != nil {
		t.Fatal(err)
	}
	sd.Detach()
	der, err := sd.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return der
}
