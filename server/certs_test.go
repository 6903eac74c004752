package server

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edigateway/gateway/internal/testpki"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServeLogsCertificateFindings: serve judges the certificates at start
// (an expired partner certificate is named at ERROR), after a reload (a
// certificate expiring within cert_warning at WARN) and periodically.
func TestServeLogsCertificateFindings(t *testing.T) {
	keys := testpki.RSAKeys(t, 3)
	dir := t.TempDir()
	pdir := filepath.Join(dir, "partners")
	os.Mkdir(pdir, 0o750)
	os.WriteFile(filepath.Join(pdir, "old.pem"), testpki.CertPEM(testpki.SelfSigned(t, keys[1], testpki.Cert{CommonName: "old",
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})), 0o600)
	os.WriteFile(filepath.Join(pdir, "old.yaml"), []byte("id: old\nas2:\n  as2_id: OLD\n  certificates: [old.pem]\n"), 0o600)
	cfg := demoConfig(t)
	cfg.File = "" // reload re-reads the partner directory and key files only
	cfg.Partners = pdir
	cfg.ReloadOnChange = false
	var logs syncBuffer
	s, err := New(context.Background(), cfg, slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if l := logs.String(); !strings.Contains(l, `"level":"ERROR","msg":"certificate problem","owner":"partner old"`) ||
		!strings.Contains(l, "CN=old expired on") || !strings.Contains(l, filepath.Join(pdir, "old.pem")) {
		t.Fatalf("start-up log:\n%s", l)
	}

	os.WriteFile(filepath.Join(pdir, "soon.pem"), testpki.CertPEM(testpki.SelfSigned(t, keys[2], testpki.Cert{CommonName: "soon",
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(10 * 24 * time.Hour)})), 0o600)
	os.WriteFile(filepath.Join(pdir, "soon.yaml"), []byte("id: soon\nas2:\n  as2_id: SOON\n  certificates: [soon.pem]\n"), 0o600)
	if err := s.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if l := logs.String(); !strings.Contains(l, `"level":"WARN","msg":"certificate warning","owner":"partner soon"`) || !strings.Contains(l, "(in 9 days)") {
		t.Fatalf("log after reload:\n%s", l)
	}

	n := strings.Count(logs.String(), "CN=soon expires")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.runCertChecks(20 * time.Millisecond)(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(logs.String(), "CN=soon expires") < n+2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if strings.Count(logs.String(), "CN=soon expires") < n+2 {
		t.Fatalf("periodic check did not log again:\n%s", logs.String())
	}
}
