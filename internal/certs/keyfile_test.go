package certs

import (
	"crypto/rsa"
	"crypto/x509"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"software.sslmate.com/src/go-pkcs12"

	"github.com/edigateway/gateway/internal/interop"
	"github.com/edigateway/gateway/internal/testpki"
)

// openssl runs the openssl command line tool (the tests generate vendor
// files with it, as operators do).
func openssl(t *testing.T, args ...string) {
	t.Helper()
	if _, err := exec.LookPath("openssl"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("openssl not installed (CI needs it to build the key files)")
		}
		t.Skip("openssl not installed")
	}
	out, err := exec.Command("openssl", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("openssl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// fixture writes a PEM pair (us) and a second certificate (other), and
// returns the directory.
func fixture(t *testing.T) (dir, cert, key, otherCert string) {
	dir = t.TempDir()
	keys := testpki.RSAKeys(t, 2)
	cert, key = testpki.WriteKeyPair(t, dir, "us", testpki.SelfSigned(t, keys[0], testpki.Cert{CommonName: "us"}), keys[0])
	otherCert, _ = testpki.WriteKeyPair(t, dir, "other", testpki.SelfSigned(t, keys[1], testpki.Cert{CommonName: "other", Serial: 2}), keys[1])
	return dir, cert, key, otherCert
}

// Identity keys in every format load to the same pair: PEM, DER (PKCS#8 and
// PKCS#1 keys, DER certificate), PKCS#12 written by OpenSSL 3 with its
// default AES-256-CBC/PBKDF2 encryption and with -legacy (RC2/3DES), with
// the certificate in the .p12 (cert omitted) or given separately; the
// password from an environment variable or a file.
func TestKeyPairFormats(t *testing.T) {
	dir, cert, key, other := fixture(t)
	p := func(name string) string { return filepath.Join(dir, name) }
	openssl(t, "x509", "-in", cert, "-outform", "DER", "-out", p("us.cer"))
	openssl(t, "pkey", "-in", key, "-outform", "DER", "-out", p("us8.der"))
	openssl(t, "rsa", "-in", key, "-outform", "DER", "-traditional", "-out", p("us1.der"))
	openssl(t, "pkcs12", "-export", "-inkey", key, "-in", cert, "-certfile", other, "-passout", "pass:s3cret", "-out", p("modern.p12"))
	openssl(t, "pkcs12", "-export", "-legacy", "-inkey", key, "-in", cert, "-passout", "pass:s3cret", "-out", p("legacy.pfx"))
	// A vendor file with another certificate before the leaf (openssl
	// refuses to write one, go-pkcs12 does not check).
	caFirst, err := pkcs12.Modern.Encode(key0(t, key), certOf(t, other), []*x509.Certificate{certOf(t, cert)}, "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(p("caFirst.p12"), caFirst, 0o600)
	os.WriteFile(p("pw.txt"), []byte("s3cret\n"), 0o600)
	t.Setenv("GW_TEST_KEY_PASSWORD", "s3cret")
	want := certOf(t, cert)
	_, _, err = KeyPair(cert, key, Password{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, cert, key string
		pw              Password
	}{
		{"pem", cert, key, Password{}},
		{"der cert, pkcs8 der key", p("us.cer"), p("us8.der"), Password{}},
		{"pem cert, pkcs1 der key", cert, p("us1.der"), Password{}},
		{"pkcs12 aes-256 (openssl 3 default), env password", "", p("modern.p12"), Password{Env: "GW_TEST_KEY_PASSWORD"}},
		{"pkcs12 legacy, file password", "", p("legacy.pfx"), Password{File: p("pw.txt")}},
		{"pkcs12 key, same file as cert", p("modern.p12"), p("modern.p12"), Password{File: p("pw.txt")}},
		{"pkcs12 key, pem cert", cert, p("legacy.pfx"), Password{File: p("pw.txt")}},
		{"pkcs12 with the CA first", "", p("caFirst.p12"), Password{File: p("pw.txt")}},
	} {
		c, k, err := KeyPair(tc.cert, tc.key, tc.pw)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !c.Equal(want) || !k.(*rsa.PrivateKey).Equal(key0(t, key)) {
			t.Errorf("%s: loaded %s, want %s", tc.name, c.Subject, want.Subject)
		}
	}

	// Certificates: DER, PEM and PKCS#12 (all certificates of the file).
	for _, tc := range []struct {
		file string
		pw   Password
		n    int
	}{{p("us.cer"), Password{}, 1}, {cert, Password{}, 1}, {p("modern.p12"), Password{Env: "GW_TEST_KEY_PASSWORD"}, 2}} {
		certs, err := Certificates(tc.file, tc.pw)
		if err != nil || len(certs) != tc.n || !certs[0].Equal(want) {
			t.Errorf("Certificates(%s): %d certificates, %v", tc.file, len(certs), err)
		}
	}
}

func certOf(t *testing.T, file string) *x509.Certificate {
	certs, err := Certificates(file, Password{})
	if err != nil {
		t.Fatal(err)
	}
	return certs[0]
}

func key0(t *testing.T, file string) *rsa.PrivateKey {
	b, _ := os.ReadFile(file)
	k2, err := pemKey(b)
	if err != nil {
		t.Fatal(err)
	}
	return k2.(*rsa.PrivateKey)
}

// Each problem names the file and says what is wrong.
func TestKeyPairProblemsNameTheFile(t *testing.T) {
	dir, cert, key, other := fixture(t)
	p := func(name string) string { return filepath.Join(dir, name) }
	openssl(t, "pkcs12", "-export", "-inkey", key, "-in", cert, "-passout", "pass:right", "-out", p("us.p12"))
	openssl(t, "pkcs12", "-export", "-nokeys", "-in", cert, "-passout", "pass:right", "-out", p("certonly.p12"))
	openssl(t, "pkcs12", "-export", "-legacy", "-nokeys", "-in", cert, "-passout", "pass:right", "-out", p("certonly-legacy.p12"))
	openssl(t, "pkey", "-in", key, "-aes256", "-passout", "pass:x", "-out", p("enc.pem"))
	os.WriteFile(p("wrong.txt"), []byte("wrong\n"), 0o600)
	os.WriteFile(p("right.txt"), []byte("right\n"), 0o600)
	os.WriteFile(p("junk.bin"), []byte("not a key at all"), 0o600)
	for _, tc := range []struct {
		name, cert, key string
		pw              Password
		want            error
		file            string
	}{
		{"wrong password", "", p("us.p12"), Password{File: p("wrong.txt")}, ErrWrongPassword, p("us.p12")},
		{"no key in the file", "", p("certonly.p12"), Password{File: p("right.txt")}, ErrNoKey, p("certonly.p12")},
		{"key does not match the certificate", other, key, Password{}, ErrKeyMismatch, key},
		{"pkcs12 key, other certificate", other, p("us.p12"), Password{File: p("right.txt")}, ErrKeyMismatch, p("us.p12")},
		{"a certificate as the key", "", cert, Password{}, ErrNoKey, cert},
		{"encrypted PEM key", cert, p("enc.pem"), Password{}, ErrEncryptedPEM, p("enc.pem")},
		{"junk", cert, p("junk.bin"), Password{}, ErrFormat, p("junk.bin")},
		{"pem key, no certificate", "", key, Password{}, ErrNoCertificate, key},
	} {
		_, _, err := KeyPair(tc.cert, tc.key, tc.pw)
		var fe *FileError
		if !errors.Is(err, tc.want) || !errors.As(err, &fe) || fe.File != tc.file || !strings.Contains(err.Error(), tc.file) {
			t.Errorf("%s: got %v, want %v naming %s", tc.name, err, tc.want, tc.file)
		}
	}
	// A password source that is not there.
	if _, _, err := KeyPair("", p("us.p12"), Password{Env: "GW_TEST_UNSET_PASSWORD"}); err == nil || !strings.Contains(err.Error(), "GW_TEST_UNSET_PASSWORD is not set") {
		t.Errorf("unset environment variable: %v", err)
	}
	// Certificate-only PKCS#12 files (partner certificates): a Java trust
	// store is read (go-pkcs12 writes one as keytool does).
	ts, err := pkcs12.Modern.EncodeTrustStore([]*x509.Certificate{certOf(t, cert)}, "right")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(p("truststore.p12"), ts, 0o600)
	certs, err := Certificates(p("truststore.p12"), Password{File: p("right.txt")})
	if err != nil || len(certs) != 1 || certs[0].Subject.CommonName != "us" {
		t.Errorf("trust store: %d certificates, %v", len(certs), err)
	}
	if _, err := Certificates(p("truststore.p12"), Password{File: p("wrong.txt")}); !errors.Is(err, ErrWrongPassword) {
		t.Errorf("trust store, wrong password: %v", err)
	}
	// openssl -nokeys: OpenSSL 3's default (PBES2 AES-256-CBC, SHA-256
	// MAC) and 3DES are read, RC2 (-legacy) is refused with the way out.
	openssl(t, "pkcs12", "-export", "-nokeys", "-in", cert, "-certfile", other, "-certpbe", "PBE-SHA1-3DES", "-macalg", "sha1",
		"-passout", "pass:right", "-out", p("certonly-3des.p12"))
	for _, f := range []string{"certonly.p12", "certonly-3des.p12"} {
		certs, err := Certificates(p(f), Password{File: p("right.txt")})
		if err != nil || len(certs) < 1 || certs[0].Subject.CommonName != "us" {
			t.Errorf("%s: %d certificates, %v", f, len(certs), err)
		}
		if _, err := Certificates(p(f), Password{File: p("wrong.txt")}); !errors.Is(err, ErrWrongPassword) {
			t.Errorf("%s, wrong password: %v", f, err)
		}
		if _, _, err := KeyPair("", p(f), Password{File: p("right.txt")}); !errors.Is(err, ErrNoKey) {
			t.Errorf("%s as a key: %v", f, err)
		}
	}
	if certs, _ := Certificates(p("certonly-3des.p12"), Password{File: p("right.txt")}); len(certs) != 2 {
		t.Errorf("certonly-3des.p12: %d certificates, want 2", len(certs))
	}
	if _, err := Certificates(p("certonly-legacy.p12"), Password{File: p("right.txt")}); !errors.Is(err, ErrCertOnly) ||
		!strings.Contains(err.Error(), p("certonly-legacy.p12")) || !strings.Contains(err.Error(), "openssl pkcs12 -nokeys") {
		t.Errorf("certonly-legacy.p12 (RC2): %v", err)
	}
	// A partner's .pfx that holds its key too gives its certificates.
	if certs, err := Certificates(p("us.p12"), Password{File: p("right.txt")}); err != nil || len(certs) != 1 {
		t.Errorf("key and certificate PKCS#12 as certificates: %d, %v", len(certs), err)
	}
}

// The vendor files of the interop vectors: the eessi-as4.net .pfx files
// (3DES, SHA-1 MAC) and pyas2lib's .p12 (RC2-40 certificate bag).
func TestInteropPKCS12(t *testing.T) {
	dir := interop.Dir(t)
	for _, tc := range []struct{ file, password, cn string }{
		{"as4/AccessPointA.pfx", "Pz4cZK4SULUwmraZa", "AccessPointA"},
		{"as4/AccessPointB.pfx", "Pz4cZK4SULUwmraZb", "AccessPointB"},
		{"as2/cert_test.p12", "test", "pyas2lib"},
	} {
		t.Setenv("GW_TEST_INTEROP_PASSWORD", tc.password)
		c, _, err := KeyPair("", filepath.Join(dir, tc.file), Password{Env: "GW_TEST_INTEROP_PASSWORD"})
		if err != nil || c.Subject.CommonName != tc.cn {
			t.Errorf("%s: %v", tc.file, err)
		}
	}
}
