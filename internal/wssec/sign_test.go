package wssec

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/beevik/etree"
	dsig "github.com/russellhaering/goxmldsig"
	"github.com/russellhaering/goxmldsig/etreeutils"
)

func TestSignVerifyRoundTrip(t *testing.T) {
	for _, name := range []string{"rsa", "p256", "p384", "ed25519"} {
		t.Run(name, func(t *testing.T) {
			k := key(t, name)
			atts := testAttachments()
			raw := signedMessage(t, k, atts, nil)
			doc := mustParse(t, raw)

			// Byte-stable: the re-parsed document serialises to the same bytes.
			again, err := doc.WriteToBytes()
			if err != nil || !bytes.Equal(again, raw) {
				t.Fatalf("re-serialisation differs (err %v)", err)
			}
			res, err := Verify(doc, atts, VerifyOptions{Trusted: []*x509.Certificate{key(t, "rsa-old").cert, k.cert}})
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if res.Signer != k.cert || res.SignatureMethod != k.method {
				t.Fatalf("signer %s method %s", res.Signer.Subject, res.SignatureMethod)
			}
			if len(res.References) != 5 {
				t.Fatalf("%d references", len(res.References))
			}
			wantURIs := []string{"#", "#", "cid:payload-1@gateway.test", "cid:payload-2@gateway.test", "cid:payload-3@gateway.test"}
			for i, r := range res.References {
				if !strings.HasPrefix(r.URI, wantURIs[i]) || r.DigestMethod != AlgSHA256 || len(r.Transforms) != 1 {
					t.Fatalf("reference %d: %+v", i, r)
				}
			}
			if res.References[2].Transforms[0].Algorithm != AlgAttachmentContentSignature {
				t.Fatalf("attachment transform %s", res.References[2].Transforms[0].Algorithm)
			}
			hdr := doc.Root().ChildElements()[0]
			if res.Messaging == nil || res.Messaging.Parent() != hdr || res.Body == nil || res.Body.Parent() != doc.Root() {
				t.Fatal("Messaging/Body are not the envelope's own elements")
			}
			sec := hdr.ChildElements()[0]
			if !isElement(sec, NamespaceWSSE, "Security") {
				t.Fatalf("first header block is %s", sec.Tag)
			}
			if mu, _ := attrValue(sec, NamespaceSOAP12, "mustUnderstand"); mu != "true" {
				t.Fatalf("mustUnderstand %q", mu)
			}
		})
	}
}

// TestAttachmentTransformOutput pins the transform output of the three
// attachment kinds of testAttachments.
func TestAttachmentTransformOutput(t *testing.T) {
	atts := testAttachments()
	want := []string{
		string(atts[0].Body),
		`<inv:Invoice xmlns:inv="urn:inv" a="1" b="2">` + "\n  <inv:ID>42</inv:ID>\n</inv:Invoice>",
		"line 1\r\nline 2\r\nline 3",
	}
	for i, a := range atts {
		got, err := attachmentOctets(a, false, Limits{})
		if err != nil || string(got) != want[i] {
			t.Errorf("attachment %d: %q, %v\nwant %q", i, got, err, want[i])
		}
	}
}

func TestSignTimestamp(t *testing.T) {
	k := key(t, "rsa")
	created := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	raw := signedMessage(t, k, nil, func(o *SignOptions) {
		o.TimestampTTL = 5 * time.Minute
		o.Now = func() time.Time { return created }
	})
	if !bytes.Contains(raw, []byte("<wsu:Created>2025-06-01T12:00:00.000Z</wsu:Created><wsu:Expires>2025-06-01T12:05:00.000Z</wsu:Expires>")) {
		t.Fatalf("timestamp not as expected:\n%s", raw)
	}
	trusted := []*x509.Certificate{k.cert}
	at := func(d time.Duration) VerifyOptions {
		return VerifyOptions{Trusted: trusted, RequireTimestamp: true, Now: func() time.Time { return created.Add(d) }}
	}
	res, err := Verify(mustParse(t, raw), nil, at(9*time.Minute)) // expired 4 minutes ago, within 5 min skew
	if err != nil {
		t.Fatalf("within skew: %v", err)
	}
	if !res.Timestamp.Expires.Equal(created.Add(5 * time.Minute)) {
		t.Fatalf("timestamp %+v", res.Timestamp)
	}
	for _, d := range []time.Duration{11 * time.Minute, time.Hour, -6 * time.Minute} {
		if _, err := Verify(mustParse(t, raw), nil, at(d)); Code(err) != CodeFailedAuthentication {
			t.Fatalf("now=created%+v: %v", d, err)
		}
	}
	// A message without a timestamp when one is required.
	plain := signedMessage(t, k, nil, nil)
	if _, err := Verify(mustParse(t, plain), nil, at(0)); Code(err) != CodePolicyNoncompliance {
		t.Fatalf("missing timestamp: %v", err)
	}
}

// TestVerifyRejects runs the negative cases on our own signed message. Each
// case gets a fresh parse of the same signed bytes.
func TestVerifyRejects(t *testing.T) {
	k := key(t, "rsa")
	atts := testAttachments()
	raw := signedMessage(t, k, atts, nil)
	opts := VerifyOptions{Trusted: []*x509.Certificate{k.cert}}
	if _, err := Verify(mustParse(t, raw), atts, opts); err != nil {
		t.Fatalf("baseline: %v", err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(doc *etree.Document, atts []Attachment, o *VerifyOptions) []Attachment
		code   string
		msg    string
	}{
		{"tampered attachment", func(_ *etree.Document, a []Attachment, _ *VerifyOptions) []Attachment {
			a[0].Body = append([]byte(nil), a[0].Body...)
			a[0].Body[len(a[0].Body)-1] ^= 0x80
			return a
		}, CodeFailedAuthentication, "digest mismatch"},
		{"tampered XML attachment", func(_ *etree.Document, a []Attachment, _ *VerifyOptions) []Attachment {
			a[1].Body = bytes.Replace(a[1].Body, []byte("42"), []byte("43"), 1)
			return a
		}, CodeFailedAuthentication, "digest mismatch"},
		{"tampered body", func(d *etree.Document, a []Attachment, _ *VerifyOptions) []Attachment {
			d.Root().ChildElements()[1].CreateElement("Evil").SetText("x")
			return a
		}, CodeFailedAuthentication, "digest mismatch"},
		{"tampered messaging", func(d *etree.Document, a []Attachment, _ *VerifyOptions) []Attachment {
			find(d, NamespaceEbMS, "Action").SetText("Pay")
			return a
		}, CodeFailedAuthentication, "digest mismatch"},
		{"tampered signature value", func(d *etree.Document, a []Attachment, _ *VerifyOptions) []Attachment {
			sv := find(d, NamespaceDSig, "SignatureValue")
			b, _ := base64.StdEncoding.DecodeString(sv.Text())
			b[10] ^= 1
			sv.SetText(base64.StdEncoding.EncodeToString(b))
			return a
		}, CodeFailedAuthentication, "signature value"},
		{"tampered SignedInfo", func(d *etree.Document, a []Attachment, _ *VerifyOptions) []Attachment {
			dv := find(d, NamespaceDSig, "DigestValue")
			dv.SetText(encodeB64(make([]byte, 32)))
			return a
		}, CodeFailedAuthentication, "signature value"},
		{"wrapped messaging, duplicate id", func(d *etree.Document, a []Attachment, _ *VerifyOptions) []Attachment {
			orig := find(d, NamespaceEbMS, "Messaging")
			hdr := orig.Parent()
			forged := orig.Copy()
			forged.FindElement(".//eb:Action").SetText("Pay")
			hdr.RemoveChild(orig)
			wrapper := hdr.CreateElement("x:Wrapper")
			wrapper.CreateAttr("xmlns:x", "urn:attacker")
			wrapper.AddChild(orig)
			hdr.AddChild(forged)
			return a
		}, CodePolicyNoncompliance, "duplicate id"},
		{"wrapped messaging, forged block without id", func(d *etree.Document, a []Attachment, _ *VerifyOptions) []Attachment {
			orig := find(d, NamespaceEbMS, "Messaging")
			hdr := orig.Parent()
			forged := orig.Copy()
			forged.FindElement(".//eb:Action").SetText("Pay")
			for _, at := range forged.Attr {
				if at.Key == "Id" {
					forged.RemoveAttr(at.Space + ":" + at.Key)
				}
			}
			hdr.RemoveChild(orig)
			wrapper := hdr.CreateElement("x:Wrapper")
			wrapper.CreateAttr("xmlns:x", "urn:attacker")
			wrapper.AddChild(orig)
			hdr.AddChild(forged)
			return a
		}, CodePolicyNoncompliance, "eb:Messaging is not covered"},
		{"second messaging block", func(d *etree.Document, a []Attachment, _ *VerifyOptions) []Attachment {
			orig := find(d, NamespaceEbMS, "Messaging")
			forged := orig.Copy()
			for _, at := range forged.Attr {
				if at.Key == "Id" {
					forged.RemoveAttr(at.Space + ":" + at.Key)
				}
			}
			orig.Parent().AddChild(forged)
			return a
		}, CodePolicyNoncompliance, "2 eb:Messaging"},
		{"duplicated wsu:Id", func(d *etree.Document, a []Attachment, _ *VerifyOptions) []Attachment {
			body := d.Root().ChildElements()[1]
			id, _ := attrValue(body, NamespaceWSU, "Id")
			ext := find(d, NamespaceEbMS, "Messaging").Parent().CreateElement("x:Extra")
			ext.CreateAttr("xmlns:x", "urn:other")
			ext.CreateAttr("xmlns:u", NamespaceWSU)
			ext.CreateAttr("u:Id", id)
			return a
		}, CodePolicyNoncompliance, "duplicate id"},
		{"duplicated plain Id", func(d *etree.Document, a []Attachment, _ *VerifyOptions) []Attachment {
			body := d.Root().ChildElements()[1]
			id, _ := attrValue(body, NamespaceWSU, "Id")
			find(d, NamespaceEbMS, "UserMessage").CreateAttr("Id", id)
			return a
		}, CodePolicyNoncompliance, "duplicate id"},
		{"unknown signer", func(_ *etree.Document, a []Attachment, o *VerifyOptions) []Attachment {
			o.Trusted = []*x509.Certificate{key(t, "rsa-old").cert, key(t, "p256").cert}
			return a
		}, CodeFailedAuthentication, "not a trusted certificate"},
		{"no trusted certificates", func(_ *etree.Document, a []Attachment, o *VerifyOptions) []Attachment {
			o.Trusted = nil
			return a
		}, CodeFailedAuthentication, "not a trusted certificate"},
		{"too many references", func(_ *etree.Document, a []Attachment, o *VerifyOptions) []Attachment {
			o.MaxReferences = 4
			return a
		}, CodePolicyNoncompliance, "5 references, at most 4"},
		{"unsigned extra attachment", func(_ *etree.Document, a []Attachment, _ *VerifyOptions) []Attachment {
			return append(a, Attachment{ContentID: "<extra@x>", Body: []byte("x")})
		}, CodePolicyNoncompliance, "not covered"},
		{"missing attachment", func(_ *etree.Document, a []Attachment, _ *VerifyOptions) []Attachment {
			return a[:2]
		}, CodeFailedAuthentication, "no such attachment"},
		{"duplicate attachment content id", func(_ *etree.Document, a []Attachment, _ *VerifyOptions) []Attachment {
			return append(a, a[0])
		}, CodePolicyNoncompliance, "2 attachments"},
		{"no security header", func(d *etree.Document, a []Attachment, _ *VerifyOptions) []Attachment {
			sec := find(d, NamespaceWSSE, "Security")
			sec.Parent().RemoveChild(sec)
			return a
		}, CodePolicyNoncompliance, "no wsse:Security"},
		{"security header for another role", func(d *etree.Document, a []Attachment, _ *VerifyOptions) []Attachment {
			find(d, NamespaceWSSE, "Security").CreateAttr("S12:role", "urn:somebody-else")
			return a
		}, CodePolicyNoncompliance, "no wsse:Security"},
		{"two security headers", func(d *etree.Document, a []Attachment, _ *VerifyOptions) []Attachment {
			sec := find(d, NamespaceWSSE, "Security")
			sec.Parent().AddChild(sec.Copy())
			return a
		}, CodePolicyNoncompliance, "2 wsse:Security"},
		{"disallowed signature method", func(d *etree.Document, a []Attachment, _ *VerifyOptions) []Attachment {
			find(d, NamespaceDSig, "SignatureMethod").CreateAttr("Algorithm", AlgRSASHA1)
			return a
		}, CodePolicyNoncompliance, "SHA-1"},
		{"unknown transform", func(d *etree.Document, a []Attachment, _ *VerifyOptions) []Attachment {
			find(d, NamespaceDSig, "Transform").CreateAttr("Algorithm", "http://www.w3.org/TR/1999/REC-xslt-19991116")
			resign(t, d, k)
			return a
		}, CodePolicyNoncompliance, "not supported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := mustParse(t, raw)
			o := opts
			a := tc.mutate(doc, testAttachments(), &o)
			_, err := Verify(doc, a, o)
			if err == nil {
				t.Fatal("Verify accepted the message")
			}
			if Code(err) != tc.code || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("got %s %v, want %s containing %q", Code(err), err, tc.code, tc.msg)
			}
		})
	}
}

// TestVerifyUnsignedBody removes the Body reference and re-signs: the
// signature is valid but does not cover the body.
func TestVerifyUnsignedBody(t *testing.T) {
	k := key(t, "rsa")
	doc := mustParse(t, signedMessage(t, k, nil, nil))
	body := doc.Root().ChildElements()[1]
	bodyID, _ := attrValue(body, NamespaceWSU, "Id")
	si := find(doc, NamespaceDSig, "SignedInfo")
	for _, r := range si.ChildElements() {
		if uri, _ := attrValue(r, "", "URI"); uri == "#"+bodyID {
			si.RemoveChild(r)
		}
	}
	resign(t, doc, k)
	opts := VerifyOptions{Trusted: []*x509.Certificate{k.cert}}
	if _, err := Verify(doc, nil, opts); Code(err) != CodePolicyNoncompliance || !strings.Contains(err.Error(), "soap:Body is not covered") {
		t.Fatalf("unsigned body: %v", err)
	}
	opts.Require = RequireMessaging | RequireAttachments
	res, err := Verify(doc, nil, opts)
	if err != nil || res.Body != nil || res.Messaging == nil {
		t.Fatalf("body not required: %v %+v", err, res)
	}
}

func TestVerifySHA1WhenAllowed(t *testing.T) {
	k := key(t, "rsa")
	raw := signedMessage(t, k, nil, func(o *SignOptions) {
		o.SignatureMethod = AlgRSASHA1
		o.DigestMethod = AlgSHA1
	})
	trusted := []*x509.Certificate{k.cert}
	if _, err := Verify(mustParse(t, raw), nil, VerifyOptions{Trusted: trusted}); Code(err) != CodePolicyNoncompliance {
		t.Fatalf("sha1 not allowed: %v", err)
	}
	if _, err := Verify(mustParse(t, raw), nil, VerifyOptions{Trusted: trusted, AllowSHA1: true}); err != nil {
		t.Fatalf("sha1 allowed: %v", err)
	}
}

// TestKeyReferenceForms rewrites the (unsigned) KeyInfo of a signed message
// into every supported key reference form.
func TestKeyReferenceForms(t *testing.T) {
	k := key(t, "rsa")
	raw := signedMessage(t, k, nil, nil)
	thumb := sha1.Sum(k.cert.Raw)
	trusted := []*x509.Certificate{key(t, "rsa-old").cert, k.cert}
	for _, tc := range []struct {
		name, keyInfo string
		code          string
	}{
		{"issuer serial", `<wsse:SecurityTokenReference><ds:X509Data><ds:X509IssuerSerial><ds:X509IssuerName>C=DE, O=Gateway Test\, Inc., CN=rsa</ds:X509IssuerName><ds:X509SerialNumber>100</ds:X509SerialNumber></ds:X509IssuerSerial></ds:X509Data></wsse:SecurityTokenReference>`, ""},
		{"issuer serial, ASN.1 order", `<wsse:SecurityTokenReference><ds:X509Data><ds:X509IssuerSerial><ds:X509IssuerName>CN = rsa,O="Gateway Test, Inc.",C=de</ds:X509IssuerName><ds:X509SerialNumber>100</ds:X509SerialNumber></ds:X509IssuerSerial></ds:X509Data></wsse:SecurityTokenReference>`, ""},
		{"issuer serial, wrong serial", `<wsse:SecurityTokenReference><ds:X509Data><ds:X509IssuerSerial><ds:X509IssuerName>CN=rsa,O=Gateway Test\, Inc.,C=DE</ds:X509IssuerName><ds:X509SerialNumber>101</ds:X509SerialNumber></ds:X509IssuerSerial></ds:X509Data></wsse:SecurityTokenReference>`, CodeFailedAuthentication},
		{"issuer serial, wrong issuer", `<wsse:SecurityTokenReference><ds:X509Data><ds:X509IssuerSerial><ds:X509IssuerName>CN=rsa,O=Other,C=DE</ds:X509IssuerName><ds:X509SerialNumber>100</ds:X509SerialNumber></ds:X509IssuerSerial></ds:X509Data></wsse:SecurityTokenReference>`, CodeFailedAuthentication},
		{"X509SKI", `<wsse:SecurityTokenReference><ds:X509Data><ds:X509SKI>` + encodeB64(subjectKeyID(k.cert)) + `</ds:X509SKI></ds:X509Data></wsse:SecurityTokenReference>`, ""},
		{"KeyIdentifier SKI", `<wsse:SecurityTokenReference><wsse:KeyIdentifier EncodingType="` + EncodingBase64Binary + `" ValueType="` + ValueTypeX509SKI + `">` + encodeB64(subjectKeyID(k.cert)) + `</wsse:KeyIdentifier></wsse:SecurityTokenReference>`, ""},
		{"X509SKI unknown", `<wsse:SecurityTokenReference><ds:X509Data><ds:X509SKI>` + encodeB64(make([]byte, 20)) + `</ds:X509SKI></ds:X509Data></wsse:SecurityTokenReference>`, CodeFailedAuthentication},
		{"KeyIdentifier thumbprint", `<wsse:SecurityTokenReference><wsse:KeyIdentifier ValueType="` + ValueTypeThumbprintSHA + `">` + encodeB64(thumb[:]) + `</wsse:KeyIdentifier></wsse:SecurityTokenReference>`, ""},
		{"KeyIdentifier unknown thumbprint", `<wsse:SecurityTokenReference><wsse:KeyIdentifier ValueType="` + ValueTypeThumbprintSHA + `">` + encodeB64(make([]byte, 20)) + `</wsse:KeyIdentifier></wsse:SecurityTokenReference>`, CodeFailedAuthentication},
		{"X509Certificate", `<ds:X509Data><ds:X509Certificate>` + encodeB64(k.cert.Raw) + `</ds:X509Certificate></ds:X509Data>`, ""},
		{"KeyValue", `<ds:KeyValue/>`, CodePolicyNoncompliance},
		{"external token", `<wsse:SecurityTokenReference><wsse:Reference URI="http://example.com/cert"/></wsse:SecurityTokenReference>`, CodePolicyNoncompliance},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := mustParse(t, raw)
			ki := find(doc, NamespaceDSig, "KeyInfo")
			for _, c := range ki.ChildElements() {
				ki.RemoveChild(c)
			}
			frag := etree.NewDocument()
			if err := frag.ReadFromString(`<r xmlns:ds="` + NamespaceDSig + `" xmlns:wsse="` + NamespaceWSSE + `">` + tc.keyInfo + `</r>`); err != nil {
				t.Fatal(err)
			}
			ki.AddChild(frag.Root().ChildElements()[0])
			res, err := Verify(doc, nil, VerifyOptions{Trusted: trusted})
			if Code(err) != tc.code {
				t.Fatalf("got %v, want code %q", err, tc.code)
			}
			// Every authentication failure here is a signer that is not
			// trusted.
			if unknown := errors.Is(err, ErrUnknownSigner); unknown != (tc.code == CodeFailedAuthentication) {
				t.Fatalf("errors.Is(%v, ErrUnknownSigner) = %v", err, unknown)
			}
			if err == nil && res.Signer != k.cert {
				t.Fatalf("signer %s", res.Signer.Subject)
			}
		})
	}
}

// TestUnknownSignerError: a signer that is none of the certificates Verify
// may accept is ErrUnknownSigner (and EBMS:0101, the text unchanged); a
// signature that does not verify with a trusted signer's key is not.
func TestUnknownSignerError(t *testing.T) {
	k := key(t, "rsa")
	raw := signedMessage(t, k, nil, nil)
	_, err := Verify(mustParse(t, raw), nil, VerifyOptions{Trusted: []*x509.Certificate{key(t, "rsa-old").cert}})
	if !errors.Is(err, ErrUnknownSigner) || Code(err) != CodeFailedAuthentication || Reason(err) != err.Error() ||
		!strings.Contains(err.Error(), `signer "CN=rsa,O=Gateway Test\\, Inc.,C=DE" (serial 64) is not a trusted certificate`) {
		t.Fatalf("untrusted token: %v", err)
	}
	doc := mustParse(t, raw)
	sv := find(doc, NamespaceDSig, "SignatureValue")
	v := []byte(sv.Text())
	v[10] ^= 1
	sv.SetText(string(v))
	_, err = Verify(doc, nil, VerifyOptions{Trusted: []*x509.Certificate{k.cert}})
	if Code(err) != CodeFailedAuthentication || errors.Is(err, ErrUnknownSigner) {
		t.Fatalf("bad signature value: %v", err)
	}
}

func TestSignRefusesDoubleSigningAndForeignKey(t *testing.T) {
	doc := mustParse(t, signedMessage(t, key(t, "rsa"), nil, nil))
	if err := Sign(doc, nil, SignOptions{Signer: key(t, "rsa").signer, Certificate: key(t, "rsa").cert}); err == nil {
		t.Fatal("signed twice")
	}
	doc2 := etree.NewDocument()
	_ = doc2.ReadFromString(userMessage)
	if err := Sign(doc2, nil, SignOptions{Signer: key(t, "rsa").signer, Certificate: key(t, "p256").cert}); err == nil {
		t.Fatal("signed with a certificate of another key")
	}
	if err := Sign(doc2, nil, SignOptions{Signer: key(t, "p256").signer, Certificate: key(t, "p256").cert, SignatureMethod: AlgRSASHA256}); err == nil {
		t.Fatal("ECDSA key with an RSA signature method")
	}
}

// TestSignSOAP11 signs a SOAP 1.1 envelope whose Body already has a wsu:Id
// under another prefix and which uses a default namespace.
func TestSignSOAP11(t *testing.T) {
	k := key(t, "p256")
	doc := etree.NewDocument()
	err := doc.ReadFromString(`<Envelope xmlns="http://schemas.xmlsoap.org/soap/envelope/"><Header><m:Messaging xmlns:m="` + NamespaceEbMS + `"><m:SignalMessage/></m:Messaging></Header><Body xmlns:u="` + NamespaceWSU + `" u:Id="body-1"><p xmlns="urn:payload">text</p></Body></Envelope>`)
	if err != nil {
		t.Fatal(err)
	}
	if err := Sign(doc, nil, SignOptions{Signer: k.signer, Certificate: k.cert}); err != nil {
		t.Fatal(err)
	}
	raw, _ := doc.WriteToBytes()
	if !bytes.Contains(raw, []byte(`<wsse:Security xmlns:wsse="`+NamespaceWSSE+`" xmlns:wsu="`+NamespaceWSU+`" xmlns:S11="`+NamespaceSOAP11+`" S11:mustUnderstand="1">`)) ||
		!bytes.Contains(raw, []byte(`URI="#body-1"`)) {
		t.Fatalf("unexpected signed envelope:\n%s", raw)
	}
	res, err := Verify(mustParse(t, raw), nil, VerifyOptions{Trusted: []*x509.Certificate{k.cert}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Body.Tag != "Body" || res.Messaging.Tag != "Messaging" {
		t.Fatal("wrong elements")
	}
}

func TestCodeMapping(t *testing.T) {
	for err, want := range map[error]string{
		nil:                     "",
		errors.New("other"):     "",
		authErr("x"):            "EBMS:0101",
		policyErr("x"):          "EBMS:0103",
		xmlErr("x"):             "EBMS:0009",
		ErrFailedAuthentication: "EBMS:0101",
		ErrPolicyNoncompliance:  "EBMS:0103",
		ErrInvalidXML:           "EBMS:0009",
	} {
		if got := Code(err); got != want {
			t.Errorf("Code(%v) = %q, want %q", err, got, want)
		}
	}
}

// TestSignWhitespaceSurvivesSerialisation: attribute values with line ends
// and text with carriage returns in signed elements still verify after a
// serialise/parse round trip.
func TestSignWhitespaceSurvivesSerialisation(t *testing.T) {
	k := key(t, "ed25519")
	doc := etree.NewDocument()
	if err := doc.ReadFromString(userMessage); err != nil {
		t.Fatal(err)
	}
	find(doc, NamespaceEbMS, "Service").CreateAttr("type", "line 1\nline 2\tend")
	find(doc, NamespaceEbMS, "Action").SetText("Deliver\r\n")
	if err := Sign(doc, nil, SignOptions{Signer: k.signer, Certificate: k.cert}); err != nil {
		t.Fatal(err)
	}
	raw, err := doc.WriteToBytes()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(raw, []byte(`type="line 1&#xA;line 2&#x9;end"`)) || !bytes.Contains(raw, []byte("Deliver&#xD;\n")) {
		t.Fatalf("whitespace not escaped:\n%s", raw)
	}
	if _, err := Verify(mustParse(t, raw), nil, VerifyOptions{Trusted: []*x509.Certificate{k.cert}}); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyRSAKeySizeFloor(t *testing.T) {
	k := key(t, "rsa1024")
	raw := signedMessage(t, k, nil, nil)
	trusted := []*x509.Certificate{k.cert}
	if _, err := Verify(mustParse(t, raw), nil, VerifyOptions{Trusted: trusted}); Code(err) != CodePolicyNoncompliance || !strings.Contains(err.Error(), "1024 bits") {
		t.Fatalf("1024-bit key: %v", err)
	}
	if _, err := Verify(mustParse(t, raw), nil, VerifyOptions{Trusted: trusted, MinRSABits: 1024}); err != nil {
		t.Fatalf("1024-bit key allowed: %v", err)
	}
}

// TestReferenceTransforms rewrites the Body reference to inclusive C14N 1.0,
// to no transform (the XML-DSig default, also inclusive C14N 1.0) and to
// enveloped-signature + exclusive c14n on the Header (which contains the
// signature), with digests over hand-written canonical forms.
func TestReferenceTransforms(t *testing.T) {
	k := key(t, "p256")
	raw := signedMessage(t, k, nil, nil)
	sha := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return encodeB64(sum[:])
	}
	for _, tc := range []struct {
		name       string
		transforms []string
		header     bool
	}{
		{"c14n 1.0", []string{AlgC14N10}, false},
		{"default", nil, false},
		{"enveloped + exc-c14n on the Header", []string{AlgEnvelopedSignature, AlgExcC14N}, true},
		{"enveloped + c14n 1.1 on the Header", []string{AlgEnvelopedSignature, AlgC14N11}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := mustParse(t, raw)
			body := doc.Root().ChildElements()[1]
			bodyID, _ := attrValue(body, NamespaceWSU, "Id")
			var ref *etree.Element
			for _, r := range find(doc, NamespaceDSig, "SignedInfo").ChildElements() {
				if uri, _ := attrValue(r, "", "URI"); uri == "#"+bodyID {
					ref = r
				}
			}
			ref.RemoveChild(ref.SelectElement("Transforms"))
			if len(tc.transforms) > 0 {
				ts := etree.NewElement("ds:Transforms")
				for _, a := range tc.transforms {
					ts.CreateElement("ds:Transform").CreateAttr("Algorithm", a)
				}
				ref.InsertChildAt(0, ts)
			}
			want := `<S12:Body xmlns:S12="` + NamespaceSOAP12 + `" xmlns:eb="` + NamespaceEbMS + `" xmlns:wsu="` + NamespaceWSU + `" wsu:Id="` + bodyID + `"></S12:Body>`
			opts := VerifyOptions{Trusted: []*x509.Certificate{k.cert}}
			if tc.header {
				// Reference the Header instead, which carries the signature.
				hdr := doc.Root().ChildElements()[0]
				hdr.CreateAttr("Id", "hdr")
				ref.CreateAttr("URI", "#hdr")
				// Expectation from goxmldsig: detach with the in-scope
				// namespaces, drop the signature, canonicalise.
				ctx, err := etreeutils.NSBuildParentContext(hdr)
				if err != nil {
					t.Fatal(err)
				}
				detached, err := etreeutils.NSDetatch(ctx, hdr)
				if err != nil {
					t.Fatal(err)
				}
				sec := detached.ChildElements()[0]
				sec.RemoveChild(sec.SelectElement("ds:Signature"))
				canon := dsig.MakeC14N10ExclusiveCanonicalizerWithPrefixList("")
				if tc.transforms[1] == AlgC14N11 {
					canon = dsig.MakeC14N11Canonicalizer()
				}
				c, err := canon.Canonicalize(detached)
				if err != nil {
					t.Fatal(err)
				}
				if bytes.Contains(c, []byte("SignatureValue")) || !bytes.Contains(c, []byte("BinarySecurityToken")) {
					t.Fatalf("enveloped signature not removed: %s", c)
				}
				want = string(c)
				opts.Require = RequireMessaging | RequireAttachments
			}
			ref.SelectElement("DigestValue").SetText(sha(want))
			resign(t, doc, k)
			if _, err := Verify(doc, nil, opts); err != nil {
				t.Fatalf("Verify: %v", err)
			}
		})
	}
}
