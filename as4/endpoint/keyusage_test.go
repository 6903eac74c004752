package endpoint_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/as4/client"
	"github.com/edigateway/gateway/as4/endpoint"
	"github.com/edigateway/gateway/internal/xmlenc"
	"github.com/edigateway/gateway/receipt"
)

// TestBDEWDecryptionKeyNeedsKeyAgreement: a message whose ECDH-ES key
// agreement names our signing-only certificate (keyUsage
// digitalSignature, nonRepudiation) is refused with EBMS:0103 naming the
// key usage (it was decrypted and delivered); the encryption certificate
// (keyAgreement) is accepted.
func TestBDEWDecryptionKeyNeedsKeyAgreement(t *testing.T) {
	s := newBDEW(t)
	ctx := context.Background()
	cl := *s.client
	enc := *cl.Encryption
	enc.Recipient = s.gw.Signing.Cert
	cl.Encryption = &enc
	_, _, err := cl.Send(ctx, s.url, s.message("to-signing-key@9900000000002"))
	var se *receipt.SignalError
	if !errors.As(err, &se) || se.Errors[0].Code != as4.CodePolicyNoncompliance || !strings.Contains(se.Errors[0].Detail, "key usage does not include keyAgreement") {
		t.Fatalf("encrypted to our signing certificate: %v", err)
	}
	if _, _, err := s.client.Send(ctx, s.url, s.message("to-encryption-key@9900000000002")); err != nil {
		t.Fatalf("encrypted to our encryption certificate: %v", err)
	}
	if n := s.calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

// TestRSADecryptionKeyNeedsKeyEncipherment: RSA-OAEP key transport to a
// certificate of ours whose key usage is digitalSignature only is refused
// with EBMS:0103 (it was decrypted and delivered).
func TestRSADecryptionKeyNeedsKeyEncipherment(t *testing.T) {
	t.Parallel()
	k := getKeys(t)
	signOnly := rsaPairWithUsage(t, "gateway signing only", x509.KeyUsageDigitalSignature)
	h := newHarness(t, harnessOptions{keys: []xmlenc.KeyPair{k.gatewayRSA, signOnly}})
	c := rsaClient(k)
	c.Encryption = &client.Encryption{Recipient: signOnly.Cert}
	_, resp, err := c.Send(context.Background(), h.url, testMessage("rsa-sign-only@acme.test"))
	if err == nil {
		t.Fatal("accepted")
	}
	refusal(t, h, resp, as4.CodePolicyNoncompliance, "key usage does not include keyEncipherment")
	if _, _, err := rsaClient(k).Send(context.Background(), h.url, testMessage("rsa-key-encipherment@acme.test")); err != nil {
		t.Fatalf("encrypted to the keyEncipherment certificate: %v", err)
	}
	if h.handler.count() != 1 {
		t.Fatalf("handler ran %d times, want 1", h.handler.count())
	}
}

// TestSignalsBeforeThePartnerIsKnownAreSignedByASigningKey: with a
// key-agreement-only key listed first, an error signal raised before the
// sender is known (envelope not XML, unknown eb:From) is signed by the
// first key whose certificate may sign (it was signed with the key
// agreement key).
func TestSignalsBeforeThePartnerIsKnownAreSignedByASigningKey(t *testing.T) {
	s := newBDEWWith(t, "", func(c *endpoint.Config) {
		c.Keys = []xmlenc.KeyPair{c.Keys[2], c.Keys[1]} // brainpool encryption (keyAgreement), then signing
	})
	unknown, err := s.client.Build(func() *client.Message {
		m := s.message("unknown@9900000000009")
		m.From.Value = "9900000000009"
		return m
	}())
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		contentType string
		body        []byte
		code        string
	}{
		"envelope not XML": {"application/soap+xml", []byte("<S:Envelope"), as4.CodeInvalidHeader},
		"unknown eb:From":  {unknown.ContentType, unknown.Body, as4.CodeProcessingModeMismatch},
	} {
		t.Run(name, func(t *testing.T) {
			hr, err := http.Post(s.url, c.contentType, bytes.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(hr.Body)
			hr.Body.Close()
			_, err = client.VerifyReceipt(hr.Header.Get("Content-Type"), body, client.ReceiptCheck{Trusted: []*x509.Certificate{s.gw.Signing.Cert}})
			var se *receipt.SignalError
			if !errors.As(err, &se) || se.Errors[0].Code != c.code {
				t.Fatalf("answer not a %s signal signed by our signing key: %v\n%s", c.code, err, body)
			}
		})
	}
}

// rsaPairWithUsage is a self-signed RSA certificate and key with the given
// key usage.
func rsaPairWithUsage(t *testing.T, cn string, usage x509.KeyUsage) xmlenc.KeyPair {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(201), Subject: pkix.Name{CommonName: cn, Organization: []string{"gateway tests"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), KeyUsage: usage}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return xmlenc.KeyPair{Cert: cert, Key: key}
}
