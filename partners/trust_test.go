package partners

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/edigateway/gateway/internal/trust"
)

const caPartner = `id: globex
as2:
  as2_id: GLOBEX
  trust: ca
  ca_certificates: [root.pem]
  intermediates: [ica.pem]
  certificate_subject: "CN=AS2 GLOBEX*,O=Globex*"
  extended_key_usage: [emailProtection]
  require_signature: true
  revocation: {mode: ocsp, policy: soft, ocsp_responder: "http://ocsp.globex.example/"}
as4:
  party_id: urn:globex
  trust: ca
  ca_certificates: [root.pem]
  party_id_is_cn: true
  revocation: {mode: both}
  pmodes: [{id: p}]
`

func TestTrustCA(t *testing.T) {
	dir := t.TempDir()
	writeCert(t, dir, "root.pem")
	writeCert(t, dir, "ica.pem")
	writeFile(t, dir, "globex.yaml", caPartner)
	d, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	p := d.Partners[0]
	pol := d.AS2Trust(p)
	if pol == nil || len(pol.Roots) != 1 || len(pol.Intermediates) != 1 || pol.Subject != "CN=AS2 GLOBEX*,O=Globex*" ||
		pol.Revocation.Mode != trust.ModeOCSP || pol.Revocation.Policy != trust.PolicySoft || len(pol.ExtKeyUsages) != 1 {
		t.Fatalf("as2 policy %+v", pol)
	}
	if a := d.AS4Trust(p); a == nil || a.Revocation.Policy != trust.PolicyHard || !p.AS4.PartyIDIsCN {
		t.Fatalf("as4 policy %+v", a)
	}
	writeFile(t, dir, "globex.yaml", acme)
	writeCert(t, dir, "acme-2025.pem")
	writeCert(t, dir, "acme-2026.pem")
	if d, err = Load(dir); err != nil || d.AS2Trust(d.Partners[0]) != nil || d.Partners[0].AS2.Trust.Model != "pinned" {
		t.Fatalf("pinned: %v", err)
	}
}

func TestTrustValidation(t *testing.T) {
	for _, tc := range []struct{ name, from, to, field string }{
		{"model", "trust: ca\n  ca_certificates: [root.pem]\n  intermediates", "trust: web\n  ca_certificates: [root.pem]\n  intermediates", "as2.trust"},
		{"no-ca", "  ca_certificates: [root.pem]\n  intermediates", "  intermediates", "as2.ca_certificates"},
		{"ca-file", "[root.pem]\n  intermediates", "[gone.pem]\n  intermediates", "as2.ca_certificates[0]"},
		{"pattern", "CN=AS2 GLOBEX*,O=Globex*", "XX=1", "as2.certificate_subject"},
		{"eku", "[emailProtection]", "[smime]", "as2.extended_key_usage[0]"},
		{"mode", "mode: ocsp", "mode: ldap", "as2.revocation.mode"},
		{"policy", "policy: soft", "policy: lenient", "as2.revocation.policy"},
		{"url", "http://ocsp.globex.example/", "file:///etc/passwd", "as2.revocation"},
		{"pinned-extra", "  trust: ca\n  ca_certificates: [root.pem]\n  party_id_is_cn", "  certificates: [root.pem]\n  party_id_is_cn", "as4.party_id_is_cn"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeCert(t, dir, "root.pem")
			writeCert(t, dir, "ica.pem")
			body := strings.Replace(caPartner, tc.from, tc.to, 1)
			if body == caPartner {
				t.Fatal("replacement did not apply")
			}
			writeFile(t, dir, "p.yaml", body)
			_, err := Load(dir)
			if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "p.yaml")) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("error %v does not name %q", err, tc.field)
			}
		})
	}
}
