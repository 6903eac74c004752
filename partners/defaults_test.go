package partners

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestSecureDefaultsAndOptOutWarnings: the fewest lines are the secure
// agreement (AS2 signed and encrypted, AS4 encrypted); each weaker setting
// must be written down and is a warning naming the file and the key.
func TestSecureDefaultsAndOptOutWarnings(t *testing.T) {
	dir := t.TempDir()
	writeCert(t, dir, "acme.pem")
	writeFile(t, dir, "acme.yaml", "id: acme\nas2:\n  as2_id: ACME\n  certificates: [acme.pem]\n"+
		"as4:\n  party_id: urn:acme\n  certificates: [acme.pem]\n  pmodes: [{id: p}]\n")
	writeFile(t, dir, "plain.yaml", "id: plain\nas2:\n  as2_id: PLAIN\n  require_signature: false\n  require_encryption: false\n"+
		"as4:\n  party_id: urn:plain\n  certificates: [acme.pem]\n  require_encryption: false\n  pmodes: [{id: p}]\n")
	d, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]*Partner{}
	for _, p := range d.Partners {
		byID[p.ID] = p
	}
	if a := byID["acme"]; !a.AS2.RequireSignature || !a.AS2.RequireEncryption || !a.AS4.RequireEncryption {
		t.Errorf("minimal partner: as2 signature %v encryption %v, as4 encryption %v; want all required",
			a.AS2.RequireSignature, a.AS2.RequireEncryption, a.AS4.RequireEncryption)
	}
	if p := byID["plain"]; p.AS2.RequireSignature || p.AS2.RequireEncryption || p.AS4.RequireEncryption {
		t.Error("the explicit opt-outs were not kept")
	}
	plain := filepath.Join(dir, "plain.yaml")
	for _, want := range []string{plain + ": as2.require_signature: false", plain + ": as2.require_encryption: false", plain + ": as4.require_encryption: false"} {
		n := 0
		for _, w := range d.Warnings {
			if strings.HasPrefix(w, want) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d warnings %q…, want 1; warnings: %q", n, want, d.Warnings)
		}
	}
	if len(d.Warnings) != 3 {
		t.Errorf("warnings %q, want the three opt-outs only", d.Warnings)
	}

	// Signatures are required by default: a partner without certificates
	// is an error that names the opt-out.
	dir = t.TempDir()
	writeFile(t, dir, "nocert.yaml", "id: nocert\nas2:\n  as2_id: NOCERT\n")
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "nocert.yaml: as2.certificates: at least one certificate") ||
		!strings.Contains(err.Error(), "require_signature: false") {
		t.Fatalf("partner without certificates: %v", err)
	}
}

// TestUnknownKeysNameFileLineAndNearestKey: a misspelt key is refused with
// the file, its line and the valid key it is closest to.
func TestUnknownKeysNameFileLineAndNearestKey(t *testing.T) {
	dir := t.TempDir()
	writeCert(t, dir, "acme.pem")
	writeFile(t, dir, "acme.yaml", "id: acme\nas2:\n  as2_id: ACME\n  certificates: [acme.pem]\n  dedup_windw: 7d\n"+
		"as4:\n  party_id: urn:acme\n  certificates: [acme.pem]\n  pmodes:\n    - id: p\n      acton: Deliver\n  revocaton: {mode: off}\nleese: 1\n")
	_, err := Load(dir)
	if err == nil {
		t.Fatal("misspelt keys accepted")
	}
	file := filepath.Join(dir, "acme.yaml")
	for _, want := range []string{
		file + `:5: unknown key "as2.dedup_windw" (did you mean "as2.dedup_window"?)`,
		file + `:11: unknown key "as4.pmodes[0].acton" (did you mean "as4.pmodes[0].action"?)`,
		file + `:12: unknown key "as4.revocaton" (did you mean "as4.revocation"?)`,
		file + `:13: unknown key "leese"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error\n%v\ndoes not say\n%s", err, want)
		}
	}
	if strings.Contains(err.Error(), `"leese" (did you mean`) {
		t.Errorf("a key far from every valid one got a suggestion: %v", err)
	}
}

// TestTrustCAWithoutSubjectIsWarned: trust: ca without certificate_subject
// (or party_id_is_cn) takes any certificate of the CA for the partner's; it
// is a warning, the bound forms are not.
func TestTrustCAWithoutSubjectIsWarned(t *testing.T) {
	dir := t.TempDir()
	writeCert(t, dir, "root.pem")
	writeFile(t, dir, "open.yaml", "id: open\nas2:\n  as2_id: OPEN\n  trust: ca\n  ca_certificates: [root.pem]\n")
	writeFile(t, dir, "bound.yaml", "id: bound\nas2:\n  as2_id: BOUND\n  trust: ca\n  ca_certificates: [root.pem]\n  certificate_subject: \"CN=Bound\"\n"+
		"as4:\n  party_id: urn:bound\n  trust: ca\n  ca_certificates: [root.pem]\n  party_id_is_cn: true\n  pmodes: [{id: p}]\n")
	d, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(dir, "open.yaml") + ": as2.trust: ca without certificate_subject accepts a signature by any certificate its CAs issue"
	if len(d.Warnings) != 1 || !strings.HasPrefix(d.Warnings[0], want) {
		t.Fatalf("warnings %q, want one %q…", d.Warnings, want)
	}
}
