package wssec

import (
	"bytes"
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"io"
	"mime/multipart"
	"net/textproto"
	"strings"
	"testing"
	"time"

	"github.com/beevik/etree"

	"github.com/edigateway/gateway/internal/interop"
)

// helgerEnvelope returns the SOAP envelope of helger.as4in: the HTTP response
// headers are skipped (body after the first empty line, README quirk 10).
func helgerEnvelope(t testing.TB) []byte {
	t.Helper()
	raw := interop.Read(t, "as4/helger.as4in")
	i := bytes.Index(raw, []byte("\n\n"))
	if i < 0 {
		t.Fatal("helger.as4in: no empty line after the HTTP headers")
	}
	return raw[i+2:]
}

// bstCertificate extracts the X509v3 BinarySecurityToken of an envelope.
func bstCertificate(t testing.TB, doc *etree.Document) *x509.Certificate {
	t.Helper()
	var found *etree.Element
	var walk func(e *etree.Element)
	walk = func(e *etree.Element) {
		if isElement(e, NamespaceWSSE, "BinarySecurityToken") {
			found = e
		}
		for _, c := range e.ChildElements() {
			walk(c)
		}
	}
	walk(doc.Root())
	if found == nil {
		t.Fatal("no BinarySecurityToken")
	}
	der, err := decodeBase64(found.Text())
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func pinned(s string) func() time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return func() time.Time { return t }
}

func TestInteropPhase4Receipts(t *testing.T) {
	for _, tc := range []struct {
		name      string
		envelope  func(testing.TB) []byte
		now       string
		serial    string
		messaging string
		body      string
	}{
		{"helger.as4in", helgerEnvelope, "2022-03-07T17:36:50.173Z", "5c01e7ec750224ee30822d508089c8b",
			"#phase4-msg-a9255f87-075b-4348-b125-beb6cee397e9", "#id-c80f8255-da5a-4c42-8e4b-9b66bac931d7"},
		{"TestReceipt12.xml", func(t testing.TB) []byte { return interop.Read(t, "as4/TestReceipt12.xml") },
			"2025-12-05T14:03:40.878Z", "45c54c505e860c0ae346a9b1d0c0ad02280d421f",
			"#phase4-msg-16a44d96-0b9d-4752-a7f5-53bff8b33cb3", "#id-c29f9432-1235-4342-9e1a-2ae722ad1120"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc, err := ParseEnvelope(bytes.NewReader(tc.envelope(t)), Limits{})
			if err != nil {
				t.Fatal(err)
			}
			cert := bstCertificate(t, doc)
			if got := cert.SerialNumber.Text(16); got != tc.serial {
				t.Fatalf("BST serial %s, want %s", got, tc.serial)
			}
			res, err := Verify(doc, nil, VerifyOptions{Trusted: []*x509.Certificate{cert}, Now: pinned(tc.now)})
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if res.Signer != cert || res.SignatureMethod != AlgRSASHA256 {
				t.Fatalf("signer %v method %s", res.Signer.Subject, res.SignatureMethod)
			}
			if len(res.References) != 2 || res.References[0].URI != tc.messaging || res.References[1].URI != tc.body {
				t.Fatalf("references %+v", res.References)
			}
			if !isElement(res.Messaging, NamespaceEbMS, "Messaging") || !isElement(res.Body, NamespaceSOAP12, "Body") {
				t.Fatalf("Messaging %v Body %v", res.Messaging, res.Body)
			}
			if res.Messaging.Parent() != doc.Root().SelectElement("S12:Header") {
				t.Fatal("Messaging is not the header block")
			}
			// Another certificate is an unknown signer.
			other := accessPointA(t)
			_, err = Verify(doc, nil, VerifyOptions{Trusted: []*x509.Certificate{other}, Now: pinned(tc.now)})
			if Code(err) != CodeFailedAuthentication {
				t.Fatalf("untrusted BST signer: %v", err)
			}
		})
	}
}

func accessPointA(t testing.TB) *x509.Certificate {
	t.Helper()
	blk, _ := pem.Decode(interop.Read(t, "as4/AccessPointA_cert.pem"))
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// holodeckParts splits as4-encrypted-signed-issuerserial.as4 into its MIME
// parts (README: boundary from the origin's Content-Type).
func holodeckParts(t testing.TB) []*multipartPart {
	t.Helper()
	raw := interop.Read(t, "as4/as4-encrypted-signed-issuerserial.as4")
	mr := multipart.NewReader(bytes.NewReader(raw), "MIMEBoundary_416ba07b9ac392cc88fdb1c2ed23ba5e2e6d64fdf13325f1")
	var parts []*multipartPart
	for {
		p, err := mr.NextRawPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(p)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, &multipartPart{header: textproto.MIMEHeader(p.Header), body: b})
	}
	if len(parts) != 3 {
		t.Fatalf("%d MIME parts, want 3", len(parts))
	}
	return parts
}

type multipartPart struct {
	header textproto.MIMEHeader
	body   []byte
}

func TestInteropHolodeckIssuerSerial(t *testing.T) {
	parts := holodeckParts(t)
	doc, err := ParseEnvelope(bytes.NewReader(parts[0].body), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	certA := accessPointA(t)
	sig, err := ParseSignature(doc, VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sig.SignatureMethod != AlgRSASHA384 || sig.PrefixList != "eb3 soapenv xsd xsi" || len(sig.References) != 4 {
		t.Fatalf("signature %s prefixes %q refs %d", sig.SignatureMethod, sig.PrefixList, len(sig.References))
	}
	signer, err := sig.ResolveSigner([]*x509.Certificate{accessPointB(t), certA})
	if err != nil || signer != certA {
		t.Fatalf("ResolveSigner (IssuerSerial): %v, %v", signer, err)
	}
	if err := sig.VerifySignedInfo(signer); err != nil {
		t.Fatalf("VerifySignedInfo: %v", err)
	}
	for i, want := range []string{"Messaging", "Body"} {
		el, err := sig.VerifyReference(i, nil)
		if err != nil {
			t.Fatalf("reference %d: %v", i, err)
		}
		if el.Tag != want {
			t.Fatalf("reference %d resolved to %s", i, el.Tag)
		}
	}
	// The cid digests are the SHA-256 of the decrypted gzip bytes (README).
	for i, want := range []string{
		"f4b7702c70321d016469efd9b2584a4d069681864fe60d2cbf7828fe101bbfbe",
		"70e06fd5cf42545c39d1aee1f1cd1d6c8956964b56abd0abd1b3e2a6d67fc147",
	} {
		r := sig.References[2+i]
		if r.Transforms[0].Algorithm != AlgAttachmentContentSignature || hex.EncodeToString(r.digest) != want {
			t.Fatalf("reference %s: %s %x", r.URI, r.Transforms[0].Algorithm, r.digest)
		}
	}
	// Without the attachments, the cid references cannot be resolved.
	if _, err := sig.VerifyReference(2, nil); Code(err) != CodeFailedAuthentication {
		t.Fatalf("missing attachment: %v", err)
	}
}

func accessPointB(t testing.TB) *x509.Certificate {
	t.Helper()
	blk, _ := pem.Decode(interop.Read(t, "as4/AccessPointB_cert.pem"))
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestInteropHolodeckFull decrypts the two attachments with a few lines of
// test-only code (RSA-OAEP SHA-256/MGF1-SHA-1, AES-128-GCM; README quirks 6
// and 7) so that the complete Verify, all four references, runs on the
// vector. The production decryption lives in another package.
func TestInteropHolodeckFull(t *testing.T) {
	parts := holodeckParts(t)
	doc, err := ParseEnvelope(bytes.NewReader(parts[0].body), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(interop.Read(t, "as4/AccessPointB_key.pem"))
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	cv := doc.FindElement("//xenc:EncryptedKey/xenc:CipherData/xenc:CipherValue")
	wrapped, err := decodeBase64(cv.Text())
	if err != nil {
		t.Fatal(err)
	}
	cek, err := k.(*rsa.PrivateKey).Decrypt(nil, wrapped, &rsa.OAEPOptions{Hash: crypto.SHA256, MGFHash: crypto.SHA1})
	if err != nil {
		t.Fatal(err)
	}
	block, _ := aes.NewCipher(cek)
	gcm, _ := cipher.NewGCM(block)
	var atts []Attachment
	for _, p := range parts[1:] {
		plain, err := gcm.Open(nil, p.body[:12], p.body[12:], nil)
		if err != nil {
			t.Fatal(err)
		}
		h := textproto.MIMEHeader{}
		h.Set("Content-Id", p.header.Get("Content-Id"))
		h.Set("Content-Type", "application/gzip") // xenc:EncryptedData MimeType
		atts = append(atts, Attachment{ContentID: p.header.Get("Content-Id"), Header: h, Body: plain})
	}
	sum := sha256.Sum256(atts[0].Body)
	if hex.EncodeToString(sum[:]) != "f4b7702c70321d016469efd9b2584a4d069681864fe60d2cbf7828fe101bbfbe" {
		t.Fatalf("decrypted attachment 1: %x", sum)
	}
	opts := VerifyOptions{Trusted: []*x509.Certificate{accessPointA(t)}, Now: pinned("2018-12-19T08:56:26.657Z")}
	res, err := Verify(doc, atts, opts)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if len(res.References) != 4 || res.Messaging == nil || res.Body == nil {
		t.Fatalf("result %+v", res)
	}
	if got := res.References[2].DigestValue; got != "9LdwLHAyHQFkae/ZslhKTQaWgYZP5g0sv3go/hAbv74=" {
		t.Fatalf("DigestValue %q", got)
	}
	// One flipped byte in the compressed attachment.
	atts[1].Body = append([]byte(nil), atts[1].Body...)
	atts[1].Body[20] ^= 1
	if _, err := Verify(doc, atts, opts); Code(err) != CodeFailedAuthentication || !strings.Contains(err.Error(), "digest mismatch") {
		t.Fatalf("tampered attachment: %v", err)
	}
	// An extra, unsigned attachment is not covered.
	atts[1].Body[20] ^= 1
	extra := append(atts, Attachment{ContentID: "<extra@x>", Header: textproto.MIMEHeader{}, Body: []byte("x")})
	if _, err := Verify(doc, extra, opts); Code(err) != CodePolicyNoncompliance {
		t.Fatalf("unsigned attachment: %v", err)
	}
}
