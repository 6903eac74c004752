package server

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/edigateway/gateway/internal/testpki"
	"github.com/edigateway/gateway/internal/trust/trusttest"
	"github.com/edigateway/gateway/outbound"
)

// TestPickupTargetsCarryTheFilenameProperty: a partner's
// as4.send.filename_property reaches its pickup directories, whose
// sidecars may not give that property (the file name goes in it).
func TestPickupTargetsCarryTheFilenameProperty(t *testing.T) {
	root := trusttest.NewRoot(t, "Globex Root CA")
	pdir := t.TempDir()
	for name, text := range map[string][]byte{
		"root.pem": testpki.CertPEM(root.Cert),
		"globex.yaml": []byte("id: globex\nas2:\n  as2_id: GLOBEX\n  trust: ca\n  ca_certificates: [root.pem]\n" +
			"  send:\n    url: \"https://as2.globex.example/as2\"\n    cipher: none\n" +
			"as4:\n  party_id: urn:globex\n  trust: ca\n  ca_certificates: [root.pem]\n  pmodes: [{id: p}]\n" +
			"  send:\n    url: \"https://as4.globex.example/as4\"\n    encrypt: false\n    filename_property: FileName\n"),
	} {
		if err := os.WriteFile(filepath.Join(pdir, name), text, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := demoConfig(t)
	cfg.Partners = pdir
	s, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, tg := range s.pickupTargets() {
		if tg.Partner == "globex" {
			if !slices.Equal(tg.Protocols, []outbound.Protocol{outbound.AS2, outbound.AS4}) || tg.FilenameProperty != "FileName" {
				t.Fatalf("pickup target %+v, want as2 and as4 with FilenameProperty FileName", tg)
			}
			return
		}
	}
	t.Fatal("no pickup target for globex")
}
