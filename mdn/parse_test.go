package mdn

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestSplitMultipartExactBytes(t *testing.T) {
	cases := []struct {
		name, body string
		want       []string
	}{
		{"crlf", "preamble\r\n--b\r\nA\r\n\r\n--b\r\nB\r\n--b--\r\nepilogue", []string{"A\r\n", "B"}},
		{"lf", "--b\nA\n--b\nB\n--b--\n", []string{"A", "B"}},
		{"padding", "--b  \r\nA\r\n--b\t\r\nB\r\n--b-- \r\n", []string{"A", "B"}},
		{"prefix boundary is not ours", "--b\r\n--bc\r\nx\r\n--b--", []string{"--bc\r\nx"}},
		{"no close delimiter", "--b\r\nA\r\n--b\r\nB\r\n", []string{"A", "B"}},
		{"empty part", "--b\r\n\r\n--b--", []string{""}},
		{"delimiter not at line start", "--b\r\nA --b\r\n--b--", []string{"A --b"}},
	}
	for _, c := range cases {
		parts, err := splitMultipart([]byte(c.body), "b")
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		var got []string
		for _, p := range parts {
			got = append(got, string(p))
		}
		if strings.Join(got, "|") != strings.Join(c.want, "|") || len(got) != len(c.want) {
			t.Errorf("%s: parts %q, want %q", c.name, got, c.want)
		}
	}
	if _, err := splitMultipart([]byte("no delimiter here"), "b"); !errors.Is(err, errNoBoundary) {
		t.Errorf("missing delimiter: %v", err)
	}
}

// handMDN is an unsigned MDN with LF line ends, lower-case and folded field
// names, a preamble, a base64 notification part and a quoted-printable text.
const handMDN = "This is a preamble.\n" +
	"--XYZ\n" +
	"content-type: TEXT/PLAIN; charset=utf-8\n" +
	"content-transfer-encoding: quoted-printable\n" +
	"\n" +
	"Caf=C3=A9 received =\n" +
	"it.\n" +
	"--XYZ\n" +
	"Content-Type: message/disposition-notification\n" +
	"Content-Transfer-Encoding: base64\n" +
	"\n" +
	"%s\n" +
	"--XYZ--\n"

const handFields = "reporting-ua: Example AS2\r\n" +
	"ORIGINAL-RECIPIENT: rfc822;   \"Our Id\"\r\n" +
	"Final-Recipient: rfc822; \"Our Id\"\r\n" +
	"Original-Message-Id:\r\n <abc@example>\r\n" +
	"Received-content-MIC: Swt5ybhwCgiNShERM5Xgkhf4Gf8=,\r\n\tsha1\r\n" +
	"X-Vendor: kept\r\n" +
	"\r\n" +
	"Disposition: automatic-action/MDN-sent-automatically;\r\n\tprocessed/Warning: Duplicate-Document\r\n"

func encodeB64Lines(s string) string {
	var b bytes.Buffer
	writeBase64Lines(&b, []byte(s))
	return strings.TrimRight(strings.ReplaceAll(b.String(), "\r\n", "\n"), "\n")
}

func TestParseTolerant(t *testing.T) {
	body := strings.Replace(handMDN, "%s", encodeB64Lines(handFields), 1)
	ct := "Multipart/Report; Report-Type=\"disposition-notification\";\tboundary=XYZ"
	p, err := Parse(ct, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	want := Report{
		ReportingUA:       "Example AS2",
		OriginalRecipient: `"Our Id"`,
		FinalRecipient:    `"Our Id"`,
		OriginalMessageID: "<abc@example>",
		MIC:               "Swt5ybhwCgiNShERM5Xgkhf4Gf8=",
		MICAlg:            "sha-1",
		Disposition:       DispDuplicateDocument,
		HumanText:         "Café received it.",
	}
	if p.Report != want {
		t.Fatalf("report\n%+v\nwant\n%+v", p.Report, want)
	}
	if p.Signed || p.SignedContent != nil || p.Signature != nil {
		t.Fatal("unsigned MDN reported as signed")
	}
	if got := p.Fields.Get("x-vendor"); got != "kept" {
		t.Errorf("X-Vendor = %q", got)
	}
	if got := p.Fields.Get("received-content-mic"); got != "Swt5ybhwCgiNShERM5Xgkhf4Gf8=, sha1" {
		t.Errorf("raw MIC field = %q", got)
	}
	if err := p.Verify(func(sig, content []byte) error { return nil }); !errors.Is(err, ErrNotSigned) {
		t.Errorf("Verify of unsigned MDN: %v", err)
	}
}

func TestParseSniffsMissingBoundary(t *testing.T) {
	body := "\r\n--abc\r\nContent-Type: message/disposition-notification\r\n\r\nDisposition: automatic-action/MDN-sent-automatically; processed\r\n--abc--\r\n"
	p, err := Parse("multipart/report; report-type=disposition-notification", []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if p.Report.Disposition != DispProcessed {
		t.Fatalf("disposition %v", p.Report.Disposition)
	}
}

func TestParseSignedBinarySignature(t *testing.T) {
	inner := "Content-Type: multipart/report; report-type=disposition-notification; boundary=in\r\n\r\n" +
		"--in\r\nContent-Type: message/disposition-notification\r\n\r\nDisposition: automatic-action/MDN-sent-automatically; processed/error: decryption-failed\r\n--in--\r\n"
	der := "\x30\x03\x02\x01\x0a"
	for _, tc := range []struct{ cte, trailer string }{
		{"Content-Transfer-Encoding: binary\r\n", ""},
		{"Content-Transfer-Encoding: binary\r\n", "\r\n"},
		{"", ""},
	} {
		cte := tc.cte
		body := "--out\r\n" + inner + "\r\n--out\r\nContent-Type: application/pkcs7-signature\r\n" + cte + "\r\n" + der + tc.trailer + "\r\n--out--\r\n"
		p, err := Parse(`multipart/signed; protocol="application/pkcs7-signature"; micalg=sha-256; boundary=out`, []byte(body))
		if err != nil {
			t.Fatalf("cte %q: %v", cte, err)
		}
		if string(p.Signature) != der || string(p.SignedContent) != inner || p.SignatureMICAlg != "sha-256" {
			t.Fatalf("cte %q: sig %x content %q micalg %q", cte, p.Signature, p.SignedContent, p.SignatureMICAlg)
		}
		if p.Report.Disposition != DispDecryptionFailed {
			t.Fatalf("disposition %v", p.Report.Disposition)
		}
		var gotSig, gotContent []byte
		if err := p.Verify(func(sig, content []byte) error { gotSig, gotContent = sig, content; return nil }); err != nil {
			t.Fatal(err)
		}
		if string(gotSig) != der || string(gotContent) != inner {
			t.Fatal("verifier got other bytes")
		}
		boom := errors.New("bad signature")
		if err := p.Verify(func(sig, content []byte) error { return boom }); !errors.Is(err, ErrSignature) || !errors.Is(err, boom) {
			t.Fatalf("verify error not wrapped: %v", err)
		}
	}
}

func TestParseRejects(t *testing.T) {
	okReport := "--b\r\nContent-Type: message/disposition-notification\r\n\r\nDisposition: automatic-action/MDN-sent-automatically; processed\r\n--b--\r\n"
	cases := []struct{ name, ct, body string }{
		{"no content type", "", okReport},
		{"wrong type", "text/plain", okReport},
		{"wrong report-type", "multipart/report; report-type=delivery-status; boundary=b", okReport},
		{"no notification part", "multipart/report; boundary=b", "--b\r\nContent-Type: text/plain\r\n\r\nhi\r\n--b--\r\n"},
		{"no disposition", "multipart/report; boundary=b", "--b\r\nContent-Type: message/disposition-notification\r\n\r\nReporting-UA: x\r\n--b--\r\n"},
		{"bad disposition", "multipart/report; boundary=b", "--b\r\nContent-Type: message/disposition-notification\r\n\r\nDisposition: ;\r\n--b--\r\n"},
		{"no delimiter", "multipart/report; boundary=b", "just text"},
		{"bad base64", "multipart/report; boundary=b", "--b\r\nContent-Type: message/disposition-notification\r\nContent-Transfer-Encoding: base64\r\n\r\n!!!\r\n--b--\r\n"},
		{"signed one part", "multipart/signed; boundary=s", "--s\r\n" + "x" + "\r\n--s--\r\n"},
		{"signed not report", "multipart/signed; boundary=s", "--s\r\nContent-Type: text/plain\r\n\r\nx\r\n--s\r\nContent-Type: application/pkcs7-signature\r\n\r\nMAMCAQo=\r\n--s--\r\n"},
		{"signed wrong sig type", "multipart/signed; boundary=s", "--s\r\nContent-Type: multipart/report; boundary=b\r\n\r\n" + okReport + "\r\n--s\r\nContent-Type: text/plain\r\n\r\nMAMCAQo=\r\n--s--\r\n"},
		{"signed empty sig", "multipart/signed; boundary=s", "--s\r\nContent-Type: multipart/report; boundary=b\r\n\r\n" + okReport + "\r\n--s\r\nContent-Type: application/pkcs7-signature\r\n\r\n\r\n--s--\r\n"},
	}
	for _, c := range cases {
		if p, err := Parse(c.ct, []byte(c.body)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %+v, %v; want ErrMalformed", c.name, p, err)
		}
	}
	big := make([]byte, maxMDNSize+1)
	if _, err := Parse("multipart/report; boundary=b", big); !errors.Is(err, ErrMalformed) {
		t.Errorf("oversized body: %v", err)
	}
}

func TestParseMessageAndHTTPHeaders(t *testing.T) {
	fixedBoundaries(t)
	r := sampleReport()
	ct, body := Build(r)
	raw := "Message-ID: <mdn-1@gateway>\nAS2-From: OURID\nAS2-To: \"Partner Co\"\nContent-Type: " + ct + "\n\n" + string(body)
	p, err := ParseMessage([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	want := r
	want.HumanText = "Received.\nThank you."
	if p.Report != want {
		t.Fatalf("report\n%+v\nwant\n%+v", p.Report, want)
	}
	h := r.Headers()
	h.Set("Content-Type", ct)
	p2, err := ParseHTTP(h, body)
	if err != nil {
		t.Fatal(err)
	}
	if p2.Report != want {
		t.Fatalf("ParseHTTP report\n%+v\nwant\n%+v", p2.Report, want)
	}
	if _, err := ParseMessage([]byte("Subject: x\n\nbody")); !errors.Is(err, ErrMalformed) {
		t.Errorf("message without Content-Type: %v", err)
	}
}

func TestMediaTypeLenient(t *testing.T) {
	mt, params := mediaType(`multipart/report; report-type=disposition-notification; boundary="a;b"; boundary=dup; junk`)
	if mt != "multipart/report" || params["boundary"] != "a;b" || params["report-type"] != "disposition-notification" {
		t.Fatalf("%q %v", mt, params)
	}
	mt, params = mediaType("multipart/signed; protocol=\"application/pkcs7-signature\"; micalg=sha1;  boundary=\"----=_Part_8_1315897558.1483093497177\"")
	if mt != "multipart/signed" || params["boundary"] != "----=_Part_8_1315897558.1483093497177" || params["micalg"] != "sha1" {
		t.Fatalf("%q %v", mt, params)
	}
}

func TestParseSignatureBase64WithoutCTE(t *testing.T) {
	inner := "Content-Type: multipart/report; boundary=in\r\n\r\n" +
		"--in\r\nContent-Type: message/disposition-notification\r\n\r\nDisposition: automatic-action/MDN-sent-automatically; processed\r\n--in--\r\n"
	body := "--out\r\n" + inner + "\r\n--out\r\nContent-Type: application/x-pkcs7-signature\r\n\r\nMAMC\r\nAQo=\r\n--out--\r\n"
	p, err := Parse("multipart/signed; boundary=out", []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if string(p.Signature) != "\x30\x03\x02\x01\x0a" {
		t.Fatalf("signature %x", p.Signature)
	}
}
