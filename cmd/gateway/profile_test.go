package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// profileFixture is a configuration with public_url and two partners: the
// fixture's demo (AS2 and AS4) and acme, an AS4 partner whose P-Mode names
// an agreement and our party, that opts out of encryption.
func profileFixture(t *testing.T) string {
	t.Helper()
	fixture := filepath.Dir(demoConfig(t))
	pdir := t.TempDir()
	for _, f := range []string{"demo.yaml", "demo-partner.pem"} {
		b, err := os.ReadFile(filepath.Join(fixture, "partners", f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "demo.yaml" {
			b = bytes.Replace(b, []byte("  duplicate_disposition: warning\n"), []byte("  duplicate_disposition: warning\n  allowed_digests: [sha256, sha512]\n  allowed_ciphers: [aes256-gcm]\n"), 1)
		}
		os.WriteFile(filepath.Join(pdir, f), b, 0o600)
	}
	os.WriteFile(filepath.Join(pdir, "acme.yaml"), []byte(`id: acme
name: ACME Energy
as4:
  party_id: "4012345000009"
  party_type: urn:oasis:names:tc:ebcore:partyid-type:iso6523:0088
  certificates: [demo-partner.pem]
  require_encryption: false
  pmodes:
    - id: acme-orders
      agreement: urn:acme:agreement:2026
      service: urn:acme:orders
      service_type: urn:acme:services
      action: Submit
      to_party_id: urn:demo:gateway
      to_party_type: urn:oasis:names:tc:ebcore:partyid-type:unregistered
`), 0o600)
	return operatorConfig(t, pdir, "public_url: https://edi.example.com/gw/\n")
}

// opensslField is `openssl x509 -noout ARG`'s value (after "=").
func opensslField(t *testing.T, pem string, arg ...string) string {
	t.Helper()
	if _, err := exec.LookPath("openssl"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("openssl not installed")
		}
		t.Skip("openssl not installed")
	}
	out, err := exec.Command("openssl", append([]string{"x509", "-noout", "-in", pem}, arg...)...).Output()
	if err != nil {
		t.Fatalf("openssl x509 %v: %v", arg, err)
	}
	_, v, _ := strings.Cut(strings.TrimSpace(string(out)), "=")
	return v
}

// TestPartnersProfile: `gateway partners profile` prints, for one partner
// or every partner, what the partner needs to set up their side: our AS2
// id and AS4 party, the URLs from public_url, our certificate as PEM with
// the SHA-256 and SHA-1 fingerprints and serial openssl shows, its subject
// and expiry, the algorithms and security the agreement accepts, the MDN
// and receipt options and the P-Modes; as text and as JSON. An unknown
// partner is an error (exit 1) naming the partners there are.
func TestPartnersProfile(t *testing.T) {
	cfg := profileFixture(t)
	gwPEM := filepath.Join(filepath.Dir(demoConfig(t)), "keys", "gateway.pem")
	sha256FP := opensslField(t, gwPEM, "-fingerprint", "-sha256")
	sha1FP := opensslField(t, gwPEM, "-fingerprint", "-sha1")
	serial := opensslField(t, gwPEM, "-serial")
	pemBytes, _ := os.ReadFile(gwPEM)
	pemBody := strings.Split(strings.TrimSpace(string(pemBytes)), "\n")[1] // a line of the base64

	var out, errb bytes.Buffer
	if code := run([]string{"partners", "profile", "-config", cfg, "-partner", "demo"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	text := out.String()
	for _, want := range []string{
		"partner demo (Demo Partner",
		"their AS2 id (AS2-From):   DEMO",
		"our AS2 id (AS2-To):       GATEWAY",
		"URL:                       https://edi.example.com/gw/as2",
		"URL:                       https://edi.example.com/gw/as4",
		"messages must be:          signed, encrypted",
		"signature digests:         sha256, sha512",
		"content ciphers:           aes256-gcm",
		"key transport:             rsaEncryption (PKCS#1 v1.5), RSAES-OAEP",
		"MDN:                       sync or async",
		"async MDN URL:           http://127.0.0.1:8078/mdn",
		"MDN micalg:                sha256, sha512",
		"signed MDN:", "processed/warning: duplicate-document",
		"their party (eb:From):     urn:demo:partner (type urn:oasis:names:tc:ebcore:partyid-type:unregistered)",
		"our party (eb:To):         urn:demo:gateway (type urn:oasis:names:tc:ebcore:partyid-type:unregistered)",
		"P-Mode demo-invoice:       service urn:demo:invoicing, action Deliver, agreement (any)",
		"signature methods:         rsa-sha256",
		"receipt:                   synchronous (on the HTTP response), signed, with NonRepudiationInformation",
		"subject:  CN=gateway demo (do not use in production)",
		"serial:   " + serial,
		"SHA-256:  " + sha256FP,
		"SHA-1:    " + sha1FP,
		"valid:    2026-11-30 to 2036-11-27",
		"-----BEGIN CERTIFICATE-----", pemBody,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("profile of demo lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "acme") || strings.Contains(text, "set public_url") {
		t.Errorf("profile -partner demo shows another partner or the listen note:\n%s", text)
	}

	// JSON, every partner.
	out.Reset()
	errb.Reset()
	if code := run([]string{"partners", "profile", "-config", cfg, "-json"}, &out, &errb); code != 0 {
		t.Fatalf("-json: exit %d: %s", code, errb.String())
	}
	var all []partnerProfile
	if err := json.Unmarshal(out.Bytes(), &all); err != nil || len(all) != 2 {
		t.Fatalf("-json: %v, %d profiles:\n%s", err, len(all), out.String())
	}
	acme, demo := all[0], all[1]
	if acme.Partner != "acme" || acme.AS2 != nil || acme.AS4 == nil || demo.Partner != "demo" || demo.AS2 == nil || demo.AS4 == nil {
		t.Fatalf("profiles: %+v", all)
	}
	a4 := acme.AS4
	if a4.TheirPartyID != "4012345000009" || a4.OurPartyID != "urn:demo:gateway" || a4.URL != "https://edi.example.com/gw/as4" ||
		!a4.RequireSignature || a4.RequireEncryption || a4.MutualTLS || len(a4.PModes) != 1 ||
		a4.PModes[0] != (pmodeInfo{ID: "acme-orders", Agreement: "urn:acme:agreement:2026", Service: "urn:acme:orders", ServiceType: "urn:acme:services",
			Action: "Submit", ToPartyID: "urn:demo:gateway", ToPartyType: "urn:oasis:names:tc:ebcore:partyid-type:unregistered"}) ||
		!a4.Receipt.Signed || !a4.Receipt.NonRepudiation || len(a4.Certificates) != 1 {
		t.Errorf("acme as4: %+v", a4)
	}
	c := demo.AS2.Certificates[0]
	if c.SHA256 != sha256FP || c.SHA1 != sha1FP || c.Serial != serial || c.PEM != string(pemBytes) ||
		c.NotAfter.Format("2006-01-02") != "2036-11-27" || !strings.Contains(c.Use, "signs") {
		t.Errorf("demo as2 certificate: %+v", c)
	}
	if a2 := demo.AS2; a2.OurAS2ID != "GATEWAY" || a2.TheirAS2ID != "DEMO" || !a2.RequireSignature || !a2.RequireEncryption ||
		strings.Join(a2.MDN.AsyncURLs, " ") != "http://127.0.0.1:8078/mdn" || strings.Join(a2.MDN.MICAlgs, " ") != "sha256 sha512" {
		t.Errorf("demo as2: %+v", a2)
	}

	// Without public_url the URL comes from listen, and the text says so.
	out.Reset()
	if code := run([]string{"partners", "profile", "-config", demoConfig(t), "-partner", "demo"}, &out, &errb); code != 0 ||
		!strings.Contains(out.String(), "set public_url to the address partners reach") {
		t.Errorf("fixture without public_url: exit %d:\n%s", code, out.String())
	}

	// An unknown partner.
	out.Reset()
	errb.Reset()
	if code := run([]string{"partners", "profile", "-config", cfg, "-partner", "nobody"}, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), `no partner "nobody"`) || !strings.Contains(errb.String(), "acme, demo") {
		t.Errorf("unknown partner: exit %d, stderr %q", code, errb.String())
	}
}

// TestPartnersProfileNamesTheSendingIdentity: an AS4 partner we send to as
// another identity (as4.send.from_party_id) than the one its messages
// address is told that party and that identity's certificates, which sign
// what we send; a partner we send to as the identity it addresses is not.
func TestPartnersProfileNamesTheSendingIdentity(t *testing.T) {
	fixture := filepath.Dir(demoConfig(t))
	pdir := t.TempDir()
	b, err := os.ReadFile(filepath.Join(fixture, "partners", "demo-partner.pem"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(pdir, "demo-partner.pem"), b, 0o600)
	partner := func(id, from string) string {
		return "id: " + id + "\nas4:\n  party_id: urn:" + id + "\n  certificates: [demo-partner.pem]\n  pmodes: [{id: inv}]\n" +
			"  send: {url: \"https://" + id + ".example/as4\"" + from + "}\n"
	}
	os.WriteFile(filepath.Join(pdir, "p1.yaml"), []byte(partner("p1", "")), 0o600)
	os.WriteFile(filepath.Join(pdir, "p2.yaml"), []byte(partner("p2", ", from_party_id: urn:gw2")), 0o600)
	cfg := operatorConfig(t, pdir, "public_url: https://edi.example.com/gw/\nidentities:\n  - as2_id: GW2\n    party_id: urn:gw2\n"+
		"    keys:\n      - cert: "+filepath.Join(fixture, "partners", "demo-partner.pem")+"\n        key: "+filepath.Join(fixture, "keys", "demo-partner.key")+"\n")
	var out, errb bytes.Buffer
	if code := run([]string{"partners", "profile", "-config", cfg, "-json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var all []partnerProfile
	if err := json.Unmarshal(out.Bytes(), &all); err != nil || len(all) != 2 {
		t.Fatalf("%v, %d profiles:\n%s", err, len(all), out.String())
	}
	p1, p2 := all[0].AS4, all[1].AS4
	if p1 == nil || p1.SendingAs != nil || len(p1.SendingCertificates) != 0 {
		t.Errorf("p1 (sent to as the identity it addresses): %+v", p1)
	}
	if p2 == nil || p2.SendingAs == nil || p2.SendingAs.ID != "urn:gw2" || len(p2.SendingCertificates) != 1 ||
		!strings.Contains(p2.SendingCertificates[0].Subject, "demo") || p2.SendingCertificates[0].SHA256 == p2.Certificates[0].SHA256 {
		t.Fatalf("p2 (sent to as urn:gw2): %+v", p2)
	}
	out.Reset()
	if code := run([]string{"partners", "profile", "-config", cfg, "-partner", "p2"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "we send to you as (eb:From): urn:gw2") {
		t.Errorf("text profile of p2:\n%s", out.String())
	}
}
