package certs

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/edigateway/gateway/internal/testpki"
)

// FuzzCertificateFile feeds arbitrary files to Certificates, the reader of
// the certificate files partners send (PEM with any number of blocks, one
// DER certificate, PKCS#12): no panic, and a file either gives at least
// one certificate or an error.
func FuzzCertificateFile(f *testing.F) {
	a := testpki.SelfSigned(f, testpki.RSAKey(f, 0), testpki.Cert{CommonName: "partner"})
	b := testpki.SelfSigned(f, testpki.RSAKey(f, 1), testpki.Cert{CommonName: "partner CA"})
	f.Add(testpki.CertPEM(a))
	f.Add(testpki.CertPEM(a, b))
	f.Add(append([]byte("subject=CN = partner\n"), testpki.CertPEM(a)...))
	f.Add(append([]byte("-----BEGIN PRIVATE KEY-----\nMAA=\n-----END PRIVATE KEY-----\n"), testpki.CertPEM(b)...))
	f.Add(a.Raw)
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----\n"))
	f.Add([]byte{0x30, 0x03, 0x02, 0x01, 0x03})
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "partner.pem")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		certs, err := Certificates(path, Password{})
		if err == nil && len(certs) == 0 {
			t.Fatal("no error and no certificate")
		}
		for _, c := range certs {
			if c == nil {
				t.Fatal("nil certificate")
			}
		}
	})
}
