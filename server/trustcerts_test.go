package server

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/internal/testpki"
	"github.com/edigateway/gateway/internal/trust/trusttest"
	"github.com/edigateway/gateway/partners"
)

// The CA files of trust: ca partners and of the Peppol AP CA are listed
// with the snapshot's certificates (watched by reload_on_change, shown by
// the certificate metrics), and a CA file whose content changed makes the
// partner "changed" in the reload report.
func TestTrustCertificatesAreWatchedAndDiffed(t *testing.T) {
	dir := t.TempDir()
	root1, root2 := trusttest.NewRoot(t, "Root 1"), trusttest.NewRoot(t, "Root 2")
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("root.pem", testpki.CertPEM(root1.Cert))
	write("globex.yaml", []byte("id: globex\nas2:\n  as2_id: GLOBEX\n  trust: ca\n  ca_certificates: [root.pem]\n"))
	d1, err := partners.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	certs := trustCerts(d1, config.Peppol{Enabled: true, APCA: []string{filepath.Join(dir, "root.pem")}})
	if len(certs) != 2 || certs[0].Use != "as2-ca" || certs[0].File != filepath.Join(dir, "root.pem") ||
		certs[0].Config != filepath.Join(dir, "globex.yaml")+" as2.ca_certificates[0]" || certs[1].Use != "peppol-ca" || certs[1].Config != "peppol.ap_ca[0]" {
		t.Fatalf("trust certificates %+v", certs)
	}
	write("root.pem", testpki.CertPEM(root2.Cert))
	d2, err := partners.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, _, changed := diffPartners(&Snapshot{Partners: d1}, &Snapshot{Partners: d2})
	if len(changed) != 1 || changed[0] != "globex" {
		t.Fatalf("changed %v, want [globex]", changed)
	}
	if _, _, changed := diffPartners(&Snapshot{Partners: d2}, &Snapshot{Partners: d2}); len(changed) != 0 {
		t.Fatalf("unchanged reported %v", changed)
	}
}
