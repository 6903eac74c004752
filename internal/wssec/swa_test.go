package wssec

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"io"
	"net/textproto"
	"strings"
	"testing"
)

func mimeHeader(kv ...string) textproto.MIMEHeader {
	h := textproto.MIMEHeader{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// TestCanonicalMIMEHeaders pins the SwA §5.4.1 header canonicalization (as
// WSS4J implements it) on hand-derived outputs.
func TestCanonicalMIMEHeaders(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    textproto.MIMEHeader
		want string
	}{
		{"none", mimeHeader(), "Content-Type:text/plain;charset=\"us-ascii\"\r\n"},
		{"all listed, sorted, others dropped", mimeHeader(
			"Content-Type", `Application/XML; Charset="UTF-8" (comment)`,
			"Content-Id", "<att1@example.com>",
			"Content-Disposition", "attachment; filename=Invoice.XML",
			"Content-Description", "=?utf-8?q?Rechnung_M=C3=A4rz?= (note)",
			"Content-Transfer-Encoding", "binary",
			"Content-Location", "http://example.com/x",
		), "Content-Description:Rechnung März \r\n" +
			"Content-Disposition:attachment;filename=\"invoice.xml\"\r\n" +
			"Content-ID:<att1@example.com>\r\n" +
			"Content-Location:http://example.com/x\r\n" +
			"Content-Type:application/xml;charset=\"utf-8\"\r\n"},
		{"RFC 2231 extended value", mimeHeader(
			"Content-Disposition", "attachment; size=12; filename*=UTF-8''R%C3%A9sum%C3%A9.PDF",
			"Content-Type", "application/pdf",
		), "Content-Disposition:attachment;filename=\"résumé.pdf\";size=\"12\"\r\n" +
			"Content-Type:application/pdf\r\n"},
		{"RFC 2231 continuation", mimeHeader(
			"Content-Type", `message/external-body; access-type=URL; URL*0="ftp://"; URL*1="cs.utk.edu/pub"`,
		), "Content-Type:message/external-body;access-type=\"URL\";url=\"ftp://cs.utk.edu/pub\"\r\n"},
		{"quoted comment is not a comment", mimeHeader(
			"Content-Type", `text/plain; name="a (b).txt"`,
		), "Content-Type:text/plain;name=\"a (b).txt\"\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := canonicalMIMEHeaders(tc.h)
			if err != nil || got != tc.want {
				t.Fatalf("%v\n%q\nwant\n%q", err, got, tc.want)
			}
		})
	}
	if _, err := canonicalMIMEHeaders(mimeHeader("Content-Type", "text/plain; broken")); err == nil {
		t.Fatal("parameter without '=' accepted")
	}
}

// TestAttachmentCompleteTransform verifies a reference that uses the
// Attachment-Complete-Signature-Transform (headers + content).
func TestAttachmentCompleteTransform(t *testing.T) {
	k := key(t, "rsa")
	atts := testAttachments()[:1]
	atts[0].Header.Set("Content-Description", "invoice")
	doc := mustParse(t, signedMessage(t, k, atts, nil))
	var ref *Reference
	sig, _ := ParseSignature(doc, VerifyOptions{})
	for i := range sig.References {
		if sig.References[i].URI == "cid:payload-1@gateway.test" {
			ref = &sig.References[i]
		}
	}
	ref.Element.FindElement("ds:Transforms/ds:Transform").CreateAttr("Algorithm", AlgAttachmentCompleteSignature)
	want := "Content-Description:invoice\r\nContent-ID:<payload-1@gateway.test>\r\nContent-Type:application/gzip\r\n" + string(atts[0].Body)
	sum := sha256.Sum256([]byte(want))
	ref.Element.FindElement("ds:DigestValue").SetText(encodeB64(sum[:]))
	resign(t, doc, k)
	opts := VerifyOptions{Trusted: []*x509.Certificate{k.cert}}
	res, err := Verify(doc, atts, opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.References[2].Transforms[0].Algorithm != AlgAttachmentCompleteSignature {
		t.Fatal("transform not reported")
	}
	// A changed MIME header now breaks the digest.
	atts[0].Header.Set("Content-Type", "application/octet-stream")
	if _, err := Verify(doc, atts, opts); Code(err) != CodeFailedAuthentication {
		t.Fatalf("changed header: %v", err)
	}
}

func TestCRLF(t *testing.T) {
	if got := string(crlf([]byte("a\nb\r\nc\rd\r"))); got != "a\r\nb\r\nc\r\nd\r\n" {
		t.Fatalf("%q", got)
	}
}

// The streaming CRLF normaliser gives crlf's output however the input is
// cut (a CR at the end of one write, its LF at the start of the next).
func TestCRLFWriterAnySplit(t *testing.T) {
	in := []byte("a\r\nb\rc\n\r\r\nd\r")
	want := string(crlf(in))
	for cut := 0; cut <= len(in); cut++ {
		var out bytes.Buffer
		w := &crlfWriter{w: &out}
		w.Write(in[:cut])
		w.Write(in[cut:])
		w.flush()
		if out.String() != want {
			t.Fatalf("cut %d: %q, want %q", cut, out.String(), want)
		}
	}
}

// An attachment read through Open digests as its Body does.
func TestAttachmentOpenDigestsAsBody(t *testing.T) {
	for _, ct := range []string{"application/octet-stream", "text/plain", "application/xml"} {
		body := []byte("<a  b='1'>x\ny\r</a>")
		h := textproto.MIMEHeader{"Content-Type": {ct}, "Content-Id": {"<p1>"}}
		for _, complete := range []bool{false, true} {
			want, err := attachmentOctets(Attachment{Header: h, Body: body}, complete, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := attachmentOctets(Attachment{Header: h, Open: func() (io.ReadCloser, error) {
				return io.NopCloser(bytes.NewReader(body)), nil
			}}, complete, Limits{})
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s complete=%v: %q %v, want %q", ct, complete, got, err, want)
			}
		}
	}
}

// AttachmentDigester, fed the content in pieces, gives the digest Verify
// computes from the content for either SwA transform, and Verify takes a
// digest computed ahead instead of reading the content (a wrong one fails).
func TestAttachmentDigesterMatchesVerify(t *testing.T) {
	body := []byte("<a  b='1'>x\ny\r</a>")
	for _, ct := range []string{"application/octet-stream", "text/plain", "application/xml"} {
		h := textproto.MIMEHeader{"Content-Type": {ct}, "Content-Id": {"<p1>"}}
		for _, tr := range []string{AlgAttachmentContentSignature, AlgAttachmentCompleteSignature} {
			octets, err := attachmentOctets(Attachment{Header: h, Body: body}, tr == AlgAttachmentCompleteSignature, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			want := sha256.Sum256(octets)
			w, sum, err := AttachmentDigester(h, DigestKey{tr, "http://www.w3.org/2001/04/xmlenc#sha256"}, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			for i := range body {
				w.Write(body[i : i+1])
			}
			got, err := sum()
			if err != nil || !bytes.Equal(got, want[:]) {
				t.Fatalf("%s %s: %x %v, want %x", ct, tr, got, err, want)
			}
		}
	}
	_, sum, _ := AttachmentDigester(textproto.MIMEHeader{"Content-Type": {"application/xml"}},
		DigestKey{AlgAttachmentContentSignature, "http://www.w3.org/2001/04/xmlenc#sha256"}, Limits{MaxBytes: 4})
	if _, err := sum(); err == nil {
		t.Fatal("empty XML digested")
	}
}

// Verify uses digests computed ahead (Attachment.Digests) instead of
// reading the content: it never opens it, and a wrong digest fails.
func TestVerifyUsesDigestsComputedAhead(t *testing.T) {
	k := key(t, "rsa")
	atts := testAttachments()
	msg := signedMessage(t, k, atts, nil)
	ahead := make([]Attachment, len(atts))
	for i, a := range atts {
		w, sum, err := AttachmentDigester(a.Header, DigestKey{AlgAttachmentContentSignature, "http://www.w3.org/2001/04/xmlenc#sha256"}, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(a.Body)
		d, err := sum()
		if err != nil {
			t.Fatal(err)
		}
		ahead[i] = Attachment{ContentID: a.ContentID, Header: a.Header,
			Open:    func() (io.ReadCloser, error) { t.Error("content read again"); return nil, io.EOF },
			Digests: map[DigestKey][]byte{{AlgAttachmentContentSignature, "http://www.w3.org/2001/04/xmlenc#sha256"}: d}}
	}
	if _, err := Verify(mustParse(t, msg), ahead, VerifyOptions{Trusted: []*x509.Certificate{k.cert}}); err != nil {
		t.Fatal(err)
	}
	for k2 := range ahead[0].Digests {
		ahead[0].Digests[k2] = make([]byte, 32)
	}
	if _, err := Verify(mustParse(t, msg), ahead, VerifyOptions{Trusted: []*x509.Certificate{k.cert}}); err == nil || !strings.Contains(err.Error(), "digest mismatch") {
		t.Fatalf("a wrong digest: %v", err)
	}
}
