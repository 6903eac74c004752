package server

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edigateway/gateway/internal/testpki"
	"github.com/edigateway/gateway/internal/trust/trusttest"
)

// peppol.enabled wires a Peppol access point into the AS4 endpoint; an
// unreadable AP CA file refuses the start naming the setting.
func TestPeppolWiring(t *testing.T) {
	cfg := demoConfig(t)
	ca := trusttest.NewRoot(t, "Peppol AP TEST CA")
	caFile := filepath.Join(t.TempDir(), "ap-ca.pem")
	if err := os.WriteFile(caFile, testpki.CertPEM(ca.Cert), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Peppol.Enabled = true
	cfg.Peppol.APCA = []string{caFile}
	cfg.Peppol.Participants = []string{"0088:5790000435975"}
	cfg.Peppol.ReportDir = t.TempDir()
	s, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	snap := s.reload.current.Load()
	if snap.as4 == nil || s.peppolRecords == nil || s.peppolRecords.Dir != cfg.Peppol.ReportDir {
		t.Fatalf("peppol not wired: as4 %v, records %+v", snap.as4 != nil, s.peppolRecords)
	}
	s.Close()

	cfg = demoConfig(t)
	cfg.Peppol.Enabled = true
	cfg.Peppol.APCA = []string{filepath.Join(t.TempDir(), "missing.pem")}
	cfg.Peppol.Participants = []string{"0088:5790000435975"}
	cfg.Peppol.ReportDir = t.TempDir()
	if s, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "peppol.ap_ca[0]") {
		if s != nil {
			s.Close()
		}
		t.Fatalf("missing AP CA: %v", err)
	}
}
