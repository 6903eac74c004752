package certs

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/edigateway/gateway/internal/testpki"
)

// FuzzPKCS12 feeds arbitrary bytes to the PKCS#12 readers (certificate
// files come from partners): no panic, and a result is either certificates
// or an error. Seeds: PKCS#12 files made with openssl (default, 3DES,
// -legacy, with and without a key) when it is installed.
func FuzzPKCS12(f *testing.F) {
	f.Add([]byte{0x30, 0x03, 0x02, 0x01, 0x03})
	f.Add([]byte("not pkcs12"))
	if _, err := exec.LookPath("openssl"); err != nil && os.Getenv("CI") != "" {
		f.Fatal("openssl not installed (CI needs it for the PKCS#12 seed corpus)")
	} else if err == nil {
		dir := f.TempDir()
		key := testpki.RSAKey(f, 0)
		cert, keyFile := testpki.WriteKeyPair(f, dir, "us", testpki.SelfSigned(f, key, testpki.Cert{CommonName: "us"}), key)
		for i, args := range [][]string{
			{"-inkey", keyFile},
			{"-nokeys"},
			{"-nokeys", "-certpbe", "PBE-SHA1-3DES", "-macalg", "sha1"},
			{"-nokeys", "-legacy"},
		} {
			out := filepath.Join(dir, "seed.p12")
			cmd := append([]string{"pkcs12", "-export", "-in", cert, "-passout", "pass:pw", "-out", out}, args...)
			if err := exec.Command("openssl", cmd...).Run(); err != nil {
				f.Fatalf("seed %d: %v", i, err)
			}
			b, err := os.ReadFile(out)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, pw := range []string{"pw", ""} {
			if certs, err := certOnlyPKCS12(b, pw); err == nil && len(certs) == 0 {
				t.Fatal("no error and no certificates")
			}
			if looksLikePKCS12(b) {
				decodePKCS12(b, pw)
			}
		}
	})
}
