package smime

import (
	"bytes"
	"crypto/x509"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/internal/cms"
)

func wrapCMS(t testing.TB, smimeType string, der []byte) []byte {
	t.Helper()
	return append([]byte("Content-Type: application/pkcs7-mime; smime-type="+smimeType+"\r\n"+
		"Content-Transfer-Encoding: base64\r\n\r\n"), base64Lines(der)...)
}

// TestUnwrapAnyOrder: layers in an order no standard sender uses —
// compressed(encrypted(opaque signed(compressed(payload)))) — still unwrap,
// and the MIC is over the signed content.
func TestUnwrapAnyOrder(t *testing.T) {
	sender := newKeyPair(t, "sender", 0)
	receiver := newKeyPair(t, "receiver", 1)
	payloadEntity := []byte("Content-Type: application/xml\r\n\r\n<Invoice/>\n")

	z1, err := cms.Compress(payloadEntity)
	if err != nil {
		t.Fatal(err)
	}
	l1 := wrapCMS(t, "compressed-data", z1)
	sig, err := cms.Sign(l1, sender.Cert, sender.Key, cms.SignOptions{Attached: true, Digest: "sha384"})
	if err != nil {
		t.Fatal(err)
	}
	l2 := wrapCMS(t, "signed-data", sig)
	env, err := cms.Encrypt(l2, []*x509.Certificate{receiver.Cert}, "aes192-cbc", true)
	if err != nil {
		t.Fatal(err)
	}
	l3 := wrapCMS(t, "enveloped-data", env)
	z2, err := cms.Compress(l3)
	if err != nil {
		t.Fatal(err)
	}
	msg := append([]byte("Content-Type: application/x-pkcs7-mime\r\n\r\n"), z2...) // no smime-type at all

	res, err := Unwrap(msg, Options{Keys: []cms.KeyPair{receiver}, Trusted: []*x509.Certificate{sender.Cert}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{LayerCompressed, LayerEncrypted, LayerSignedOpaque, LayerCompressed}
	if !slices.Equal(res.Layers, want) || string(res.Payload) != "<Invoice/>\n" || res.MediaType != "application/xml" {
		t.Fatalf("layers %v payload %q", res.Layers, res.Payload)
	}
	if !bytes.Equal(res.MICInput(), l1) || res.Signer.DigestAlg != "sha384" {
		t.Fatal("MIC input is not the opaque signed content")
	}
}

func TestUnwrapLimitsAndErrors(t *testing.T) {
	sender := newKeyPair(t, "sender", 0)
	opts := Options{Trusted: []*x509.Certificate{sender.Cert}}

	// Too many layers.
	cur := []byte("Content-Type: text/plain\r\n\r\nx")
	for range 5 {
		z, err := cms.Compress(cur)
		if err != nil {
			t.Fatal(err)
		}
		cur = wrapCMS(t, "compressed-data", z)
	}
	if _, err := Unwrap(cur, Options{MaxLayers: 3, MaxCompressedLayers: 5}); !errors.Is(err, ErrMalformedMIME) {
		t.Fatalf("max layers: %v", err)
	}
	if res, err := Unwrap(cur, Options{MaxCompressedLayers: 5}); err != nil || len(res.Layers) != 5 {
		t.Fatalf("5 layers: %v", err)
	}
	// Nested compressed layers are bounded by default.
	if _, err := Unwrap(cur, Options{}); !errors.Is(err, cms.ErrTooLarge) {
		t.Fatalf("5 compressed layers with the default bound: %v", err)
	}

	// Decompression limit.
	big, _ := cms.Compress(append([]byte("Content-Type: text/plain\r\n\r\n"), make([]byte, 1<<20)...))
	if _, err := Unwrap(wrapCMS(t, "compressed-data", big), Options{MaxSize: 1 << 19}); !errors.Is(err, cms.ErrTooLarge) {
		t.Fatalf("size limit: %v", err)
	}

	signed, err := Build([]byte("x"), "text/plain", "", BuildOptions{SignCert: sender.Cert, SignKey: sender.Key, SignDigest: "sha256"})
	if err != nil {
		t.Fatal(err)
	}
	ct := signed.ContentType
	body := string(signed.Body)
	for name, c := range map[string]struct {
		ct, body string
		want     error
	}{
		"unknown protocol":   {strings.Replace(ct, "application/pkcs7-signature", "application/pgp-signature", 1), body, cms.ErrUnsupportedAlgorithm},
		"three parts":        {ct, strings.Replace(body, "--"+boundaryOf(t, ct)+"--", "--"+boundaryOf(t, ct)+"\r\nContent-Type: text/plain\r\n\r\nz\r\n--"+boundaryOf(t, ct)+"--", 1), ErrMalformedMIME},
		"not a signature":    {ct, strings.Replace(body, "application/pkcs7-signature", "text/plain", 1), ErrMalformedMIME},
		"bad base64":         {ct, strings.Replace(body, "filename=smime.p7s\r\n\r\n", "filename=smime.p7s\r\n\r\n!!", 1), ErrMalformedMIME},
		"no close delimiter": {ct, body[:len(body)-10], ErrMalformedMIME},
		"garbage pkcs7":      {"application/pkcs7-mime; smime-type=enveloped-data", "not DER", cms.ErrMalformed},
		"data pkcs7":         {"application/pkcs7-mime", string(mustDER(t)), cms.ErrUnsupportedAlgorithm},
		"bad media type":     {"a/", "x", ErrMalformedMIME},
		"plain text":         {"text/plain", "x", nil},
	} {
		e := &Entity{Header: Header{{"Content-Type", c.ct}}, Body: []byte(c.body)}
		_, err := UnwrapEntity(e, opts)
		if c.want == nil {
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			continue
		}
		if !errors.Is(err, c.want) {
			t.Errorf("%s: want %v, got %v", name, c.want, err)
		}
	}

	// Encrypted but none of our keys: decryption-failed class, partial result.
	other := newKeyPair(t, "other", 1)
	enc, err := Build([]byte("x"), "text/plain", "", BuildOptions{EncryptCerts: []*x509.Certificate{other.Cert}, Cipher: "aes128-cbc"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := UnwrapEntity(httpEntity(enc), Options{Keys: []cms.KeyPair{newKeyPair(t, "ours", 0)}})
	if !errors.Is(err, cms.ErrNoRecipient) || res == nil || !slices.Equal(res.Layers, []string{LayerEncrypted}) || res.Encrypted {
		t.Fatalf("no recipient: %v %+v", err, res)
	}

	// A clock returning the zero time disables the validity check; a clock
	// after NotAfter fails it.
	zero := Options{Trusted: []*x509.Certificate{sender.Cert}, Now: func() time.Time { return time.Time{} }}
	if _, err := UnwrapEntity(httpEntity(signed), zero); err != nil {
		t.Fatal(err)
	}
	late := Options{Trusted: []*x509.Certificate{sender.Cert}, Now: func() time.Time { return time.Date(2050, 1, 1, 0, 0, 0, 0, time.UTC) }}
	if _, err := UnwrapEntity(httpEntity(signed), late); !errors.Is(err, cms.ErrCertificateExpired) {
		t.Fatalf("expired: %v", err)
	}
}

func boundaryOf(t testing.TB, ct string) string {
	t.Helper()
	_, p, err := parseMediaType(ct)
	if err != nil {
		t.Fatal(err)
	}
	return p["boundary"]
}

// mustDER returns a ContentInfo of type data (not an S/MIME layer).
func mustDER(t testing.TB) []byte {
	t.Helper()
	// SEQUENCE { OID data, [0] { OCTET STRING "x" } }
	return []byte{0x30, 0x11, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x07, 0x01, 0xa0, 0x04, 0x04, 0x02, 'h', 'i'}
}

func TestPlainMessageMIC(t *testing.T) {
	// Unsigned, unencrypted: the MIC covers the content only, not headers.
	e := &Entity{Header: Header{{"Content-Type", "application/edi-x12"}, {"Content-Transfer-Encoding", "base64"}}, Body: []byte("SVNBKjAw")}
	res, err := UnwrapEntity(e, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Payload) != "ISA*00" || string(res.MICInput()) != "ISA*00" || len(res.Layers) != 0 {
		t.Fatalf("payload %q MIC input %q", res.Payload, res.MICInput())
	}
	if _, err := res.MIC("sha3"); !errors.Is(err, cms.ErrUnsupportedAlgorithm) {
		t.Fatalf("unknown MIC alg: %v", err)
	}
}

func TestNormalizeMICAlg(t *testing.T) {
	for in, want := range map[string]string{
		"sha1": "sha-1", "sha-1": "sha-1", "SHA256": "sha-256", "sha-256": "sha-256", "sha384": "sha-384",
		"sha-384": "sha-384", "sha512": "sha-512", "sha-512": "sha-512", "md5": "md5", "sha224": "sha-224",
	} {
		got, err := NormalizeMICAlg(in)
		if err != nil || got != want {
			t.Errorf("NormalizeMICAlg(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := NormalizeMICAlg("sha-3"); err == nil {
		t.Fatal("sha-3 accepted")
	}
}

// TestTransferEncodingMistakes: a pkcs7-mime body labelled base64 but sent
// binary, and one sent base64 without a label, both unwrap; so does the
// correct combination of each.
func TestTransferEncodingMistakes(t *testing.T) {
	receiver := newKeyPair(t, "receiver", 1)
	b, err := Build([]byte("payload"), "text/plain", "", BuildOptions{EncryptCerts: []*x509.Certificate{receiver.Cert}, Cipher: "aes128-cbc"})
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Keys: []cms.KeyPair{receiver}}
	for _, c := range []struct {
		cte  string
		body []byte
	}{
		{"", b.Body}, {"binary", b.Body}, {"base64", base64Lines(b.Body)},
		{"base64", b.Body}, {"", base64Lines(b.Body)}, {"binary", []byte(base64Std(b.Body))},
	} {
		h := Header{{"Content-Type", "application/pkcs7-mime; smime-type=enveloped-data"}}
		if c.cte != "" {
			h = append(h, Field{"Content-Transfer-Encoding", c.cte})
		}
		res, err := UnwrapEntity(&Entity{Header: h, Body: c.body}, opts)
		if err != nil || string(res.Payload) != "payload" {
			t.Fatalf("cte %q body %.8q: %v", c.cte, c.body, err)
		}
	}
}
