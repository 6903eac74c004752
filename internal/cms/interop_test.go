package cms

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/edigateway/gateway/internal/interop"
)

var boundaryRE = regexp.MustCompile(`boundary="([^"]+)"`)

func TestInteropDecryptMendelson3DESBER(t *testing.T) {
	body := captureBody(t, interop.Read(t, "as2/mecas2_encrypted.as2"))
	if len(body) != 1085 {
		t.Fatalf("body is %d bytes, want 1085", len(body))
	}
	if !bytes.HasPrefix(body, []byte{0x30, 0x80}) {
		t.Fatalf("vector is expected to be BER indefinite length, starts % x", body[:2])
	}
	kp := pyas2libKeyPair(t)
	other, otherKey := newCert(t, "other", 0, certOpts{})
	keys := []KeyPair{{Cert: other, Key: otherKey}, kp} // rollover: ours is the second

	plain, info, err := Decrypt(body, keys)
	if err != nil {
		t.Fatal(err)
	}
	want := interop.Read(t, "as2/payload.txt")
	if !bytes.Equal(plain, want) {
		t.Fatalf("plaintext differs from payload.txt (%d vs %d bytes)", len(plain), len(want))
	}
	if info.Cipher != Cipher3DES || info.KeyTransport != KeyTransportRSA || info.AuthEnveloped {
		t.Fatalf("info = %+v", info)
	}
	if info.Recipient.SerialNumber.Text(16) != "d009b23e5ffe6697" {
		t.Fatalf("recipient serial %x", info.Recipient.SerialNumber)
	}
	if ct, err := ContentType(body); err != nil || ct != TypeEnvelopedData {
		t.Fatalf("ContentType = %q, %v", ct, err)
	}

	// Without the pyas2lib key nobody is addressed.
	if _, _, err := Decrypt(body, keys[:1]); !errors.Is(err, ErrNoRecipient) {
		t.Fatalf("want ErrNoRecipient, got %v", err)
	}
	// The right certificate with the wrong private key never yields the
	// payload. A failed PKCS#1 v1.5 unwrap continues with a random content
	// key (no Bleichenbacher oracle), so the failure is usually the CBC
	// padding (ErrDecrypt), but about one random key in 256 pads validly
	// and decrypts to garbage.
	if got, _, err := Decrypt(body, []KeyPair{{Cert: kp.Cert, Key: otherKey}}); err == nil && bytes.Equal(got, want) {
		t.Fatal("the wrong private key decrypted the payload")
	} else if err != nil && !errors.Is(err, ErrDecrypt) {
		t.Fatalf("want ErrDecrypt, got %v", err)
	}
	// Corrupting the last ciphertext block breaks the padding.
	bad := bytes.Clone(body)
	bad[len(bad)-20] ^= 0xff
	if _, _, err := Decrypt(bad, keys); !errors.Is(err, ErrDecrypt) && !errors.Is(err, ErrMalformed) {
		t.Fatalf("want ErrDecrypt, got %v", err)
	}
}

func TestInteropVerifyMendelson(t *testing.T) {
	mendelson := mendelsonCert(t)
	payload := interop.Read(t, "as2/payload.txt")
	date := time.Date(2022, 1, 4, 14, 0, 0, 0, time.UTC)

	// mecas2_signed.as2: the signed part is the three header lines with CRLF
	// and the payload untouched (quirk 1 and 2); build it directly here, the
	// smime package tests the MIME repair.
	signedBody := captureBody(t, interop.Read(t, "as2/mecas2_signed.as2"))
	part := append([]byte("Content-Type: application/EDI-Consent\r\nContent-Transfer-Encoding: binary\r\n"+
		"Content-Disposition: attachment; filename=payload.txt\r\n\r\n"), payload...)
	sig := signaturePartLF(t, signedBody)

	// mecas2_signed_encrypted.as2 decrypts to a multipart/signed entity.
	inner, _, err := Decrypt(captureBody(t, interop.Read(t, "as2/mecas2_signed_encrypted.as2")), []KeyPair{pyas2libKeyPair(t)})
	if err != nil {
		t.Fatal(err)
	}
	if len(inner) != 3808 {
		t.Fatalf("decrypted entity is %d bytes, want 3808", len(inner))
	}
	m := boundaryRE.FindSubmatch(inner)
	if m == nil {
		t.Fatal("no boundary in decrypted entity")
	}
	seBody := inner[bytes.Index(inner, []byte("\r\n\r\n"))+4:]

	compBody := captureBody(t, interop.Read(t, "as2/mecas2_compressed.as2"))
	cm := boundaryRE.FindSubmatch(interop.Read(t, "as2/mecas2_compressed.as2"))
	compPart := firstPart(t, compBody, string(cm[1]))

	cases := []struct {
		name    string
		sig     []byte
		content []byte
		mic     string
	}{
		{"signed", sig, part, "G6PhshLOERWJEIfypIh6Q3sno6cBUWJBDky1igJvDMo="},
		{"signed_encrypted", signaturePart(t, seBody), firstPart(t, seBody, string(m[1])), "G6PhshLOERWJEIfypIh6Q3sno6cBUWJBDky1igJvDMo="},
		{"compressed", signaturePart(t, compBody), compPart, "14SZThwSYUH4aPdkglDwdRFnKUFmgjKsJFZWcSXBTww="},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := VerifyDetached(c.sig, c.content, []*x509.Certificate{mendelson}, date)
			if err != nil {
				t.Fatal(err)
			}
			if got := base64.StdEncoding.EncodeToString(s.Digest); got != c.mic {
				t.Fatalf("messageDigest %s, want %s", got, c.mic)
			}
			if s.DigestAlg != DigestSHA256 || s.PSS || s.Cert != mendelson {
				t.Fatalf("signer = %+v", s)
			}
			if s.SigningTime.IsZero() {
				t.Fatal("signingTime not reported")
			}
			// Tampered content: integrity failure.
			bad := bytes.Clone(c.content)
			bad[len(bad)-3] ^= 1
			if _, err := VerifyDetached(c.sig, bad, []*x509.Certificate{mendelson}, date); !errors.Is(err, ErrBadSignature) {
				t.Fatalf("tampered: want ErrBadSignature, got %v", err)
			}
			// Not a configured signer: the embedded certificate does not count.
			if _, err := VerifyDetached(c.sig, c.content, []*x509.Certificate{pyas2libKeyPair(t).Cert}, date); !errors.Is(err, ErrUnknownSigner) {
				t.Fatalf("untrusted: want ErrUnknownSigner, got %v", err)
			}
			// Outside the certificate's validity.
			if _, err := VerifyDetached(c.sig, c.content, []*x509.Certificate{mendelson}, time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)); !errors.Is(err, ErrCertificateExpired) {
				t.Fatalf("expired: want ErrCertificateExpired, got %v", err)
			}
			embedded, err := Certificates(c.sig)
			if err != nil || len(embedded) != 1 || !bytes.Equal(embedded[0].Raw, mendelson.Raw) {
				t.Fatalf("Certificates = %d certs, %v", len(embedded), err)
			}
		})
	}

	// The compressed first part inflates to the 751-byte signed entity.
	compDER := compPart[bytes.Index(compPart, []byte("\r\n\r\n"))+4:]
	entity, err := Decompress(compDER, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(entity) != 751 || !bytes.Equal(entity, part) {
		t.Fatalf("inflated %d bytes, want the 751-byte entity", len(entity))
	}
	if _, err := Decompress(compDER, 750); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("limit 750: want ErrTooLarge, got %v", err)
	}
}

// signaturePartLF is signaturePart for the LF-only stored mecas2_signed.as2.
func signaturePartLF(t testing.TB, body []byte) []byte {
	t.Helper()
	crlf := bytes.ReplaceAll(body, []byte("\n"), []byte("\r\n"))
	return signaturePart(t, crlf)
}

func TestInteropPKCS12(t *testing.T) {
	kp, err := ParsePKCS12(interop.Read(t, "as2/cert_test.p12"), "test")
	if err != nil {
		t.Fatal(err)
	}
	pem := pyas2libKeyPair(t)
	if !bytes.Equal(kp.Cert.Raw, pem.Cert.Raw) {
		t.Fatal("PKCS#12 certificate differs from cert_test_public.pem")
	}
	if !kp.Key.Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(pem.Key.Public()) {
		t.Fatal("PKCS#12 key differs from cert_test_key.pem")
	}
	if _, err := ParsePKCS12(interop.Read(t, "as2/cert_test.p12"), "wrong"); err == nil {
		t.Fatal("wrong password accepted")
	}
}
