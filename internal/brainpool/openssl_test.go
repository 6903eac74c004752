package brainpool

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// openssl runs the openssl command line tool (which has brainpoolP256r1);
// the cross-checks are skipped only where it is not installed.
func openssl(t *testing.T, dir string, args ...string) []byte {
	t.Helper()
	path, err := exec.LookPath("openssl")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("openssl not installed (CI needs it for the brainpool cross-checks)")
		}
		t.Skip("openssl not installed")
	}
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("openssl %v: %v: %s", args, err, stderr.Bytes())
	}
	return out
}

func opensslKey(t *testing.T, dir, name string) *PrivateKey {
	t.Helper()
	openssl(t, dir, "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:brainpoolP256r1", "-out", name)
	data, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	k, err := ParsePEMPrivateKey(data)
	if err != nil {
		t.Fatalf("parse openssl key: %v", err)
	}
	return k
}

func writePub(t *testing.T, dir, name string, k *PublicKey) {
	der, err := MarshalPKIXPublicKey(k)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600)
}

func TestOpenSSLSignatures(t *testing.T) {
	dir := t.TempDir()
	k := opensslKey(t, dir, "k.pem")
	msg := []byte("UNH+1+UTILMD:D:11A:UN:S2.1'")
	os.WriteFile(filepath.Join(dir, "msg"), msg, 0o600)
	sum := sha256.Sum256(msg)

	// openssl signs, we verify.
	sig := openssl(t, dir, "dgst", "-sha256", "-sign", "k.pem", "msg")
	if !VerifyASN1(k.PublicKey(), sum[:], sig) {
		t.Fatal("openssl signature does not verify with our code")
	}
	// we sign, openssl verifies (with our SPKI encoding of the public key).
	writePub(t, dir, "pub.pem", k.PublicKey())
	for i := 0; i < 5; i++ {
		ours, err := k.Sign(rand.Reader, sum[:], nil)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, "sig"), ours, 0o600)
		if out := openssl(t, dir, "dgst", "-sha256", "-verify", "pub.pem", "-signature", "sig", "msg"); !bytes.Contains(out, []byte("Verified OK")) {
			t.Fatalf("openssl: %s", out)
		}
	}
	// our PKCS #8 encoding is readable by openssl and gives the same key.
	p8, _ := MarshalPKCS8PrivateKey(k)
	os.WriteFile(filepath.Join(dir, "k2.pem"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8}), 0o600)
	a := openssl(t, dir, "pkey", "-in", "k.pem", "-pubout")
	b := openssl(t, dir, "pkey", "-in", "k2.pem", "-pubout")
	if !bytes.Equal(a, b) {
		t.Fatal("our PKCS #8 encoding gives openssl another key")
	}
}

func TestOpenSSLECDH(t *testing.T) {
	dir := t.TempDir()
	a := opensslKey(t, dir, "a.pem")
	for i := 0; i < 3; i++ {
		b, err := GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		writePub(t, dir, "b.pub", b.PublicKey())
		z := openssl(t, dir, "pkeyutl", "-derive", "-inkey", "a.pem", "-peerkey", "b.pub")
		ours, err := b.ECDH(a.PublicKey())
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(z, ours) {
			t.Fatalf("shared secret: openssl %x, ours %x", z, ours)
		}
	}
}

func TestOpenSSLCertificate(t *testing.T) {
	dir := t.TempDir()
	ca := opensslKey(t, dir, "ca.pem")
	openssl(t, dir, "req", "-new", "-x509", "-key", "ca.pem", "-subj", "/CN=BDEW test CA", "-days", "30", "-sha256", "-out", "ca.crt")
	leaf := opensslKey(t, dir, "leaf.pem")
	openssl(t, dir, "req", "-new", "-key", "leaf.pem", "-subj", "/CN=9900000000001.sig", "-out", "leaf.csr")
	openssl(t, dir, "x509", "-req", "-in", "leaf.csr", "-CA", "ca.crt", "-CAkey", "ca.pem", "-CAcreateserial", "-days", "30", "-sha256", "-out", "leaf.crt")
	load := func(name string) []byte {
		data, _ := os.ReadFile(filepath.Join(dir, name))
		b, _ := pem.Decode(data)
		if b == nil {
			t.Fatalf("%s: no PEM", name)
		}
		return b.Bytes
	}
	caDER, leafDER := load("ca.crt"), load("leaf.crt")
	caCert, err := ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	leafCert, err := ParseCertificate(leafDER)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(leafCert.Raw, leafDER) || leafCert.Subject.CommonName != "9900000000001.sig" {
		t.Fatalf("parsed certificate differs: %q", leafCert.Subject.CommonName)
	}
	if !leafCert.PublicKey.(*PublicKey).Equal(leaf.PublicKey()) {
		t.Fatal("certificate key is not the leaf key")
	}
	if err := CheckSignatureFrom(leafCert, caCert); err != nil {
		t.Fatal(err)
	}
	if err := CheckSignatureFrom(caCert, leafCert); err == nil {
		t.Fatal("leaf accepted as the CA's issuer")
	}
	if len(leafCert.SubjectKeyId) == 0 {
		t.Log("no SKI extension in the openssl leaf")
	}
	_ = ca
}
