package certs_test

import (
	"crypto/rand"
	"crypto/rsa"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/internal/certs"
	"github.com/edigateway/gateway/internal/testpki"
	"github.com/edigateway/gateway/partners"
)

var now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// fixture: partner "old" (AS2, expired certificate), partner "soon" (AS4,
// a certificate expiring in 3 days and a 1024-bit one valid for years),
// partner "fine"; identity key 0 matches, key 1 does not.
func fixture(t *testing.T) (*partners.Directory, []config.KeyPair) {
	t.Helper()
	keys := testpki.RSAKeys(t, 3)
	weak, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pdir := filepath.Join(dir, "partners")
	os.Mkdir(pdir, 0o750)
	write(t, filepath.Join(pdir, "old.pem"), testpki.CertPEM(testpki.SelfSigned(t, keys[0], testpki.Cert{CommonName: "old", NotAfter: now.Add(-time.Hour)})))
	write(t, filepath.Join(pdir, "soon.pem"), testpki.CertPEM(
		testpki.SelfSigned(t, keys[1], testpki.Cert{CommonName: "soon", NotAfter: now.Add(3 * 24 * time.Hour)}),
		testpki.SelfSigned(t, weak, testpki.Cert{CommonName: "weak"})))
	write(t, filepath.Join(pdir, "fine.pem"), testpki.CertPEM(testpki.SelfSigned(t, keys[2], testpki.Cert{CommonName: "fine"})))
	write(t, filepath.Join(pdir, "old.yaml"), []byte("id: old\nas2:\n  as2_id: OLD\n  certificates: [old.pem]\n"))
	write(t, filepath.Join(pdir, "soon.yaml"), []byte("id: soon\nas4:\n  party_id: urn:soon\n  certificates: [soon.pem]\n  pmodes:\n    - id: p\n"))
	write(t, filepath.Join(pdir, "fine.yaml"), []byte("id: fine\nas2:\n  as2_id: FINE\n  certificates: [fine.pem]\n"))
	d, err := partners.Load(pdir)
	if err != nil {
		t.Fatal(err)
	}
	good := testpki.SelfSigned(t, keys[0], testpki.Cert{CommonName: "us"})
	c0, k0 := testpki.WriteKeyPair(t, dir, "us", good, keys[0])
	c1, _ := testpki.WriteKeyPair(t, dir, "us-new", testpki.SelfSigned(t, keys[1], testpki.Cert{CommonName: "us new"}), keys[1])
	// The classic rotation mistake: the new certificate with the old key.
	return d, []config.KeyPair{{Cert: c0, Key: k0}, {Cert: c1, Key: k0}}
}

func TestAllFindsExpiredExpiringWeakAndMismatchedKey(t *testing.T) {
	d, keys := fixture(t)
	found, fs := certs.All(d, keys, now, certs.DefaultWarning)
	if len(found) != 6 {
		t.Fatalf("%d certificates, want 6 (2 identity, 4 partner): %+v", len(found), found)
	}
	var got []string
	for _, f := range fs {
		got = append(got, f.Severity.String()+" "+f.String())
	}
	t.Log(strings.Join(got, "\n"))
	want := []struct {
		sev  certs.Severity
		subs []string
	}{
		{certs.Error, []string{"identity (identity.keys[1])", keys[1].Cert, "with key " + keys[1].Key, "does not belong to certificate CN=us new"}},
		{certs.Error, []string{"partner old", "old.yaml as2.certificates[0]", filepath.Join(d.Dir, "old.pem"), "CN=old expired on 2026-12-01T11:00:00Z"}},
		{certs.Error, []string{"partner soon", "CN=weak has a 1024-bit RSA key (below 2048 bits): refused; allow_weak_keys accepts it"}},
		{certs.Warning, []string{"partner soon", "soon.yaml as4.certificates[0]", "CN=soon expires on 2026-12-04T12:00:00Z (in 3 days)"}},
	}
	if len(fs) != len(want) {
		t.Fatalf("%d findings, want %d:\n%s", len(fs), len(want), strings.Join(got, "\n"))
	}
	for i, w := range want {
		if fs[i].Severity != w.sev {
			t.Errorf("finding %d: severity %v, want %v: %s", i, fs[i].Severity, w.sev, got[i])
		}
		for _, s := range w.subs {
			if !strings.Contains(got[i], s) {
				t.Errorf("finding %d lacks %q: %s", i, s, got[i])
			}
		}
	}
	if certs.Errors(fs) != 3 {
		t.Errorf("Errors = %d, want 3", certs.Errors(fs))
	}
}

// With as4.allow_weak_keys the 1024-bit certificate is a warning, not an
// error, and the partner directory records that it is accepted.
func TestAllowWeakKeysTurnsTheErrorIntoAWarning(t *testing.T) {
	d, _ := fixture(t)
	y, err := os.ReadFile(filepath.Join(d.Dir, "soon.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(d.Dir, "soon.yaml"), []byte(strings.Replace(string(y), "as4:\n", "as4:\n  allow_weak_keys: true\n", 1)))
	d, err = partners.Load(d.Dir)
	if err != nil {
		t.Fatal(err)
	}
	var weak []certs.Finding
	for _, f := range certs.Check(certs.PartnerCerts(d), now, certs.DefaultWarning) {
		if strings.Contains(f.Msg, "1024-bit") {
			weak = append(weak, f)
		}
	}
	if len(weak) != 1 || weak[0].Severity != certs.Warning || !strings.Contains(weak[0].Msg, "accepted because allow_weak_keys is set") {
		t.Fatalf("weak-key findings %v", weak)
	}
	if w := strings.Join(d.Warnings, "\n"); !strings.Contains(w, `as4.allow_weak_keys accepts certificate "CN=weak"`) || !strings.Contains(w, "1024-bit") {
		t.Fatalf("directory warnings: %q", d.Warnings)
	}
}

func TestCheckWarningWindowIsConfigurable(t *testing.T) {
	d, _ := fixture(t)
	found := certs.PartnerCerts(d)
	// 2 days ahead: "soon" (3 days) is no longer warned about.
	for _, f := range certs.Check(found, now, 48*time.Hour) {
		if strings.Contains(f.Msg, "CN=soon") {
			t.Fatalf("warned with a 2-day window: %s", f)
		}
	}
	// 20 years ahead: every valid certificate is warned about.
	fs := certs.Check(found, now, 20*365*24*time.Hour)
	expiring := 0
	for _, f := range fs {
		if strings.Contains(f.Msg, "expires on") {
			expiring++
		}
	}
	if expiring != 3 {
		t.Fatalf("%d expiry warnings with a 20-year window, want 3: %v", expiring, fs)
	}
}

func TestIdentityCertsUnreadableKey(t *testing.T) {
	_, keys := fixture(t)
	keys[0].Key = filepath.Join(t.TempDir(), "missing.key")
	_, bad := certs.IdentityCerts(keys[:1])
	if len(bad) != 1 || bad[0].Severity != certs.Error || !strings.Contains(bad[0].String(), "missing.key") {
		t.Fatalf("findings %v", bad)
	}
}

// Our own 1024-bit key is an error (serve refuses it) unless its identity
// sets allow_weak_keys, read from the configuration file.
func TestIdentityWeakKeyFollowsAllowWeakKeys(t *testing.T) {
	weak, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	c, k := testpki.WriteKeyPair(t, dir, "weak", testpki.SelfSigned(t, weak, testpki.Cert{CommonName: "us weak"}), weak)
	for _, allow := range []bool{false, true} {
		cfgFile := filepath.Join(dir, "gateway.yaml")
		write(t, cfgFile, []byte(fmt.Sprintf("identities:\n  - as2_id: GW\n    allow_weak_keys: %v\n    keys: [{cert: %s, key: %s}]\n", allow, c, k)))
		cfg, err := config.Load(cfgFile)
		if err != nil {
			t.Fatal(err)
		}
		found, bad := certs.IdentityCerts(cfg.AllKeys())
		fs := append(bad, certs.Check(found, now, certs.DefaultWarning)...)
		want := certs.Error
		if allow {
			want = certs.Warning
		}
		if len(fs) != 1 || fs[0].Severity != want || !strings.Contains(fs[0].String(), "identities[0].keys[0]") || !strings.Contains(fs[0].Msg, "1024-bit") {
			t.Errorf("allow_weak_keys %v: findings %v", allow, fs)
		}
	}
}

// The certificates of a send block are checked too: the partner's
// encryption certificate and our TLS client certificate; an encryption
// certificate that is one of the section's certificates is listed once.
func TestSendCertificatesAreChecked(t *testing.T) {
	keys := testpki.RSAKeys(t, 3)
	dir := t.TempDir()
	write(t, filepath.Join(dir, "sign.pem"), testpki.CertPEM(testpki.SelfSigned(t, keys[0], testpki.Cert{CommonName: "out sign"})))
	write(t, filepath.Join(dir, "enc.pem"), testpki.CertPEM(testpki.SelfSigned(t, keys[1], testpki.Cert{CommonName: "out enc", NotAfter: now.Add(5 * 24 * time.Hour)})))
	testpki.WriteKeyPair(t, dir, "tlsc", testpki.SelfSigned(t, keys[2], testpki.Cert{CommonName: "our tls client", NotAfter: now.Add(10 * 24 * time.Hour)}), keys[2])
	write(t, filepath.Join(dir, "out.yaml"), []byte(`id: out
as2:
  as2_id: OUT
  certificates: [sign.pem]
  send:
    url: https://out.example/as2
    encryption_certificate: enc.pem
    tls: {client_certificate: tlsc.crt, client_key: tlsc.key}
`))
	write(t, filepath.Join(dir, "same.yaml"), []byte(`id: same
as2:
  as2_id: SAME
  certificates: [enc.pem]
  send:
    url: https://same.example/as2
    encryption_certificate: enc.pem
`))
	d, err := partners.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	found, fs := certs.All(d, nil, now, certs.DefaultWarning)
	var got []string
	for _, c := range found {
		got = append(got, c.Partner+" "+c.Use+" "+c.Cert.Subject.CommonName+" "+strings.TrimPrefix(c.Config, c.Config[:strings.Index(c.Config, " ")+1]))
	}
	want := []string{"out as2 out sign as2.certificates[0]", "out as2-send out enc as2.send.encryption_certificate",
		"out as2-tls-client our tls client as2.send.tls.client_certificate", "same as2 out enc as2.certificates[0]"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("certificates:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var warned []string
	for _, f := range fs {
		if strings.Contains(f.Msg, "expires on") {
			warned = append(warned, f.String())
		}
	}
	if len(warned) != 3 || !strings.Contains(strings.Join(warned, "\n"), "as2.send.tls.client_certificate") ||
		!strings.Contains(strings.Join(warned, "\n"), "out.yaml as2.send.encryption_certificate") {
		t.Fatalf("expiry warnings:\n%s", strings.Join(warned, "\n"))
	}
}
