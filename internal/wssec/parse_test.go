package wssec

import (
	"net/textproto"
	"strings"
	"testing"
)

const tinyEnvelope = `<S:Envelope xmlns:S="http://www.w3.org/2003/05/soap-envelope"><S:Body/></S:Envelope>`

func TestParseEnvelopeRejects(t *testing.T) {
	deep := strings.Repeat("<a>", 70) + strings.Repeat("</a>", 70)
	for _, tc := range []struct {
		name, xml string
		limits    Limits
		msg       string
	}{
		{"billion laughs", `<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;">]><S:Envelope xmlns:S="http://www.w3.org/2003/05/soap-envelope"><S:Body>&lol2;</S:Body></S:Envelope>`, Limits{}, "DOCTYPE"},
		{"external entity", `<!DOCTYPE x [<!ENTITY xxe SYSTEM "file:///etc/passwd">]><S:Envelope xmlns:S="http://www.w3.org/2003/05/soap-envelope"><S:Body>&xxe;</S:Body></S:Envelope>`, Limits{}, "DOCTYPE"},
		{"doctype after prolog comment", `<?xml version="1.0"?><!-- c --><!DOCTYPE S:Envelope SYSTEM "http://example.com/x.dtd">` + tinyEnvelope, Limits{}, "DOCTYPE"},
		{"undefined entity", `<S:Envelope xmlns:S="http://www.w3.org/2003/05/soap-envelope"><S:Body>&nbsp;</S:Body></S:Envelope>`, Limits{}, "entity"},
		{"too deep", `<S:Envelope xmlns:S="http://www.w3.org/2003/05/soap-envelope"><S:Body>` + deep + `</S:Body></S:Envelope>`, Limits{}, "deeper than 64"},
		{"too large", tinyEnvelope, Limits{MaxBytes: 40}, "larger than 40"},
		{"too many elements", `<S:Envelope xmlns:S="http://www.w3.org/2003/05/soap-envelope"><S:Body><a/><a/><a/></S:Body></S:Envelope>`, Limits{MaxElements: 4}, "more than 4 elements"},
		{"too many attributes", `<S:Envelope xmlns:S="http://www.w3.org/2003/05/soap-envelope" a="1" b="2"><S:Body/></S:Envelope>`, Limits{MaxAttributes: 2}, "more than 2 attributes"},
		{"duplicate attribute", `<S:Envelope xmlns:S="http://www.w3.org/2003/05/soap-envelope"><S:Body a="1" a="2"/></S:Envelope>`, Limits{}, "duplicate attribute"},
		{"duplicate attribute via two prefixes", `<S:Envelope xmlns:S="http://www.w3.org/2003/05/soap-envelope" xmlns:p="urn:x" xmlns:q="urn:x"><S:Body p:a="1" q:a="2"/></S:Envelope>`, Limits{}, "duplicate attribute"},
		{"latin-1", `<?xml version="1.0" encoding="ISO-8859-1"?>` + tinyEnvelope, Limits{}, "UTF-8 only"},
		{"two roots", tinyEnvelope + tinyEnvelope, Limits{}, "more than one document element"},
		{"text after root", tinyEnvelope + "junk", Limits{}, "text outside"},
		{"not an envelope", `<Envelope><Body/></Envelope>`, Limits{}, "not a SOAP Envelope"},
		{"no body", `<S:Envelope xmlns:S="http://www.w3.org/2003/05/soap-envelope"><S:Header/></S:Envelope>`, Limits{}, "0 SOAP Body"},
		{"two bodies", `<S:Envelope xmlns:S="http://www.w3.org/2003/05/soap-envelope"><S:Body/><S:Body/></S:Envelope>`, Limits{}, "2 SOAP Body"},
		{"mismatched tags", `<S:Envelope xmlns:S="http://www.w3.org/2003/05/soap-envelope"><S:Body></S:Envelope>`, Limits{}, ""},
		{"empty", ``, Limits{}, "no document element"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseEnvelope(strings.NewReader(tc.xml), tc.limits)
			if Code(err) != CodeInvalidHeader || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("got %v, want ErrInvalidXML containing %q", err, tc.msg)
			}
		})
	}
}

func TestParseEnvelopeAccepts(t *testing.T) {
	for _, s := range []string{
		tinyEnvelope,
		"\xef\xbb\xbf<?xml version='1.0' encoding='utf-8'?>\n<!-- comment -->\n" + tinyEnvelope + "\n",
		`<?xml version="1.0" encoding="US-ASCII"?>` + tinyEnvelope,
		`<Envelope xmlns="http://schemas.xmlsoap.org/soap/envelope/"><Header/><Body><![CDATA[<x>]]></Body></Envelope>`,
	} {
		doc, err := ParseEnvelope(strings.NewReader(s), Limits{})
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if doc.Root().Tag != "Envelope" {
			t.Fatalf("root %s", doc.Root().Tag)
		}
	}
}

// TestVerifyRefusesUnsafeDocuments: Verify on a document that did not come
// through ParseEnvelope still refuses a DOCTYPE, and an XML attachment with
// a DOCTYPE cannot be canonicalised.
func TestVerifyRefusesUnsafeDocuments(t *testing.T) {
	doc := etreeDoc(t, `<!DOCTYPE x><S:Envelope xmlns:S="http://www.w3.org/2003/05/soap-envelope"><S:Body/></S:Envelope>`)
	if _, err := Verify(doc, nil, VerifyOptions{}); Code(err) != CodeInvalidHeader {
		t.Fatalf("DOCTYPE document: %v", err)
	}
	h := textproto.MIMEHeader{}
	h.Set("Content-Type", "application/xml")
	_, err := attachmentOctets(Attachment{Header: h, Body: []byte(`<!DOCTYPE a [<!ENTITY e "x">]><a>&e;</a>`)}, false, Limits{})
	if err == nil || !strings.Contains(err.Error(), "DOCTYPE") {
		t.Fatalf("XML attachment with DTD: %v", err)
	}
}

func TestAttributeValueNormalization(t *testing.T) {
	for in, want := range map[string]string{
		"<a b=\"x\ny\tz\r\nw&#10;v\"/>":                       "x y z w\nv",
		"<a b='1\r2'\n c=\"\"/>":                              "1 2",
		"<!-- <x y=\"\n\"> --><a b=\"p\nq\"/>":                "p q",
		"<?pi x=\"\n\"?><r><![CDATA[\"\n\"]]><a b=\"\"/></r>": "",
	} {
		doc, err := parseXML([]byte(in), Limits{})
		if err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		if got := doc.FindElement("//a").SelectAttrValue("b", "?"); got != want {
			t.Errorf("%q: attribute %q, want %q", in, got, want)
		}
	}
	// Text and CDATA keep their line ends; nothing is copied when clean.
	clean := []byte("<a b=\"1\">x\ny</a>")
	if out := normalizeAttributeWhitespace(clean); &out[0] != &clean[0] {
		t.Error("clean input was copied")
	}
}
