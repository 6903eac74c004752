package server

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	as2client "github.com/edigateway/gateway/as2/client"
	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/as4/client"
	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/internal/testpki"
)

// Two local identities through the real HTTP server: GW / urn:gw (the
// identity block, PEM key) and GW2 / urn:gw2 (identities[0], its key in a
// PKCS#12 file whose password comes from an environment variable). A
// partner addressing each gets an MDN (AS2-To) or a receipt (eb:To) signed
// by that identity's key, and the other identity's certificate does not
// verify it; each identity decrypts what is encrypted to it.
func TestTwoIdentitiesSignWithTheAddressedKey(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("openssl not installed (CI needs it to verify with another implementation)")
		}
		t.Skip("openssl not installed")
	}
	keys := testpki.RSAKeys(t, 4)
	dir := t.TempDir()
	pdir := filepath.Join(dir, "partners")
	os.Mkdir(pdir, 0o750)
	gw1 := testpki.SelfSigned(t, keys[0], testpki.Cert{CommonName: "gateway one", Serial: 1})
	gw2 := testpki.SelfSigned(t, keys[1], testpki.Cert{CommonName: "gateway two", Serial: 2})
	acme := testpki.SelfSigned(t, keys[2], testpki.Cert{CommonName: "acme", Serial: 3})
	testpki.WriteKeyPair(t, dir, "gw1", gw1, keys[0])
	c2, k2 := testpki.WriteKeyPair(t, dir, "gw2", gw2, keys[1])
	if out, err := exec.Command("openssl", "pkcs12", "-export", "-inkey", k2, "-in", c2, "-passout", "pass:two", "-out", filepath.Join(dir, "gw2.p12")).CombinedOutput(); err != nil {
		t.Fatalf("openssl: %v\n%s", err, out)
	}
	os.Remove(k2)
	t.Setenv("GW_TEST_GW2_PASSWORD", "two")
	os.WriteFile(filepath.Join(pdir, "acme.pem"), testpki.CertPEM(acme), 0o600)
	// ACME's agreement with GW, and with GW2 (our_as2_id); one AS4 party
	// whose P-Mode (no to_party_id) may address either of our parties.
	os.WriteFile(filepath.Join(pdir, "acme.yaml"), []byte(`id: acme
as2:
  as2_id: ACME
  certificates: [acme.pem]
  require_signature: true
as4:
  party_id: urn:acme
  certificates: [acme.pem]
  pmodes:
    - id: invoices
      service: urn:invoicing
      action: Deliver
`), 0o600)
	os.WriteFile(filepath.Join(pdir, "acme-gw2.yaml"), []byte("id: acme-gw2\nas2:\n  as2_id: ACME\n  our_as2_id: GW2\n  certificates: [acme.pem]\n  require_signature: true\n"), 0o600)
	cfgFile := filepath.Join(dir, "gateway.yaml")
	os.WriteFile(cfgFile, []byte(`store: sqlite:gw.db
partners: partners
identity:
  as2_id: GW
  party_id: urn:gw
  keys:
    - cert: gw1.crt
      key: gw1.key
identities:
  - as2_id: GW2
    party_id: urn:gw2
    keys:
      - key: gw2.p12
        key_password_env: GW_TEST_GW2_PASSWORD
handler:
  inbox: inbox
quarantine_dir: quarantine
archive_dir: archive
shutdown_timeout: 5s
drain_period: 0s
reload_on_change: false
admin:
  listen: 127.0.0.1:0
`), 0o600)
	cfg, err := config.Load(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	defer func() { cancel(); <-done }()

	n := 0
	sendAS2 := func(to string, encryptTo, mdnCert *x509.Certificate) string {
		n++
		c := &as2client.Client{URL: url + "/as2", From: "ACME", To: to, SignCert: acme, SignKey: keys[2], SignDigest: "sha256",
			MDN: as2client.MDNSync, SignedMDN: true, MDNCerts: []*x509.Certificate{mdnCert},
			RecipientCerts: []*x509.Certificate{encryptTo}, Cipher: "aes256-cbc"}
		m, err := c.Prepare([]byte(fmt.Sprintf("<Invoice>%d</Invoice>", n)), "application/xml", "i.xml")
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Send(context.Background(), m)
		if err != nil {
			return err.Error()
		}
		if !res.OK() {
			return strings.Join(res.Problems, "; ")
		}
		return ""
	}
	sendAS4 := func(to string, encryptTo, receiptCert *x509.Certificate) string {
		n++
		c := &client.Client{Signer: keys[2], Certificate: acme, ReceiptSigners: []*x509.Certificate{receiptCert},
			Encryption: &client.Encryption{Recipient: encryptTo}}
		_, resp, err := c.Send(context.Background(), url+"/as4", &client.Message{
			From: as4.PartyID{Value: "urn:acme"}, To: as4.PartyID{Value: to}, Service: "urn:invoicing", Action: "Deliver",
			Payloads: []client.Payload{{MimeType: "application/xml", Data: []byte(fmt.Sprintf("<Invoice>%d</Invoice>", n))}},
		})
		if err != nil {
			return err.Error()
		}
		if resp.Receipt == nil {
			return "no receipt"
		}
		return ""
	}
	for _, tc := range []struct {
		to2, to4    string
		mine, other *x509.Certificate
	}{{"GW", "urn:gw", gw1, gw2}, {"GW2", "urn:gw2", gw2, gw1}} {
		if why := sendAS2(tc.to2, tc.mine, tc.mine); why != "" {
			t.Errorf("AS2 to %s, MDN checked with its certificate: %s", tc.to2, why)
		}
		if why := sendAS2(tc.to2, tc.mine, tc.other); why == "" {
			t.Errorf("AS2 to %s: the MDN verified with the other identity's certificate", tc.to2)
		}
		if why := sendAS4(tc.to4, tc.mine, tc.mine); why != "" {
			t.Errorf("AS4 to %s, receipt checked with its certificate: %s", tc.to4, why)
		}
		if why := sendAS4(tc.to4, tc.mine, tc.other); why == "" {
			t.Errorf("AS4 to %s: the receipt verified with the other identity's certificate", tc.to4)
		}
	}

	// A rollover of the second identity's key on reload: the new .p12
	// signs; the first identity is untouched.
	gw3 := testpki.SelfSigned(t, keys[3], testpki.Cert{CommonName: "gateway two 2027", Serial: 4})
	c3, k3 := testpki.WriteKeyPair(t, dir, "gw3", gw3, keys[3])
	if out, err := exec.Command("openssl", "pkcs12", "-export", "-inkey", k3, "-in", c3, "-passout", "pass:two", "-out", filepath.Join(dir, "gw2.p12")).CombinedOutput(); err != nil {
		t.Fatalf("openssl: %v\n%s", err, out)
	}
	if err := s.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if why := sendAS2("GW2", gw3, gw3); why != "" {
		t.Errorf("AS2 to GW2 after the rollover: %s", why)
	}
	if why := sendAS4("urn:gw2", gw3, gw3); why != "" {
		t.Errorf("AS4 to urn:gw2 after the rollover: %s", why)
	}
	if why := sendAS4("urn:gw", gw1, gw1); why != "" {
		t.Errorf("AS4 to urn:gw after the rollover: %s", why)
	}
}
