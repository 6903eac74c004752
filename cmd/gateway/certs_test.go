package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/internal/testpki"
)

// certCheckFixture writes a gateway config whose identity key is key (its
// certificate is always of key 0) and one partner whose certificate
// expires in 3 days.
func certCheckFixture(t *testing.T, keyIndex int, extra string) (cfg, certFile, keyFile string) {
	t.Helper()
	keys := testpki.RSAKeys(t, 3)
	dir := t.TempDir()
	pdir := filepath.Join(dir, "partners")
	os.Mkdir(pdir, 0o750)
	os.WriteFile(filepath.Join(pdir, "acme.pem"), testpki.CertPEM(testpki.SelfSigned(t, keys[2], testpki.Cert{CommonName: "acme",
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(3*24*time.Hour + time.Hour)})), 0o600)
	os.WriteFile(filepath.Join(pdir, "acme.yaml"), []byte("id: acme\nas2:\n  as2_id: ACME\n  certificates: [acme.pem]\n"), 0o600)
	certFile, _ = testpki.WriteKeyPair(t, dir, "gw", testpki.SelfSigned(t, keys[0], testpki.Cert{CommonName: "gw"}), keys[0])
	keyFile = filepath.Join(dir, "gw-other.key")
	os.WriteFile(keyFile, testpki.KeyPEM(t, keys[keyIndex]), 0o600)
	cfg = filepath.Join(dir, "gateway.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("partners: partners\nidentity:\n  as2_id: GW\n  keys:\n    - cert: %s\n      key: %s\n%s", certFile, keyFile, extra)), 0o600)
	return cfg, certFile, keyFile
}

func TestPartnersCheckFailsOnIdentityKeyNotMatchingItsCertificate(t *testing.T) {
	cfg, certFile, keyFile := certCheckFixture(t, 1, "")
	var out, errb bytes.Buffer
	code := run([]string{"partners", "check", "-config", cfg}, &out, &errb)
	all := out.String() + errb.String()
	if code != 1 || !strings.Contains(all, certFile) || !strings.Contains(all, keyFile) || !strings.Contains(all, "does not belong to certificate CN=gw") {
		t.Fatalf("exit %d, output:\n%s", code, all)
	}
}

func TestPartnersCheckWarnsAheadOfExpiry(t *testing.T) {
	cfg, _, _ := certCheckFixture(t, 0, "")
	var out, errb bytes.Buffer
	if code := run([]string{"partners", "check", "-config", cfg}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s%s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "warning: partner acme") || !strings.Contains(out.String(), "CN=acme expires on") ||
		!strings.Contains(out.String(), "(in 3 days)") || !strings.Contains(out.String(), "1 partners, 1 warnings, 0 errors") {
		t.Fatalf("output:\n%s", out.String())
	}
	// cert_warning: 48h — three days ahead is not yet worth a warning.
	cfg, _, _ = certCheckFixture(t, 0, "cert_warning: 48h\n")
	out.Reset()
	if code := run([]string{"partners", "check", "-config", cfg}, &out, &errb); code != 0 || !strings.Contains(out.String(), "1 partners, 0 warnings, 0 errors") {
		t.Fatalf("cert_warning 48h: exit %d, output:\n%s", code, out.String())
	}
}
