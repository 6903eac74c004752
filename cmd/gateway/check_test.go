package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPartnersCheckReportsEveryProblem: partners check reports every
// problem of every partner file in one run (unknown keys with their line,
// each invalid field, a value of the wrong type, each certificate file that
// cannot be read, a duplicate id, the trust section's problems), lists the
// partners that are fine, counts the errors and exits 1.
func TestPartnersCheckReportsEveryProblem(t *testing.T) {
	dir := t.TempDir()
	pem, err := os.ReadFile(filepath.Join(filepath.Dir(demoConfig(t)), "partners", "demo-partner.pem"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"demo-partner.pem": string(pem),
		"a.yaml": `id: acme
on_drift: maybe
colour: red
as2:
  as2_id: ACME
  certificates: [missing-1.pem, missing-2.pem]
  duplicate_disposition: sometimes
  dedup_window: 7x
as4:
  party_id: urn:acme
  certificates: [demo-partner.pem]
`,
		"b.yaml": "id: good\nas2:\n  as2_id: GOOD\n  certificates: [demo-partner.pem]\n",
		"c.yaml": "id: good\nas2:\n  as2_id: OTHER\n  certificates: [demo-partner.pem]\n",
		"d.yaml": `id: delta
as4:
  party_id: urn:delta
  certificates: [missing-3.pem]
  trust: ca
  extended_key_usage: [sometimes]
  pmodes: [{id: x}, {id: x}]
`,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var out, errb bytes.Buffer
	code := run([]string{"partners", "check", "-dir", dir}, &out, &errb)
	a, c, d := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "c.yaml"), filepath.Join(dir, "d.yaml")
	wants := []string{
		"error: " + a + `:3: unknown key "colour"`,
		"error: " + a + `: on_drift: "maybe" is not one of reject, quarantine, accept`,
		"error: " + a + `: as2.duplicate_disposition: "sometimes" is not one of warning, processed`,
		`line 8: invalid duration "7x"`,
		"error: " + a + ": as2.certificates[0]: ", "missing-1.pem",
		"error: " + a + ": as2.certificates[1]: ", "missing-2.pem",
		"error: " + a + ": as4.pmodes: at least one pmode is required",
		"error: " + c + `: id: "good" is also the id of ` + filepath.Join(dir, "b.yaml"),
		"error: " + d + ": as4.ca_certificates: trust: ca needs at least one CA certificate",
		"error: " + d + `: as4.extended_key_usage[0]: "sometimes" is not one of`,
		"error: " + d + `: as4.pmodes[1].id: "x" is used twice`,
		"error: " + d + ": as4.certificates[0]: ", "missing-3.pem",
		"ok good: [as2 GOOD",
		"1 partners, 1 warnings, 12 errors",
	}
	for _, want := range wants {
		if !strings.Contains(out.String(), want) {
			t.Errorf("partners check output lacks %q", want)
		}
	}
	if code != 1 || !strings.Contains(errb.String(), "12 problems in partner files") {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
	if t.Failed() {
		t.Logf("stdout:\n%s", out.String())
	}
}
