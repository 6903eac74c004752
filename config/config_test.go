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
	if c.Retention != 90*24*time.Hour || c.AS2.Path != "/as2" || c.Limits.MaxBodyBytes != 4<<30 {
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
		{"in_flight_retry_after: soon\n", "in_flight_retry_after"},
		{"in_flight_retry_after: 100ms\n", "in_flight_retry_after"},
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

func TestHostileInputLimits(t *testing.T) {
	c, err := Load(write(t, "store: \"memory:\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	l := c.Limits
	if l.MaxDecompressedBytes != 4<<30 || l.MaxCompressionRatio != 200 || l.MaxEnvelopeBytes != 4<<20 ||
		l.MemoryBudget != 1<<30 || l.MinBodyRate != 4096 || l.MinBodyRateGrace != 10*time.Second ||
		l.MemorySharePerSource != 50 || l.MemorySharePerPartner != 50 {
		t.Fatalf("defaults: %+v", l)
	}
	c, err = Load(write(t, "store: \"memory:\"\nlimits:\n  max_compression_ratio: 50.5\n  memory_budget: 67108864\n  min_body_rate_grace: 2s\n"))
	if err != nil || c.Limits.MaxCompressionRatio != 50.5 || c.Limits.MemoryBudget != 64<<20 || c.Limits.MinBodyRateGrace != 2*time.Second {
		t.Fatalf("from the file: %+v %v", c.Limits, err)
	}
	for _, body := range []string{"limits:\n  memory_budget: -1\n", "limits:\n  max_compression_ratio: -2\n",
		"limits:\n  max_decompressed_bytes: 0\n", "limits:\n  max_envelope_bytes: 0\n", "limits:\n  min_body_rate: -5\n",
		"limits:\n  memory_share_per_source: 101\n", "limits:\n  memory_share_per_partner: -1\n"} {
		if _, err := Load(write(t, body)); err == nil || !strings.Contains(err.Error(), "limits.") {
			t.Errorf("%q: %v", body, err)
		}
	}
	if l.MaxConnections != 0 || l.MaxConnectionsPerAddress != 0 || c.Admin.MaxConnections != 32 {
		t.Fatalf("connection defaults: %d %d %d", l.MaxConnections, l.MaxConnectionsPerAddress, c.Admin.MaxConnections)
	}
	for _, body := range []string{"limits:\n  max_connections: -1\n", "limits:\n  max_connections_per_address: -1\n", "admin:\n  max_connections: 0\n"} {
		if _, err := Load(write(t, body)); err == nil || !strings.Contains(err.Error(), "max_connections") {
			t.Errorf("%q: %v", body, err)
		}
	}
	t.Setenv("GATEWAY_LIMITS_MIN_BODY_RATE", "100")
	if c, err = Load(""); err != nil || c.Limits.MinBodyRate != 100 {
		t.Fatalf("from the environment: %v %v", c, err)
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

// A PKCS#12 key needs no cert; its password file is resolved against the
// configuration file; env and file together, an inline password and a pair
// without key are refused.
func TestKeyPasswordSources(t *testing.T) {
	p := write(t, `
identity:
  keys:
    - key: keys/gw.p12
      key_password_file: secrets/gw.pass
    - cert: keys/b.pem
      key: keys/b.p12
      key_password_env: GW_B_PASSWORD
`)
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(p)
	k := c.Identity.Keys
	if k[0].Cert != "" || k[0].Key != filepath.Join(dir, "keys/gw.p12") || k[0].Password().File != filepath.Join(dir, "secrets/gw.pass") ||
		k[1].Password().Env != "GW_B_PASSWORD" || k[1].Password().File != "" {
		t.Fatalf("keys %+v", k)
	}
	for body, want := range map[string]string{
		"identity:\n  keys:\n    - key: a.p12\n      key_password_env: X\n      key_password_file: y\n": "key_password_env and key_password_file are exclusive",
		"identity:\n  keys:\n    - key: a.p12\n      key_password: secret\n":                            "key_password",
		"identity:\n  keys:\n    - cert: a.pem\n":                                                       "identity.keys[0].key: required",
	} {
		if _, err := Load(write(t, body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", body, err, want)
		}
	}
}

// identities: paths resolved against the file, the identity block first,
// every pair labelled with its field; a name used twice and an identity
// without a name are refused.
func TestIdentities(t *testing.T) {
	p := write(t, `
identity:
  as2_id: GW
  keys:
    - {cert: a.pem, key: a.key}
identities:
  - as2_id: GW2
    party_id: urn:gw2
    keys:
      - {key: b.p12, key_password_file: b.pass}
`)
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(p)
	ids := c.AllIdentities()
	keys := c.AllKeys()
	if len(ids) != 2 || ids[0].AS2ID != "GW" || ids[1].PartyID != "urn:gw2" || len(keys) != 2 ||
		keys[1].Key != filepath.Join(dir, "b.p12") || keys[1].KeyPasswordFile != filepath.Join(dir, "b.pass") ||
		keys[0].Field != "identity.keys[0]" || keys[1].Field != "identities[0].keys[0]" {
		t.Fatalf("identities %+v keys %+v", ids, keys)
	}
	if f0, f1 := c.IdentityField(0), c.IdentityField(1); f0 != "identity" || f1 != "identities[0]" {
		t.Errorf("identity fields %q, %q", f0, f1)
	}
	c2, err := Load(write(t, "identities:\n  - as2_id: A\n  - as2_id: B\n"))
	if err != nil {
		t.Fatal(err)
	}
	if f0, f1 := c2.IdentityField(0), c2.IdentityField(1); f0 != "identities[0]" || f1 != "identities[1]" {
		t.Errorf("without the identity block: identity fields %q, %q", f0, f1)
	}
	for body, want := range map[string]string{
		"identity:\n  as2_id: GW\nidentities:\n  - as2_id: GW\n":  `identities[0].as2_id: "GW" is also another identity's`,
		"identities:\n  - party_id: urn:a\n  - party_id: urn:a\n": `identities[1].party_id: "urn:a"`,
		"identities:\n  - keys: [{cert: a.pem, key: a.key}]\n":    "identities[0]: as2_id or party_id required",
		"identities:\n  - as2_id: X\n    keys: [{cert: a.pem}]\n": "identities[0].keys[0].key: required",
	} {
		if _, err := Load(write(t, body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", body, err, want)
		}
	}
}

func TestInFlightRetryAfter(t *testing.T) {
	for body, want := range map[string]time.Duration{"": 0, "in_flight_retry_after: auto\n": 0, "in_flight_retry_after: 15s\n": 15 * time.Second} {
		c, err := Load(write(t, body))
		if err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		if got, err := c.InFlightRetryAfterFixed(); err != nil || got != want {
			t.Errorf("%q: %v %v, want %v", body, got, err, want)
		}
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

// A configuration written for the separate AS2 streaming cap still loads:
// max_streamed_body_bytes raises the body limit of both protocols.
func TestFormerStreamedBodyLimitLoads(t *testing.T) {
	p := write(t, "listen: \":9999\"\nstore: \"memory:\"\nlimits:\n  max_body_bytes: 104857600\n  max_streamed_body_bytes: 8589934592\n")
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.Limits.BodyLimit() != 8<<30 {
		t.Fatalf("body limit %d, want 8 GiB", c.Limits.BodyLimit())
	}
	c2, err := Load(write(t, "listen: \":9999\"\nstore: \"memory:\"\nlimits:\n  max_body_bytes: 1000\n"))
	if err != nil || c2.Limits.BodyLimit() != 1000 {
		t.Fatalf("body limit %d (%v), want 1000", c2.Limits.BodyLimit(), err)
	}
}

// drain_period: 5s by default, 0 turns the drain off, a negative period is
// refused.
func TestDrainPeriod(t *testing.T) {
	c, err := Load(write(t, "partners: p\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.DrainPeriod != 5*time.Second {
		t.Fatalf("default drain_period %s, want 5s", c.DrainPeriod)
	}
	c, err = Load(write(t, "drain_period: 0s\n"))
	if err != nil || c.DrainPeriod != 0 {
		t.Fatalf("drain_period 0: %v %s", err, c.DrainPeriod)
	}
	if _, err := Load(write(t, "drain_period: -1s\n")); err == nil || !strings.Contains(err.Error(), "drain_period") {
		t.Fatalf("negative drain_period: %v", err)
	}
}
