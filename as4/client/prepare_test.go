package client_test

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/as4/client"
)

// TestPrepareIsBuild: Prepare (streamed, spool file) writes the very bytes
// Build writes in memory for the same message, clock and randomness:
// several payloads, gzipped from a file, uncompressed from a file, and from
// Data; it reports the payload bytes it reads up to their total, the body
// reads the same on every Post, and nothing is left in SpoolDir.
func TestPrepareIsBuild(t *testing.T) {
	t.Parallel()
	priv, cert := ed25519Cert(t, "sender")
	dir := t.TempDir()
	content := make([]byte, 3<<20+17)
	rng := mrand.NewChaCha8([32]byte{7})
	rng.Read(content[:1<<20]) // a random first MiB, then text
	for i := 1 << 20; i < len(content); i++ {
		content[i] = "EDIFACT UNH+1 "[i%14]
	}
	file := filepath.Join(dir, "catalogue.bin")
	os.WriteFile(file, content, 0o600)
	open := func() (io.ReadCloser, error) { return os.Open(file) }
	msg := func() *client.Message {
		return &client.Message{MessageID: "prepare-1@test", From: as4.PartyID{Value: "urn:a"}, To: as4.PartyID{Value: "urn:b"},
			Service: "urn:s", Action: "A", Payloads: []client.Payload{
				{Open: open, Size: int64(len(content)), Compress: true, MimeType: "application/octet-stream"},
				{Open: open, Size: int64(len(content)), MimeType: "application/octet-stream"},
				{Data: []byte("<Invoice>small</Invoice>"), MimeType: "application/xml", Compress: true},
			}}
	}
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	newClient := func() *client.Client {
		return &client.Client{Signer: crypto.Signer(priv), Certificate: cert, Now: func() time.Time { return now },
			Rand: mrand.NewChaCha8([32]byte{1}), SpoolDir: filepath.Join(dir, "spool")}
	}
	os.Mkdir(filepath.Join(dir, "spool"), 0o700)
	built, err := newClient().Build(msg())
	if err != nil {
		t.Fatal(err)
	}
	c := newClient()
	var done, total int64
	c.Progress = func(d, tot int64) { done, total = d, tot }
	prepared, err := c.Prepare(msg())
	if err != nil {
		t.Fatal(err)
	}
	if prepared.Body != nil || prepared.Size() != int64(len(built.Body)) || prepared.ContentType != built.ContentType {
		t.Fatalf("prepared %d bytes (%s), built %d (%s)", prepared.Size(), prepared.ContentType, len(built.Body), built.ContentType)
	}
	want := int64(3*len(content) + 24) // gzipped: read once; plain: twice
	if done != want || total != want {
		t.Errorf("progress %d of %d, want %d", done, total, want)
	}
	for i := 0; i < 2; i++ {
		b, err := io.ReadAll(prepared.BodyReader())
		if err != nil || !bytes.Equal(b, built.Body) {
			t.Fatalf("read %d of the prepared body differs from the built one (%v)", i, err)
		}
	}
	if err := prepared.Close(); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(filepath.Join(dir, "spool")); len(left) != 0 {
		t.Errorf("SpoolDir keeps %d files", len(left))
	}
}

// ed25519Cert is a new Ed25519 key and its self-signed certificate for
// common name cn, valid for the hour around now.
func ed25519Cert(t testing.TB, cn string) (ed25519.PrivateKey, *x509.Certificate) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return priv, cert
}
