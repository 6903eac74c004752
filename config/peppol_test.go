package config

import (
	"path/filepath"
	"strings"
	"testing"
)

const peppolYAML = `
peppol:
  enabled: true
  ap_ca: [peppol/root.pem, peppol/ap-ca.pem]
  participants: ["0088:5790000435975", "iso6523-actorid-upis::0184:DK12345678"]
  revocation: {mode: crl, policy: soft, crl_urls: ["http://crl.example/ap.crl"]}
  reporter_id: POP000999
  country: DK
  report_dir: peppol/records
`

func TestPeppol(t *testing.T) {
	p := write(t, peppolYAML)
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(p)
	pp := c.Peppol
	if !pp.Enabled || pp.APCA[1] != filepath.Join(dir, "peppol/ap-ca.pem") || pp.ReportDir != filepath.Join(dir, "peppol/records") ||
		len(pp.Participants) != 2 || pp.Revocation.Mode != "crl" || pp.Revocation.Policy != "soft" || pp.Country != "DK" {
		t.Fatalf("peppol %+v", pp)
	}
	if c, err := Load(write(t, "peppol:\n  enabled: true\n  ap_ca: [a.pem]\n  participants: [\"0088:1\"]\n  report_dir: r\n")); err != nil ||
		c.Peppol.Revocation.Mode != "ocsp" || c.Peppol.Revocation.Policy != "hard" {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	for _, tc := range []struct{ from, to, want string }{
		{"ap_ca: [peppol/root.pem, peppol/ap-ca.pem]", "ap_ca: []", "peppol.ap_ca"},
		{`"0088:5790000435975", `, `"5790000435975", `, "peppol.participants[0]"},
		{"mode: crl", "mode: ldap", "peppol.revocation.mode"},
		{"policy: soft", "policy: maybe", "peppol.revocation.policy"},
		{"http://crl.example/ap.crl", "file:///etc/passwd", "peppol.revocation"},
		{"reporter_id: POP000999", "reporter_id: AP1", "peppol.reporter_id"},
		{"country: DK", "country: Denmark", "peppol.country"},
		{"  report_dir: peppol/records\n", "", "peppol.report_dir"},
	} {
		body := strings.Replace(peppolYAML, tc.from, tc.to, 1)
		if body == peppolYAML {
			t.Fatalf("%q not replaced", tc.from)
		}
		if _, err := Load(write(t, body)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v", tc.want, err)
		}
	}
}
