package smime

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestParseEntityHeaders(t *testing.T) {
	raw := "content-type: multipart/signed; protocol=\"application/pkcs7-signature\"; micalg=sha256; \tboundary=\"b1\"\n" +
		"X-Folded: first\r\n" +
		"  second\r\n" +
		"\tthird\n" +
		"Subject : spaced name\r\n" +
		"\r\n" +
		"body\r\nline2"
	e, err := ParseEntity([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	if got := e.Header.Get("Content-Type"); got != "multipart/signed; protocol=\"application/pkcs7-signature\"; micalg=sha256; \tboundary=\"b1\"" {
		t.Fatalf("Content-Type %q", got)
	}
	if got := e.Header.Get("x-folded"); got != "first  second\tthird" {
		t.Fatalf("folded %q", got)
	}
	if got := e.Header.Get("SUBJECT"); got != "spaced name" || !e.Header.Has("subject") || e.Header.Has("from") {
		t.Fatalf("Subject %q", got)
	}
	if string(e.Body) != "body\r\nline2" || string(e.Raw) != raw {
		t.Fatalf("body %q", e.Body)
	}
	mt, params, err := e.MediaType()
	if err != nil || mt != "multipart/signed" || params["boundary"] != "b1" || params["micalg"] != "sha256" {
		t.Fatalf("media type %q %v %v", mt, params, err)
	}

	// No header fields at all: the entity starts with the empty line.
	e, err = ParseEntity([]byte("\r\nplain"))
	if err != nil || len(e.Header) != 0 || string(e.Body) != "plain" {
		t.Fatalf("empty header: %v %+v", err, e)
	}
	if mt, _, _ := e.MediaType(); mt != "text/plain" {
		t.Fatalf("default media type %q", mt)
	}
}

func TestParseEntityErrors(t *testing.T) {
	for name, raw := range map[string]string{
		"no empty line":      "Content-Type: text/plain\r\nbody",
		"not a field":        "Content-Type: text/plain\r\nthis is not a header\r\n\r\n",
		"leading fold":       " folded\r\n\r\n",
		"bad name":           "Bad Name: x\r\n\r\n",
		"empty name":         ": x\r\n\r\n",
		"empty input":        "",
		"huge header":        "X: " + strings.Repeat("a", maxHeaderBytes+10) + "\r\n\r\n",
		"too many fields":    strings.Repeat("X: y\n", maxHeaderFields+1) + "\n",
		"control char name":  "X\x01Y: z\r\n\r\n",
		"eight-bit name":     "X\xffY: z\r\n\r\n",
		"colonless edifact":  "UNB+UNOA:2+X'\nUNH+1+ORDERS'\n",
		"unterminated bytes": "Content-Type: a/b",
	} {
		if _, err := ParseEntity([]byte(raw)); !errors.Is(err, ErrMalformedMIME) {
			t.Errorf("%s: want ErrMalformedMIME, got %v", name, err)
		}
	}
}

// TestParseEntityLinear: many continuation lines or a long header line
// cost linear time and never more than the header limit.
func TestParseEntityLinear(t *testing.T) {
	raw := "X-Long: a\r\n" + strings.Repeat(" b\n", 20000) + "\r\nbody"
	start := time.Now()
	e, err := ParseEntity([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("20000 continuation lines took %v", d)
	}
	if v := e.Header.Get("x-long"); len(v) != 1+2*20000 || !strings.HasPrefix(v, "a b") {
		t.Fatalf("value of %d bytes", len(v))
	}
	huge := []byte("X-Huge: " + strings.Repeat("a", 10<<20) + "\r\n\r\n")
	if _, err := ParseEntity(huge); !errors.Is(err, ErrMalformedMIME) {
		t.Fatalf("10 MiB header line: %v", err)
	}
}

// TestBarePayloadDetection covers quirk 3: decrypted content is a MIME
// entity only when a header block with a MIME field ends in an empty line.
func TestBarePayloadDetection(t *testing.T) {
	bare := []string{
		"UNB+UNOA:2+<Sender GLN>:14+<Receiver GLN>:14+140407:0910+5++++1+EANCOM'\nUNH+1+ORDERS:D:96A:UN:EAN008'\nBGM+220+1AA1TEST+9'\n",
		"UNB+UNOA:2+A:14+B:14+140407:0910+5'\n\nUNZ+1+5'\n", // colon lines then an empty line, but no MIME field
		"ISA*00*          *00*          *ZZ*SENDER         *ZZ*RECEIVER       *210101*1200*U*00401*000000001*0*P*>~",
		"<?xml version=\"1.0\"?>\n<Invoice/>",
		"Subject: hello\r\nFrom: x\r\n\r\nbody", // RFC 5322 fields but nothing MIME
		"",
		"\r\nleading empty line",
	}
	for _, b := range bare {
		if e := parseInner([]byte(b)); e != nil {
			t.Errorf("%q parsed as a MIME entity", b)
		}
	}
	mimeish := []string{
		"Content-Type: application/edi-x12\r\n\r\nISA*00*",
		"content-transfer-encoding: binary\n\nbody",
		"MIME-Version: 1.0\r\nContent-Disposition: attachment; filename=a.edi\r\n\r\nUNB",
	}
	for _, m := range mimeish {
		if e := parseInner([]byte(m)); e == nil {
			t.Errorf("%q not recognised as a MIME entity", m)
		}
	}
}

func TestParts(t *testing.T) {
	body := "Date: Tue, 4 Jan 2022 13:57:06 +0000 (UTC)\r\n\r\n" + // preamble (mendelson)
		"--b1\r\n" +
		"Content-Type: text/plain\r\n\r\nfirst\nline\n" + // part ends with its own LF; the CRLF before the delimiter is not part of it
		"\r\n--b1  \t\r\n" + // transport padding
		"Content-Type: application/octet-stream\r\n\r\n\x00\x01--b1x not a delimiter\r\n--b1-not-either\r\n" +
		"\r\n--b1--\r\n" +
		"epilogue --b1\r\n"
	e := &Entity{Header: Header{{"Content-Type", `multipart/mixed; boundary="b1"`}}, Body: []byte(body)}
	parts, err := e.Parts()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"Content-Type: text/plain\r\n\r\nfirst\nline\n",
		"Content-Type: application/octet-stream\r\n\r\n\x00\x01--b1x not a delimiter\r\n--b1-not-either\r\n",
	}
	if len(parts) != len(want) {
		t.Fatalf("%d parts", len(parts))
	}
	for i, p := range parts {
		if string(p.Raw) != want[i] {
			t.Errorf("part %d = %q, want %q", i, p.Raw, want[i])
		}
	}
	if string(parts[1].Body) != "\x00\x01--b1x not a delimiter\r\n--b1-not-either\r\n" {
		t.Fatalf("part 2 body %q", parts[1].Body)
	}

	// LF-only framing (captures that lost their CRs).
	lf := &Entity{Header: Header{{"Content-Type", "multipart/mixed; boundary=x"}}, Body: []byte("--x\nA: 1\n\none\n--x\nA: 2\n\ntwo\n--x--")}
	parts, err = lf.Parts()
	if err != nil || len(parts) != 2 || string(parts[0].Raw) != "A: 1\n\none" || string(parts[1].Body) != "two" {
		t.Fatalf("LF framing: %v %d", err, len(parts))
	}

	for name, b := range map[string]string{
		"no close":       "--b1\r\nA: b\r\n\r\nx\r\n",
		"no delimiter":   "nothing here",
		"close only":     "--b1--\r\n",
		"bad part head":  "--b1\r\nnot a header\r\n\r\nx\r\n--b1--",
		"delimiter text": "x--b1\r\nA: b\r\n\r\n--b1--",
	} {
		e := &Entity{Header: Header{{"Content-Type", "multipart/mixed; boundary=b1"}}, Body: []byte(b)}
		if _, err := e.Parts(); !errors.Is(err, ErrMalformedMIME) {
			t.Errorf("%s: want ErrMalformedMIME, got %v", name, err)
		}
	}
	noBoundary := &Entity{Header: Header{{"Content-Type", "multipart/mixed"}}}
	if _, err := noBoundary.Parts(); !errors.Is(err, ErrMalformedMIME) {
		t.Fatalf("no boundary: %v", err)
	}
	notMultipart := &Entity{Header: Header{{"Content-Type", "text/plain"}}}
	if _, err := notMultipart.Parts(); !errors.Is(err, ErrMalformedMIME) {
		t.Fatalf("not multipart: %v", err)
	}
}

func TestDecodedBody(t *testing.T) {
	cases := []struct{ cte, body, want string }{
		{"", "raw\r\n\x00", "raw\r\n\x00"},
		{"binary", "raw\n", "raw\n"},
		{"7BIT", "x", "x"},
		{"8bit", "\xff", "\xff"},
		{"base64", "aGVs\r\nbG8g\r\nd29y\nbGQ=\r\n", "hello world"},
		{" Base64 ", "aGVsbG8", "hello"}, // missing padding
		{"quoted-printable", "caf=C3=A9 =\r\nsoft", "café soft"},
	}
	for _, c := range cases {
		e := &Entity{Header: Header{{"Content-Transfer-Encoding", c.cte}}, Body: []byte(c.body)}
		got, err := e.DecodedBody()
		if err != nil || string(got) != c.want {
			t.Errorf("%q: %q, %v; want %q", c.cte, got, err, c.want)
		}
	}
	for _, c := range []struct{ cte, body string }{{"base64", "@@@@"}, {"x-uuencode", "begin"}} {
		e := &Entity{Header: Header{{"Content-Transfer-Encoding", c.cte}}, Body: []byte(c.body)}
		if _, err := e.DecodedBody(); !errors.Is(err, ErrMalformedMIME) {
			t.Errorf("%q: want ErrMalformedMIME, got %v", c.cte, err)
		}
	}
}

func TestMediaTypeAndFilename(t *testing.T) {
	cases := []struct {
		ct, cd, mt, boundary, filename string
	}{
		{`Application/EDI-Consent; name="a.edi"`, "", "application/edi-consent", "", "a.edi"},
		{"application/edi-x12", `attachment; filename="in voice.x12"`, "application/edi-x12", "", "in voice.x12"},
		{"application/xml", "attachment; filename*=UTF-8''r%C3%A9sum%C3%A9.xml", "application/xml", "", "résumé.xml"},
		// Duplicate parameter: rejected by mime.ParseMediaType, read leniently.
		{`multipart/signed; boundary="b"; boundary="c"; micalg=sha1`, "", "multipart/signed", "b", ""},
		{"application/pkcs7-mime; smime-type=enveloped-data; name=smime.p7m", "attachment; filename=smime.p7m", "application/pkcs7-mime", "", "smime.p7m"},
	}
	for _, c := range cases {
		h := Header{{"Content-Type", c.ct}}
		if c.cd != "" {
			h = append(h, Field{"Content-Disposition", c.cd})
		}
		e := &Entity{Header: h}
		mt, params, err := e.MediaType()
		if err != nil || mt != c.mt || params["boundary"] != c.boundary {
			t.Errorf("%q: %q %v %v", c.ct, mt, params, err)
		}
		if got := e.Filename(); got != c.filename {
			t.Errorf("%q: filename %q, want %q", c.ct, got, c.filename)
		}
	}
	e := &Entity{Header: Header{{"Content-Type", "/"}}}
	if _, _, err := e.MediaType(); !errors.Is(err, ErrMalformedMIME) {
		t.Fatalf("bad media type: %v", err)
	}
}

func TestEntityFromHTTP(t *testing.T) {
	h := http.Header{}
	h.Set("Content-Type", "application/pkcs7-mime; smime-type=enveloped-data")
	h.Set("Content-Transfer-Encoding", "base64")
	h.Set("AS2-From", "partner")
	e := EntityFromHTTP(h, []byte("aGk="))
	if len(e.Header) != 2 || e.Header.Get("content-transfer-encoding") != "base64" || e.Raw != nil {
		t.Fatalf("%+v", e)
	}
	if b, _ := e.DecodedBody(); string(b) != "hi" {
		t.Fatalf("body %q", b)
	}
}
