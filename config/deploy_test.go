package config

import (
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestProductionExampleLoads loads deploy/gateway.yaml, the production
// example: HTTPS, an mTLS admin listener off loopback, PostgreSQL, paths
// resolved against /etc/gateway when installed there.
func TestProductionExampleLoads(t *testing.T) {
	t.Setenv("GATEWAY_ADMIN_TOKEN", "")
	_, file, _, _ := runtime.Caller(0)
	path := filepath.Join(filepath.Dir(file), "..", "deploy", "gateway.yaml")
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(path)
	for name, got := range map[string]string{
		"tls.cert": c.TLS.Cert, "tls.key": c.TLS.Key, "admin.tls.cert": c.Admin.TLS.Cert,
		"admin.tls.client_ca": c.Admin.TLS.ClientCA, "partners": c.Partners, "identity.keys[0].cert": c.Identity.Keys[0].Cert,
	} {
		if !strings.HasPrefix(got, dir) {
			t.Errorf("%s = %s, not resolved against the file's directory", name, got)
		}
	}
	if c.Listen != ":8443" || c.Admin.Listen != ":8079" || IsLoopback(c.Admin.Listen) || c.Admin.Token != "" {
		t.Errorf("listeners: %q %q token %q", c.Listen, c.Admin.Listen, c.Admin.Token)
	}
	if !strings.HasPrefix(c.Store, "postgres://") || !strings.Contains(c.Store, "schema=gateway") || !strings.Contains(c.Store, "sslmode=verify-full") {
		t.Errorf("store: %s", c.Store)
	}
	if len(c.Identity.Keys) != 2 || c.Audit.BestEffort || c.Handler.Inbox != "/var/lib/gateway/inbox" {
		t.Errorf("identity/audit/handler: %+v %+v %+v", c.Identity, c.Audit, c.Handler)
	}
	if strings.Contains(c.Redacted(), "***") {
		t.Error("the example carries a password in the store URL")
	}
}
