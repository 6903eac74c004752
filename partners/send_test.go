package partners

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/internal/brainpool/bptest"
	"github.com/edigateway/gateway/outbound"
)

// writeKeyPair writes a self-signed certificate and its PKCS#8 key.
func writeKeyPair(t *testing.T, dir, certName, keyName string) {
	t.Helper()
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: certName},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, certName, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	writeFile(t, dir, keyName, string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd})))
}

const as4Head = "as4:\n  party_id: urn:acme\n  certificates: [acme.pem]\n  pmodes: [{id: p, agreement: urn:agr, service: urn:svc, action: Deliver}]\n"

// loadOne loads a directory holding acme.pem and one partner file.
func loadOne(t *testing.T, body string) (*Directory, string, error) {
	t.Helper()
	dir := t.TempDir()
	writeCert(t, dir, "acme.pem")
	writeFile(t, dir, "acme.yaml", body)
	d, err := Load(dir)
	return d, filepath.Join(dir, "acme.yaml"), err
}

// TestSendDefaultsAreSecure: send: {url: …} alone signs with sha256,
// encrypts with aes256-cbc and asks for a signed synchronous MDN (AS2), and
// encrypts, compresses and requires a signed receipt (AS4), on the default
// retry schedule, without a warning; a partner without send only receives.
func TestSendDefaultsAreSecure(t *testing.T) {
	d, _, err := loadOne(t, "id: acme\nas2:\n  as2_id: ACME\n  certificates: [acme.pem]\n  send: {url: https://acme.example/as2}\n"+
		as4Head+"  send: {url: https://acme.example/as4, pmode: {id: p}}\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Warnings) != 0 {
		t.Errorf("warnings for the secure defaults: %q", d.Warnings)
	}
	p := d.Partners[0]
	if got := p.Sends(); !slices.Equal(got, []outbound.Protocol{outbound.AS2, outbound.AS4}) {
		t.Errorf("Sends() = %v", got)
	}
	s := p.AS2.Send
	want2 := AS2Send{URL: "https://acme.example/as2", Digest: "sha256", Cipher: "aes256-cbc", Compression: "none", MDN: "sync", SignedMDN: true,
		ContentType: "application/octet-stream", Subject: "AS2 message", Timeout: Duration(5 * time.Minute), MDNTimeout: Duration(time.Hour)}
	if !s.Signed() || !s.Encrypted() || s.Compressed() {
		t.Errorf("signed %v encrypted %v compressed %v", s.Signed(), s.Encrypted(), s.Compressed())
	}
	s.set, s.Retry.set = nil, nil
	if !reflect.DeepEqual(*s, want2) {
		t.Errorf("as2.send\n got %+v\nwant %+v", *s, want2)
	}
	if s.Retry.Policy() != outbound.DefaultRetryPolicy {
		t.Errorf("as2 retry %+v", s.Retry.Policy())
	}
	s4 := p.AS4.Send
	if !s4.Encrypt || !s4.Compress || !s4.ReceiptRequired || s4.Timeout.Std() != 5*time.Minute || s4.Retry.Policy() != outbound.DefaultRetryPolicy {
		t.Errorf("as4.send %+v", *s4)
	}
	// The P-Mode named fills what the file leaves out; eb:To is the partner.
	wantPM := SendPMode{ID: "p", Agreement: "urn:agr", Service: "urn:svc", Action: "Deliver", ToPartyID: "urn:acme"}
	if s4.PMode != wantPM {
		t.Errorf("pmode %+v, want %+v", s4.PMode, wantPM)
	}
	if c := d.SendEncryptionCertificate(p, outbound.AS2); c == nil || c.Subject.CommonName != "acme.pem" {
		t.Errorf("as2 encryption certificate %v", c)
	}
	if c := d.SendEncryptionCertificate(p, outbound.AS4); c == nil || c.Subject.CommonName != "acme.pem" {
		t.Errorf("as4 encryption certificate %v", c)
	}

	d, _, err = loadOne(t, "id: acme\nas2:\n  as2_id: ACME\n  certificates: [acme.pem]\n"+as4Head)
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Partners[0].Sends(); len(got) != 0 {
		t.Errorf("a partner without send sends %v", got)
	}
}

// TestSendSettingsAsWritten: every field written is kept, normalised
// (SHA-256 → sha256), and the retry schedule is the one written.
func TestSendSettingsAsWritten(t *testing.T) {
	dir := t.TempDir()
	writeCert(t, dir, "acme.pem")
	writeCert(t, dir, "enc.pem")
	writeFile(t, dir, "acme.yaml", `id: acme
as2:
  as2_id: ACME
  certificates: [acme.pem]
  send:
    url: https://acme.example/as2
    digest: SHA-512
    cipher: AES128-GCM
    compression: before-signing
    mdn: async
    async_mdn_url: https://us.example/as2
    content_type: application/edi-x12
    subject: Invoices
    encryption_certificate: enc.pem
    timeout: 90s
    mdn_timeout: 2h
    retry: {first: 30s, factor: 1.5, max: 2h, give_up_after: 5d}
`+as4Head+`  send:
    url: https://acme.example/as4
    pmode: {id: other, agreement: urn:mine, service: urn:s2, to_party_id: urn:to, to_party_type: urn:t, from_role: r1, to_role: r2}
    compress: false
    encryption_certificate: enc.pem
    retry: {give_up_after: 1h}
`)
	d, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	p := d.Partners[0]
	s := p.AS2.Send
	if s.Digest != "sha512" || s.Cipher != "aes128-gcm" || s.Compression != CompressBeforeSigning || s.MDN != MDNAsync ||
		s.AsyncMDNURL != "https://us.example/as2" || s.ContentType != "application/edi-x12" || s.Subject != "Invoices" ||
		s.Timeout.Std() != 90*time.Second || s.MDNTimeout.Std() != 2*time.Hour || !s.SignedMDN {
		t.Errorf("as2.send %+v", *s)
	}
	want := outbound.RetryPolicy{First: 30 * time.Second, Factor: 1.5, Max: 2 * time.Hour, GiveUpAfter: 120 * time.Hour}
	if got := s.Retry.Policy(); got != want {
		t.Errorf("as2 retry %+v, want %+v", got, want)
	}
	s4 := p.AS4.Send
	if s4.Compress || !s4.Encrypt || !s4.ReceiptRequired {
		t.Errorf("as4.send %+v", *s4)
	}
	wantPM := SendPMode{ID: "other", Agreement: "urn:mine", Service: "urn:s2", ToPartyID: "urn:to", ToPartyType: "urn:t", FromRole: "r1", ToRole: "r2"}
	if s4.PMode != wantPM {
		t.Errorf("pmode %+v, want %+v", s4.PMode, wantPM)
	}
	if got := s4.Retry.Policy(); got != (outbound.RetryPolicy{First: time.Minute, Factor: 2, Max: time.Hour, GiveUpAfter: time.Hour}) {
		t.Errorf("as4 retry %+v", got)
	}
	for _, proto := range []outbound.Protocol{outbound.AS2, outbound.AS4} {
		if c := d.SendEncryptionCertificate(p, proto); c == nil || c.Subject.CommonName != "enc.pem" {
			t.Errorf("%s encryption certificate %v, want enc.pem's", proto, c)
		}
	}
	if len(d.Warnings) != 0 {
		t.Errorf("warnings %q", d.Warnings)
	}
}

// TestSendOptOutsAreWarned: each weaker sending setting is a warning naming
// the file and the key, once; the start-up log and partners check print
// Directory.Warnings.
func TestSendOptOutsAreWarned(t *testing.T) {
	d, file, err := loadOne(t, `id: acme
as2:
  as2_id: ACME
  certificates: [acme.pem]
  send: {url: "http://acme.example/as2", digest: none, cipher: none, signed_mdn: false}
`+as4Head+`  send: {url: "http://acme.example/as4", encrypt: false, receipt_required: false}
`)
	if err != nil {
		t.Fatal(err)
	}
	wants := []string{
		file + ": as2.send.digest: none sends unsigned messages",
		file + ": as2.send.cipher: none sends unencrypted messages",
		file + ": as2.send.signed_mdn: false accepts unsigned MDNs",
		file + ": as2.send.url http://acme.example/as2 is plain http",
		file + ": as4.send.encrypt: false sends unencrypted payloads",
		file + ": as4.send.receipt_required: false counts a message",
		file + ": as4.send.url http://acme.example/as4 is plain http",
	}
	checkWarnings(t, d.Warnings, wants)
	p := d.Partners[0]
	if p.AS2.Send.Signed() || p.AS2.Send.Encrypted() || p.AS2.Send.SignedMDN || p.AS4.Send.Encrypt || p.AS4.Send.ReceiptRequired {
		t.Error("the explicit opt-outs were not kept")
	}

	// mdn: none is its own warning (an unsigned MDN that is never asked
	// for is not warned twice).
	d, file, err = loadOne(t, "id: acme\nas2:\n  as2_id: ACME\n  certificates: [acme.pem]\n  send: {url: \"https://acme.example/as2\", mdn: none, signed_mdn: false}\n")
	if err != nil {
		t.Fatal(err)
	}
	checkWarnings(t, d.Warnings, []string{file + ": as2.send.mdn: none asks \"ACME\" for no MDN"})
}

func checkWarnings(t *testing.T, got, wants []string) {
	t.Helper()
	for _, want := range wants {
		n := 0
		for _, w := range got {
			if strings.HasPrefix(w, want) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d warnings %q…, want 1", n, want)
		}
	}
	if len(got) != len(wants) {
		t.Errorf("warnings %q, want %d", got, len(wants))
	}
}

// TestSendValidationErrors: every invalid sending setting fails the file
// with the file and the field.
func TestSendValidationErrors(t *testing.T) {
	as2 := func(send string) string {
		return "id: acme\nas2:\n  as2_id: ACME\n  certificates: [acme.pem]\n  send: " + send + "\n"
	}
	as4 := func(send string) string { return "id: acme\n" + as4Head + "  send: " + send + "\n" }
	for name, c := range map[string]struct{ file, want string }{
		"no url":              {as2("{digest: sha256}"), "as2.send.url: required"},
		"empty as2 send":      {as2(""), "as2.send.url: required"},
		"empty as4 send":      {as4("~"), "as4.send.url: required"},
		"relative url":        {as2("{url: /as2}"), `as2.send.url: "/as2" is not an absolute http(s) URL`},
		"ftp url":             {as4("{url: \"ftp://acme.example/\"}"), `as4.send.url: "ftp://acme.example/" is not an absolute http(s) URL`},
		"url without host":    {as2("{url: \"https:///as2\"}"), "as2.send.url: \"https:///as2\" is not an absolute http(s) URL"},
		"url credentials":     {as2("{url: \"https://u:secret@acme.example/\"}"), "as2.send.url: \"https://u:xxxxx@acme.example/\" holds credentials"},
		"unparsable url":      {as2("{url: \"https://acme example/%zz\"}"), "as2.send.url: \"https://acme example/%zz\" is not a URL"},
		"md5":                 {as2("{url: \"https://a.example\", digest: md5}"), `as2.send.digest: "md5" is not one of sha1, sha224, sha256, sha384, sha512, none`},
		"cipher":              {as2("{url: \"https://a.example\", cipher: rc2}"), `as2.send.cipher: "rc2" is not one of 3des, aes128-cbc`},
		"compression":         {as2("{url: \"https://a.example\", compression: zip}"), `as2.send.compression: "zip" is not one of none, before-signing, after-signing`},
		"mdn":                 {as2("{url: \"https://a.example\", mdn: later}"), `as2.send.mdn: "later" is not one of sync, async, none`},
		"async url with sync": {as2("{url: \"https://a.example\", async_mdn_url: \"https://us.example/\"}"), "as2.send.async_mdn_url: is only used with mdn: async (mdn is sync)"},
		"bad async url":       {as2("{url: \"https://a.example\", mdn: async, async_mdn_url: /mdn}"), `as2.send.async_mdn_url: "/mdn" is not an absolute http(s) URL`},
		"content type":        {as2("{url: \"https://a.example\", content_type: edi}"), `as2.send.content_type: "edi" is not a media type`},
		"subject":             {as2("{url: \"https://a.example\", subject: \"a\\r\\nBcc: x\"}"), "as2.send.subject: \"a\\r\\nBcc: x\" holds a control character"},
		"zero timeout":        {as2("{url: \"https://a.example\", timeout: 0}"), "as2.send.timeout: must be greater than 0"},
		"zero mdn timeout":    {as2("{url: \"https://a.example\", mdn_timeout: 0}"), "as2.send.mdn_timeout: must be greater than 0"},
		"as4 zero timeout":    {as4("{url: \"https://a.example\", timeout: 0}"), "as4.send.timeout: must be greater than 0"},
		"bad duration":        {as2("{url: \"https://a.example\", timeout: soon}"), `invalid duration "soon"`},
		"retry first 0":       {as2("{url: \"https://a.example\", retry: {first: 0}}"), "as2.send.retry.first: must be greater than 0"},
		"retry factor 0":      {as4("{url: \"https://a.example\", retry: {factor: 0}}"), "as4.send.retry.factor: must be greater than 0"},
		"retry factor < 1":    {as2("{url: \"https://a.example\", retry: {factor: 0.5}}"), "as2.send.retry.factor: 0.5 must be at least 1"},
		"retry max < first":   {as2("{url: \"https://a.example\", retry: {first: 2h}}"), "as2.send.retry.max: 1h0m0s is shorter than first 2h0m0s"},
		"retry max 0":         {as2("{url: \"https://a.example\", retry: {max: 0}}"), "as2.send.retry.max: must be greater than 0"},
		"retry give up 0":     {as4("{url: \"https://a.example\", retry: {give_up_after: 0}}"), "as4.send.retry.give_up_after: must be greater than 0"},
		"client cert only":    {as2("{url: \"https://a.example\", tls: {client_certificate: acme.pem}}"), "as2.send.tls.client_key: client_certificate and client_key go together"},
		"tls with http":       {as4("{url: \"http://a.example\", tls: {ca_file: acme.pem}}"), "as4.send.tls: set, but the url is plain http"},
		"as2 nothing to encrypt for": {"id: acme\nas2:\n  as2_id: ACME\n  require_signature: false\n  send: {url: \"https://a.example\", signed_mdn: false}\n",
			"as2.send.cipher: encrypting needs the partner's certificate"},
		"as2 nothing to verify the MDN": {"id: acme\nas2:\n  as2_id: ACME\n  require_signature: false\n  send: {url: \"https://a.example\", cipher: none}\n",
			"as2.send.signed_mdn: verifying the partner's signed MDN needs as2.certificates or trust: ca"},
		"as4 nothing to encrypt for": {"id: acme\nas4:\n  party_id: urn:acme\n  trust: ca\n  ca_certificates: [acme.pem]\n  certificate_subject: CN=x\n  pmodes: [{id: p}]\n  send: {url: \"https://a.example\"}\n",
			"as4.send.encrypt: encrypting needs the partner's certificate"},
		"missing encryption certificate": {as2("{url: \"https://a.example\", encryption_certificate: nope.pem}"), "as2.send.encryption_certificate: "},
		"missing ca file":                {as4("{url: \"https://a.example\", tls: {ca_file: nope.pem}}"), "as4.send.tls.ca_file: "},
		"unreadable pinned certificate":  {as2("{url: \"https://a.example\", tls: {pinned_certificate: acme.yaml}}"), "as2.send.tls.pinned_certificate: "},
		"key of another certificate":     {as2("{url: \"https://a.example\", tls: {client_certificate: acme.pem, client_key: client.key}}"), "as2.send.tls.client_certificate: "},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			writeCert(t, dir, "acme.pem")
			writeKeyPair(t, dir, "client.pem", "client.key")
			writeFile(t, dir, "acme.yaml", c.file)
			_, err := Load(dir)
			want := filepath.Join(dir, "acme.yaml")
			if !strings.HasPrefix(c.want, "invalid duration") {
				want += ": " + c.want
			} else {
				want = c.want
			}
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("error %v\nwant %q", err, want)
			}
		})
	}
}

// TestSendTLSFilesAreRead: valid TLS files (relative to the partners
// directory) load; SendFile resolves them.
func TestSendTLSFilesAreRead(t *testing.T) {
	dir := t.TempDir()
	writeCert(t, dir, "acme.pem")
	writeKeyPair(t, dir, "client.pem", "client.key")
	writeFile(t, dir, "acme.yaml", "id: acme\nas2:\n  as2_id: ACME\n  certificates: [acme.pem]\n"+
		"  send: {url: \"https://a.example\", tls: {ca_file: acme.pem, pinned_certificate: acme.pem, client_certificate: client.pem, client_key: client.key}}\n")
	d, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	tls := d.Partners[0].AS2.Send.TLS
	if got := d.SendFile(tls.ClientKey); got != filepath.Join(dir, "client.key") {
		t.Errorf("SendFile = %s", got)
	}
	if got := d.SendFile("/abs/ca.pem"); got != "/abs/ca.pem" {
		t.Errorf("SendFile of an absolute path = %s", got)
	}
}

// TestSendUnknownKeysNameFileAndLine: a misspelt key of a send block is
// refused with its line and the nearest key.
func TestSendUnknownKeysNameFileAndLine(t *testing.T) {
	_, file, err := loadOne(t, `id: acme
as2:
  as2_id: ACME
  certificates: [acme.pem]
  send:
    url: https://a.example
    signed_mnd: true
    tls: {ca_fil: x.pem}
`+as4Head+`  send:
    url: https://a.example
    retry: {frist: 1m}
    pmode: {acton: x}
`)
	if err == nil {
		t.Fatal("misspelt keys accepted")
	}
	for _, want := range []string{
		file + `:7: unknown key "as2.send.signed_mnd" (did you mean "as2.send.signed_mdn"?)`,
		file + `:8: unknown key "as2.send.tls.ca_fil" (did you mean "as2.send.tls.ca_file"?)`,
		file + `:15: unknown key "as4.send.retry.frist" (did you mean "as4.send.retry.first"?)`,
		file + `:16: unknown key "as4.send.pmode.acton" (did you mean "as4.send.pmode.action"?)`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error\n%v\ndoes not say\n%s", err, want)
		}
	}
}

// TestSendOneLine: the set-up partners check prints.
func TestSendOneLine(t *testing.T) {
	d, _, err := loadOne(t, "id: acme\nas2:\n  as2_id: ACME\n  certificates: [acme.pem]\n  send: {url: https://acme.example/as2}\n"+
		as4Head+"  send: {url: \"http://acme.example/as4\", encrypt: false, receipt_required: false}\n")
	if err != nil {
		t.Fatal(err)
	}
	p := d.Partners[0]
	if got, want := p.AS2.Send.String(), "as2 to https://acme.example/as2 (signed sha256, encrypted aes256-cbc, sync signed MDN; timeout 5m0s; retry 1m0s ×2 up to 1h0m0s apart for 72h0m0s)"; got != want {
		t.Errorf("as2:\n got %s\nwant %s", got, want)
	}
	if got, want := p.AS4.Send.String(), "as4 to http://acme.example/as4 (signed, unencrypted, compressed, no receipt required; timeout 5m0s; retry 1m0s ×2 up to 1h0m0s apart for 72h0m0s)"; got != want {
		t.Errorf("as4:\n got %s\nwant %s", got, want)
	}
}

// FuzzPartnerFile loads arbitrary partner files (the send blocks among
// the seeds): no panic, and a file that loads has its send defaults
// filled in.
func FuzzPartnerFile(f *testing.F) {
	f.Add("id: acme\nas2:\n  as2_id: ACME\n  certificates: [acme.pem]\n  send: {url: https://acme.example/as2}\n")
	f.Add("id: acme\nas2:\n  as2_id: ACME\n  require_signature: false\n  send: {url: \"http://a.example\", digest: none, cipher: none, mdn: none, retry: {factor: 1.5}}\n")
	f.Add("id: acme\n" + as4Head + "  send: {url: https://a.example, pmode: {id: p}, encrypt: false, retry: {first: 0}}\n")
	f.Add("id: acme\nas4:\n  profile: bdew\n  party_id: \"9900000000002\"\n  send: {compress: false}\n")
	f.Add("id: acme\nas2:\n  send:\n  - 1\n")
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, body string) {
		path := filepath.Join(dir, "p.yaml")
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		p, err := loadFile(path)
		if err != nil {
			return
		}
		if p.AS2 != nil && p.AS2.Send != nil {
			s := p.AS2.Send
			if s.Digest == "" || s.Cipher == "" || s.MDN == "" || s.Timeout == 0 || s.Retry.Policy().First == 0 {
				t.Fatalf("as2.send defaults missing: %+v", *s)
			}
		}
		if p.AS4 != nil && p.AS4.Send != nil && (p.AS4.Send.Timeout == 0 || p.AS4.Send.PMode.ToPartyID == "") {
			t.Fatalf("as4.send defaults missing: %+v", *p.AS4.Send)
		}
	})
}

// TestSendBDEWFloor: a bdew partner's send block cannot turn off
// encryption, compression or the receipt, nor use plain http; left out,
// they are on, and the P-Mode gets the BDEW agreement and the GLN type.
func TestSendBDEWFloor(t *testing.T) {
	pki := bptest.New(t)
	sigPEM, _ := os.ReadFile(pki.Issue("sw-sig", "/CN=9900000000002.sig", "digitalSignature").CertFile)
	tlsPEM, _ := os.ReadFile(pki.Issue("sw-tls", "/CN=9900000000002.tls", "digitalSignature").CertFile)
	agreement := ""
	load := func(send string) (*Directory, string, error) {
		dir := t.TempDir()
		writeFile(t, dir, "sw-sig.pem", string(sigPEM))
		writeFile(t, dir, "sw-tls.pem", string(tlsPEM))
		writeFile(t, dir, "sw.yaml", strings.Replace(bdewPartner("  send: "+send+"\n"), "    - id: mp\n", "    - id: mp\n"+agreement, 1))
		d, err := Load(dir)
		return d, filepath.Join(dir, "sw.yaml"), err
	}
	d, _, err := load("{url: \"https://sw.example/as4\", encrypt: true, pmode: {id: mp}}")
	if err != nil {
		t.Fatal(err)
	}
	s := d.Partners[0].AS4.Send
	if !s.Encrypt || !s.Compress || !s.ReceiptRequired || s.PMode.Agreement != BDEWAgreement ||
		s.PMode.Service != "https://www.bdew.de/as4/communication/services/MP" ||
		s.PMode.ToPartyID != "9900000000002" || s.PMode.ToPartyType != PartyTypeGLN {
		t.Errorf("bdew send %+v", *s)
	}
	if len(d.Warnings) != 0 {
		t.Errorf("warnings %q", d.Warnings)
	}
	// The agreement of the P-Mode named comes before the profile's.
	agreement = "      agreement: urn:bilateral\n"
	if d, _, err = load("{url: \"https://sw.example/as4\", pmode: {id: mp}}"); err != nil {
		t.Fatal(err)
	} else if got := d.Partners[0].AS4.Send.PMode.Agreement; got != "urn:bilateral" {
		t.Errorf("agreement %q, want the P-Mode's", got)
	}
	agreement = ""
	_, file, err := load("{url: \"http://sw.example/as4\", encrypt: false, compress: false, receipt_required: false}")
	for _, want := range []string{
		file + ": as4.send.encrypt: the bdew profile requires it",
		file + ": as4.send.compress: the bdew profile requires it",
		file + ": as4.send.receipt_required: the bdew profile requires it",
		file + ": as4.send.url: the bdew profile requires TLS",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v\ndoes not say %q", err, want)
		}
	}
}
