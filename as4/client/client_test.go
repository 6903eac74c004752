package client_test

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/beevik/etree"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/as4/client"
	"github.com/edigateway/gateway/internal/interop"
	"github.com/edigateway/gateway/internal/trust"
	"github.com/edigateway/gateway/internal/wssec"
	"github.com/edigateway/gateway/receipt"
)

// phase4Receipt returns the Content-Type and body of a recorded phase4
// receipt, and the certificate of its BinarySecurityToken.
func phase4Receipt(t *testing.T, name string) (string, []byte, *x509.Certificate) {
	t.Helper()
	raw := interop.Read(t, "as4/"+name)
	ct, body := "application/soap+xml", raw
	if name == "helger.as4in" {
		// HTTP response headers (LF), an empty line, the de-chunked body.
		i := bytes.Index(raw, []byte("\n\n"))
		if i < 0 {
			t.Fatal("no end of headers")
		}
		for _, line := range strings.Split(string(raw[:i]), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(k, "Content-Type") {
				ct = strings.TrimSpace(v)
			}
		}
		body = raw[i+2:]
	}
	doc := etree.NewDocument()
	if err := doc.ReadFromBytes(body); err != nil {
		t.Fatal(err)
	}
	bst := doc.FindElement("//BinarySecurityToken")
	if bst == nil {
		t.Fatal("no BinarySecurityToken")
	}
	der, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(bst.Text()), ""))
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return ct, body, cert
}

// TestInteropPhase4Receipts: both recorded phase4 receipts verify with our
// receipt verifier, refer to the message they answer and acknowledge their
// three references; a changed digest, another message id, another signer
// and a changed byte are refused.
func TestInteropPhase4Receipts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file, ref, cn string
		// at is the receipt's eb:Timestamp: the signers' certificates are
		// judged at the capture date (helger's expired on 2023-05-14).
		at time.Time
	}{
		{"helger.as4in", "3b3775c9-e88d-47f9-be5a-8e045ca2bc07@phase4", "POP000306", time.Date(2022, 3, 7, 17, 36, 50, 0, time.UTC)},
		{"TestReceipt12.xml", "035e0a83-6dc5-427b-bcee-483475c65153@phase4", "PDE000576", time.Date(2025, 12, 5, 14, 3, 40, 0, time.UTC)},
	} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			ct, body, cert := phase4Receipt(t, tc.file)
			if cert.Subject.CommonName != tc.cn {
				t.Fatalf("BST signer %s", cert.Subject)
			}
			at := func() time.Time { return tc.at }
			chk := client.ReceiptCheck{Trusted: []*x509.Certificate{cert}, MessageID: tc.ref, Now: at}
			r, err := client.VerifyReceipt(ct, body, chk)
			if err != nil {
				t.Fatalf("VerifyReceipt: %v", err)
			}
			if len(r.References) != 3 || !strings.HasPrefix(r.References[2].URI, "cid:") {
				t.Fatalf("references %+v", r.References)
			}
			// What our sender would have signed: the three references.
			chk.References = append([]receipt.Reference(nil), r.References...)
			if _, err := client.VerifyReceipt(ct, body, chk); err != nil {
				t.Fatalf("covering its own references: %v", err)
			}

			bad := chk
			bad.References = append([]receipt.Reference(nil), r.References...)
			d, _ := base64.StdEncoding.DecodeString(bad.References[2].DigestValue)
			d[0] ^= 1
			bad.References[2].DigestValue = base64.StdEncoding.EncodeToString(d)
			if got, err := client.VerifyReceipt(ct, body, bad); as4.CodeOf(err) != as4.CodeInvalidReceipt || !errors.Is(err, client.ErrNotCovered) ||
				got == nil || got.MessageID != r.MessageID {
				t.Errorf("changed digest: %v", err)
			}
			bad = chk
			bad.MessageID = "other@phase4"
			if _, err := client.VerifyReceipt(ct, body, bad); as4.CodeOf(err) != as4.CodeInvalidReceipt || errors.Is(err, client.ErrNotCovered) {
				t.Errorf("other message id: %v", err)
			}
			bad = chk
			bad.Trusted = []*x509.Certificate{otherCert(t)}
			if _, err := client.VerifyReceipt(ct, body, bad); !errors.Is(err, wssec.ErrFailedAuthentication) {
				t.Errorf("other signer: %v", err)
			}
			tampered := bytes.Replace(body, []byte(tc.ref), []byte(strings.Replace(tc.ref, "@", "X", 1)), 1)
			if _, err := client.VerifyReceipt(ct, tampered, client.ReceiptCheck{Trusted: chk.Trusted, Now: at}); !errors.Is(err, wssec.ErrFailedAuthentication) {
				t.Errorf("tampered receipt: %v", err)
			}
			// After the signer's certificate expired, or before it was
			// issued, the same receipt is refused with EBMS:0101 naming it.
			for _, late := range []struct {
				at   time.Time
				want error
			}{{cert.NotAfter.Add(time.Hour), trust.ErrExpired}, {cert.NotBefore.Add(-time.Hour), trust.ErrNotYetValid}} {
				chk := chk
				chk.Now = func() time.Time { return late.at }
				_, err := client.VerifyReceipt(ct, body, chk)
				if !errors.Is(err, late.want) || as4.CodeOf(err) != as4.CodeFailedAuthentication || !strings.Contains(err.Error(), tc.cn) ||
					!strings.Contains(err.Error(), cert.NotAfter.UTC().Format(time.RFC3339)) {
					t.Errorf("at %s: got %v, want EBMS:0101 %v naming %s and its dates", late.at, err, late.want, tc.cn)
				}
			}
		})
	}
}

func otherCert(t *testing.T) *x509.Certificate {
	_, c := ed25519Cert(t, "other")
	return c
}

// TestBuildRefusesIncompleteInput covers the sender's own checks.
func TestBuildRefusesIncompleteInput(t *testing.T) {
	t.Parallel()
	priv, cert := ed25519Cert(t, "sender")
	ok := &client.Message{From: as4.PartyID{Value: "urn:a"}, To: as4.PartyID{Value: "urn:b"}, Service: "urn:s", Action: "A",
		Payloads: []client.Payload{{Data: []byte("x")}}}
	if _, err := (&client.Client{}).Build(ok); err == nil {
		t.Error("built without a signer")
	}
	c := &client.Client{Signer: crypto.Signer(priv), Certificate: cert}
	bad := *ok
	bad.Action = ""
	if _, err := c.Build(&bad); err == nil {
		t.Error("built without an action")
	}
	c.Encryption = &client.Encryption{}
	if _, err := c.Build(ok); err == nil {
		t.Error("built with encryption but no recipient")
	}
	c.Encryption = nil
	out, err := c.Build(ok)
	if err != nil {
		t.Fatal(err)
	}
	// The built message reads back as an AS4 message with the properties
	// the sender declared, signed over Messaging, Body and the attachment.
	env, err := as4.ReadMessage(out.ContentType, bytes.NewReader(out.Body), as4.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	mel, err := env.Messaging()
	if err != nil {
		t.Fatal(err)
	}
	m, err := as4.ParseMessaging(mel)
	if err != nil {
		t.Fatal(err)
	}
	um := m.UserMessage
	if um.MessageInfo.MessageID != out.MessageID || !strings.HasSuffix(out.MessageID, "@gateway") ||
		um.From.Role != client.RoleInitiator || um.CollaborationInfo.ConversationID != out.MessageID ||
		len(um.PayloadInfo) != 1 || um.PayloadInfo[0].MimeType != "application/octet-stream" || um.PayloadInfo[0].CompressionType != "" {
		t.Errorf("user message %+v", um)
	}
	if len(out.References) != 3 || out.References[2].URI != um.PayloadInfo[0].Href {
		t.Errorf("references %+v", out.References)
	}
	atts := []wssec.Attachment{{ContentID: env.Attachments[0].ContentID, Header: env.Attachments[0].Header, Open: env.Attachments[0].Content}}
	if _, err := wssec.Verify(env.Doc, atts, wssec.VerifyOptions{Trusted: []*x509.Certificate{cert}}); err != nil {
		t.Errorf("our signature: %v", err)
	}
	rc, err := env.Attachments[0].Open()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if b, _ := io.ReadAll(rc); !bytes.Equal(b, []byte("x")) {
		t.Error("attachment body")
	}
}
