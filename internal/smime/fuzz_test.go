package smime

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/edigateway/gateway/internal/cms"
)

// optionalInterop returns an interop file for seeding, or nil when the
// vectors are absent (fuzzing must not depend on them).
func optionalInterop(rel string) []byte {
	dir := os.Getenv("GATEWAY_INTEROP_DIR")
	if dir == "" {
		dir = filepath.Join("..", "..", "..", "shared", "interop")
	}
	b, err := os.ReadFile(filepath.Join(dir, rel))
	if err != nil {
		return nil
	}
	return b
}

var interopCaptures = []string{
	"as2/mecas2_signed.as2", "as2/mecas2_compressed.as2", "as2/mecas2_encrypted.as2",
	"as2/mecas2_signed_encrypted.as2", "as2/mecas2_signed.mdn", "as2/mecas2_unsigned.mdn",
}

func FuzzParseEntity(f *testing.F) {
	for _, s := range []string{
		"Content-Type: multipart/signed; micalg=sha256; \tboundary=\"b\"\r\n\r\n--b\r\nA: 1\r\n\r\nx\r\n--b\r\nContent-Type: application/pkcs7-signature\r\nContent-Transfer-Encoding: base64\r\n\r\nAAAA\r\n--b--\r\n",
		"content-type: multipart/mixed; boundary=x\nx-folded: a\n b\n\npreamble\n--x\n\nbody\n--x--\n",
		"Content-Transfer-Encoding: quoted-printable\r\nContent-Type: text/plain\r\n\r\n=41=\r\nB",
		"UNB+UNOA:2+X:14+Y:14'\nUNH+1'\n",
		"\r\n",
	} {
		f.Add([]byte(s))
	}
	for _, rel := range interopCaptures {
		if b := optionalInterop(rel); b != nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		_ = parseInner(raw)
		e, err := ParseEntity(raw)
		if err != nil {
			return
		}
		if len(e.Raw) != len(raw) || len(e.Body) > len(raw) {
			t.Fatal("entity bytes do not alias the input")
		}
		_, _, _ = e.MediaType()
		_ = e.Filename()
		_, _ = e.DecodedBody()
		parts, err := e.Parts()
		if err != nil {
			return
		}
		for _, p := range parts {
			if len(p.Raw) > len(e.Body) {
				t.Fatal("part larger than the body")
			}
			_, _ = p.DecodedBody()
		}
	})
}

func FuzzUnwrap(f *testing.F) {
	var keys []cms.KeyPair
	var trusted []*x509.Certificate
	if cert, key := optionalInterop("as2/cert_test_public.pem"), optionalInterop("as2/cert_test_key.pem"); cert != nil && key != nil {
		if kp, err := cms.ParseKeyPair(cert, key); err == nil {
			keys = append(keys, kp)
		}
	}
	if b := optionalInterop("as2/cert_mecas2_public.pem"); b != nil {
		if c, err := cms.ParseCertificates(b); err == nil {
			trusted = append(trusted, c...)
		}
	}
	for _, rel := range interopCaptures {
		if b := optionalInterop(rel); b != nil {
			f.Add(b)
		}
	}
	if len(keys) == 0 {
		keys = append(keys, newKeyPair(f, "fuzz", 0))
	}
	own := keys[0]
	for _, bo := range []BuildOptions{
		{SignDigest: "sha256", Cipher: "3des", Compression: CompressThenSign},
		{Cipher: "aes128-gcm", Compression: SignThenCompress},
		{SignDigest: "sha1", TransferEncoding: "base64"},
	} {
		bo.SignCert, bo.SignKey, bo.EncryptCerts = own.Cert, own.Key, []*x509.Certificate{own.Cert}
		b, err := Build([]byte("UNB+UNOA:2+A+B'\n"), "application/edifact", "a.edi", bo)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(append([]byte("Content-Type: "+b.ContentType+"\r\n\r\n"), b.Body...))
	}
	trusted = append(trusted, own.Cert)
	opts := Options{
		Keys: keys, Trusted: trusted, MaxSize: 1 << 20,
		Now: func() time.Time { return time.Date(2022, 1, 4, 14, 0, 0, 0, time.UTC) },
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		res, err := Unwrap(raw, opts)
		if err != nil {
			return
		}
		if res.Signed && res.Signer == nil {
			t.Fatal("signed without signer")
		}
		if _, err := res.MIC("sha256"); err != nil {
			t.Fatal(err)
		}
	})
}
