package smime

import (
	"bytes"
	"crypto/x509"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/edigateway/gateway/internal/cms"
	"github.com/edigateway/gateway/internal/interop"
)

const (
	micSigned    = "G6PhshLOERWJEIfypIh6Q3sno6cBUWJBDky1igJvDMo="
	micCompSign  = "14SZThwSYUH4aPdkglDwdRFnKUFmgjKsJFZWcSXBTww="
	micEncSHA256 = "NZ0XtRNO0lTldQhKy9c+Dk27CIsuhZX+BGmE2cV6xQk="
	micEncSHA1   = "Swt5ybhwCgiNShERM5Xgkhf4Gf8="
)

// interopOptions: pyas2lib's decryption key, mendelson's signing
// certificate, the clock pinned to the messages' date (quirk 9).
func interopOptions(t testing.TB) Options {
	return Options{
		Keys:    pyas2libKeys(t),
		Trusted: mendelsonCerts(t),
		Now:     func() time.Time { return time.Date(2022, 1, 4, 14, 0, 0, 0, time.UTC) },
	}
}

func TestInteropVectors(t *testing.T) {
	payload := interop.Read(t, "as2/payload.txt")
	cases := []struct {
		file       string
		layers     []string
		mics       map[string]string
		signed     bool
		encrypted  bool
		compressed bool
		bare       bool
		micLen     int
	}{
		{"mecas2_signed.as2", []string{LayerSigned}, map[string]string{"sha256": micSigned, "sha-256": micSigned}, true, false, false, false, 751},
		{"mecas2_compressed.as2", []string{LayerSigned, LayerCompressed}, map[string]string{"sha256": micCompSign}, true, false, true, false, 782},
		{"mecas2_encrypted.as2", []string{LayerEncrypted}, map[string]string{"sha256": micEncSHA256, "SHA-256": micEncSHA256, "sha1": micEncSHA1, "sha-1": micEncSHA1}, false, true, false, true, 620},
		{"mecas2_signed_encrypted.as2", []string{LayerEncrypted, LayerSigned}, map[string]string{"sha-256": micSigned}, true, true, false, false, 751},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			raw := interop.Read(t, "as2/"+c.file)
			if c.file == "mecas2_signed.as2" {
				head, body := SplitCapture(t, raw)
				raw = append(bytes.Clone(head), repairSignedCapture(t, body, payload)...)
			}
			opts := interopOptions(t)
			opts.StrictLineEndings = true // the repaired or intact bytes verify as they are
			res, err := Unwrap(raw, opts)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(res.Payload, payload) {
				t.Fatalf("payload differs from payload.txt:\n%q", res.Payload)
			}
			if !slices.Equal(res.Layers, c.layers) || res.Signed != c.signed || res.Encrypted != c.encrypted ||
				res.Compressed != c.compressed || res.Bare != c.bare || res.LineEndingsRepaired {
				t.Fatalf("result = layers %v signed %v encrypted %v compressed %v bare %v repaired %v",
					res.Layers, res.Signed, res.Encrypted, res.Compressed, res.Bare, res.LineEndingsRepaired)
			}
			if len(res.MICInput()) != c.micLen {
				t.Fatalf("MIC input is %d bytes, want %d", len(res.MICInput()), c.micLen)
			}
			for alg, want := range c.mics {
				got, err := res.MIC(alg)
				if err != nil || got != want {
					t.Fatalf("MIC(%s) = %s, %v; want %s", alg, got, err, want)
				}
			}
			if c.signed {
				if res.Signer.Cert.SerialNumber.Int64() != 0x5A2A5B1C || res.Signer.DigestAlg != cms.DigestSHA256 || res.MICAlgParam != "sha256" {
					t.Fatalf("signer %+v micalg %q", res.Signer, res.MICAlgParam)
				}
				// With the signature's own digest the MIC is its messageDigest.
				mic, _ := res.MIC(res.Signer.DigestAlg)
				if mic != c.mics[firstKey(c.mics)] {
					t.Fatal("MIC differs from messageDigest")
				}
			}
			if c.encrypted && (res.Decryption.Cipher != cms.Cipher3DES || res.Decryption.KeyTransport != cms.KeyTransportRSA) {
				t.Fatalf("decryption %+v", res.Decryption)
			}
			if c.bare {
				if res.ContentType != DefaultContentType || res.Entity != nil || res.Filename != "" {
					t.Fatalf("bare payload: content type %q entity %v", res.ContentType, res.Entity)
				}
			} else {
				if res.ContentType != "application/EDI-Consent" || res.MediaType != "application/edi-consent" || res.Filename != "payload.txt" {
					t.Fatalf("content type %q / %q filename %q", res.ContentType, res.MediaType, res.Filename)
				}
			}
			rec, err := res.ReceivedContentMIC("sha-256")
			if err != nil || rec != res.mustMIC(t, "sha256")+", sha-256" {
				t.Fatalf("ReceivedContentMIC = %q, %v", rec, err)
			}
		})
	}
}

func firstKey(m map[string]string) string {
	for k := range m {
		return k
	}
	return ""
}

func (r *Result) mustMIC(t testing.TB, alg string) string {
	t.Helper()
	m, err := r.MIC(alg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestInteropSignedAsStored feeds mecas2_signed.as2 without the harness
// repair: the exact bytes fail (quirk 1), the line-ending fallback verifies
// the header-CRLF form, which is exactly the 751 bytes that were signed.
func TestInteropSignedAsStored(t *testing.T) {
	raw := interop.Read(t, "as2/mecas2_signed.as2")
	payload := interop.Read(t, "as2/payload.txt")

	strict := interopOptions(t)
	strict.StrictLineEndings = true
	res, err := Unwrap(raw, strict)
	if !errors.Is(err, cms.ErrBadSignature) {
		t.Fatalf("strict: want ErrBadSignature, got %v", err)
	}
	if res == nil || !slices.Equal(res.Layers, []string{LayerSigned}) {
		t.Fatalf("strict: partial result %+v", res)
	}

	res, err = Unwrap(raw, interopOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	if !res.LineEndingsRepaired || !bytes.Equal(res.Payload, payload) || res.mustMIC(t, "sha256") != micSigned || len(res.MICInput()) != 751 {
		t.Fatalf("repaired %v payload %d bytes MIC %s", res.LineEndingsRepaired, len(res.Payload), res.mustMIC(t, "sha256"))
	}
}

func TestInteropNegative(t *testing.T) {
	opts := interopOptions(t)
	other := newKeyPair(t, "other", 0)

	noKeys := opts
	noKeys.Keys = []cms.KeyPair{other}
	res, err := Unwrap(interop.Read(t, "as2/mecas2_signed_encrypted.as2"), noKeys)
	if !errors.Is(err, cms.ErrNoRecipient) || !slices.Equal(res.Layers, []string{LayerEncrypted}) || res.Decryption.Cipher != cms.Cipher3DES {
		t.Fatalf("no key: %v, %+v", err, res)
	}

	untrusted := opts
	untrusted.Trusted = []*x509.Certificate{other.Cert}
	res, err = Unwrap(interop.Read(t, "as2/mecas2_compressed.as2"), untrusted)
	if !errors.Is(err, cms.ErrUnknownSigner) || res.Signed {
		t.Fatalf("untrusted: %v, %+v", err, res)
	}

	expired := opts
	expired.Now = func() time.Time { return time.Date(2028, 1, 1, 0, 0, 0, 0, time.UTC) }
	if _, err := Unwrap(interop.Read(t, "as2/mecas2_compressed.as2"), expired); !errors.Is(err, cms.ErrCertificateExpired) {
		t.Fatalf("expired: %v", err)
	}

	// A flipped payload byte in the signed part: integrity failure.
	raw := bytes.Clone(interop.Read(t, "as2/mecas2_compressed.as2"))
	i := bytes.Index(raw, []byte("S/MIME Compressed Message\r\n\r\n"))
	raw[i+40] ^= 0x01
	if _, err := Unwrap(raw, opts); !errors.Is(err, cms.ErrBadSignature) {
		t.Fatalf("tampered: %v", err)
	}
}

// TestInteropMDNs: the MDN vectors parse with the same entity layer; the
// signed one verifies with the certificate embedded in its CMS (it is not
// signed by cert_mecas2_public.pem).
func TestInteropMDNs(t *testing.T) {
	raw := interop.Read(t, "as2/mecas2_signed.mdn")
	top, err := ParseEntity(raw)
	if err != nil {
		t.Fatal(err)
	}
	parts, err := top.Parts()
	if err != nil || len(parts) != 2 {
		t.Fatalf("signed MDN parts: %d, %v", len(parts), err)
	}
	sig, err := parts[1].DecodedBody()
	if err != nil {
		t.Fatal(err)
	}
	embedded, err := cms.Certificates(sig)
	if err != nil || len(embedded) != 1 || embedded[0].Subject.CommonName != "mecas2" {
		t.Fatalf("embedded certificates: %v", err)
	}
	at2016 := func() time.Time { return time.Date(2016, 12, 30, 10, 25, 0, 0, time.UTC) }
	res, err := UnwrapEntity(top, Options{Trusted: embedded, Now: at2016})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Signed || res.Signer.DigestAlg != cms.DigestSHA1 || len(res.MICInput()) != 923 ||
		res.mustMIC(t, "sha1") != "S7j1nnJZHD1Iq89ZwaZizEiSIpA=" || res.MediaType != "multipart/report" {
		t.Fatalf("signed MDN: %+v", res)
	}
	report, err := res.Entity.Parts()
	if err != nil || len(report) != 2 {
		t.Fatalf("report parts: %v", err)
	}
	if mt, _, _ := report[1].MediaType(); mt != "message/disposition-notification" ||
		!bytes.Contains(report[1].Body, []byte("Received-Content-MIC: O4bvrm5t2YunRfwvZicNdEUmPaPZ9vUslX8loVLDck0=, sha-256")) {
		t.Fatalf("disposition part %s", mt)
	}
	if _, err := UnwrapEntity(top, Options{Trusted: mendelsonCerts(t), Now: at2016}); !errors.Is(err, cms.ErrUnknownSigner) {
		t.Fatalf("mendelson certificate: want ErrUnknownSigner, got %v", err)
	}

	res, err = Unwrap(interop.Read(t, "as2/mecas2_unsigned.mdn"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	report, err = res.Entity.Parts()
	if err != nil || len(report) != 2 || res.Signed || len(res.Layers) != 0 {
		t.Fatalf("unsigned MDN: %v", err)
	}
	if !bytes.Contains(report[1].Body, []byte("Disposition: automatic-action/MDN-sent-automatically; processed/error: authentication-failed")) {
		t.Fatalf("disposition: %q", report[1].Body)
	}
}
