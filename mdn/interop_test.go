package mdn

import (
	"bytes"
	"crypto/sha1"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"strings"
	"testing"

	"github.com/smallstep/pkcs7"

	"github.com/edigateway/gateway/internal/interop"
)

// pkcs7Verify verifies a detached CMS signature over content with the
// certificate embedded in the signature.
func pkcs7Verify(sig, content []byte) error {
	p7, err := pkcs7.Parse(sig)
	if err != nil {
		return err
	}
	p7.Content = content
	return p7.Verify()
}

// TestInteropSignedMDN parses mendelson's signed MDN and verifies it as the
// README states: valid with the embedded certificate, 923 signed bytes,
// messageDigest (sha1) S7j1nnJZHD1Iq89ZwaZizEiSIpA=.
func TestInteropSignedMDN(t *testing.T) {
	raw := interop.Read(t, "as2/mecas2_signed.mdn")
	p, err := ParseMessage(raw)
	if err != nil {
		t.Fatal(err)
	}
	want := Report{
		ReportingUA:       "mendelson opensource AS2",
		OriginalRecipient: "mecas2",
		FinalRecipient:    "mecas2",
		OriginalMessageID: "<20161230102456.10748.40759@imac.local>",
		MIC:               "O4bvrm5t2YunRfwvZicNdEUmPaPZ9vUslX8loVLDck0=",
		MICAlg:            "sha-256",
		Disposition:       DispProcessed,
		HumanText: "The AS2 message has been received. Thank you for exchanging AS2 messages with mendelson opensource AS2.\n" +
			"Please download your free copy of mendelson opensource AS2 today at http://opensource.mendelson-e-c.com",
		MessageID: "<mendelson_opensource_AS2-1483093497174-1@mecas2_pyas2mac>",
	}
	if p.Report != want {
		t.Fatalf("report\n%+v\nwant\n%+v", p.Report, want)
	}
	for k, v := range map[string]string{
		"Disposition":          "automatic-action/MDN-sent-automatically; processed",
		"Received-Content-MIC": "O4bvrm5t2YunRfwvZicNdEUmPaPZ9vUslX8loVLDck0=, sha-256",
		"Original-Message-ID":  "<20161230102456.10748.40759@imac.local>",
	} {
		if got := p.Fields.Get(k); got != v {
			t.Errorf("field %s = %q, want %q", k, got, v)
		}
	}
	if !p.Signed || p.SignatureMICAlg != "sha1" {
		t.Fatalf("Signed=%v micalg=%q", p.Signed, p.SignatureMICAlg)
	}
	if len(p.SignedContent) != 923 {
		t.Fatalf("signed part is %d bytes, want 923", len(p.SignedContent))
	}
	if !bytes.HasPrefix(p.SignedContent, []byte("Content-Type: multipart/report; report-type=disposition-notification; \r\n\tboundary=")) ||
		!bytes.HasSuffix(p.SignedContent, []byte("------=_Part_5_2083852873.1483093497175--\r\n")) {
		t.Fatalf("signed part boundaries wrong: %q ... %q", p.SignedContent[:80], p.SignedContent[len(p.SignedContent)-50:])
	}
	sum := sha1.Sum(p.SignedContent)
	if got := base64.StdEncoding.EncodeToString(sum[:]); got != "S7j1nnJZHD1Iq89ZwaZizEiSIpA=" {
		t.Fatalf("sha1 of signed part %s, want the messageDigest S7j1nnJZHD1Iq89ZwaZizEiSIpA=", got)
	}

	if err := p.Verify(pkcs7Verify); err != nil {
		t.Fatalf("signature with the embedded certificate: %v", err)
	}
	p7, err := pkcs7.Parse(p.Signature)
	if err != nil {
		t.Fatal(err)
	}
	signer := p7.GetOnlySigner()
	if signer == nil || signer.Subject.CommonName != "mecas2" {
		t.Fatalf("embedded signer %v", signer)
	}

	// The README: the MDN is not signed by cert_mecas2_public.pem.
	blk, _ := pem.Decode(interop.Read(t, "as2/cert_mecas2_public.pem"))
	if blk == nil {
		t.Fatal("cert_mecas2_public.pem: no PEM block")
	}
	mecas2, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	onlyMecas2 := func(sig, content []byte) error {
		p7, err := pkcs7.Parse(sig)
		if err != nil {
			return err
		}
		if s := p7.GetOnlySigner(); s == nil || !s.Equal(mecas2) {
			return errors.New("signer certificate not found")
		}
		p7.Content = content
		return p7.Verify()
	}
	if err := p.Verify(onlyMecas2); !errors.Is(err, ErrSignature) {
		t.Fatalf("verification against cert_mecas2_public.pem: %v, want failure", err)
	}

	// One changed byte in the signed part breaks the signature.
	tampered := bytes.Replace(raw, []byte("; processed\r\n"), []byte("; Processed\r\n"), 1)
	if bytes.Equal(tampered, raw) {
		t.Fatal("tamper did not change the file")
	}
	tp, err := ParseMessage(tampered)
	if err != nil {
		t.Fatal(err)
	}
	if err := tp.Verify(pkcs7Verify); !errors.Is(err, ErrSignature) {
		t.Fatalf("tampered MDN verified: %v", err)
	}
}

// TestInteropUnsignedMDN parses mendelson's unsigned, LF-only MDN.
func TestInteropUnsignedMDN(t *testing.T) {
	raw := interop.Read(t, "as2/mecas2_unsigned.mdn")
	if bytes.Contains(raw, []byte("\r")) {
		t.Fatal("vector expected to be LF only")
	}
	p, err := ParseMessage(raw)
	if err != nil {
		t.Fatal(err)
	}
	r := p.Report
	if r.OriginalMessageID != "<20161230102316.10728.85252@imac.local>" ||
		r.Disposition != DispAuthenticationFailed ||
		r.Disposition.String() != "automatic-action/MDN-sent-automatically; processed/error: authentication-failed" ||
		r.ReportingUA != "mendelson opensource AS2" || r.OriginalRecipient != "mecas2" || r.FinalRecipient != "mecas2" ||
		r.MIC != "" || r.MICAlg != "" || r.MessageID != "" || r.AS2From != "" || r.AS2To != "" {
		t.Fatalf("report %+v", r)
	}
	if !strings.HasPrefix(r.HumanText, "Thank you for exchanging AS2 messages with mendelson opensource AS2.\n") ||
		!strings.HasSuffix(r.HumanText, "Issuer: CN=pyas2lib, O=Internet Widgits Pty Ltd, ST=Some-State, C=AU.") {
		t.Fatalf("human text %q", r.HumanText)
	}
	if p.Signed {
		t.Fatal("unsigned MDN reported as signed")
	}
	if err := p.Verify(pkcs7Verify); !errors.Is(err, ErrNotSigned) {
		t.Fatalf("Verify: %v", err)
	}
}
