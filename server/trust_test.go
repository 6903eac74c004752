package server

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/internal/testpki"
)

// Our own expired certificate, or a short RSA key, is refused at start
// (naming the file, the certificate and its dates) and on reload, where the
// running configuration stays; identity.allow_weak_keys admits the short key.
func TestOwnExpiredOrShortKeyIsRefusedAtStartAndReload(t *testing.T) {
	keys := testpki.RSAKeys(t, 2)
	dir := t.TempDir()
	expired := testpki.SelfSigned(t, keys[0], testpki.Cert{CommonName: "gateway old", Serial: 0x77,
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	oldCert, oldKey := testpki.WriteKeyPair(t, dir, "old", expired, keys[0])
	weakKey, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	weakCert, weakKeyFile := testpki.WriteKeyPair(t, dir, "weak", testpki.SelfSigned(t, weakKey, testpki.Cert{CommonName: "gateway weak"}), weakKey)

	cfg := demoConfig(t)
	good := cfg.Identity.Keys
	cfg.Identity.Keys = append([]config.KeyPair{{Cert: oldCert, Key: oldKey}}, good...)
	if _, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler)); err == nil ||
		!strings.Contains(err.Error(), oldCert) || !strings.Contains(err.Error(), `"CN=gateway old" (serial 77) expired on`) {
		t.Fatalf("start with an expired identity certificate: %v", err)
	}
	cfg = demoConfig(t)
	cfg.Identity.Keys = append([]config.KeyPair{{Cert: weakCert, Key: weakKeyFile}}, good...)
	if _, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler)); err == nil ||
		!strings.Contains(err.Error(), weakCert) || !strings.Contains(err.Error(), "1024-bit RSA key") {
		t.Fatalf("start with a 1024-bit identity key: %v", err)
	}
	cfg.Identity.AllowWeakKeys = true
	s, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("identity.allow_weak_keys: %v", err)
	}
	s.Close()

	cfg = demoConfig(t)
	cfg.File = "" // reload re-reads the key files
	// Copies of the demo key pair that the test may overwrite.
	cfg.Identity.Keys = []config.KeyPair{{Cert: filepath.Join(dir, "gw.pem"), Key: filepath.Join(dir, "gw.key")}}
	if err := copyFile(good[0].Cert, cfg.Identity.Keys[0].Cert); err != nil {
		t.Fatal(err)
	}
	if err := copyFile(good[0].Key, cfg.Identity.Keys[0].Key); err != nil {
		t.Fatal(err)
	}
	s, err = New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	before := s.Current()
	// The certificate file now holds the expired certificate.
	if err := copyFile(oldCert, cfg.Identity.Keys[0].Cert); err != nil {
		t.Fatal(err)
	}
	if err := copyFile(oldKey, cfg.Identity.Keys[0].Key); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(context.Background()); err == nil || !strings.Contains(err.Error(), "expired on") {
		t.Fatalf("reload with an expired identity certificate: %v", err)
	}
	if s.Current() != before || s.ReloadStatus().OK {
		t.Fatalf("the running configuration was replaced: %s", s.ReloadStatus())
	}
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o600)
}
