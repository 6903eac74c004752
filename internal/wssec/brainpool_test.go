package wssec

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edigateway/gateway/internal/brainpool"
	"github.com/edigateway/gateway/internal/brainpool/bptest"
)

// BDEW AS4: ECDSA-SHA256 on brainpoolP256r1 with an X509PKIPathv1 token, signed
// by an openssl-built certificate, verified by us and refused when tampered.
func TestBrainpoolSignVerifyPKIPath(t *testing.T) {
	pki := bptest.New(t)
	sig := pki.Issue("sig", "/O=BDEW test/CN=9900000000001.sig", "digitalSignature")
	atts := testAttachments()
	doc := mustParse(t, []byte(userMessage))
	if err := Sign(doc, atts, SignOptions{Signer: sig.Key, Certificate: sig.Cert, PKIPath: true, Chain: []*x509.Certificate{pki.CA.Cert}}); err != nil {
		t.Fatal(err)
	}
	raw, _ := doc.WriteToBytes()
	s := string(raw)
	if !strings.Contains(s, `ValueType="`+ValueTypeX509PKIPathv1+`"`) || !strings.Contains(s, AlgECDSASHA256) {
		t.Fatalf("no PKIPath token or ecdsa-sha256: %s", s)
	}
	res, err := Verify(mustParse(t, raw), atts, VerifyOptions{Trusted: []*x509.Certificate{sig.Cert}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Signer != sig.Cert || res.SignatureMethod != AlgECDSASHA256 {
		t.Fatalf("signer %v method %s", res.Signer.Subject, res.SignatureMethod)
	}
	if res.TokenType != ValueTypeX509PKIPathv1 {
		t.Fatalf("TokenType %q, want X509PKIPathv1", res.TokenType)
	}
	// The same key as an X509v3 token is reported as such.
	doc = mustParse(t, []byte(userMessage))
	if err := Sign(doc, atts, SignOptions{Signer: sig.Key, Certificate: sig.Cert}); err != nil {
		t.Fatal(err)
	}
	raw3, _ := doc.WriteToBytes()
	res3, err := Verify(mustParse(t, raw3), atts, VerifyOptions{Trusted: []*x509.Certificate{sig.Cert}})
	if err != nil {
		t.Fatal(err)
	}
	if res3.TokenType != ValueTypeX509v3 {
		t.Fatalf("X509v3 token: TokenType %q", res3.TokenType)
	}
	// The CA in the path is not a signer.
	if _, err := Verify(mustParse(t, raw), atts, VerifyOptions{Trusted: []*x509.Certificate{pki.CA.Cert}}); Code(err) != CodeFailedAuthentication {
		t.Fatalf("CA of the path accepted as signer: %v", err)
	}
	// Tampered attachment and tampered SignatureValue.
	bad := testAttachments()
	bad[0].Body = append(bytes.Clone(bad[0].Body), 'x')
	if _, err := Verify(mustParse(t, raw), bad, VerifyOptions{Trusted: []*x509.Certificate{sig.Cert}}); Code(err) != CodeFailedAuthentication {
		t.Fatalf("tampered attachment: %v", err)
	}
	i := strings.Index(s, "<ds:SignatureValue>") + len("<ds:SignatureValue>")
	v, _ := base64.StdEncoding.DecodeString(s[i : i+88])
	v[10] ^= 1
	tampered := s[:i] + base64.StdEncoding.EncodeToString(v) + s[i+88:]
	if _, err := Verify(mustParse(t, []byte(tampered)), atts, VerifyOptions{Trusted: []*x509.Certificate{sig.Cert}}); Code(err) != CodeFailedAuthentication {
		t.Fatalf("tampered signature value: %v", err)
	}
	// A broken PKIPath token is refused, not a crash.
	j := strings.Index(s, `ValueType="`+ValueTypeX509PKIPathv1+`" wsu:Id=`)
	if j < 0 {
		j = strings.Index(s, "<wsse:BinarySecurityToken")
	}
	k := strings.Index(s[j:], ">") + j + 1
	broken := s[:k] + "MAA=" + s[k+strings.Index(s[k:], "<"):]
	if _, err := Verify(mustParse(t, []byte(broken)), atts, VerifyOptions{Trusted: []*x509.Certificate{sig.Cert}}); Code(err) != CodeFailedAuthentication {
		t.Fatalf("empty PKIPath: %v", err)
	}
}

func TestPKIPathEncoding(t *testing.T) {
	pki := bptest.New(t)
	leaf := pki.Issue("leaf", "/CN=leaf", "digitalSignature")
	der, err := pkiPath(leaf.Cert, []*x509.Certificate{pki.CA.Cert})
	if err != nil {
		t.Fatal(err)
	}
	certs, err := parsePKIPath(der)
	if err != nil || len(certs) != 2 || !bytes.Equal(certs[0], pki.CA.Cert.Raw) || !bytes.Equal(certs[1], leaf.Cert.Raw) {
		t.Fatalf("PKIPath order: %v", err)
	}
	// openssl reads the chain certificates back out of the PkiPath.
	c, err := brainpool.ParseCertificate(certs[1])
	if err != nil || c.Subject.CommonName != "leaf" {
		t.Fatalf("%v", err)
	}
}

// FuzzPKIPath: arbitrary X509PKIPathv1 token bytes never panic.
func FuzzPKIPath(f *testing.F) {
	f.Add([]byte{0x30, 0x00})
	f.Add([]byte{0x30, 0x03, 0x30, 0x01, 0x00})
	f.Add([]byte{0x30, 0x82, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		certs, err := parsePKIPath(b)
		if err == nil && (len(certs) == 0 || len(certs) > maxPKIPathCerts) {
			t.Fatalf("%d certificates accepted", len(certs))
		}
		matchPKIPath(base64.StdEncoding.EncodeToString(b), nil)
	})
}

// xmlsec1 (libxmlsec1 with its OpenSSL backend: not our code) verifies a
// brainpoolP256r1 ECDSA-SHA256 signature we made over eb:Messaging and the Body.
func TestBrainpoolSignatureVerifiedByXMLSec1(t *testing.T) {
	path, err := exec.LookPath("xmlsec1")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("xmlsec1 not installed (apt-get install xmlsec1)")
		}
		t.Skip("xmlsec1 not installed")
	}
	pki := bptest.New(t)
	sig := pki.Issue("sig", "/O=BDEW test/CN=9900000000001.sig", "digitalSignature")
	doc := mustParse(t, []byte(userMessage))
	if err := Sign(doc, nil, SignOptions{Signer: sig.Key, Certificate: sig.Cert}); err != nil {
		t.Fatal(err)
	}
	raw, _ := doc.WriteToBytes()
	if err := XMLSec1Verify(path, raw, sig.CertFile, "Messaging", "Body"); err != nil {
		t.Fatal(err)
	}
	tampered := bytes.Replace(raw, []byte("msg-1@gateway.test"), []byte("msg-2@gateway.test"), 1)
	if err := XMLSec1Verify(path, tampered, sig.CertFile, "Messaging", "Body"); err == nil {
		t.Fatal("xmlsec1 accepted a tampered message")
	}
}

// XMLSec1Verify runs xmlsec1 --verify on doc with the signer certificate,
// treating the Id attributes of the named elements as XML IDs.
func XMLSec1Verify(xmlsec1 string, doc []byte, certFile string, idElements ...string) error {
	dir, err := os.MkdirTemp("", "xmlsec1-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	f := filepath.Join(dir, "doc.xml")
	if err := os.WriteFile(f, doc, 0o600); err != nil {
		return err
	}
	args := []string{"--verify", "--pubkey-cert-pem", certFile}
	for _, e := range idElements {
		args = append(args, "--id-attr:Id", e)
	}
	out, err := exec.Command(xmlsec1, append(args, f)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("xmlsec1: %v: %s", err, out)
	}
	return nil
}
