package client_test

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/as4/client"
	"github.com/edigateway/gateway/internal/wssec"
	"github.com/edigateway/gateway/receipt"
)

// FuzzVerifyReceipt feeds arbitrary answers to the receipt verifier: it
// must return an error or a receipt, never panic, and accept only what the
// trusted key signed.
func FuzzVerifyReceipt(f *testing.F) {
	priv, cert := ed25519Cert(f, "receiver")
	refs := []receipt.Reference{{URI: "cid:a@b", DigestMethod: wssec.AlgSHA256, DigestValue: "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=",
		Transforms: []receipt.Transform{{Algorithm: wssec.AlgAttachmentContentSignature}}}}
	um := &as4.UserMessage{MessageInfo: as4.MessageInfo{MessageID: "m@x"}}
	sig, err := receipt.BuildReceipt(um, refs, receipt.Options{})
	if err != nil {
		f.Fatal(err)
	}
	if err := wssec.Sign(sig.Doc, nil, wssec.SignOptions{Signer: priv, Certificate: cert}); err != nil {
		f.Fatal(err)
	}
	body, err := sig.Doc.WriteToBytes()
	if err != nil {
		f.Fatal(err)
	}
	f.Add("application/soap+xml", body)
	f.Add("multipart/related; boundary=b", []byte("--b\r\nContent-Type: application/soap+xml\r\n\r\n"+string(body)+"\r\n--b--\r\n"))
	// The recorded phase4 receipts, when the interop vectors are present.
	if dir := os.Getenv("GATEWAY_INTEROP_DIR"); dir != "" {
		if b, err := os.ReadFile(filepath.Join(dir, "as4", "TestReceipt12.xml")); err == nil {
			f.Add("application/soap+xml", b)
		}
	} else if b, err := os.ReadFile(filepath.Join("..", "..", "..", "shared", "interop", "as4", "TestReceipt12.xml")); err == nil {
		f.Add("application/soap+xml", b)
	}
	chk := client.ReceiptCheck{Trusted: []*x509.Certificate{cert}, MessageID: "m@x", References: refs}
	f.Fuzz(func(t *testing.T, contentType string, data []byte) {
		r, err := client.VerifyReceipt(contentType, data, chk)
		if err == nil && (r == nil || r.RefToMessageID != "m@x" || r.Covers(refs) != nil) {
			t.Fatalf("accepted a receipt that does not satisfy the check: %+v", r)
		}
	})
}
