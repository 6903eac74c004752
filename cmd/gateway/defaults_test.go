package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// operatorConfig writes a gateway.yaml in a temporary directory: the demo
// identity, partners from pdir, and extra lines.
func operatorConfig(t *testing.T, pdir, extra string) string {
	t.Helper()
	demo := filepath.Dir(demoConfig(t))
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gateway.yaml")
	y := fmt.Sprintf("listen: 127.0.0.1:0\nstore: sqlite:var/gw.db\npartners: %s\nidentity:\n  as2_id: GATEWAY\n  party_id: urn:demo:gateway\n"+
		"  party_type: urn:oasis:names:tc:ebcore:partyid-type:unregistered\n  keys:\n    - cert: %s\n      key: %s\nhandler:\n  inbox: var/inbox\n%s",
		pdir, filepath.Join(demo, "keys", "gateway.pem"), filepath.Join(demo, "keys", "gateway.key"), extra)
	if err := os.WriteFile(cfg, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestNoPartnerFilesIsAnError: partners check run on a folder without
// partner files (here the partners package's Go sources, which ./partners
// is when run from the source tree) and serve on such a directory fail
// with "no partner files in <dir>", unless allowed explicitly
// (-allow-empty, allow_no_partners: true).
func TestNoPartnerFilesIsAnError(t *testing.T) {
	src, err := filepath.Abs(filepath.Join(filepath.Dir(filepath.Dir(demoConfig(t))), "..", "partners"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(src, "partners.go")); err != nil {
		t.Fatal(err)
	}
	want := "no partner files in " + src
	var out, errb bytes.Buffer
	if code := run([]string{"partners", "check", "-dir", src}, &out, &errb); code != 1 || !strings.Contains(errb.String(), want) {
		t.Fatalf("partners check -dir %s: exit %d, stdout %q, stderr %q; want exit 1 and %q", src, code, out.String(), errb.String(), want)
	}
	out.Reset()
	errb.Reset()
	if code := run([]string{"partners", "check", "-dir", src, "-allow-empty"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "0 partners") {
		t.Fatalf("partners check -allow-empty: exit %d, %s%s", code, out.String(), errb.String())
	}

	empty := t.TempDir()
	cfg := operatorConfig(t, empty, "")
	for _, args := range [][]string{{"partners", "check", "-config", cfg}, {"serve", "-check", "-config", cfg}} {
		out.Reset()
		errb.Reset()
		if code := run(args, &out, &errb); code != 1 || !strings.Contains(errb.String(), "no partner files in "+empty) {
			t.Errorf("%v: exit %d, stderr %q", args, code, errb.String())
		}
	}
	cfg = operatorConfig(t, empty, "allow_no_partners: true\n")
	for _, args := range [][]string{{"partners", "check", "-config", cfg}, {"serve", "-check", "-config", cfg}} {
		out.Reset()
		errb.Reset()
		if code := run(args, &out, &errb); code != 0 || !strings.Contains(out.String(), "0 partners") {
			t.Errorf("%v with allow_no_partners: exit %d, %s%s", args, code, out.String(), errb.String())
		}
	}
}

// TestOptOutsAreWarnedByCheckAndAtStart: a partner that accepts unsigned
// or unencrypted messages is a warning of partners check (printed and
// counted) and of serve's start (a WARN log line); the demo partner, which
// takes the secure defaults, has none.
func TestOptOutsAreWarnedByCheckAndAtStart(t *testing.T) {
	demo := filepath.Dir(demoConfig(t))
	pdir := t.TempDir()
	pem, err := os.ReadFile(filepath.Join(demo, "partners", "demo-partner.pem"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(pdir, "demo-partner.pem"), pem, 0o600)
	os.WriteFile(filepath.Join(pdir, "plain.yaml"), []byte("id: plain\nas2:\n  as2_id: PLAIN\n  require_signature: false\n  require_encryption: false\n"+
		"as4:\n  party_id: urn:plain\n  certificates: [demo-partner.pem]\n  require_encryption: false\n  pmodes: [{id: p}]\n"), 0o600)
	cfg := operatorConfig(t, pdir, "")
	file := filepath.Join(pdir, "plain.yaml")
	warnings := []string{
		file + `: as2.require_signature: false accepts unsigned messages: anyone who sends AS2-From "PLAIN" is taken for this partner`,
		file + `: as2.require_encryption: false accepts unencrypted messages from AS2-From "PLAIN"`,
		file + `: as4.require_encryption: false accepts messages from party "urn:plain" whose payloads are not encrypted`,
	}
	var out, errb bytes.Buffer
	if code := run([]string{"partners", "check", "-config", cfg}, &out, &errb); code != 0 {
		t.Fatalf("partners check: exit %d: %s", code, errb.String())
	}
	for _, w := range warnings {
		if !strings.Contains(out.String(), "warning: "+w) {
			t.Errorf("partners check does not warn %q:\n%s", w, out.String())
		}
	}
	if !strings.Contains(out.String(), "1 partners, 3 warnings, 0 errors") {
		t.Errorf("summary:\n%s", out.String())
	}
	out.Reset()
	errb.Reset()
	if code := run([]string{"serve", "-check", "-config", cfg}, &out, &errb); code != 0 {
		t.Fatalf("serve -check: exit %d: %s", code, errb.String())
	}
	for _, w := range warnings {
		if !strings.Contains(errb.String(), `"level":"WARN","msg":"partner configuration","warning":"`+strings.ReplaceAll(w, `"`, `\"`)) {
			t.Errorf("no WARN at start for %q:\n%s", w, errb.String())
		}
	}
	out.Reset()
	if code := run([]string{"partners", "check", "-config", demoConfig(t)}, &out, &errb); code != 0 || strings.Contains(out.String(), "warning:") {
		t.Errorf("demo partner: exit %d:\n%s", code, out.String())
	}
}

// TestServeCreatesTheAuditDirectory: the directory of audit.file is
// created like the SQLite store's; when it cannot be, the error names the
// resolved directory once.
func TestServeCreatesTheAuditDirectory(t *testing.T) {
	cfg := operatorConfig(t, filepath.Join(filepath.Dir(demoConfig(t)), "partners"), "audit:\n  file: var/audit/2026/audit.jsonl\n")
	var out, errb bytes.Buffer
	if code := run([]string{"serve", "-check", "-config", cfg}, &out, &errb); code != 0 {
		t.Fatalf("serve -check: exit %d: %s", code, errb.String())
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(cfg), "var", "audit", "2026", "audit.jsonl")); err != nil {
		t.Fatalf("audit file: %v", err)
	}

	dir := filepath.Dir(cfg)
	os.WriteFile(filepath.Join(dir, "blocker"), nil, 0o600) // a file where a directory should be
	cfg = filepath.Join(dir, "gateway2.yaml")
	b, _ := os.ReadFile(filepath.Join(dir, "gateway.yaml"))
	os.WriteFile(cfg, bytes.Replace(b, []byte("var/audit/2026/"), []byte("blocker/audit/"), 1), 0o600)
	errb.Reset()
	code := run([]string{"serve", "-check", "-config", cfg}, &out, &errb)
	want := "audit.file: cannot create its directory " + filepath.Join(dir, "blocker", "audit") + ": not a directory"
	if code != 1 || !strings.Contains(errb.String(), want) || strings.Count(errb.String(), filepath.Join(dir, "blocker")) != 1 {
		t.Fatalf("exit %d, stderr %q; want exit 1 and %q, the path once", code, errb.String(), want)
	}
}
