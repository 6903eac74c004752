package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edigateway/gateway/internal/testpki"
)

func openssl(t *testing.T, args ...string) {
	t.Helper()
	if _, err := exec.LookPath("openssl"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("openssl not installed (CI needs it to build the key files)")
		}
		t.Skip("openssl not installed")
	}
	if out, err := exec.Command("openssl", args...).CombinedOutput(); err != nil {
		t.Fatalf("openssl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// `gateway partners check` reads identity keys as PKCS#12 (OpenSSL 3's
// default AES encryption and -legacy) with the password from an environment
// variable or a file, and a partner certificate as DER and as PKCS#12; for
// each problem it names the file and says what is wrong: wrong password, no
// key in the file, key not belonging to the certificate.
func TestPartnersCheckKeyFormatsAndProblems(t *testing.T) {
	keys := testpki.RSAKeys(t, 3)
	dir := t.TempDir()
	pdir := filepath.Join(dir, "partners")
	os.Mkdir(pdir, 0o750)
	p := func(n string) string { return filepath.Join(dir, n) }
	gwCert, gwKey := testpki.WriteKeyPair(t, dir, "gw", testpki.SelfSigned(t, keys[0], testpki.Cert{CommonName: "gw"}), keys[0])
	otherCert, _ := testpki.WriteKeyPair(t, dir, "other", testpki.SelfSigned(t, keys[1], testpki.Cert{CommonName: "other", Serial: 2}), keys[1])
	acmeCert, acmeKey := testpki.WriteKeyPair(t, pdir, "acme", testpki.SelfSigned(t, keys[2], testpki.Cert{CommonName: "acme", Serial: 3}), keys[2])
	openssl(t, "pkcs12", "-export", "-inkey", gwKey, "-in", gwCert, "-passout", "pass:gw-secret", "-out", p("gw.p12"))
	openssl(t, "pkcs12", "-export", "-legacy", "-inkey", gwKey, "-in", gwCert, "-passout", "pass:gw-secret", "-out", p("gw-legacy.pfx"))
	openssl(t, "pkcs12", "-export", "-nokeys", "-in", gwCert, "-passout", "pass:gw-secret", "-out", p("certonly.p12"))
	openssl(t, "x509", "-in", acmeCert, "-outform", "DER", "-out", filepath.Join(pdir, "acme.cer"))
	openssl(t, "pkcs12", "-export", "-inkey", acmeKey, "-in", acmeCert, "-passout", "pass:acme-secret", "-out", filepath.Join(pdir, "acme.pfx"))
	os.WriteFile(p("gw.pass"), []byte("gw-secret\n"), 0o600)
	os.WriteFile(p("wrong.pass"), []byte("nope\n"), 0o600)
	os.WriteFile(filepath.Join(pdir, "acme.pass"), []byte("acme-secret\n"), 0o600)
	os.WriteFile(filepath.Join(pdir, "acme.yaml"), []byte("id: acme\nas2:\n  as2_id: ACME\n  certificates: [acme.cer]\n"+
		"as4:\n  party_id: urn:acme\n  certificates: [acme.pfx]\n  certificate_password_file: acme.pass\n  pmodes:\n    - id: p\n"), 0o600)
	t.Setenv("GW_TEST_P12_PASSWORD", "gw-secret")

	check := func(keysYAML string) (int, string) {
		cfg := p("gateway.yaml")
		os.WriteFile(cfg, []byte(fmt.Sprintf("partners: partners\nidentity:\n  as2_id: GW\n  keys:\n%s", keysYAML)), 0o600)
		var out, errb bytes.Buffer
		code := run([]string{"partners", "check", "-config", cfg}, &out, &errb)
		return code, out.String() + errb.String()
	}
	code, out := check("    - key: gw.p12\n      key_password_env: GW_TEST_P12_PASSWORD\n" +
		"    - key: gw-legacy.pfx\n      key_password_file: gw.pass\n" +
		"    - cert: gw.crt\n      key: gw.p12\n      key_password_file: gw.pass\n")
	if code != 0 || !strings.Contains(out, "ok acme: [as2 ACME (1 certificates") || !strings.Contains(out, "as4 urn:acme (1 certificates") ||
		!strings.Contains(out, "0 errors") {
		t.Fatalf("good files: exit %d\n%s", code, out)
	}
	for _, tc := range []struct {
		name, keys string
		want       []string
	}{
		{"wrong password", "    - key: gw.p12\n      key_password_file: wrong.pass\n", []string{p("gw.p12"), "wrong password"}},
		{"no key in the file", "    - key: certonly.p12\n      key_password_file: gw.pass\n", []string{p("certonly.p12"), "no private key in the file"}},
		{"key does not match", "    - cert: other.crt\n      key: gw.p12\n      key_password_file: gw.pass\n",
			[]string{p("gw.p12"), "does not belong to certificate CN=other in " + otherCert}},
		{"password variable not set", "    - key: gw.p12\n      key_password_env: GW_TEST_UNSET\n", []string{p("gw.p12"), "GW_TEST_UNSET is not set"}},
	} {
		code, out := check(tc.keys)
		if code != 1 {
			t.Errorf("%s: exit %d\n%s", tc.name, code, out)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: output lacks %q:\n%s", tc.name, w, out)
			}
		}
	}
	// An inline password is not a configuration key.
	if code, out := check("    - key: gw.p12\n      key_password: gw-secret\n"); code == 0 || !strings.Contains(out, "key_password") {
		t.Errorf("inline password accepted: exit %d\n%s", code, out)
	}
	// A partner certificate with a wrong password names the partner file, the field and the certificate file.
	os.WriteFile(filepath.Join(pdir, "acme.pass"), []byte("nope\n"), 0o600)
	if code, out := check("    - cert: gw.crt\n      key: gw.key\n"); code == 0 || !strings.Contains(out, "acme.yaml: as4.certificates[0]") ||
		!strings.Contains(out, filepath.Join(pdir, "acme.pfx")) || !strings.Contains(out, "wrong password") {
		t.Errorf("partner PKCS#12 with a wrong password: exit %d\n%s", code, out)
	}
}
