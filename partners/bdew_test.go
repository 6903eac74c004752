package partners

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/internal/brainpool/bptest"
)

func bdewPartner(extra string) string {
	return `id: stadtwerke
as4:
  profile: bdew
  party_id: "9900000000002"
  certificates: [sw-sig.pem]
  tls_certificates: [sw-tls.pem]
  pmodes:
    - id: mp
      service: https://www.bdew.de/as4/communication/services/MP
` + extra
}

func TestBDEWProfileDefaults(t *testing.T) {
	dir := t.TempDir()
	pki := bptest.New(t)
	sig := pki.Issue("sw-sig", "/CN=9900000000002.sig", "digitalSignature")
	b, _ := os.ReadFile(sig.CertFile)
	writeFile(t, dir, "sw-sig.pem", string(b))
	tlsPEM, _ := os.ReadFile(pki.Issue("sw-tls", "/CN=9900000000002.tls", "digitalSignature").CertFile)
	writeFile(t, dir, "sw-tls.pem", string(tlsPEM))
	writeFile(t, dir, "sw.yaml", bdewPartner(""))
	d, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := d.ByAS4(PartyTypeGLN, "9900000000002")
	if !ok {
		t.Fatal("bdew partner not found under the GLN party type")
	}
	a := p.AS4
	if !a.IsBDEW() || !a.RequireEncryption || a.RetryWindow.Std() != 72*time.Hour || a.DedupWindow.Std() < 72*time.Hour {
		t.Fatalf("defaults: %+v", a)
	}
	if certs := d.AS4Certificates(p); len(certs) != 1 {
		t.Fatalf("%d certificates", len(certs))
	}
}

func TestBDEWProfileCannotBeRelaxed(t *testing.T) {
	pki := bptest.New(t)
	sig := pki.Issue("sw-sig", "/CN=9900000000002.sig", "digitalSignature")
	brainpoolPEM, _ := os.ReadFile(sig.CertFile)
	tlsPEM, _ := os.ReadFile(pki.Issue("sw-tls", "/CN=9900000000002.tls", "digitalSignature").CertFile)
	for name, c := range map[string]struct {
		file  string
		field string
	}{
		"encryption off":     {bdewPartner("  require_encryption: false\n"), "as4.require_encryption"},
		"short window":       {bdewPartner("  dedup_window: 24h\n"), "as4.dedup_window"},
		"window below retry": {bdewPartner("  dedup_window: 4d\n  retry_window: 5d\n"), "as4.dedup_window"},
		"foreign party type": {strings.Replace(bdewPartner(""), "  party_id:", "  party_type: urn:oasis:names:tc:ebcore:partyid-type:unregistered\n  party_id:", 1), "as4.party_type"},
		"not a 13-digit id":  {strings.Replace(bdewPartner(""), `"9900000000002"`, "urn:stadtwerke", 1), "as4.party_id"},
		"unknown profile":    {strings.Replace(bdewPartner(""), "profile: bdew", "profile: bdew2", 1), "as4.profile"},
		"non-brainpool cert": {strings.Replace(bdewPartner(""), "sw-sig.pem", "p256.pem", 1), "as4.certificates"},
		"no mutual TLS":      {strings.Replace(bdewPartner(""), "  tls_certificates: [sw-tls.pem]\n", "", 1), "as4.tls_certificates"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, "sw-sig.pem", string(brainpoolPEM))
			writeFile(t, dir, "sw-tls.pem", string(tlsPEM))
			writeFile(t, dir, "sw-tls.pem", string(tlsPEM))
			writeCert(t, dir, "p256.pem")
			writeFile(t, dir, "sw.yaml", c.file)
			_, err := Load(dir)
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != c.field {
				t.Fatalf("err = %v, want a %s field error", err, c.field)
			}
		})
	}
	// require_encryption: true is allowed (it is the floor).
	dir := t.TempDir()
	writeFile(t, dir, "sw-sig.pem", string(brainpoolPEM))
	writeFile(t, dir, "sw-tls.pem", string(tlsPEM))
	writeFile(t, dir, "sw.yaml", bdewPartner("  require_encryption: true\n  dedup_window: 7d\n"))
	if _, err := Load(dir); err != nil {
		t.Fatal(err)
	}
}
