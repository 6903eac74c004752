package certs_test

import (
	"crypto/x509"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/internal/certs"
	"github.com/edigateway/gateway/internal/testpki"
	"github.com/edigateway/gateway/internal/trust/trusttest"
	"github.com/edigateway/gateway/partners"
)

// TestListedCertificatesAreJudgedByTheirCAPolicy: a trust: ca section that
// also lists certificates judges them by its policy when they sign, so a
// listed signing certificate the policy refuses (self-signed, another CA,
// another subject) is a warning naming the file, the field and the
// reason, and one that chains only through a CA certificate listed beside
// it (never used to complete a chain) is a warning pointing to
// intermediates; certificates the policy accepts (the chain completed by
// intermediates), CA certificates that issued a listed one, encryption-only
// keys, pinned sections and certificates already refused for their dates
// are not.
func TestListedCertificatesAreJudgedByTheirCAPolicy(t *testing.T) {
	root := trusttest.NewRoot(t, "Partner Root CA")
	ica := root.NewIntermediate(t, "Partner Issuing CA")
	keys := testpki.RSAKeys(t, 3)
	dir := t.TempDir()
	pem := func(name string, cs ...*x509.Certificate) { write(t, filepath.Join(dir, name), testpki.CertPEM(cs...)) }
	pem("root.pem", root.Cert)
	pem("good.pem", root.Issue(t, trusttest.Leaf{CommonName: "AS2 Good"}).Cert)
	chainLeaf := ica.Issue(t, trusttest.Leaf{CommonName: "AS2 Chain"}).Cert
	pem("chain.pem", chainLeaf, ica.Cert)
	pem("leaf.pem", chainLeaf)
	pem("ica.pem", ica.Cert)
	pem("self.pem", testpki.SelfSigned(t, keys[0], testpki.Cert{CommonName: "AS2 Self"}))
	pem("wrongcn.pem", root.Issue(t, trusttest.Leaf{CommonName: "Somebody Else"}).Cert)
	pem("enc.pem", testpki.SelfSigned(t, keys[1], testpki.Cert{CommonName: "AS2 Enc", KeyUsage: x509.KeyUsageKeyEncipherment}))
	pem("expired.pem", root.Issue(t, trusttest.Leaf{CommonName: "AS2 Expired", NotAfter: now.Add(-time.Hour)}).Cert)
	pem("pinned.pem", testpki.SelfSigned(t, keys[2], testpki.Cert{CommonName: "Pinned"}))
	ca := "  trust: ca\n  ca_certificates: [root.pem]\n  certificate_subject: \"CN=AS2 *\"\n"
	for name, yaml := range map[string]string{
		"good":    "as2:\n  as2_id: GOOD\n" + ca + "  certificates: [good.pem]\n",
		"chain":   "as2:\n  as2_id: CHAIN\n" + ca + "  certificates: [chain.pem]\n",
		"inter":   "as2:\n  as2_id: INTER\n" + ca + "  intermediates: [ica.pem]\n  certificates: [leaf.pem, ica.pem]\n",
		"self":    "as2:\n  as2_id: SELF\n" + ca + "  certificates: [good.pem, self.pem]\n",
		"wrongcn": "as4:\n  party_id: urn:wrongcn\n" + ca + "  certificates: [wrongcn.pem]\n  pmodes: [{id: p}]\n",
		"enc":     "as2:\n  as2_id: ENC\n" + ca + "  certificates: [enc.pem]\n",
		"expired": "as2:\n  as2_id: EXPIRED\n" + ca + "  certificates: [expired.pem]\n",
		"pinned":  "as2:\n  as2_id: PINNED\n  certificates: [pinned.pem]\n",
	} {
		write(t, filepath.Join(dir, name+".yaml"), []byte("id: "+name+"\n"+yaml))
	}
	d, err := partners.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, fs := certs.All(d, nil, now, certs.DefaultWarning)
	var got []string
	for _, f := range fs {
		if strings.Contains(f.Msg, "trust: ca policy refuses it") || strings.Contains(f.Msg, "not used to complete chains") {
			if f.Severity != certs.Warning {
				t.Errorf("%s: severity %s, want warning", f, f.Severity)
			}
			got = append(got, f.String())
		}
	}
	sort.Strings(got)
	want := []struct{ where, reason string }{
		{"partner chain (" + filepath.Join(dir, "chain.yaml") + " as2.certificates[0]) " + filepath.Join(dir, "chain.pem"),
			`issuer "CN=Partner Issuing CA,O=trusttest") does not chain to a configured CA without the CA certificates listed beside it in as2.certificates, which are not used to complete chains: a message or reply it signs that does not carry them is refused (list them in as2.intermediates)`},
		{"partner self (" + filepath.Join(dir, "self.yaml") + " as2.certificates[1]) " + filepath.Join(dir, "self.pem"), `"CN=AS2 Self" (serial 01, issuer "CN=AS2 Self") does not chain to a configured CA`},
		{"partner wrongcn (" + filepath.Join(dir, "wrongcn.yaml") + " as4.certificates[0]) " + filepath.Join(dir, "wrongcn.pem"), `does not match the partner's certificate subject "CN=AS2 *"`},
	}
	if len(got) != len(want) {
		t.Fatalf("findings:\n%s\nwant %d", strings.Join(got, "\n"), len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w.where+": ") || !strings.Contains(got[i], w.reason) {
			t.Errorf("finding %q\nwant %q … %q", got[i], w.where, w.reason)
		}
	}
	if !strings.Contains(got[2], "as4.ca_certificates") {
		t.Errorf("the AS4 finding names as2 fields: %s", got[2])
	}
	// The expired certificate is Check's error, not a policy finding too.
	var expired int
	for _, f := range fs {
		if strings.Contains(f.String(), "expired.pem") {
			expired++
		}
	}
	if expired != 1 {
		t.Errorf("%d findings for expired.pem, want its expiry only", expired)
	}
}
