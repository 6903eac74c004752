package xmlenc

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"mime/multipart"
	"strings"
	"testing"
	"time"

	"github.com/beevik/etree"

	"github.com/edigateway/gateway/internal/interop"
)

const holodeckBoundary = "MIMEBoundary_416ba07b9ac392cc88fdb1c2ed23ba5e2e6d64fdf13325f1"

// splitSwA parses a multipart/related body (parts in CTE binary) into the
// SOAP envelope and the attachments.
func splitSwA(t testing.TB, body []byte, boundary string) (*etree.Document, []Attachment) {
	t.Helper()
	mr := multipart.NewReader(bytes.NewReader(body), boundary)
	var doc *etree.Document
	var atts []Attachment
	for {
		p, err := mr.NextRawPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("multipart: %v", err)
		}
		b, err := io.ReadAll(p)
		if err != nil {
			t.Fatalf("multipart body: %v", err)
		}
		if doc == nil {
			doc = etree.NewDocument()
			if err := doc.ReadFromBytes(b); err != nil {
				t.Fatalf("SOAP part: %v", err)
			}
			continue
		}
		atts = append(atts, Attachment{ContentID: p.Header.Get("Content-ID"), Header: p.Header, Body: b})
	}
	if doc == nil {
		t.Fatal("no SOAP part")
	}
	return doc, atts
}

func loadKeyPair(t testing.TB, certPEM, keyPEM []byte) KeyPair {
	t.Helper()
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		t.Fatal("PEM decode failed")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	key, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return KeyPair{Cert: cert, Key: key}
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func holodeckMessage(t testing.TB) (*etree.Document, []Attachment) {
	return splitSwA(t, interop.Read(t, "as4/as4-encrypted-signed-issuerserial.as4"), holodeckBoundary)
}

func accessPointB(t testing.TB) KeyPair {
	return loadKeyPair(t, interop.Read(t, "as4/AccessPointB_cert.pem"), interop.Read(t, "as4/AccessPointB_key.pem"))
}

func TestInteropHolodeckDecrypt(t *testing.T) {
	doc, atts := holodeckMessage(t)
	if len(atts) != 2 || len(atts[0].Body) != 296413 || len(atts[1].Body) != 192 {
		t.Fatalf("unexpected attachments: %d", len(atts))
	}
	res, err := Decrypt(doc, atts, []KeyPair{accessPointB(t)}, Options{
		RequireEncryptedAttachments: true,
		AllowedAlgorithms:           []string{AlgRSAOAEPMGF1P, AlgSHA256, AlgMGF1SHA1, AlgAES128GCM},
	})
	if err != nil {
		t.Fatalf("Decrypt: %v", err)
	}
	want := []struct {
		cid        string
		n          int
		sum, unzip string
		unzipLen   int
	}{
		{"b545c3a0-e57f-46aa-862f-381eb4b7009-291596031@CLT-SMOREELS.mshome.net", 296385,
			"f4b7702c70321d016469efd9b2584a4d069681864fe60d2cbf7828fe101bbfbe",
			"060364613d88080a698ed6720d1a2288a30fdff223b4fb0cca280d3c3c67e93f", 296454},
		{"b545c3a0-e57f-46aa-862f-381eb4b7009-1650194442@CLT-SMOREELS.mshome.net", 164,
			"70e06fd5cf42545c39d1aee1f1cd1d6c8956964b56abd0abd1b3e2a6d67fc147",
			"df3d563a69eef2cc166afde17715eb803399df573737be357f15a64c37995170", 206},
	}
	for i, w := range want {
		a := res.Attachments[i]
		if normCID(a.ContentID) != w.cid {
			t.Fatalf("attachment %d Content-ID %q", i, a.ContentID)
		}
		if len(a.Body) != w.n || sha256Hex(a.Body) != w.sum {
			t.Errorf("attachment %d: %d bytes sha256 %s", i, len(a.Body), sha256Hex(a.Body))
		}
		if ct := a.Header.Get("Content-Type"); ct != "application/gzip" {
			t.Errorf("attachment %d Content-Type %q, want the EncryptedData MimeType", i, ct)
		}
		zr, err := gzip.NewReader(bytes.NewReader(a.Body))
		if err != nil {
			t.Fatal(err)
		}
		plain, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		if len(plain) != w.unzipLen || sha256Hex(plain) != w.unzip {
			t.Errorf("attachment %d gunzip: %d bytes sha256 %s", i, len(plain), sha256Hex(plain))
		}
		if !res.AttachmentEncrypted("<" + w.cid + ">") {
			t.Errorf("attachment %d not reported encrypted", i)
		}
	}
	// The input attachments are untouched.
	if len(atts[0].Body) != 296413 {
		t.Error("input attachment modified")
	}
	if len(res.Keys) != 1 {
		t.Fatalf("keys used: %d", len(res.Keys))
	}
	k := res.Keys[0]
	if k.Algorithm != AlgRSAOAEPMGF1P || k.DigestMethod != AlgSHA256 || k.MGF != AlgMGF1SHA1 ||
		k.Reference != RefIssuerSerial || k.ID != "EK-501d4b2b-3eb6fa47-3710-465d-96b6-75176b467e6f" ||
		k.Cert.Subject.CommonName != "AccessPointB" {
		t.Errorf("used key = %+v", k)
	}
	if len(res.Parts) != 2 {
		t.Fatalf("parts: %d", len(res.Parts))
	}
	for _, p := range res.Parts {
		if p.Type != TypeAttachmentContentOnly || p.Algorithm != AlgAES128GCM || p.MimeType != "application/gzip" || p.KeyID != k.ID {
			t.Errorf("part = %+v", p)
		}
	}
	// Bookkeeping removed, the signature and everything it covers left alone.
	sec := doc.FindElement("//Security")
	var kinds []string
	for _, c := range sec.ChildElements() {
		kinds = append(kinds, c.Tag)
	}
	if strings.Join(kinds, ",") != "Signature" {
		t.Errorf("Security children after decryption: %v", kinds)
	}
	if doc.FindElement("//Messaging") == nil || doc.FindElement("//Body") == nil {
		t.Error("Messaging or Body lost")
	}
}

func TestInteropHolodeckNegative(t *testing.T) {
	t.Run("wrong key", func(t *testing.T) {
		doc, atts := holodeckMessage(t)
		before, _ := doc.WriteToBytes()
		other := newRSAKeyPair(t, "AccessPointB", 5956198424360021448)
		_, err := Decrypt(doc, atts, []KeyPair{other}, Options{})
		if !errors.Is(err, ErrNoKey) || Code(err) != CodeFailedDecryption {
			t.Fatalf("err = %v, want ErrNoKey/EBMS:0102", err)
		}
		after, _ := doc.WriteToBytes()
		if !bytes.Equal(before, after) {
			t.Error("document changed by a failed Decrypt")
		}
	})
	t.Run("right certificate wrong private key", func(t *testing.T) {
		doc, atts := holodeckMessage(t)
		kp := accessPointB(t)
		kp.Key = newRSAKeyPair(t, "x", 1).Key
		_, err := Decrypt(doc, atts, []KeyPair{kp}, Options{})
		if !errors.Is(err, ErrDecrypt) || Code(err) != CodeFailedDecryption {
			t.Fatalf("err = %v, want ErrDecrypt/EBMS:0102", err)
		}
	})
	t.Run("flipped ciphertext byte", func(t *testing.T) {
		doc, atts := holodeckMessage(t)
		atts[1].Body = bytes.Clone(atts[1].Body)
		atts[1].Body[40] ^= 0x80
		_, err := Decrypt(doc, atts, []KeyPair{accessPointB(t)}, Options{})
		if !errors.Is(err, ErrDecrypt) || Code(err) != CodeFailedDecryption || !strings.Contains(err.Error(), "GCM") {
			t.Fatalf("err = %v, want GCM failure as ErrDecrypt/EBMS:0102", err)
		}
		if sec := doc.FindElement("//Security"); len(sec.ChildElements()) != 4 {
			t.Error("document changed by a failed Decrypt")
		}
	})
	t.Run("policy forbids mgf1p", func(t *testing.T) {
		doc, atts := holodeckMessage(t)
		_, err := Decrypt(doc, atts, []KeyPair{accessPointB(t)}, Options{AllowedAlgorithms: []string{AlgRSAOAEP, AlgSHA256, AlgMGF1SHA256, AlgAES128GCM}})
		if !errors.Is(err, ErrPolicy) || Code(err) != CodePolicyNoncompliance {
			t.Fatalf("err = %v, want ErrPolicy/EBMS:0103", err)
		}
	})
	t.Run("missing attachment", func(t *testing.T) {
		doc, atts := holodeckMessage(t)
		_, err := Decrypt(doc, atts[:1], []KeyPair{accessPointB(t)}, Options{})
		if !errors.Is(err, ErrMalformed) {
			t.Fatalf("err = %v, want ErrMalformed", err)
		}
	})
	t.Run("rollover", func(t *testing.T) {
		doc, atts := holodeckMessage(t)
		keys := []KeyPair{newRSAKeyPair(t, "AccessPointB-next", 7), accessPointB(t)}
		res, err := Decrypt(doc, atts, keys, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Keys[0].Cert != keys[1].Cert {
			t.Error("wrong key of the rollover pair used")
		}
	})
}

// newRSAKeyPair makes a self-signed RSA-2048 certificate with the given CN
// (as subject and issuer) and serial.
func newRSAKeyPair(t testing.TB, cn string, serial int64) KeyPair {
	t.Helper()
	key := testRSAKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:     time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC),
		KeyUsage:     x509.KeyUsageKeyEncipherment,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return KeyPair{Cert: cert, Key: key}
}

var rsaKeys []*rsa.PrivateKey

// testRSAKey hands out RSA-2048 keys from a small pool to keep tests fast.
func testRSAKey(t testing.TB) *rsa.PrivateKey {
	t.Helper()
	if len(rsaKeys) < 3 {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		rsaKeys = append(rsaKeys, k)
		return k
	}
	k := rsaKeys[0]
	rsaKeys = append(rsaKeys[1:], k)
	return k
}
