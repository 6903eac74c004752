package xmlenc

import (
	"bytes"
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/textproto"
	"strings"
	"testing"
)

// These tests build messages by hand (independently of Encrypt) to reach
// the forms Encrypt never writes: xenc11 rsa-oaep without MGF, OAEPparams,
// AES-CBC, Attachment-Complete, Type Element, inline EncryptedKey,
// RetrievalMethod, SOAP 1.1.

func gcmSeal(t testing.TB, key, pt []byte) []byte {
	t.Helper()
	b, _ := aes.NewCipher(key)
	g, _ := cipher.NewGCM(b)
	iv := make([]byte, 12)
	rand.Read(iv)
	return g.Seal(iv, iv, pt, nil)
}

// cbcSeal encrypts with AES-CBC and ISO 10126 padding (random filler, last
// byte = pad length).
func cbcSeal(t testing.TB, key, pt []byte) []byte {
	t.Helper()
	b, _ := aes.NewCipher(key)
	pad := 16 - len(pt)%16
	padded := make([]byte, len(pt)+pad)
	copy(padded, pt)
	rand.Read(padded[len(pt):])
	padded[len(padded)-1] = byte(pad)
	out := make([]byte, 16+len(padded))
	rand.Read(out[:16])
	cipher.NewCBCEncrypter(b, out[:16]).CryptBlocks(out[16:], padded)
	return out
}

func oaep(t testing.TB, kp KeyPair, cek []byte, h, mgf crypto.Hash, label []byte) []byte {
	t.Helper()
	ct, err := rsa.EncryptOAEPWithOptions(rand.Reader, kp.Cert.PublicKey.(*rsa.PublicKey), cek, &rsa.OAEPOptions{Hash: h, MGFHash: mgf, Label: label})
	if err != nil {
		t.Fatal(err)
	}
	return ct
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func issuerSerialKI(kp KeyPair) string {
	return `<ds:KeyInfo><wsse:SecurityTokenReference><ds:X509Data><ds:X509IssuerSerial><ds:X509IssuerName>` +
		kp.Cert.Issuer.String() + `</ds:X509IssuerName><ds:X509SerialNumber>` + kp.Cert.SerialNumber.String() +
		`</ds:X509SerialNumber></ds:X509IssuerSerial></ds:X509Data></wsse:SecurityTokenReference></ds:KeyInfo>`
}

// soap12 wraps a Security header and a body into an envelope that declares
// every prefix used by the hand-made fragments on the Envelope.
func soap12(security, body string) string {
	return `<env:Envelope xmlns:env="http://www.w3.org/2003/05/soap-envelope" xmlns:xenc="` + NSXEnc + `" xmlns:xenc11="` + NSXEnc11 +
		`" xmlns:ds="` + NSDSig + `" xmlns:wsse="` + NSWSSE + `" xmlns:inv="urn:example:invoice">` +
		`<env:Header><wsse:Security>` + security + `</wsse:Security></env:Header><env:Body>` + body + `</env:Body></env:Envelope>`
}

func TestHandmadeRSAOAEP11DefaultsAndLabel(t *testing.T) {
	kp := newRSAKeyPair(t, "Receiver", 11)
	cek := bytes.Repeat([]byte{7}, 16)
	label := []byte("label!")
	for _, c := range []struct {
		name, method string
		h, mgf       crypto.Hash
		label        []byte
		digest, mgfU string
	}{
		{"no digest no MGF", ``, crypto.SHA1, crypto.SHA1, nil, AlgSHA1, AlgMGF1SHA1},
		{"sha256 digest, MGF default sha1", `<ds:DigestMethod Algorithm="` + AlgSHA256 + `"/>`, crypto.SHA256, crypto.SHA1, nil, AlgSHA256, AlgMGF1SHA1},
		{"sha384 mgf1sha224 OAEPparams", `<ds:DigestMethod Algorithm="` + AlgSHA384 + `"/><xenc11:MGF Algorithm="` + AlgMGF1SHA224 + `"/><xenc:OAEPparams>` + b64(label) + `</xenc:OAEPparams>`,
			crypto.SHA384, crypto.SHA224, label, AlgSHA384, AlgMGF1SHA224},
	} {
		t.Run(c.name, func(t *testing.T) {
			ct := oaep(t, kp, cek, c.h, c.mgf, c.label)
			att := []Attachment{{ContentID: "a@x", Header: textproto.MIMEHeader{"Content-Type": {"application/octet-stream"}}, Body: gcmSeal(t, cek, []byte("hello"))}}
			sec := `<xenc:EncryptedKey Id="EK-1"><xenc:EncryptionMethod Algorithm="` + AlgRSAOAEP + `">` + c.method + `</xenc:EncryptionMethod>` +
				issuerSerialKI(kp) + `<xenc:CipherData><xenc:CipherValue>` + b64(ct) + `</xenc:CipherValue></xenc:CipherData>` +
				`<xenc:ReferenceList><xenc:DataReference URI="#ED-1"/></xenc:ReferenceList></xenc:EncryptedKey>` +
				`<xenc:EncryptedData Id="ED-1" Type="` + TypeAttachmentContentOnly + `" MimeType="text/plain"><xenc:EncryptionMethod Algorithm="` + AlgAES128GCM + `"/>` +
				`<xenc:CipherData><xenc:CipherReference URI="cid:a@x"/></xenc:CipherData></xenc:EncryptedData>`
			res, err := Decrypt(parseDoc(t, soap12(sec, "")), att, []KeyPair{kp}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if string(res.Attachments[0].Body) != "hello" || res.Attachments[0].Header.Get("Content-Type") != "text/plain" {
				t.Errorf("got %q %v", res.Attachments[0].Body, res.Attachments[0].Header)
			}
			if k := res.Keys[0]; k.DigestMethod != c.digest || k.MGF != c.mgfU {
				t.Errorf("digest %s mgf %s", k.DigestMethod, k.MGF)
			}
		})
	}
	t.Run("mgf1p ignores a stray MGF element", func(t *testing.T) {
		ct := oaep(t, kp, cek, crypto.SHA256, crypto.SHA1, nil)
		att := []Attachment{{ContentID: "a@x", Body: gcmSeal(t, cek, []byte("hi"))}}
		sec := `<xenc:EncryptedKey><xenc:EncryptionMethod Algorithm="` + AlgRSAOAEPMGF1P + `"><ds:DigestMethod Algorithm="` + AlgSHA256 + `"/><xenc11:MGF Algorithm="` + AlgMGF1SHA256 + `"/></xenc:EncryptionMethod>` +
			issuerSerialKI(kp) + `<xenc:CipherData><xenc:CipherValue>` + b64(ct) + `</xenc:CipherValue></xenc:CipherData>` +
			`<xenc:ReferenceList><xenc:DataReference URI="#ED-1"/></xenc:ReferenceList></xenc:EncryptedKey>` +
			`<xenc:EncryptedData Id="ED-1" Type="` + TypeAttachmentContentOnly + `"><xenc:EncryptionMethod Algorithm="` + AlgAES128GCM + `"/>` +
			`<xenc:CipherData><xenc:CipherReference URI="cid:a@x"/></xenc:CipherData></xenc:EncryptedData>`
		if _, err := Decrypt(parseDoc(t, soap12(sec, "")), att, []KeyPair{kp}, Options{}); err != nil {
			t.Fatal(err)
		}
	})
}

// TestHandmadeCBCCompleteElement covers AES-256-CBC, Attachment-Complete,
// Type Element in the body, an EncryptedKey inline in an EncryptedData, and
// a ds:RetrievalMethod reference, under a SOAP 1.1 envelope.
func TestHandmadeCBCCompleteElement(t *testing.T) {
	kp := newRSAKeyPair(t, "Receiver", 12)
	cek := bytes.Repeat([]byte{9}, 32)
	cek2 := bytes.Repeat([]byte{3}, 16)
	ct := oaep(t, kp, cek, crypto.SHA1, crypto.SHA1, nil)
	ct2 := oaep(t, kp, cek2, crypto.SHA1, crypto.SHA1, nil)
	complete := "Content-Type: application/xml\r\nContent-Description: order\r\n\r\n<order/>"
	element := `<inv:Invoice xmlns:extra="urn:extra"><inv:Amount extra:cur="EUR">10</inv:Amount></inv:Invoice>`
	atts := []Attachment{{ContentID: "<c@x>", Header: textproto.MIMEHeader{"Content-Id": {"<c@x>"}, "Content-Type": {"application/octet-stream"}}, Body: cbcSeal(t, cek, []byte(complete))}}
	sec := `<xenc:EncryptedKey Id="EK-1"><xenc:EncryptionMethod Algorithm="` + AlgRSAOAEPMGF1P + `"/>` + issuerSerialKI(kp) +
		`<xenc:CipherData><xenc:CipherValue>` + b64(ct) + `</xenc:CipherValue></xenc:CipherData></xenc:EncryptedKey>` +
		`<xenc:EncryptedData Id="ED-att" Type="` + TypeAttachmentComplete + `"><xenc:EncryptionMethod Algorithm="` + AlgAES256CBC + `"/>` +
		`<ds:KeyInfo><ds:RetrievalMethod URI="#EK-1" Type="` + retrievalEncKey + `"/></ds:KeyInfo>` +
		`<xenc:CipherData><xenc:CipherReference URI="cid:c@x"><xenc:Transforms><ds:Transform Algorithm="` + TransformAttachmentCiphertext + `"/></xenc:Transforms></xenc:CipherReference></xenc:CipherData></xenc:EncryptedData>`
	body := `<xenc:EncryptedData Id="ED-body" Type="` + TypeElement + `"><xenc:EncryptionMethod Algorithm="` + AlgAES128GCM + `"/>` +
		`<ds:KeyInfo><xenc:EncryptedKey><xenc:EncryptionMethod Algorithm="` + AlgRSAOAEPMGF1P + `"/>` + issuerSerialKI(kp) +
		`<xenc:CipherData><xenc:CipherValue>` + b64(ct2) + `</xenc:CipherValue></xenc:CipherData></xenc:EncryptedKey></ds:KeyInfo>` +
		`<xenc:CipherData><xenc:CipherValue>` + b64(gcmSeal(t, cek2, []byte(element))) + `</xenc:CipherValue></xenc:CipherData></xenc:EncryptedData>`
	env := strings.NewReplacer("http://www.w3.org/2003/05/soap-envelope", NSSOAP11).Replace(soap12(sec, body))
	doc := parseDoc(t, env)
	// Two EncryptedKeys for one key: two private-key operations.
	if _, err := Decrypt(parseDoc(t, env), atts, []KeyPair{kp}, Options{}); !errors.Is(err, ErrLimit) {
		t.Fatalf("default MaxPrivateKeyOperations: %v, want ErrLimit", err)
	}
	res, err := Decrypt(doc, atts, []KeyPair{kp}, Options{MaxPrivateKeyOperations: 2})
	if err != nil {
		t.Fatal(err)
	}
	a := res.Attachments[0]
	if string(a.Body) != "<order/>" || a.Header.Get("Content-Type") != "application/xml" ||
		a.Header.Get("Content-Description") != "order" || a.Header.Get("Content-Id") != "<c@x>" {
		t.Errorf("Attachment-Complete: %q %v", a.Body, a.Header)
	}
	inv := doc.FindElement("/Envelope/Body/Invoice")
	if inv == nil || !is(inv, "urn:example:invoice", "Invoice") {
		t.Fatalf("body not decrypted: %s", bodyXML(t, doc))
	}
	amt := child(inv, "urn:example:invoice", "Amount")
	if amt == nil || attrNS(amt, "urn:extra", "cur") != "EUR" || amt.Text() != "10" {
		t.Error("decrypted element lost its namespaces")
	}
	if len(res.Keys) != 2 || len(res.Parts) != 2 || res.Parts[0].Type != TypeAttachmentComplete || res.Parts[1].Type != TypeElement {
		t.Errorf("keys %d parts %+v", len(res.Keys), res.Parts)
	}
	if n := len(doc.FindElement("//Security").ChildElements()); n != 0 {
		t.Errorf("%d bookkeeping elements left", n)
	}
	// The same from a spooled attachment, the plaintext handed to Store:
	// the inner MIME headers are read off the stream, Store gets the
	// content after them.
	spooled := []Attachment{{ContentID: atts[0].ContentID, Header: atts[0].Header, Open: func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(atts[0].Body)), nil
	}}}
	var stored []byte
	res, err = Decrypt(parseDoc(t, env), spooled, []KeyPair{kp}, Options{MaxPrivateKeyOperations: 2,
		Store: func(_ Attachment, r io.Reader) (func() (io.ReadCloser, error), error) {
			var err error
			stored, err = io.ReadAll(r)
			return func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(stored)), nil }, err
		}})
	if err != nil || string(stored) != "<order/>" || res.Attachments[0].Header.Get("Content-Description") != "order" {
		t.Fatalf("Attachment-Complete through Store: %q %v %v", stored, err, res.Attachments[0].Header)
	}
}

// TestHandmadeEncryptedHeader: a wsse11:EncryptedHeader is replaced by the
// decrypted header block.
func TestHandmadeEncryptedHeader(t *testing.T) {
	kp := newRSAKeyPair(t, "Receiver", 14)
	cek := bytes.Repeat([]byte{1}, 16)
	ct := oaep(t, kp, cek, crypto.SHA256, crypto.SHA1, nil)
	header := `<inv:Routing env:mustUnderstand="true"><inv:To>B</inv:To></inv:Routing>`
	sec := `<xenc:EncryptedKey><xenc:EncryptionMethod Algorithm="` + AlgRSAOAEPMGF1P + `"><ds:DigestMethod Algorithm="` + AlgSHA256 + `"/></xenc:EncryptionMethod>` +
		issuerSerialKI(kp) + `<xenc:CipherData><xenc:CipherValue>` + b64(ct) + `</xenc:CipherValue></xenc:CipherData>` +
		`<xenc:ReferenceList><xenc:DataReference URI="#ED-h"/></xenc:ReferenceList></xenc:EncryptedKey>`
	env := soap12(sec, "")
	env = strings.Replace(env, `</wsse:Security>`, `</wsse:Security><wsse11:EncryptedHeader xmlns:wsse11="`+NSWSSE11+`" wsu:Id="EH-1" xmlns:wsu="`+NSWSU+`">`+
		`<xenc:EncryptedData Id="ED-h" Type="`+TypeElement+`"><xenc:EncryptionMethod Algorithm="`+AlgAES128GCM+`"/>`+
		`<xenc:CipherData><xenc:CipherValue>`+b64(gcmSeal(t, cek, []byte(header)))+`</xenc:CipherValue></xenc:CipherData></xenc:EncryptedData></wsse11:EncryptedHeader>`, 1)
	doc := parseDoc(t, env)
	if _, err := Decrypt(doc, nil, []KeyPair{kp}, Options{}); err != nil {
		t.Fatal(err)
	}
	var tags []string
	for _, c := range doc.FindElement("/Envelope/Header").ChildElements() {
		tags = append(tags, c.Tag)
	}
	if strings.Join(tags, ",") != "Security,Routing" {
		t.Fatalf("header children %v", tags)
	}
	r := doc.FindElement("/Envelope/Header/Routing")
	if !is(r, "urn:example:invoice", "Routing") || attrNS(r, NSSOAP12, "mustUnderstand") != "true" {
		t.Error("decrypted header block wrong")
	}
}

func TestHandmadeRejects(t *testing.T) {
	kp := newRSAKeyPair(t, "Receiver", 13)
	cek := bytes.Repeat([]byte{5}, 16)
	ct := oaep(t, kp, cek, crypto.SHA1, crypto.SHA1, nil)
	ek := func(refs string) string {
		return `<xenc:EncryptedKey Id="EK-1"><xenc:EncryptionMethod Algorithm="` + AlgRSAOAEPMGF1P + `"/>` + issuerSerialKI(kp) +
			`<xenc:CipherData><xenc:CipherValue>` + b64(ct) + `</xenc:CipherValue></xenc:CipherData>` +
			`<xenc:ReferenceList>` + refs + `</xenc:ReferenceList></xenc:EncryptedKey>`
	}
	bodyED := func(typ, alg string, pt []byte) string {
		var c []byte
		if strings.HasSuffix(alg, "cbc") {
			c = cbcSeal(t, cek, pt)
		} else {
			c = gcmSeal(t, cek, pt)
		}
		return `<xenc:EncryptedData Id="ED-1" Type="` + typ + `"><xenc:EncryptionMethod Algorithm="` + alg + `"/>` +
			`<xenc:CipherData><xenc:CipherValue>` + b64(c) + `</xenc:CipherValue></xenc:CipherData></xenc:EncryptedData>`
	}
	ref1 := `<xenc:DataReference URI="#ED-1"/>`
	cases := []struct {
		name string
		doc  string
		want error
	}{
		{"DTD in plaintext", soap12(ek(ref1), bodyED(TypeContent, AlgAES128GCM, []byte(`<!DOCTYPE x [<!ENTITY a "b">]><x>&a;</x>`))), ErrMalformed},
		{"undeclared entity", soap12(ek(ref1), bodyED(TypeContent, AlgAES128GCM, []byte(`<x>&ext;</x>`))), ErrMalformed},
		{"wrapper escape", soap12(ek(ref1), bodyED(TypeContent, AlgAES128GCM, []byte(`</`+fragmentWrapper+`><`+fragmentWrapper+`>`))), ErrMalformed},
		{"two elements for Type Element", soap12(ek(ref1), bodyED(TypeElement, AlgAES128GCM, []byte(`<a/><b/>`))), ErrMalformed},
		{"not XML", soap12(ek(ref1), bodyED(TypeContent, AlgAES128GCM, []byte(`<a>`))), ErrMalformed},
		{"key length does not fit aes256", soap12(ek(ref1), bodyED(TypeContent, AlgAES256GCM, []byte(`<a/>`))), ErrDecrypt},
		{"unknown content algorithm", soap12(ek(ref1), bodyED(TypeContent, "urn:x", []byte(`<a/>`))), ErrUnsupported},
		{"unknown type", soap12(ek(ref1), bodyED("urn:type", AlgAES128GCM, []byte(`<a/>`))), ErrUnsupported},
		{"dangling DataReference", soap12(ek(`<xenc:DataReference URI="#nope"/>`), ""), ErrMalformed},
		{"duplicate Id", soap12(ek(ref1), bodyED(TypeContent, AlgAES128GCM, []byte(`<a/>`))+`<x Id="ED-1"/>`), ErrMalformed},
		{"external reference", soap12(ek(`<xenc:DataReference URI="http://evil/x"/>`), ""), ErrUnsupported},
		{"EncryptedData without key", soap12(``, bodyED(TypeContent, AlgAES128GCM, []byte(`<a/>`))), ErrNoKey},
		{"not an envelope", `<x/>`, ErrMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			doc := parseDoc(t, c.doc)
			before, _ := doc.WriteToString()
			_, err := Decrypt(doc, nil, []KeyPair{kp}, Options{})
			if !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
			var e *Error
			if !errors.As(err, &e) || (e.Code != CodeFailedDecryption && e.Code != CodePolicyNoncompliance) {
				t.Fatalf("err %v is not a typed *Error", err)
			}
			if after, _ := doc.WriteToString(); after != before {
				t.Error("document changed by a failed Decrypt")
			}
		})
	}
	t.Run("CBC bad padding", func(t *testing.T) {
		b, _ := aes.NewCipher(cek)
		raw := make([]byte, 32)
		bad := bytes.Repeat([]byte{0}, 16) // last byte 0: invalid pad length
		cipher.NewCBCEncrypter(b, raw[:16]).CryptBlocks(raw[16:], bad)
		ed := `<xenc:EncryptedData Id="ED-1" Type="` + TypeContent + `"><xenc:EncryptionMethod Algorithm="` + AlgAES128CBC + `"/>` +
			`<xenc:CipherData><xenc:CipherValue>` + b64(raw) + `</xenc:CipherValue></xenc:CipherData></xenc:EncryptedData>`
		_, err := Decrypt(parseDoc(t, soap12(ek(ref1), ed)), nil, []KeyPair{kp}, Options{})
		if !errors.Is(err, ErrDecrypt) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("limits", func(t *testing.T) {
		var many strings.Builder
		for i := 0; i < 20; i++ {
			fmt.Fprintf(&many, `<xenc:EncryptedKey Id="k%d"/>`, i)
		}
		if _, err := Decrypt(parseDoc(t, soap12(many.String(), "")), nil, []KeyPair{kp}, Options{}); !errors.Is(err, ErrLimit) {
			t.Errorf("EncryptedKey limit: %v", err)
		}
		big := bodyED(TypeContent, AlgAES128GCM, bytes.Repeat([]byte("<a/>"), 1000))
		if _, err := Decrypt(parseDoc(t, soap12(ek(ref1), big)), nil, []KeyPair{kp}, Options{MaxXMLSize: 1000}); !errors.Is(err, ErrLimit) {
			t.Errorf("XML size limit: %v", err)
		}
		deep := strings.Repeat("<a>", 50) + strings.Repeat("</a>", 50)
		if _, err := Decrypt(parseDoc(t, soap12(ek(ref1), bodyED(TypeContent, AlgAES128GCM, []byte(deep)))), nil, []KeyPair{kp}, Options{MaxXMLDepth: 20}); !errors.Is(err, ErrMalformed) {
			t.Errorf("depth limit: %v", err)
		}
	})
	t.Run("unencrypted attachment with RequireEncryptedAttachments", func(t *testing.T) {
		atts := []Attachment{{ContentID: "plain@x", Body: []byte("x")}}
		_, err := Decrypt(parseDoc(t, soap12(ek(ref1), bodyED(TypeContent, AlgAES128GCM, []byte(`<a/>`)))), atts, []KeyPair{kp}, Options{RequireEncryptedAttachments: true})
		if !errors.Is(err, ErrPolicy) || Code(err) != CodePolicyNoncompliance {
			t.Fatalf("err = %v", err)
		}
		_, err = Decrypt(parseDoc(t, soap12("", "")), atts, nil, Options{RequireEncryptedAttachments: true})
		if !errors.Is(err, ErrPolicy) {
			t.Fatalf("no encryption at all: err = %v", err)
		}
	})
	t.Run("nothing encrypted", func(t *testing.T) {
		res, err := Decrypt(parseDoc(t, soap12("", "<inv:x/>")), []Attachment{{ContentID: "a"}}, nil, Options{})
		if err != nil || len(res.Parts) != 0 || len(res.Attachments) != 1 {
			t.Fatalf("res %+v err %v", res, err)
		}
	})
}

func TestParseDN(t *testing.T) {
	kp := newX25519KeyPair(t, "x", 1) // issuer: CN=Test CA,O=Gateway\, Tests
	for _, s := range []string{
		`CN=Test CA,O=Gateway\, Tests`,
		`O="Gateway, Tests", CN=Test CA`,
		`cn=test  ca; o=Gateway\2c Tests`,
		`2.5.4.3=Test CA,OID.2.5.4.10=Gateway\, Tests`,
		`CN=#0c0754657374204341,O=Gateway\, Tests`,
	} {
		if !sameDN(s, kp.Cert) {
			t.Errorf("%q should match %s", s, kp.Cert.Issuer)
		}
	}
	for _, s := range []string{`CN=Test CA`, `CN=Test CA,O=Gateway`, `CN=Test CA,O=Gateway\, Tests,C=BE`, `garbage`, `CN=Test CA,O="unterminated`, ``} {
		if sameDN(s, kp.Cert) {
			t.Errorf("%q should not match", s)
		}
	}
}
