package smime

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"os"
	"os/exec"
	"testing"

	"github.com/edigateway/gateway/internal/cms"
	"github.com/edigateway/gateway/internal/interop"
	"github.com/edigateway/gateway/internal/testpki"
)

// newKeyPair makes a self-signed certificate for test key i.
func newKeyPair(t testing.TB, cn string, i int) cms.KeyPair {
	t.Helper()
	key := testpki.RSAKey(t, i)
	return cms.KeyPair{Cert: testpki.SelfSigned(t, key, testpki.Cert{CommonName: cn, Serial: int64(4000 + i)}), Key: key}
}

func writeKeyPair(t testing.TB, dir, name string, kp cms.KeyPair) (certPath, keyPath string) {
	t.Helper()
	return testpki.WriteKeyPair(t, dir, name, kp.Cert, kp.Key)
}

func openssl(t testing.TB, args ...string) []byte {
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
		t.Fatalf("openssl %v: %v: %s", args, err, stderr.String())
	}
	return out
}

// SplitCapture splits an AS2 capture from ../shared/interop/as2 into its
// HTTP header block (LF lines, kept as stored) and body. The empty line that
// separates them is "\n" or "\r\n".
func SplitCapture(t testing.TB, raw []byte) (head, body []byte) {
	t.Helper()
	for off := 0; off < len(raw); {
		i := bytes.IndexByte(raw[off:], '\n')
		if i < 0 {
			break
		}
		line := raw[off : off+i]
		next := off + i + 1
		if len(line) == 0 || (len(line) == 1 && line[0] == '\r') {
			return raw[:next], raw[next:]
		}
		off = next
	}
	t.Fatal("capture has no empty line after the HTTP headers")
	return nil, nil
}

// repairSignedCapture is the test-harness repair of quirk 1: the stored
// mecas2_signed.as2 body lost every CR. Turning each LF outside the 620
// payload bytes back into CRLF rebuilds the 3669-byte body that was sent.
func repairSignedCapture(t testing.TB, body, payload []byte) []byte {
	t.Helper()
	i := bytes.Index(body, payload)
	if i < 0 || bytes.Contains(body, []byte("\r")) {
		t.Fatal("mecas2_signed.as2 is not in the expected stored form")
	}
	crlf := func(b []byte) []byte { return bytes.ReplaceAll(b, []byte("\n"), []byte("\r\n")) }
	var out []byte
	out = append(out, crlf(body[:i])...)
	out = append(out, payload...)
	out = append(out, crlf(body[i+len(payload):])...)
	if len(out) != 3669 {
		t.Fatalf("repaired body is %d bytes, want the Content-Length 3669", len(out))
	}
	return out
}

func pyas2libKeys(t testing.TB) []cms.KeyPair {
	t.Helper()
	kp, err := cms.ParseKeyPair(interop.Read(t, "as2/cert_test_public.pem"), interop.Read(t, "as2/cert_test_key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	return []cms.KeyPair{kp}
}

func mendelsonCerts(t testing.TB) []*x509.Certificate {
	t.Helper()
	c, err := cms.ParseCertificates(interop.Read(t, "as2/cert_mecas2_public.pem"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func base64Std(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
