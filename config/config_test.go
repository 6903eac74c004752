package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func write(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadFileResolvesPathsAndParsesDurations(t *testing.T) {
	p := write(t, `
listen: ":9999"
store: sqlite:data/gw.db
lease: 2m
partners: partners
identity:
  as2_id: GATEWAY
  keys:
    - cert: keys/a.pem
      key: keys/a.key
handler:
  type: dir
  inbox: inbox
`)
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(p)
	if c.Listen != ":9999" || c.Lease != 2*time.Minute || c.Identity.AS2ID != "GATEWAY" {
		t.Fatalf("unexpected %+v", c)
	}
	if c.Store != "sqlite:"+filepath.Join(dir, "data/gw.db") {
		t.Errorf("store = %q", c.Store)
	}
	if c.Identity.Keys[0].Cert != filepath.Join(dir, "keys/a.pem") || c.Partners != filepath.Join(dir, "partners") {
		t.Errorf("paths not resolved: %+v", c)
	}
	if c.Retention != 90*24*time.Hour || c.AS2.Path != "/as2" || c.Limits.MaxBodyBytes != 100<<20 {
		t.Errorf("defaults missing: %+v", c)
	}
}

func TestEnvironmentOverrides(t *testing.T) {
	p := write(t, "listen: \":9999\"\nstore: \"memory:\"\n")
	t.Setenv("GATEWAY_LISTEN", "127.0.0.1:7000")
	t.Setenv("GATEWAY_STORE", "postgres://u:secret@db/x")
	t.Setenv("GATEWAY_HANDLER_INBOX", "/srv/inbox")
	t.Setenv("GATEWAY_LEASE", "90s")
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:7000" || c.Store != "postgres://u:secret@db/x" || c.Handler.Inbox != "/srv/inbox" || c.Lease != 90*time.Second {
		t.Fatalf("env not applied: %+v", c)
	}
	if got := c.Redacted(); got != "postgres://u:***@db/x" {
		t.Errorf("redacted = %q", got)
	}
}

func TestUnknownKeysAndBadValuesAreErrors(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"listen: x\nstroe: x\n", "stroe"},
		{"store: mysql://x\n", "store"},
		{"lease: 10ms\n", "lease"},
		{"handler:\n  type: s3\n", "handler.type"},
		{"tls:\n  cert: a.pem\n", "tls"},
		{"as2:\n  path: as2\n", "as2.path"},
		{"log_level: loud\n", "log_level"},
	} {
		_, err := Load(write(t, tc.body))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want mention of %q", tc.body, err, tc.want)
		}
	}
}

func TestDefaultsAndEnvironmentStayRelativeToWorkingDirectory(t *testing.T) {
	p := write(t, "handler:\n  inbox: in\n")
	t.Setenv("GATEWAY_AUDIT_FILE", "var/audit.jsonl")
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.Handler.Inbox != filepath.Join(filepath.Dir(p), "in") {
		t.Errorf("file value not resolved: %q", c.Handler.Inbox)
	}
	if c.QuarantineDir != "var/quarantine" || c.Audit.File != "var/audit.jsonl" || c.Store != "sqlite:var/gateway.db" {
		t.Errorf("default/env paths moved: %q %q %q", c.QuarantineDir, c.Audit.File, c.Store)
	}
}

func TestCertWarningAndReloadOnChange(t *testing.T) {
	c, err := Load(write(t, "partners: p\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.CertWarning != 30*24*time.Hour || !c.ReloadOnChange {
		t.Fatalf("defaults: cert_warning %s, reload_on_change %v", c.CertWarning, c.ReloadOnChange)
	}
	c, err = Load(write(t, "cert_warning: 72h\nreload_on_change: false\n"))
	if err != nil || c.CertWarning != 72*time.Hour || c.ReloadOnChange {
		t.Fatalf("%v %+v", err, c)
	}
	if _, err := Load(write(t, "cert_warning: -1h\n")); err == nil || !strings.Contains(err.Error(), "cert_warning") {
		t.Fatalf("negative cert_warning: %v", err)
	}
}

func TestForwardedClientCertificateSettings(t *testing.T) {
	c, err := Load(write(t, "as4:\n  client_cert_header: X-SSL-Client-Cert\n  trusted_proxies: [10.1.2.3, \"192.168.0.0/16\", \"::1\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := ParseProxies(c.AS4.TrustedProxies)
	if err != nil || len(p) != 3 || p[0].String() != "10.1.2.3/32" || p[1].String() != "192.168.0.0/16" || p[2].String() != "::1/128" {
		t.Fatalf("proxies %v, %v", p, err)
	}
	for _, tc := range []struct{ body, want string }{
		{"as4:\n  client_cert_header: X-SSL-Client-Cert\n", "as4.client_cert_header"},
		{"as4:\n  trusted_proxies: [proxy.example]\n", "as4.trusted_proxies"},
		{"as2:\n  client_cert_header: X\n", "as2.client_cert_header"},
	} {
		if _, err := Load(write(t, tc.body)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want mention of %q", tc.body, err, tc.want)
		}
	}
}
