package xmlenc

import (
	"bytes"
	"crypto"
	"testing"

	"github.com/beevik/etree"
)

// TestParseFragmentAttributeWhitespace: decrypted XML gets the XML 1.0
// §3.3.3 attribute-value normalisation every conformant parser applies (a
// literal tab, LF, CR or CRLF in a quoted value becomes one space; character
// references keep their character), so a body signed before encryption
// digests the same after decryption. Text content is left alone.
func TestParseFragmentAttributeWhitespace(t *testing.T) {
	parent := etree.NewElement("Body")
	pt := []byte("<inv:Note xmlns:inv=\"urn:inv\" a=\"x\ty\r\nz\nw\rv\" b='keep&#10;ref&#9;'>t\r\n\tu</inv:Note>")
	toks, err := parseFragment(parent, pt, 1<<20, 16)
	if err != nil {
		t.Fatal(err)
	}
	if len(toks) != 1 {
		t.Fatalf("%d tokens", len(toks))
	}
	e := toks[0].(*etree.Element)
	if got := e.SelectAttrValue("a", ""); got != "x y z w v" {
		t.Errorf("a = %q, want %q", got, "x y z w v")
	}
	if got := e.SelectAttrValue("b", ""); got != "keep\nref\t" {
		t.Errorf("b = %q, want %q", got, "keep\nref\t")
	}
	if got := e.Text(); got != "t\n\tu" {
		t.Errorf("text = %q, want %q", got, "t\n\tu")
	}
}

// TestParseFragmentByteOrderMark: a UTF-8 byte order mark may open the
// decrypted XML, with or without an XML declaration (.NET writers emit
// one); anywhere else it is content or an error, never silently dropped.
func TestParseFragmentByteOrderMark(t *testing.T) {
	parent := etree.NewElement("Body")
	for _, pt := range []string{
		"\xef\xbb\xbf<a x=\"1\"/>",
		"\xef\xbb\xbf<?xml version=\"1.0\" encoding=\"UTF-8\"?>\r\n<a x=\"1\"/>",
	} {
		toks, err := parseFragment(parent, []byte(pt), 1<<20, 16)
		if err != nil {
			t.Fatalf("%q: %v", pt, err)
		}
		var els []*etree.Element
		for _, tok := range toks {
			if e, ok := tok.(*etree.Element); ok {
				els = append(els, e)
			}
		}
		if len(els) != 1 || els[0].Tag != "a" || els[0].SelectAttrValue("x", "") != "1" {
			t.Errorf("%q: tokens %v", pt, toks)
		}
	}
	// A BOM after the XML declaration is text, so a Type Element check
	// downstream sees it; a second XML declaration is refused.
	if _, err := parseFragment(parent, []byte("\xef\xbb\xbf\xef\xbb\xbf<?xml version=\"1.0\"?><a/>"), 1<<20, 16); err == nil {
		t.Error("XML declaration after a second BOM accepted")
	}
}

// TestDecryptBodyNormalisesAttributes: the same through Decrypt, for a
// body encrypted as Type Element by a partner whose plaintext starts with a
// byte order mark and holds a multi-line attribute value.
func TestDecryptBodyNormalisesAttributes(t *testing.T) {
	kp := newRSAKeyPair(t, "Receiver", 21)
	cek := bytes.Repeat([]byte{5}, 16)
	ct := oaep(t, kp, cek, crypto.SHA256, crypto.SHA1, nil)
	element := "\xef\xbb\xbf<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<inv:Invoice note=\"line 1\r\nline 2\"><inv:ID>7</inv:ID></inv:Invoice>"
	body := `<xenc:EncryptedData Id="ED-body" Type="` + TypeElement + `"><xenc:EncryptionMethod Algorithm="` + AlgAES128GCM + `"/>` +
		`<ds:KeyInfo><xenc:EncryptedKey><xenc:EncryptionMethod Algorithm="` + AlgRSAOAEPMGF1P + `"><ds:DigestMethod Algorithm="` + AlgSHA256 + `"/></xenc:EncryptionMethod>` + issuerSerialKI(kp) +
		`<xenc:CipherData><xenc:CipherValue>` + b64(ct) + `</xenc:CipherValue></xenc:CipherData></xenc:EncryptedKey></ds:KeyInfo>` +
		`<xenc:CipherData><xenc:CipherValue>` + b64(gcmSeal(t, cek, []byte(element))) + `</xenc:CipherValue></xenc:CipherData></xenc:EncryptedData>`
	doc := parseDoc(t, soap12("", body))
	if _, err := Decrypt(doc, nil, []KeyPair{kp}, Options{}); err != nil {
		t.Fatal(err)
	}
	if got, want := bodyXML(t, doc), "<env:Body>\n"+`<inv:Invoice note="line 1 line 2"><inv:ID>7</inv:ID></inv:Invoice></env:Body>`; got != want {
		t.Errorf("body\n got %s\nwant %s", got, want)
	}
}
