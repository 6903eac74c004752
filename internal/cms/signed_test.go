package cms

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/smallstep/pkcs7"

	"github.com/edigateway/gateway/internal/testpki"
)

var testNow = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

func TestVerifyOpenSSLSignatures(t *testing.T) {
	dir := t.TempDir()
	cert, key := newCert(t, "sender", 0, certOpts{})
	certPath, keyPath := testpki.WriteKeyPair(t, dir, "sender", cert, key)
	rolled, _ := newCert(t, "sender-next", 1, certOpts{})
	trusted := []*x509.Certificate{rolled, cert}
	content := testContent(2500)
	in := filepath.Join(dir, "content.bin")
	if err := os.WriteFile(in, content, 0o600); err != nil {
		t.Fatal(err)
	}

	variants := []struct {
		name string
		args []string
		pss  bool
	}{
		{"attrs", nil, false},
		{"noattr", []string{"-noattr"}, false},
		{"keyid-nocerts", []string{"-keyid", "-nocerts"}, false},
		{"stream-ber", []string{"-stream"}, false},
		{"pss", []string{"-keyopt", "rsa_padding_mode:pss"}, true},
		{"pss-noattr", []string{"-noattr", "-keyopt", "rsa_padding_mode:pss", "-keyopt", "rsa_pss_saltlen:32"}, true},
	}
	for _, md := range []string{"md5", "sha1", "sha224", "sha256", "sha384", "sha512"} {
		for _, v := range variants {
			t.Run(md+"/"+v.name, func(t *testing.T) {
				out := filepath.Join(dir, "sig.der")
				args := []string{"cms", "-sign", "-binary", "-md", md, "-in", in, "-signer", certPath, "-inkey", keyPath, "-outform", "DER", "-out", out}
				args = append(args, v.args...)
				if _, err := openssl(t, args...); err != nil {
					if md == "md5" {
						t.Skipf("openssl refuses %s: %v", md, err)
					}
					t.Fatal(err)
				}
				sig, err := os.ReadFile(out)
				if err != nil {
					t.Fatal(err)
				}
				s, err := VerifyDetached(sig, content, trusted, testNow)
				if err != nil {
					t.Fatal(err)
				}
				h, _ := DigestHash(md)
				d := h.New()
				d.Write(content)
				if s.DigestAlg != md || s.PSS != v.pss || s.Cert != cert || !bytes.Equal(s.Digest, d.Sum(nil)) {
					t.Fatalf("signer = %+v", s)
				}
				bad := bytes.Clone(content)
				bad[100] ^= 0x20
				if _, err := VerifyDetached(sig, bad, trusted, testNow); !errors.Is(err, ErrBadSignature) {
					t.Fatalf("tampered: want ErrBadSignature, got %v", err)
				}
				if _, err := VerifyDetached(sig, content, []*x509.Certificate{rolled}, testNow); !errors.Is(err, ErrUnknownSigner) {
					t.Fatalf("untrusted: want ErrUnknownSigner, got %v", err)
				}
			})
		}
	}
}

func TestVerifyAttachedOpenSSL(t *testing.T) {
	dir := t.TempDir()
	cert, key := newCert(t, "sender", 0, certOpts{})
	certPath, keyPath := testpki.WriteKeyPair(t, dir, "sender", cert, key)
	content := testContent(1500)
	in := filepath.Join(dir, "content.bin")
	if err := os.WriteFile(in, content, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, stream := range []bool{false, true} {
		out := filepath.Join(dir, "signed.der")
		args := []string{"cms", "-sign", "-nodetach", "-binary", "-in", in, "-signer", certPath, "-inkey", keyPath, "-outform", "DER", "-out", out}
		if stream {
			args = append(args, "-stream")
		}
		if _, err := openssl(t, args...); err != nil {
			t.Fatal(err)
		}
		der, _ := os.ReadFile(out)
		got, s, err := VerifyAttached(der, []*x509.Certificate{cert}, testNow)
		if err != nil {
			t.Fatalf("stream=%v: %v", stream, err)
		}
		if !bytes.Equal(got, content) || s.DigestAlg != DigestSHA256 {
			t.Fatalf("stream=%v: content or signer wrong: %+v", stream, s)
		}
		// An attached signature also verifies as detached over the same content.
		if _, err := VerifyDetached(der, content, []*x509.Certificate{cert}, testNow); err != nil {
			t.Fatal(err)
		}
		if _, err := VerifyDetached(der, content[1:], []*x509.Certificate{cert}, testNow); !errors.Is(err, ErrBadSignature) {
			t.Fatalf("attached with other content: want ErrBadSignature, got %v", err)
		}
	}
}

func TestSignOpenSSLVerifies(t *testing.T) {
	dir := t.TempDir()
	cert, key := newCert(t, "gateway", 0, certOpts{})
	certPath, _ := testpki.WriteKeyPair(t, dir, "gateway", cert, key)
	content := testContent(4000)
	in := filepath.Join(dir, "content.bin")
	if err := os.WriteFile(in, content, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, md := range []string{"sha1", "sha-224", "sha256", "SHA-384", "sha512"} {
		for _, pss := range []bool{false, true} {
			for _, attached := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/pss=%v/attached=%v", md, pss, attached), func(t *testing.T) {
					der, err := Sign(content, cert, key, SignOptions{Digest: md, PSS: pss, Attached: attached, SigningTime: testNow})
					if err != nil {
						t.Fatal(err)
					}
					// Ours.
					var s *Signer
					if attached {
						var got []byte
						got, s, err = VerifyAttached(der, []*x509.Certificate{cert}, testNow)
						if err == nil && !bytes.Equal(got, content) {
							t.Fatal("attached content differs")
						}
					} else {
						s, err = VerifyDetached(der, content, []*x509.Certificate{cert}, testNow)
					}
					if err != nil {
						t.Fatal(err)
					}
					wantMD, _ := NormalizeDigest(md)
					if s.DigestAlg != wantMD || s.PSS != pss || !s.SigningTime.Equal(testNow) {
						t.Fatalf("signer = %+v", s)
					}
					// OpenSSL.
					sigPath := filepath.Join(dir, "sig.der")
					if err := os.WriteFile(sigPath, der, 0o600); err != nil {
						t.Fatal(err)
					}
					args := []string{"cms", "-verify", "-binary", "-inform", "DER", "-in", sigPath, "-CAfile", certPath, "-purpose", "any"}
					if !attached {
						args = append(args, "-content", in)
					}
					out, err := openssl(t, args...)
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(out, content) {
						t.Fatal("openssl verified different content")
					}
				})
			}
		}
	}
}

// TestSmallstepCrossCheck verifies signatures between our implementation and
// github.com/smallstep/pkcs7 in both directions.
func TestSmallstepCrossCheck(t *testing.T) {
	cert, key := newCert(t, "gateway", 0, certOpts{})
	content := testContent(999)

	ours, err := SignDetached(content, cert, key, "sha256")
	if err != nil {
		t.Fatal(err)
	}
	p7, err := pkcs7.Parse(ours)
	if err != nil {
		t.Fatal(err)
	}
	p7.Content = content
	if err := p7.Verify(); err != nil {
		t.Fatalf("smallstep rejects our signature: %v", err)
	}

	sd, err := pkcs7.NewSignedData(content)
	if err != nil {
		t.Fatal(err)
	}
	sd.SetDigestAlgorithm(pkcs7.OIDDigestAlgorithmSHA512)
	if err := sd.AddSigner(cert, key, pkcs7.SignerInfoConfig{}); err != nil {
		t.Fatal(err)
	}
	sd.Detach()
	theirs, err := sd.Finish()
	if err != nil {
		t.Fatal(err)
	}
	s, err := VerifyDetached(theirs, content, []*x509.Certificate{cert}, testNow)
	if err != nil {
		t.Fatalf("we reject smallstep's signature: %v", err)
	}
	if s.DigestAlg != DigestSHA512 {
		t.Fatalf("digest %s", s.DigestAlg)
	}
}

func TestVerifyWrongKeySameIdentity(t *testing.T) {
	// A configured certificate with the signer's issuer and serial but
	// another key must not verify: only the configured key counts.
	cert, key := newCert(t, "sender", 0, certOpts{serial: 77})
	impostor, _ := newCert(t, "sender", 1, certOpts{serial: 77})
	content := []byte("payload")
	sig, err := SignDetached(content, cert, key, "sha256")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyDetached(sig, content, []*x509.Certificate{impostor}, testNow); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("want ErrBadSignature, got %v", err)
	}
	if _, err := VerifyDetached(sig, content, []*x509.Certificate{impostor, cert}, testNow); err != nil {
		t.Fatalf("with both configured: %v", err)
	}
	if _, err := VerifyDetached(sig, content, []*x509.Certificate{cert}, time.Time{}); err != nil {
		t.Fatalf("zero time skips the validity check: %v", err)
	}
	notYet, _ := newCert(t, "sender", 0, certOpts{serial: 77, notBefore: testNow.Add(time.Hour)})
	if _, err := VerifyDetached(sig, content, []*x509.Certificate{notYet}, testNow); !errors.Is(err, ErrCertificateExpired) {
		t.Fatalf("not yet valid: want ErrCertificateExpired, got %v", err)
	}
}

func TestNormalizeDigest(t *testing.T) {
	for in, want := range map[string]string{
		"sha1": "sha1", "SHA-1": "sha1", "sha-256": "sha256", "sha256": "sha256", " SHA384 ": "sha384",
		"sha-512": "sha512", "sha224": "sha224", "md5": "md5", "rsa-sha256": "sha256",
	} {
		got, err := NormalizeDigest(in)
		if err != nil || got != want {
			t.Errorf("NormalizeDigest(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "sha3-256", "crc32"} {
		if _, err := NormalizeDigest(in); !errors.Is(err, ErrUnsupportedAlgorithm) {
			t.Errorf("NormalizeDigest(%q): want ErrUnsupportedAlgorithm, got %v", in, err)
		}
	}
}
