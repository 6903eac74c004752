package xmlenc

import (
	"bytes"
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net/textproto"
	"strings"
	"testing"
	"time"

	"github.com/beevik/etree"
)

const testEnvelope = `<?xml version="1.0" encoding="UTF-8"?>` +
	`<S12:Envelope xmlns:S12="http://www.w3.org/2003/05/soap-envelope" xmlns:eb="http://docs.oasis-open.org/ebxml-msg/ebms/v3.0/ns/core/200704/" xmlns:inv="urn:example:invoice">` +
	`<S12:Header><eb:Messaging S12:mustUnderstand="true"><eb:UserMessage><eb:MessageInfo><eb:MessageId>m1@example</eb:MessageId></eb:MessageInfo></eb:UserMessage></eb:Messaging></S12:Header>` +
	`<S12:Body xmlns:wsu="http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd" wsu:Id="body-1">` + "\n  " +
	`<inv:Invoice inv:currency="EUR" note="a&#9;b&#10;c &amp; &lt;d&gt;"><inv:Amount>1656.25</inv:Amount><Line xmlns="urn:example:lines">one&#13;two</Line><!-- kept --></inv:Invoice>` + "\n" +
	`</S12:Body></S12:Envelope>`

func testAttachments() []Attachment {
	mk := func(cid, ct string, body []byte) Attachment {
		h := textproto.MIMEHeader{}
		h.Set("Content-Type", ct)
		h.Set("Content-ID", "<"+cid+">")
		h.Set("Content-Transfer-Encoding", "binary")
		return Attachment{ContentID: "<" + cid + ">", Header: h, Body: body}
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 4096)
	return []Attachment{
		mk("part-1@example", "application/gzip", big),
		mk("part-2@example", `application/xml; charset="UTF-8"`, []byte("<doc>x</doc>")),
		mk("part-3@example", "application/octet-stream", nil),
	}
}

func parseDoc(t testing.TB, s string) *etree.Document {
	t.Helper()
	d := etree.NewDocument()
	if err := d.ReadFromString(s); err != nil {
		t.Fatal(err)
	}
	return d
}

func bodyXML(t testing.TB, d *etree.Document) string {
	t.Helper()
	b := d.FindElement("/Envelope/Body")
	var buf bytes.Buffer
	b.WriteTo(&buf, &etree.WriteSettings{CanonicalText: true, CanonicalAttrVal: true})
	return buf.String()
}

// newX25519KeyPair makes an X25519 certificate signed by a throwaway Ed25519
// CA. crypto/x509 cannot create certificates for X25519 keys, so the
// certificate is issued for a placeholder Ed25519 key of the same encoded
// length, its SubjectPublicKeyInfo is replaced and the TBS is signed again.
func newX25519KeyPair(t testing.TB, cn string, serial int64) KeyPair {
	t.Helper()
	caPub, caKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "Test CA", Organization: []string{"Gateway, Tests"}},
		NotBefore: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), NotAfter: time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caPub, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	priv, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	placeholder, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: ca.NotBefore, NotAfter: ca.NotAfter, KeyUsage: x509.KeyUsageKeyAgreement,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, placeholder, caKey)
	if err != nil {
		t.Fatal(err)
	}
	first, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	spki, err := x509.MarshalPKIXPublicKey(priv.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	if len(spki) != len(first.RawSubjectPublicKeyInfo) {
		t.Fatal("SPKI length differs")
	}
	der = bytes.Replace(der, first.RawSubjectPublicKeyInfo, spki, 1)
	patched, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	copy(der[len(der)-ed25519.SignatureSize:], ed25519.Sign(caKey, patched.RawTBSCertificate))
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	if err := cert.CheckSignatureFrom(ca); err != nil {
		t.Fatalf("X25519 test certificate: %v", err)
	}
	return KeyPair{Cert: cert, Key: priv}
}

type variant struct {
	name string
	x    bool // X25519 recipient
	opts EncryptOptions
	want UsedKey
	data string
}

func variants() []variant {
	return []variant{
		{name: "rsa-oaep-mgf1p-sha256", opts: EncryptOptions{},
			want: UsedKey{Algorithm: AlgRSAOAEPMGF1P, DigestMethod: AlgSHA256, MGF: AlgMGF1SHA1}, data: AlgAES128GCM},
		{name: "rsa-oaep11-sha256-mgf1sha256", opts: EncryptOptions{KeyTransport: AlgRSAOAEP},
			want: UsedKey{Algorithm: AlgRSAOAEP, DigestMethod: AlgSHA256, MGF: AlgMGF1SHA256}, data: AlgAES128GCM},
		{name: "rsa-oaep11-sha512-mgf1sha384-aes256gcm", opts: EncryptOptions{KeyTransport: AlgRSAOAEP, DigestMethod: AlgSHA512, MGF: AlgMGF1SHA384, Content: AlgAES256GCM},
			want: UsedKey{Algorithm: AlgRSAOAEP, DigestMethod: AlgSHA512, MGF: AlgMGF1SHA384}, data: AlgAES256GCM},
		{name: "edelivery2-x25519-hkdf-kwaes128", x: true, opts: EncryptOptions{},
			want: UsedKey{Algorithm: AlgKWAES128, AgreementMethod: AlgX25519, KeyDerivation: AlgHKDF, PRF: AlgHMACSHA256}, data: AlgAES128GCM},
		{name: "x25519-kwaes256-info-aes256gcm", x: true, opts: EncryptOptions{KeyWrap: AlgKWAES256, HKDFInfo: []byte("eDelivery AS4 2.0"), Content: AlgAES256GCM},
			want: UsedKey{Algorithm: AlgKWAES256, AgreementMethod: AlgX25519, KeyDerivation: AlgHKDF, PRF: AlgHMACSHA256}, data: AlgAES256GCM},
	}
}

var refForms = []struct {
	ref  KeyReference
	form string
}{
	{ByIssuerSerial, RefIssuerSerial},
	{BySubjectKeyID, RefSubjectKeyID},
	{ByThumbprint, RefThumbprintSHA1},
	{ByBinarySecurityToken, RefBinarySecToken},
}

func TestEncryptDecryptRoundTrip(t *testing.T) {
	rsaKP := newRSAKeyPair(t, "Receiver AP", 424242)
	rsaOther := newRSAKeyPair(t, "Receiver AP", 424243) // same name, other serial: rollover
	xKP := newX25519KeyPair(t, "Receiver AP X25519", 77)
	xOther := newX25519KeyPair(t, "Receiver AP X25519", 78)
	for _, v := range variants() {
		for _, rf := range refForms {
			for _, withBody := range []bool{false, true} {
				name := fmt.Sprintf("%s/%s/body=%v", v.name, rf.form, withBody)
				t.Run(name, func(t *testing.T) {
					me, other := rsaKP, rsaOther
					if v.x {
						me, other = xKP, xOther
					}
					doc := parseDoc(t, testEnvelope)
					origBody := bodyXML(t, doc)
					atts := testAttachments()
					opts := v.opts
					opts.EncryptBody = withBody
					enc, err := Encrypt(doc, atts, Recipient{Cert: me.Cert, Reference: rf.ref}, opts)
					if err != nil {
						t.Fatal(err)
					}
					for i, a := range enc {
						if got := a.Header.Get("Content-Type"); got != "application/octet-stream" {
							t.Errorf("encrypted attachment %d Content-Type %q", i, got)
						}
						if len(a.Body) != len(atts[i].Body)+28 || bytes.Contains(a.Body, []byte("0123456789abcdef0123")) {
							t.Errorf("encrypted attachment %d: %d bytes", i, len(a.Body))
						}
					}
					if atts[0].Header.Get("Content-Type") != "application/gzip" {
						t.Fatal("Encrypt modified its input")
					}
					if withBody == strings.Contains(bodyXML(t, doc), "1656.25") {
						t.Fatalf("body encrypted=%v but body is %s", withBody, bodyXML(t, doc))
					}
					// Serialise and re-parse, as the wire does. etree's default
					// settings write CR and attribute tabs/newlines raw, which a
					// parser normalises away; the sender must escape them.
					doc.WriteSettings = etree.WriteSettings{CanonicalText: true, CanonicalAttrVal: true}
					wire, err := doc.WriteToBytes()
					if err != nil {
						t.Fatal(err)
					}
					doc2 := etree.NewDocument()
					if err := doc2.ReadFromBytes(wire); err != nil {
						t.Fatal(err)
					}
					res, err := Decrypt(doc2, enc, []KeyPair{other, me}, Options{RequireEncryptedAttachments: true})
					if err != nil {
						t.Fatalf("Decrypt: %v\n%s", err, wire)
					}
					for i, a := range res.Attachments {
						if !bytes.Equal(a.Body, atts[i].Body) {
							t.Errorf("attachment %d body differs", i)
						}
						if got, want := a.Header.Get("Content-Type"), atts[i].Header.Get("Content-Type"); got != want {
							t.Errorf("attachment %d Content-Type %q, want %q", i, got, want)
						}
					}
					if got := bodyXML(t, doc2); got != origBody {
						t.Errorf("body after round trip:\n%s\nwant:\n%s", got, origBody)
					}
					if len(res.Keys) != 1 {
						t.Fatalf("keys: %+v", res.Keys)
					}
					k := res.Keys[0]
					if k.Algorithm != v.want.Algorithm || k.DigestMethod != v.want.DigestMethod || k.MGF != v.want.MGF ||
						k.AgreementMethod != v.want.AgreementMethod || k.KeyDerivation != v.want.KeyDerivation || k.PRF != v.want.PRF {
						t.Errorf("used key %+v, want %+v", k, v.want)
					}
					if k.Reference != rf.form || k.Cert != me.Cert {
						t.Errorf("reference %s cert %v", k.Reference, k.Cert.SerialNumber)
					}
					wantParts := len(atts)
					if withBody {
						wantParts++
					}
					if len(res.Parts) != wantParts {
						t.Fatalf("parts: %d", len(res.Parts))
					}
					for _, p := range res.Parts {
						if p.Algorithm != v.data || p.KeyID != k.ID {
							t.Errorf("part %+v", p)
						}
					}
					var left []string
					for _, c := range doc2.FindElement("//Security").ChildElements() {
						left = append(left, c.Tag)
					}
					wantLeft := ""
					if rf.ref == ByBinarySecurityToken {
						wantLeft = "BinarySecurityToken"
					}
					if strings.Join(left, ",") != wantLeft {
						t.Errorf("Security after decryption holds %v", left)
					}
					// The decrypted document serialises and re-parses to the same body.
					doc2.WriteSettings = doc.WriteSettings
					again, _ := doc2.WriteToBytes()
					doc3 := etree.NewDocument()
					if err := doc3.ReadFromBytes(again); err != nil || bodyXML(t, doc3) != origBody {
						t.Errorf("decrypted document not stable: %v", err)
					}
				})
			}
		}
	}
}

func TestEncryptStructure(t *testing.T) {
	kp := newRSAKeyPair(t, "Receiver", 9)
	doc := parseDoc(t, testEnvelope)
	sec := doc.FindElement("/Envelope/Header").CreateElement("wsse:Security")
	sec.CreateAttr("xmlns:wsse", NSWSSE)
	sec.CreateElement("ds:Signature").CreateAttr("xmlns:ds", NSDSig)
	if _, err := Encrypt(doc, testAttachments()[:1], Recipient{Cert: kp.Cert}, EncryptOptions{}); err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, c := range sec.ChildElements() {
		order = append(order, c.Tag)
	}
	// Prepended: decryption first, then the signature (signed, then encrypted).
	if got := strings.Join(order, ","); got != "EncryptedKey,EncryptedData,Signature" {
		t.Fatalf("Security children %s", got)
	}
	ek := sec.ChildElements()[0]
	m := child(ek, NSXEnc, "EncryptionMethod")
	if attr(m, "Algorithm") != AlgRSAOAEPMGF1P || attr(child(m, NSDSig, "DigestMethod"), "Algorithm") != AlgSHA256 {
		t.Error("EncryptionMethod is not rsa-oaep-mgf1p with SHA-256")
	}
	name := ek.FindElement(".//X509IssuerName")
	serial := ek.FindElement(".//X509SerialNumber")
	if name == nil || name.Text() != "CN=Receiver" || serial == nil || serial.Text() != "9" {
		t.Error("X509IssuerSerial missing or wrong")
	}
	ed := sec.ChildElements()[1]
	if attr(ed, "Type") != TypeAttachmentContentOnly || attr(ed, "MimeType") != "application/gzip" ||
		attr(ed.FindElement(".//CipherReference"), "URI") != "cid:part-1@example" {
		t.Error("EncryptedData attributes wrong")
	}
}

func TestEncryptCreatesSecurityHeader(t *testing.T) {
	kp := newX25519KeyPair(t, "Receiver", 3)
	doc := parseDoc(t, `<Envelope xmlns="http://www.w3.org/2003/05/soap-envelope"><Body/></Envelope>`)
	enc, err := Encrypt(doc, testAttachments()[1:2], Recipient{Cert: kp.Cert, Reference: BySubjectKeyID}, EncryptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wire, _ := doc.WriteToString()
	if !strings.Contains(wire, `<Header><wsse:Security xmlns:wsse="`+NSWSSE+`" xmlns:soapenv="`+NSSOAP12+`" soapenv:mustUnderstand="true">`) {
		t.Fatalf("no Security header:\n%s", wire)
	}
	doc2 := parseDoc(t, wire)
	res, err := Decrypt(doc2, enc, []KeyPair{kp}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Attachments[0].Body) != "<doc>x</doc>" {
		t.Error("wrong plaintext")
	}
}

func TestEncryptRejects(t *testing.T) {
	kp := newRSAKeyPair(t, "Receiver", 9)
	ok := Recipient{Cert: kp.Cert}
	cases := []struct {
		name string
		doc  string
		atts []Attachment
		r    Recipient
		o    EncryptOptions
	}{
		{"not SOAP", `<a/>`, testAttachments(), ok, EncryptOptions{}},
		{"nothing to encrypt", testEnvelope, nil, ok, EncryptOptions{}},
		{"no certificate", testEnvelope, testAttachments(), Recipient{}, EncryptOptions{}},
		{"CBC not offered", testEnvelope, testAttachments(), ok, EncryptOptions{Content: AlgAES128CBC}},
		{"unknown transport", testEnvelope, testAttachments(), ok, EncryptOptions{KeyTransport: "urn:x"}},
		{"no Content-ID", testEnvelope, []Attachment{{Body: []byte("x")}}, ok, EncryptOptions{}},
		{"duplicate Content-ID", testEnvelope, []Attachment{{ContentID: "a"}, {ContentID: "<a>"}}, ok, EncryptOptions{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			doc := parseDoc(t, c.doc)
			before, _ := doc.WriteToString()
			if _, err := Encrypt(doc, c.atts, c.r, c.o); err == nil {
				t.Fatal("Encrypt succeeded")
			}
			if after, _ := doc.WriteToString(); after != before {
				t.Error("document changed by a failed Encrypt")
			}
		})
	}
}

// TestDecryptKeyTypeMismatch: an EncryptedKey naming our X25519 certificate
// with an RSA algorithm is a policy error, not "not for us".
func TestDecryptKeyTypeMismatch(t *testing.T) {
	xKP := newX25519KeyPair(t, "Receiver", 5)
	rsaKP := newRSAKeyPair(t, "Receiver", 5)
	doc := parseDoc(t, testEnvelope)
	enc, err := Encrypt(doc, testAttachments(), Recipient{Cert: rsaKP.Cert, Reference: ByIssuerSerial}, EncryptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Same issuer DN shape, same serial: point the X509IssuerSerial at the X25519 certificate.
	doc.FindElement("//X509IssuerName").SetText(xKP.Cert.Issuer.String())
	_, err = Decrypt(doc, enc, []KeyPair{xKP}, Options{})
	if !errors.Is(err, ErrPolicy) {
		t.Fatalf("err = %v, want ErrPolicy", err)
	}
}
