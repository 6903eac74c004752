package wssec

import (
	"bytes"
	"crypto/x509"
	"errors"
	"net/textproto"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// interopSeed returns an interop vector for a fuzz seed corpus, or nil when
// the vectors are absent (fuzz targets must not skip for lack of seeds).
func interopSeed(rel string) []byte {
	dir := os.Getenv("GATEWAY_INTEROP_DIR")
	if dir == "" {
		_, file, _, _ := runtime.Caller(0)
		dir = filepath.Join(filepath.Dir(file), "..", "..", "..", "shared", "interop")
	}
	b, err := os.ReadFile(filepath.Join(dir, rel))
	if err != nil {
		return nil
	}
	return b
}

// FuzzVerify feeds arbitrary envelopes (and XML attachment content) through
// ParseEnvelope and Verify: no panic, and every error carries an EBMS code.
func FuzzVerify(f *testing.F) {
	// ECDSA and Ed25519 only: every fuzz worker runs this setup, and RSA key
	// generation would dominate a short fuzz run. The interop seeds are RSA.
	atts := testAttachments()
	for _, name := range []string{"p256", "ed25519"} {
		f.Add(signedMessage(f, key(f, name), atts, nil), atts[1].Body)
	}
	f.Add(signedMessage(f, key(f, "p256"), atts, func(o *SignOptions) {
		o.TimestampTTL = time.Minute
		o.Now = func() time.Time { return time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC) }
	}), atts[1].Body)
	if b := interopSeed("as4/helger.as4in"); b != nil {
		if i := bytes.Index(b, []byte("\n\n")); i >= 0 {
			f.Add(b[i+2:], atts[1].Body)
		}
	}
	if b := interopSeed("as4/TestReceipt12.xml"); b != nil {
		f.Add(b, atts[1].Body)
	}
	if b := interopSeed("as4/as4-encrypted-signed-issuerserial.as4"); b != nil {
		if i, j := bytes.Index(b, []byte("<?xml")), bytes.Index(b, []byte("</soapenv:Envelope>")); i >= 0 && j > i {
			f.Add(b[i:j+len("</soapenv:Envelope>")], atts[1].Body)
		}
	}
	f.Add([]byte(tinyEnvelope), []byte("<a/>"))
	f.Add([]byte(`<!DOCTYPE a><a/>`), []byte(`<!DOCTYPE a><a/>`))

	trusted := []*x509.Certificate{key(f, "p256").cert, key(f, "ed25519").cert}
	fixedNow := func() time.Time { return time.Date(2025, 1, 1, 0, 0, 30, 0, time.UTC) }
	f.Fuzz(func(t *testing.T, envelope, xmlAttachment []byte) {
		doc, err := ParseEnvelope(bytes.NewReader(envelope), Limits{MaxBytes: 1 << 20})
		if err != nil {
			if Code(err) != CodeInvalidHeader {
				t.Fatalf("ParseEnvelope error without EBMS:0009: %v", err)
			}
			return
		}
		a := testAttachments()
		a[1].Body = xmlAttachment
		_, err = Verify(doc, a, VerifyOptions{Trusted: trusted, Now: fixedNow, AttachmentLimits: Limits{MaxBytes: 1 << 16}})
		if err != nil && Code(err) == "" {
			t.Fatalf("Verify error without EBMS code: %v", err)
		}
		// CA trust: the signer may come from the header's tokens
		// (X509v3, X509PKIPathv1); the check sees every signer that
		// verified, and its refusal is EBMS:0101.
		var checked bool
		_, err = Verify(doc, a, VerifyOptions{Trusted: trusted, Now: fixedNow, AttachmentLimits: Limits{MaxBytes: 1 << 16},
			CheckSigner: func(si SignerInfo) error { checked = si.Cert != nil; return errors.New("refused") }})
		if err == nil || (checked && Code(err) != CodeFailedAuthentication) || Code(err) == "" {
			t.Fatalf("Verify with a refusing CheckSigner: %v (checked %v)", err, checked)
		}
		for _, m := range []c14nMethod{{exclusive: true}, {}, {v11: true, comments: true}} {
			_, _ = canonicalize(doc.Root(), m, "#default S12 wsu", nil)
		}
	})
}

// FuzzCanonicalMIMEHeaders: the SwA header canonicalization must not panic on
// partner header values, and its output is CRLF-terminated header lines.
func FuzzCanonicalMIMEHeaders(f *testing.F) {
	f.Add(`Application/XML; Charset="UTF-8" (comment)`, "attachment; filename*=UTF-8''R%C3%A9sum%C3%A9.PDF", "=?utf-8?q?a_b?= (c)")
	f.Add(`message/external-body; access-type=URL; URL*0="ftp://"; URL*1="cs"`, `inline; filename="a\"b"`, "(((")
	f.Add(`a;b=""`, `x; y*0=; y*1="`, `"`)
	f.Fuzz(func(t *testing.T, ct, cd, desc string) {
		h := textproto.MIMEHeader{}
		h.Set("Content-Type", ct)
		h.Set("Content-Disposition", cd)
		h.Set("Content-Description", desc)
		out, err := canonicalMIMEHeaders(h)
		if err == nil && !strings.HasSuffix(out, "\r\n") {
			t.Fatalf("output not CRLF-terminated: %q", out)
		}
	})
}
