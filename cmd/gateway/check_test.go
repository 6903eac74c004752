package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edigateway/gateway/internal/testpki"
	"github.com/edigateway/gateway/internal/trust/trusttest"
)

// TestPartnersCheckReportsEveryProblem: partners check reports every
// problem of every partner file in one run (unknown keys with their line,
// each invalid field, a value of the wrong type, each certificate file that
// cannot be read, a duplicate id, the trust section's problems), lists the
// partners that are fine, counts the errors and exits 1.
func TestPartnersCheckReportsEveryProblem(t *testing.T) {
	dir := t.TempDir()
	pem, err := os.ReadFile(filepath.Join(filepath.Dir(demoConfig(t)), "partners", "demo-partner.pem"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"demo-partner.pem": string(pem),
		"a.yaml": `id: acme
on_drift: maybe
colour: red
as2:
  as2_id: ACME
  certificates: [missing-1.pem, missing-2.pem]
  duplicate_disposition: sometimes
  dedup_window: 7x
as4:
  party_id: urn:acme
  certificates: [demo-partner.pem]
`,
		"b.yaml": "id: good\nas2:\n  as2_id: GOOD\n  certificates: [demo-partner.pem]\n",
		"c.yaml": "id: good\nas2:\n  as2_id: OTHER\n  certificates: [demo-partner.pem]\n",
		"d.yaml": `id: delta
as4:
  party_id: urn:delta
  certificates: [missing-3.pem]
  trust: ca
  extended_key_usage: [sometimes]
  pmodes: [{id: x}, {id: x}]
`,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var out, errb bytes.Buffer
	code := run([]string{"partners", "check", "-dir", dir}, &out, &errb)
	a, c, d := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "c.yaml"), filepath.Join(dir, "d.yaml")
	wants := []string{
		"error: " + a + `:3: unknown key "colour"`,
		"error: " + a + `: on_drift: "maybe" is not one of reject, quarantine, accept`,
		"error: " + a + `: as2.duplicate_disposition: "sometimes" is not one of warning, processed`,
		`line 8: invalid duration "7x"`,
		"error: " + a + ": as2.certificates[0]: ", "missing-1.pem",
		"error: " + a + ": as2.certificates[1]: ", "missing-2.pem",
		"error: " + a + ": as4.pmodes: at least one pmode is required",
		"error: " + c + `: id: "good" is also the id of ` + filepath.Join(dir, "b.yaml"),
		"error: " + d + ": as4.ca_certificates: trust: ca needs at least one CA certificate",
		"error: " + d + `: as4.extended_key_usage[0]: "sometimes" is not one of`,
		"error: " + d + `: as4.pmodes[1].id: "x" is used twice`,
		"error: " + d + ": as4.certificates[0]: ", "missing-3.pem",
		"ok good: [as2 GOOD",
		"1 partners, 1 warnings, 12 errors",
	}
	for _, want := range wants {
		if !strings.Contains(out.String(), want) {
			t.Errorf("partners check output lacks %q", want)
		}
	}
	if code != 1 || !strings.Contains(errb.String(), "12 problems in partner files") {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
	if t.Failed() {
		t.Logf("stdout:\n%s", out.String())
	}
}

// TestPartnersCheckShowsSendingSetUp: partners check prints how we send to
// each partner that has a send block (one line), nothing for partners we
// only receive from, and a warning for each sending opt-out.
func TestPartnersCheckShowsSendingSetUp(t *testing.T) {
	dir := t.TempDir()
	pem, err := os.ReadFile(filepath.Join(filepath.Dir(demoConfig(t)), "partners", "demo-partner.pem"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"demo-partner.pem": string(pem),
		"secure.yaml":      "id: secure\nas2:\n  as2_id: SECURE\n  certificates: [demo-partner.pem]\n  send: {url: \"https://secure.example/as2\"}\n",
		"weak.yaml": `id: weak
as2:
  as2_id: WEAK
  certificates: [demo-partner.pem]
  send: {url: "http://weak.example/as2", digest: none, cipher: none, mdn: none}
as4:
  party_id: urn:weak
  certificates: [demo-partner.pem]
  pmodes: [{id: p}]
  send: {url: "https://weak.example/as4", encrypt: false, receipt_required: false}
`,
		"unsignedmdn.yaml": "id: unsignedmdn\nas2:\n  as2_id: UMDN\n  certificates: [demo-partner.pem]\n  send: {url: \"https://u.example/as2\", signed_mdn: false}\n",
		"receiver.yaml":    "id: receiver\nas2:\n  as2_id: RECV\n  certificates: [demo-partner.pem]\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var out, errb bytes.Buffer
	code := run([]string{"partners", "check", "-dir", dir}, &out, &errb)
	weak, umdn := filepath.Join(dir, "weak.yaml"), filepath.Join(dir, "unsignedmdn.yaml")
	wants := []string{
		"send secure: as2 to https://secure.example/as2 (signed sha256, encrypted aes256-cbc, sync signed MDN; timeout 5m0s; retry 1m0s ×2 up to 1h0m0s apart for 72h0m0s) as our first identity\n",
		"send weak: as2 to http://weak.example/as2 (unsigned, unencrypted, no MDN; ",
		"; as4 to https://weak.example/as4 (signed, unencrypted, compressed, no receipt required; ",
		"send unsignedmdn: as2 to https://u.example/as2 (signed sha256, encrypted aes256-cbc, sync unsigned MDN; ",
		"warning: " + weak + ": as2.send.digest: none sends unsigned messages",
		"warning: " + weak + ": as2.send.cipher: none sends unencrypted messages",
		"warning: " + weak + ": as2.send.mdn: none asks \"WEAK\" for no MDN",
		"warning: " + weak + ": as2.send.url http://weak.example/as2 is plain http",
		"warning: " + weak + ": as4.send.encrypt: false sends unencrypted payloads",
		"warning: " + weak + ": as4.send.receipt_required: false counts a message",
		"warning: " + umdn + ": as2.send.signed_mdn: false accepts unsigned MDNs",
		"4 partners, 7 warnings, 0 errors",
	}
	for _, want := range wants {
		if !strings.Contains(out.String(), want) {
			t.Errorf("partners check output lacks %q", want)
		}
	}
	if strings.Contains(out.String(), "send receiver") {
		t.Error("a partner we only receive from has a send line")
	}
	if code != 0 {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
	if t.Failed() {
		t.Logf("stdout:\n%s", out.String())
	}
}

// TestPartnersCheckShowsSendIdentity: with a configuration, partners check
// names the identity we send as on each send line (as2.our_as2_id,
// as4.send.from_party_id, else the first identity) with its field, and
// refuses one that is none of ours, naming the file and the key.
func TestPartnersCheckShowsSendIdentity(t *testing.T) {
	fixture := filepath.Dir(demoConfig(t))
	pdir := t.TempDir()
	pem, err := os.ReadFile(filepath.Join(fixture, "partners", "demo-partner.pem"))
	if err != nil {
		t.Fatal(err)
	}
	as4 := func(party, send string) string {
		return "as4:\n  party_id: " + party + "\n  certificates: [demo-partner.pem]\n  pmodes: [{id: p}]\n  send: {url: \"https://a.example/as4\"" + send + "}\n"
	}
	for name, body := range map[string]string{
		"demo-partner.pem": string(pem),
		"one.yaml":         "id: one\nas2:\n  as2_id: ONE\n  certificates: [demo-partner.pem]\n  send: {url: \"https://one.example/as2\"}\n" + as4("urn:one", ""),
		"two.yaml": "id: two\nas2:\n  as2_id: TWO\n  our_as2_id: GW2\n  certificates: [demo-partner.pem]\n  send: {url: \"https://two.example/as2\"}\n" +
			as4("urn:two", ", from_party_id: urn:gw2"),
		"bad.yaml": "id: bad\nas2:\n  as2_id: BAD\n  our_as2_id: GW9\n  certificates: [demo-partner.pem]\n  send: {url: \"https://bad.example/as2\"}\n" +
			as4("urn:bad", ", from_party_id: urn:gw9"),
	} {
		if err := os.WriteFile(filepath.Join(pdir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := operatorConfig(t, pdir, "identities:\n  - as2_id: GW2\n    party_id: urn:gw2\n    keys:\n      - cert: "+
		filepath.Join(fixture, "partners", "demo-partner.pem")+"\n        key: "+filepath.Join(fixture, "keys", "demo-partner.key")+"\n")
	var out, errb bytes.Buffer
	code := run([]string{"partners", "check", "-config", cfg}, &out, &errb)
	bad := filepath.Join(pdir, "bad.yaml")
	for _, want := range []string{
		"send one: as2 to https://one.example/as2 (", ") as GATEWAY (identity); as4 to https://a.example/as4 (", ") as urn:demo:gateway (identity)\n",
		"send two: as2 to https://two.example/as2 (", ") as GW2 (identities[0]); as4 to https://a.example/as4 (", ") as urn:gw2 (identities[0])\n",
		") as GW9 (none of our identities); as4 ", ") as urn:gw9 (none of our identities)\n",
		"error: " + bad + `: as2.our_as2_id: "GW9" is the as2_id of none of our identities (identity, identities[]: "GATEWAY", "GW2")`,
		"error: " + bad + `: as4.send.from_party_id: "urn:gw9" is the party_id of none of our identities (identity, identities[]: "urn:demo:gateway", "urn:gw2")`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("partners check output lacks %q", want)
		}
	}
	if code != 1 || !strings.Contains(errb.String(), "2 problems in partner files") {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
	if t.Failed() {
		t.Logf("stdout:\n%s", out.String())
	}
}

// TestSendOptOutsAreWarnedAtStart: the sending opt-outs are WARN lines of
// serve's start, as the receiving ones are.
func TestSendOptOutsAreWarnedAtStart(t *testing.T) {
	pdir := t.TempDir()
	pem, err := os.ReadFile(filepath.Join(filepath.Dir(demoConfig(t)), "partners", "demo-partner.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pdir, "demo-partner.pem"), pem, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pdir, "weak.yaml"), []byte("id: weak\nas2:\n  as2_id: WEAK\n  certificates: [demo-partner.pem]\n"+
		"  send: {url: \"http://weak.example/as2\", digest: none, signed_mdn: false}\n"+
		"as4:\n  party_id: urn:weak\n  certificates: [demo-partner.pem]\n  pmodes: [{id: p}]\n  send: {url: \"https://weak.example/as4\", receipt_required: false}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := operatorConfig(t, pdir, "")
	file := filepath.Join(pdir, "weak.yaml")
	var out, errb bytes.Buffer
	if code := run([]string{"serve", "-check", "-config", cfg}, &out, &errb); code != 0 {
		t.Fatalf("serve -check: exit %d: %s", code, errb.String())
	}
	for _, w := range []string{
		file + `: as2.send.digest: none sends unsigned messages to \"WEAK\"`,
		file + `: as2.send.signed_mdn: false accepts unsigned MDNs from \"WEAK\"`,
		file + `: as2.send.url http://weak.example/as2 is plain http`,
		file + `: as4.send.receipt_required: false counts a message to party \"urn:weak\"`,
	} {
		if !strings.Contains(errb.String(), `"level":"WARN","msg":"partner configuration","warning":"`+w) {
			t.Errorf("no WARN at start for %q:\n%s", w, errb.String())
		}
	}
}

// TestPartnersCheckWarnsAboutAListedCertificateItsCAPolicyRefuses: a
// trust: ca partner that lists the demo partner's self-signed certificate
// (an operator moving a partner from pinned to ca and keeping the old
// certificate) would have every message it signs refused; partners check
// says so as a warning on the certificate's line, and exits 0.
func TestPartnersCheckWarnsAboutAListedCertificateItsCAPolicyRefuses(t *testing.T) {
	dir := t.TempDir()
	pem, err := os.ReadFile(filepath.Join(filepath.Dir(demoConfig(t)), "partners", "demo-partner.pem"))
	if err != nil {
		t.Fatal(err)
	}
	root := trusttest.NewRoot(t, "Acme Root CA")
	for name, body := range map[string][]byte{
		"demo-partner.pem": pem,
		"root.pem":         testpki.CertPEM(root.Cert),
		"acme.yaml": []byte("id: acme\nas2:\n  as2_id: ACME\n  trust: ca\n  ca_certificates: [root.pem]\n" +
			"  certificate_subject: \"CN=*\"\n  certificates: [demo-partner.pem]\n"),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var out, errb bytes.Buffer
	code := run([]string{"partners", "check", "-dir", dir}, &out, &errb)
	want := "warning: partner acme (" + filepath.Join(dir, "acme.yaml") + " as2.certificates[0]) " + filepath.Join(dir, "demo-partner.pem") +
		": the signer's certificate "
	if code != 0 || !strings.Contains(out.String(), want) || !strings.Contains(out.String(), "does not chain to a configured CA: this partner's as2.trust: ca policy refuses it") ||
		!strings.Contains(out.String(), "1 partners, 1 warnings, 0 errors") {
		t.Fatalf("exit %d, output:\n%s\nwant a line starting %q", code, out.String(), want)
	}
}
