package cms

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/base64"
	"encoding/pem"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"gateway/internal/interop"
)

// testKeys are generated once per test binary and index: RSA key
// generation is the slow part of these tests.
var (
	testKeysMu sync.Mutex
	testKeys   = map[int]*rsa.PrivateKey{}
)

func rsaKey(t testing.TB, i int) *rsa.PrivateKey {
	t.Helper()
	testKeysMu.Lock()
	defer testKeysMu.Unlock()
	if k, ok := testKeys[i]; ok {
		return k
	}
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	testKeys[i] = k
	return k
}

type certOpts struct {
	serial    int64
	noSKI     bool
	notBefore time.Time
	notAfter  time.Time
}

// newCert makes a self-signed certificate for key i.
func newCert(t testing.TB, cn string, keyIndex int, o certOpts) (*x509.Certificate, *rsa.PrivateKey) {
	t.Helper()
	key := rsaKey(t, keyIndex)
	if o.serial == 0 {
		o.serial = int64(1000 + keyIndex)
	}
	if o.notBefore.IsZero() {
		o.notBefore = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	if o.notAfter.IsZero() {
		o.notAfter = time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(o.serial),
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"gateway test"}},
		NotBefore:    o.notBefore,
		NotAfter:     o.notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageEmailProtection},
	}
	if !o.noSKI {
		pub, _ := asn1.Marshal(key.PublicKey)
		sum := sha1.Sum(pub)
		tmpl.SubjectKeyId = sum[:]
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// writePEM writes cert and key PEM files into dir and returns their paths.
func writePEM(t testing.TB, dir, name string, cert *x509.Certificate, key *rsa.PrivateKey) (string, string) {
	t.Helper()
	cp := filepath.Join(dir, name+".crt")
	kp := filepath.Join(dir, name+".key")
	if err := os.WriteFile(cp, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	k8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kp, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: k8}), 0o600); err != nil {
		t.Fatal(err)
	}
	return cp, kp
}

// openssl runs the openssl CLI, skipping the test when it is not installed.
func openssl(t testing.TB, args ...string) ([]byte, error) {
	t.Helper()
	path, err := exec.LookPath("openssl")
	if err != nil {
		t.Skip("openssl CLI not found; skipping openssl interop test")
	}
	cmd := exec.Command(path, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, &opensslError{err: err, stderr: stderr.String()}
	}
	return out, nil
}

type opensslError struct {
	err    error
	stderr string
}

func (e *opensslError) Error() string { return e.err.Error() + ": " + e.stderr }

// captureBody returns the body of an AS2 capture: HTTP header lines (LF)
// then an empty line ("\n" or "\r\n").
func captureBody(t testing.TB, raw []byte) []byte {
	t.Helper()
	for off := 0; off < len(raw); {
		i := bytes.IndexByte(raw[off:], '\n')
		if i < 0 {
			break
		}
		line := raw[off : off+i]
		off += i + 1
		if len(line) == 0 || (len(line) == 1 && line[0] == '\r') {
			return raw[off:]
		}
	}
	t.Fatal("capture has no header/body separator")
	return nil
}

// signaturePart extracts and decodes the base64 application/pkcs7-signature
// part of a multipart/signed capture body.
func signaturePart(t testing.TB, body []byte) []byte {
	t.Helper()
	i := bytes.Index(body, []byte("Content-Type: application/pkcs7-signature"))
	if i < 0 {
		t.Fatal("no signature part")
	}
	rest := body[i:]
	j := bytes.Index(rest, []byte("\r\n\r\n"))
	if j < 0 {
		t.Fatal("no signature part body")
	}
	rest = rest[j+4:]
	k := bytes.Index(rest, []byte("\r\n--"))
	sig, err := base64.StdEncoding.DecodeString(strings.NewReplacer("\r", "", "\n", "").Replace(string(rest[:k])))
	if err != nil {
		t.Fatal(err)
	}
	return sig
}

// firstPart returns the first part of a CRLF multipart body as sent.
func firstPart(t testing.TB, body []byte, boundary string) []byte {
	t.Helper()
	d := []byte("--" + boundary + "\r\n")
	i := bytes.Index(body, d)
	if i < 0 {
		t.Fatal("no first boundary")
	}
	rest := body[i+len(d):]
	j := bytes.Index(rest, []byte("\r\n--"+boundary))
	if j < 0 {
		t.Fatal("no second boundary")
	}
	return rest[:j]
}

func pyas2libKeyPair(t testing.TB) KeyPair {
	t.Helper()
	kp, err := ParseKeyPair(interop.Read(t, "as2/cert_test_public.pem"), interop.Read(t, "as2/cert_test_key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

func mendelsonCert(t testing.TB) *x509.Certificate {
	t.Helper()
	certs, err := ParseCertificates(interop.Read(t, "as2/cert_mecas2_public.pem"))
	if err != nil {
		t.Fatal(err)
	}
	return certs[0]
}
