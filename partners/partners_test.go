package partners

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeCert(t *testing.T, dir, name string) {
	t.Helper()
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, dir, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

const acme = `id: acme
name: ACME Corp
as2:
  as2_id: ACME
  certificates: [acme-2025.pem, acme-2026.pem]
  require_signature: true
  allowed_digests: [SHA-256, sha512]
  retry_window: 2d
as4:
  party_id: urn:acme
  party_type: urn:oasis:names:tc:ebcore:partyid-type:unregistered
  certificates: [acme-2025.pem]
  pmodes:
    - id: invoices
      service: urn:invoice
      action: Deliver
`

func TestLoadDirectory(t *testing.T) {
	dir := t.TempDir()
	writeCert(t, dir, "acme-2025.pem")
	writeCert(t, dir, "acme-2026.pem")
	writeFile(t, dir, "acme.yaml", acme)
	writeFile(t, dir, "README.txt", "not a partner")
	d, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Partners) != 1 {
		t.Fatalf("partners = %d", len(d.Partners))
	}
	p, ok := d.ByAS2("ACME", "GATEWAY", "GATEWAY")
	if !ok || p.ID != "acme" {
		t.Fatalf("ByAS2 = %v %v", p, ok)
	}
	if _, ok := d.ByAS2("ACME", "OTHER", "GATEWAY"); ok {
		t.Error("AS2-To other than ours must not match")
	}
	if _, ok := d.ByAS2("acme", "GATEWAY", "GATEWAY"); ok {
		t.Error("AS2 ids are case sensitive")
	}
	if got := len(d.AS2Certificates(p)); got != 2 {
		t.Errorf("as2 certificates = %d, want 2 (rollover)", got)
	}
	if p.AS2.AllowedDigests[0] != "sha256" || p.AS2.DedupWindow.Std() != DefaultAS2Window || p.AS2.DuplicateDisposition != "warning" || p.OnDrift != "reject" || p.AS2.MICCompressed != "rfc5402" {
		t.Errorf("defaults/normalisation: %+v", p.AS2)
	}
	if p4, ok := d.ByAS4("urn:oasis:names:tc:ebcore:partyid-type:unregistered", "urn:acme"); !ok || p4 != p {
		t.Errorf("ByAS4 failed")
	}
	if p.AS4.DedupWindow.Std() != DefaultAS4Window || p.AS4.ClockSkew.Std() != 5*time.Minute {
		t.Errorf("as4 defaults: %+v", p.AS4)
	}
	if len(d.Warnings) != 0 {
		t.Errorf("warnings: %v", d.Warnings)
	}
}

func TestRetryWindowLongerThanDedupWindowWarns(t *testing.T) {
	dir := t.TempDir()
	writeCert(t, dir, "acme-2025.pem")
	writeCert(t, dir, "acme-2026.pem")
	writeFile(t, dir, "acme.yaml", strings.Replace(acme, "retry_window: 2d", "retry_window: 10d\n  dedup_window: 1d", 1))
	d, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0], "as2.dedup_window 24h0m0s is shorter than as2.retry_window 240h0m0s") {
		t.Fatalf("warnings = %q", d.Warnings)
	}
}

func TestValidationNamesFileAndField(t *testing.T) {
	for _, tc := range []struct{ name, body, field string }{
		{"unknown", strings.Replace(acme, "name: ACME Corp", "nmae: ACME Corp", 1), `:2: unknown key "nmae" (did you mean "name"?)`},
		{"badid", strings.Replace(acme, "id: acme", "id: ACME Corp", 1), "id: "},
		{"drift", acme + "on_drift: ignore\n", "on_drift"},
		{"digest", strings.Replace(acme, "[SHA-256, sha512]", "[sha3]", 1), "as2.allowed_digests[0]"},
		{"cert", strings.Replace(acme, "acme-2026.pem]", "missing.pem]", 1), "as2.certificates[1]"},
		{"pmode", strings.Replace(acme, "    - id: invoices\n      service", "    - service", 1), "as4.pmodes[0].id"},
		{"as2id", strings.Replace(acme, "as2_id: ACME", "as2_id: \"A\\tB\"", 1), "as2.as2_id"},
		{"window", strings.Replace(acme, "retry_window: 2d", "retry_window: soon", 1), "invalid duration"},
		{"mic_compressed", strings.Replace(acme, "retry_window: 2d", "retry_window: 2d\n  mic_compressed: headers", 1), "as2.mic_compressed"},
		{"empty", "id: lonely\n", "as2"},
		{"max_body_bytes", acme + "max_body_bytes: -1\n", "max_body_bytes"},
		{"max_body_bytes_text", acme + "max_body_bytes: 8GiB\n", "max_body_bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeCert(t, dir, "acme-2025.pem")
			writeCert(t, dir, "acme-2026.pem")
			writeFile(t, dir, "p.yaml", tc.body)
			_, err := Load(dir)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), filepath.Join(dir, "p.yaml")) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("error %q does not name the file and %q", err, tc.field)
			}
		})
	}
}

func TestDuplicateIdentifiersAcrossFiles(t *testing.T) {
	dir := t.TempDir()
	writeCert(t, dir, "acme-2025.pem")
	writeCert(t, dir, "acme-2026.pem")
	writeFile(t, dir, "a.yaml", acme)
	writeFile(t, dir, "b.yaml", strings.Replace(acme, "id: acme", "id: acme2", 1))
	_, err := Load(dir)
	if err == nil || !strings.Contains(err.Error(), "b.yaml: as2.as2_id") {
		t.Fatalf("err = %v", err)
	}
}

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{"7d": 7 * 24 * time.Hour, "36h": 36 * time.Hour, "0": 0, "90s": 90 * time.Second} {
		got, err := ParseDuration(in)
		if err != nil || got != want {
			t.Errorf("%q = %v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"-1h", "7 d", "1.5d", "d", "forever"} {
		if _, err := ParseDuration(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// max_body_bytes replaces the global limit for its partner; the largest
// of all is the cap before a partner is known.
func TestBodyLimit(t *testing.T) {
	dir := t.TempDir()
	writeCert(t, dir, "acme-2025.pem")
	writeCert(t, dir, "acme-2026.pem")
	writeFile(t, dir, "p.yaml", acme+"max_body_bytes: 8589934592\n")
	d, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	p := d.Partners[0]
	if BodyLimit(p, 100) != 8<<30 || BodyLimit(nil, 100) != 100 || BodyLimit(&Partner{}, 100) != 100 || d.MaxBodyLimit(100) != 8<<30 {
		t.Fatalf("limits %d %d %d", BodyLimit(p, 100), BodyLimit(nil, 100), d.MaxBodyLimit(100))
	}
}
