package wssec

import (
	"bytes"
	"crypto/rand"
	"crypto/x509"
	"net/textproto"
	"testing"

	"github.com/beevik/etree"
)

func benchAttachment(b *testing.B) []Attachment {
	body := make([]byte, 10<<10)
	if _, err := rand.Read(body); err != nil {
		b.Fatal(err)
	}
	h := textproto.MIMEHeader{}
	h.Set("Content-Type", "application/gzip")
	return []Attachment{{ContentID: "<payload-1@gateway.test>", Header: h, Body: body}}
}

// BenchmarkSignRSA2048: sign an AS4 user message with one 10 KB attachment.
func BenchmarkSignRSA2048(b *testing.B) {
	k := key(b, "rsa")
	atts := benchAttachment(b)
	for b.Loop() {
		doc := etree.NewDocument()
		if err := doc.ReadFromString(userMessage); err != nil {
			b.Fatal(err)
		}
		if err := Sign(doc, atts, SignOptions{Signer: k.signer, Certificate: k.cert}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyRSA2048: parse and verify the same message.
func BenchmarkVerifyRSA2048(b *testing.B) {
	k := key(b, "rsa")
	atts := benchAttachment(b)
	raw := signedMessage(b, k, atts, nil)
	opts := VerifyOptions{Trusted: []*x509.Certificate{k.cert}}
	for b.Loop() {
		doc, err := ParseEnvelope(bytes.NewReader(raw), Limits{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Verify(doc, atts, opts); err != nil {
			b.Fatal(err)
		}
	}
}
