package cms

import (
	"bytes"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/internal/interop"
	"github.com/edigateway/gateway/internal/testpki"
)

type certOpts struct {
	serial    int64
	noSKI     bool
	notBefore time.Time
	notAfter  time.Time
}

// newCert makes a self-signed certificate for key i.
func newCert(t testing.TB, cn string, keyIndex int, o certOpts) (*x509.Certificate, *rsa.PrivateKey) {
	t.Helper()
	if o.serial == 0 {
		o.serial = int64(1000 + keyIndex)
	}
	key := testpki.RSAKey(t, keyIndex)
	return testpki.SelfSigned(t, key, testpki.Cert{
		CommonName:   cn,
		Organization: []string{"gateway test"},
		Serial:       o.serial,
		NotBefore:    o.notBefore,
		NotAfter:     o.notAfter,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageEmailProtection},
		SubjectKeyID: !o.noSKI,
	}), key
}

// openssl runs the openssl CLI, skipping the test when it is not installed.
func openssl(t testing.TB, args ...string) ([]byte, error) {
	t.Helper()
	path, err := exec.LookPath("openssl")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("openssl CLI not installed (CI needs it for the openssl interop tests)")
		}
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
