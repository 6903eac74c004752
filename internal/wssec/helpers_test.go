package wssec

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"math/big"
	"net/textproto"
	"sync"
	"testing"
	"time"

	"github.com/beevik/etree"
)

// testKey is a generated key with a self-signed certificate.
type testKey struct {
	name   string
	signer crypto.Signer
	cert   *x509.Certificate
	method string
}

var (
	keysMu sync.Mutex
	keys   = map[string]*testKey{}
)

// key returns the generated key of that name (generated once): rsa and
// rsa-old (RSA-2048, the second for rollover), p256, p384, ed25519.
func key(t testing.TB, name string) *testKey {
	t.Helper()
	keysMu.Lock()
	defer keysMu.Unlock()
	if k := keys[name]; k != nil {
		return k
	}
	var signer crypto.Signer
	var method string
	var serial int64
	switch name {
	case "rsa", "rsa-old":
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		signer, method, serial = k, AlgRSASHA256, 100
		if name == "rsa-old" {
			serial = 101
		}
	case "rsa1024":
		k, err := rsa.GenerateKey(rand.Reader, 1024)
		if err != nil {
			t.Fatal(err)
		}
		signer, method, serial = k, AlgRSASHA256, 102
	case "p256":
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		signer, method, serial = k, AlgECDSASHA256, 200
	case "p384":
		k, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
		signer, method, serial = k, AlgECDSASHA384, 201
	case "ed25519":
		_, k, _ := ed25519.GenerateKey(rand.Reader)
		signer, method, serial = k, AlgEdDSAEd25519, 300
	default:
		t.Fatalf("no test key %q", name)
	}
	keys[name] = newTestKey(t, name, signer, method, serial)
	return keys[name]
}

// userMessage is an AS4 user message envelope as our sender builds it.
const userMessage = `<?xml version="1.0" encoding="UTF-8"?>
<S12:Envelope xmlns:S12="http://www.w3.org/2003/05/soap-envelope" xmlns:eb="http://docs.oasis-open.org/ebxml-msg/ebms/v3.0/ns/core/200704/">
  <S12:Header>
    <eb:Messaging S12:mustUnderstand="true">
      <eb:UserMessage>
        <eb:MessageInfo>
          <eb:Timestamp>2025-01-02T03:04:05.678Z</eb:Timestamp>
          <eb:MessageId>msg-1@gateway.test</eb:MessageId>
        </eb:MessageInfo>
        <eb:PartyInfo>
          <eb:From><eb:PartyId type="urn:oasis:names:tc:ebcore:partyid-type:unregistered">sender</eb:PartyId><eb:Role>http://docs.oasis-open.org/ebxml-msg/ebms/v3.0/ns/core/200704/initiator</eb:Role></eb:From>
          <eb:To><eb:PartyId type="urn:oasis:names:tc:ebcore:partyid-type:unregistered">receiver</eb:PartyId><eb:Role>http://docs.oasis-open.org/ebxml-msg/ebms/v3.0/ns/core/200704/responder</eb:Role></eb:To>
        </eb:PartyInfo>
        <eb:CollaborationInfo>
          <eb:Service type="urn:gateway:test">Test</eb:Service>
          <eb:Action>Deliver</eb:Action>
          <eb:ConversationId>conv-1</eb:ConversationId>
        </eb:CollaborationInfo>
        <eb:PayloadInfo>
          <eb:PartInfo href="cid:payload-1@gateway.test"/>
          <eb:PartInfo href="cid:payload-2@gateway.test"/>
          <eb:PartInfo href="cid:payload-3@gateway.test"/>
        </eb:PayloadInfo>
      </eb:UserMessage>
    </eb:Messaging>
  </S12:Header>
  <S12:Body/>
</S12:Envelope>`

// testAttachments: compressed binary, uncompressed XML (exclusive-c14n'd by
// the transform) and text (CRLF-normalised by the transform).
func testAttachments() []Attachment {
	mk := func(id, ct string, body []byte) Attachment {
		h := textproto.MIMEHeader{}
		h.Set("Content-Type", ct)
		h.Set("Content-ID", "<"+id+">")
		return Attachment{ContentID: "<" + id + ">", Header: h, Body: body}
	}
	return []Attachment{
		mk("payload-1@gateway.test", "application/gzip", []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 1, 2, 3, 4, 5, 6, 7, 8, 9}),
		mk("payload-2@gateway.test", "application/xml", []byte("<?xml version=\"1.0\"?>\n<!-- c -->\n<inv:Invoice xmlns:inv=\"urn:inv\" xmlns:unused=\"urn:u\" b='2' a=\"1\">\r\n  <inv:ID>42</inv:ID>\n</inv:Invoice>\n")),
		mk("payload-3@gateway.test", "text/plain; charset=utf-8", []byte("line 1\nline 2\r\nline 3")),
	}
}

// signedMessage signs userMessage with key k and returns the serialised
// envelope.
func signedMessage(t testing.TB, k *testKey, atts []Attachment, mod func(*SignOptions)) []byte {
	t.Helper()
	doc := etree.NewDocument()
	if err := doc.ReadFromString(userMessage); err != nil {
		t.Fatal(err)
	}
	opts := SignOptions{Signer: k.signer, Certificate: k.cert}
	if mod != nil {
		mod(&opts)
	}
	if err := Sign(doc, atts, opts); err != nil {
		t.Fatalf("Sign: %v", err)
	}
	var buf bytes.Buffer
	if _, err := doc.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func mustParse(t testing.TB, b []byte) *etree.Document {
	t.Helper()
	doc, err := ParseEnvelope(bytes.NewReader(b), Limits{})
	if err != nil {
		t.Fatalf("ParseEnvelope: %v", err)
	}
	return doc
}

// find returns the first element {ns}local in document order.
func find(doc *etree.Document, ns, local string) *etree.Element {
	var found *etree.Element
	var walk func(e *etree.Element)
	walk = func(e *etree.Element) {
		if found != nil {
			return
		}
		if isElement(e, ns, local) {
			found = e
			return
		}
		for _, c := range e.ChildElements() {
			walk(c)
		}
	}
	walk(doc.Root())
	return found
}

// resign recomputes the SignatureValue after a test changed the SignedInfo.
func resign(t testing.TB, doc *etree.Document, k *testKey) {
	t.Helper()
	si := find(doc, NamespaceDSig, "SignedInfo")
	c, err := canonicalize(si, c14nMethod{exclusive: true}, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	alg, _ := lookupSignatureAlgorithm(k.method, true)
	v, err := signValue(k.signer, alg, rand.Reader, c)
	if err != nil {
		t.Fatal(err)
	}
	sv := find(doc, NamespaceDSig, "SignatureValue")
	sv.SetText(encodeB64(v))
}

func encodeB64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func newTestKey(t testing.TB, name string, signer crypto.Signer, method string, serial int64) *testKey {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: name, Organization: []string{"Gateway Test, Inc."}, Country: []string{"DE"}},
		NotBefore:    time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:     time.Date(2044, 1, 1, 0, 0, 0, 0, time.UTC),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, signer.Public(), signer)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testKey{name: name, signer: signer, cert: cert, method: method}
}
