package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestAdminDefaultsToLoopback(t *testing.T) {
	c, err := Load(write(t, "store: memory\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Admin.Listen != "127.0.0.1:8079" || c.Admin.Token != "" || c.Admin.Pprof || c.Admin.ReadyTimeout != 2*time.Second {
		t.Fatalf("admin defaults: %+v", c.Admin)
	}
}

func TestAdminRefusesOpenNonLoopbackListener(t *testing.T) {
	for _, addr := range []string{":9090", "0.0.0.0:9090", "192.0.2.10:9090", "[::]:9090"} {
		_, err := Load(write(t, "store: memory\nadmin:\n  listen: \""+addr+"\"\n"))
		if err == nil || !strings.Contains(err.Error(), "not a loopback address") {
			t.Errorf("%s without token or client CA: %v", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:9090", "localhost:9090", "[::1]:9090", "127.0.0.2:0"} {
		if _, err := Load(write(t, "store: memory\nadmin:\n  listen: \""+addr+"\"\n")); err != nil {
			t.Errorf("loopback %s: %v", addr, err)
		}
	}
}

func TestAdminTokenFromFileOrEnvironmentOnly(t *testing.T) {
	_, err := Load(write(t, "store: memory\nadmin:\n  listen: \":9090\"\n  token: inline-secret-0123456789\n"))
	if err == nil || !strings.Contains(err.Error(), "keep the token out of the file") {
		t.Fatalf("inline token: %v", err)
	}
	dir := t.TempDir()
	tok := filepath.Join(dir, "admin.token")
	os.WriteFile(tok, []byte("file-secret-0123456789\n"), 0o600)
	c, err := Load(write(t, "store: memory\nadmin:\n  listen: \":9090\"\n  token_file: "+tok+"\n"))
	if err != nil || c.Admin.Token != "file-secret-0123456789" {
		t.Fatalf("token_file: %v %+v", err, c)
	}
	t.Setenv("GATEWAY_ADMIN_TOKEN", "env-secret-0123456789")
	c, err = Load(write(t, "store: memory\nadmin:\n  listen: \":9090\"\n"))
	if err != nil || c.Admin.Token != "env-secret-0123456789" {
		t.Fatalf("GATEWAY_ADMIN_TOKEN: %v %+v", err, c)
	}
	t.Setenv("GATEWAY_ADMIN_TOKEN", "short")
	if _, err := Load(write(t, "store: memory\n")); err == nil || !strings.Contains(err.Error(), "shorter than 16") {
		t.Fatalf("short token: %v", err)
	}
}

func TestAdminClientCAAllowsNonLoopback(t *testing.T) {
	c, err := Load(write(t, "store: memory\nadmin:\n  listen: \":9443\"\n  tls:\n    cert: a.pem\n    key: a.key\n    client_ca: ca.pem\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !filepath.IsAbs(c.Admin.TLS.ClientCA) {
		t.Errorf("client_ca not resolved against the file: %s", c.Admin.TLS.ClientCA)
	}
	if _, err := Load(write(t, "store: memory\nadmin:\n  tls:\n    client_ca: ca.pem\n")); err == nil {
		t.Error("client_ca without a server certificate accepted")
	}
}
