package trust_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edigateway/gateway/internal/brainpool"
	"github.com/edigateway/gateway/internal/brainpool/bptest"
	"github.com/edigateway/gateway/internal/trust"
)

// TestBrainpoolChains: chains of the BDEW AS4 PKI (brainpoolP256r1 root,
// sub-CA and leaf, which crypto/x509 cannot verify) are built and checked:
// through a configured or presented sub-CA, refused without it, refused
// for a sub-CA that is no CA and for an extended key usage the policy does
// not accept.
func TestBrainpoolChains(t *testing.T) {
	p := bptest.New(t)
	issue := func(name, subj, ca, ext string) *x509.Certificate {
		bptest.OpenSSL(t, p.Dir, "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:brainpoolP256r1", "-out", name+".key")
		bptest.OpenSSL(t, p.Dir, "req", "-new", "-key", name+".key", "-subj", subj, "-out", name+".csr")
		os.WriteFile(filepath.Join(p.Dir, name+".ext"), []byte(ext+"\nsubjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n"), 0o600)
		bptest.OpenSSL(t, p.Dir, "x509", "-req", "-in", name+".csr", "-CA", ca+".crt", "-CAkey", ca+".key", "-CAcreateserial",
			"-days", "30", "-sha256", "-extfile", name+".ext", "-out", name+".crt")
		b, _ := os.ReadFile(filepath.Join(p.Dir, name+".crt"))
		blk, _ := pem.Decode(b)
		c, err := brainpool.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	sub := issue("sub", "/O=BDEW test/CN=brainpool sub-CA", "ca", "basicConstraints=critical,CA:TRUE,pathlen:0\nkeyUsage=critical,keyCertSign,cRLSign")
	leaf := issue("leaf", "/O=BDEW test/CN=9900000000002.sig", "sub", "keyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth")
	notCA := issue("notca", "/O=BDEW test/CN=not a CA", "ca", "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature")
	underNotCA := issue("under", "/O=BDEW test/CN=9900000000003.sig", "notca", "keyUsage=critical,digitalSignature")
	roots := []*x509.Certificate{p.CA.Cert}
	c := &trust.Checker{}
	ctx := context.Background()

	d, err := c.Check(ctx, &trust.CAPolicy{Roots: roots, Intermediates: []*x509.Certificate{sub}}, leaf, nil)
	if err != nil || len(d.Chain) != 3 || !d.Chain[1].Equal(sub) || !d.Chain[2].Equal(p.CA.Cert) {
		t.Fatalf("configured sub-CA: %v %v", d, err)
	}
	if _, err := c.Check(ctx, &trust.CAPolicy{Roots: roots}, leaf, []*x509.Certificate{leaf, sub}); err != nil {
		t.Fatalf("presented sub-CA: %v", err)
	}
	refused := func(name string, pol *trust.CAPolicy, cert *x509.Certificate, presented []*x509.Certificate, want string) {
		t.Helper()
		_, err := c.Check(ctx, pol, cert, presented)
		var te *trust.Error
		if !errors.As(err, &te) || !errors.Is(err, trust.ErrUntrusted) || !strings.Contains(te.Reason, want) {
			t.Errorf("%s: %v, want a refusal containing %q", name, err, want)
		}
	}
	refused("sub-CA missing", &trust.CAPolicy{Roots: roots}, leaf, nil, "does not chain to a configured CA")
	refused("issuer is no CA", &trust.CAPolicy{Roots: roots, Intermediates: []*x509.Certificate{notCA}}, underNotCA, nil, "is not trusted")
	refused("extended key usage", &trust.CAPolicy{Roots: roots, Intermediates: []*x509.Certificate{sub},
		ExtKeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageEmailProtection}}, leaf, nil, "extended key usage")
	other := bptest.New(t)
	refused("another CA's root", &trust.CAPolicy{Roots: []*x509.Certificate{other.CA.Cert}, Intermediates: []*x509.Certificate{sub}}, leaf, nil, "does not chain")
}
