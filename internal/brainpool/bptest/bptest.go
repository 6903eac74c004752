// Package bptest builds brainpoolP256r1 test PKIs with the openssl command
// line tool (crypto/x509 cannot sign with the curve): a CA and, per market
// partner, the three key pairs the BDEW AS4 profile describes (TLS,
// signature, encryption).
package bptest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/edigateway/gateway/internal/brainpool"
)

// KeyPair is a certificate with its key and the PEM files openssl wrote.
type KeyPair struct {
	Cert     *x509.Certificate
	Key      *brainpool.PrivateKey
	CertFile string
	KeyFile  string
}

// Party is one market partner's key material.
type Party struct {
	ID                    string // 13-digit market partner id
	TLS, Signing, Encrypt KeyPair
}

// PKI is a brainpool CA in a temporary directory.
type PKI struct {
	t   testing.TB
	Dir string
	CA  KeyPair
}

// OpenSSL runs openssl in dir; the test is skipped where openssl is not installed.
func OpenSSL(t testing.TB, dir string, args ...string) []byte {
	t.Helper()
	path, err := exec.LookPath("openssl")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("openssl not installed (CI needs it for the brainpool cross-checks)")
		}
		t.Skip("openssl not installed")
	}
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("openssl %v: %v: %s", args, err, stderr.Bytes())
	}
	return out
}

// New makes a CA.
func New(t testing.TB) *PKI {
	t.Helper()
	p := &PKI{t: t, Dir: t.TempDir()}
	key := p.genKey("ca")
	OpenSSL(t, p.Dir, "req", "-new", "-x509", "-key", key, "-subj", "/O=BDEW test/CN=brainpool test CA", "-days", "30", "-sha256",
		"-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-out", "ca.crt")
	p.CA = p.load("ca.crt", key)
	return p
}

func (p *PKI) genKey(name string) string {
	f := name + ".key"
	OpenSSL(p.t, p.Dir, "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:brainpoolP256r1", "-out", f)
	return f
}

func (p *PKI) load(certFile, keyFile string) KeyPair {
	p.t.Helper()
	cdata, err := os.ReadFile(filepath.Join(p.Dir, certFile))
	if err != nil {
		p.t.Fatal(err)
	}
	b, _ := pem.Decode(cdata)
	if b == nil {
		p.t.Fatalf("%s: no PEM", certFile)
	}
	c, err := brainpool.ParseCertificate(b.Bytes)
	if err != nil {
		p.t.Fatalf("%s: %v", certFile, err)
	}
	kdata, err := os.ReadFile(filepath.Join(p.Dir, keyFile))
	if err != nil {
		p.t.Fatal(err)
	}
	k, err := brainpool.ParsePEMPrivateKey(kdata)
	if err != nil {
		p.t.Fatalf("%s: %v", keyFile, err)
	}
	return KeyPair{Cert: c, Key: k, CertFile: filepath.Join(p.Dir, certFile), KeyFile: filepath.Join(p.Dir, keyFile)}
}

// Issue makes a leaf certificate with the given subject and key usage
// (openssl x509v3 syntax, e.g. "digitalSignature" or "keyAgreement").
func (p *PKI) Issue(name, subject, keyUsage string, extra ...string) KeyPair {
	p.t.Helper()
	key := p.genKey(name)
	OpenSSL(p.t, p.Dir, "req", "-new", "-key", key, "-subj", subject, "-out", name+".csr")
	ext := "keyUsage=critical," + keyUsage + "\nsubjectKeyIdentifier=hash\n"
	for _, e := range extra {
		ext += e + "\n"
	}
	if err := os.WriteFile(filepath.Join(p.Dir, name+".ext"), []byte(ext), 0o600); err != nil {
		p.t.Fatal(err)
	}
	OpenSSL(p.t, p.Dir, "x509", "-req", "-in", name+".csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
		"-days", "30", "-sha256", "-extfile", name+".ext", "-out", name+".crt")
	return p.load(name+".crt", key)
}

// IssueDated is Issue with the validity period given (openssl ca: openssl
// x509 -req cannot set one), for certificates that are expired or not yet
// valid.
func (p *PKI) IssueDated(name, subject, keyUsage string, notBefore, notAfter time.Time) KeyPair {
	p.t.Helper()
	key := p.genKey(name)
	OpenSSL(p.t, p.Dir, "req", "-new", "-key", key, "-subj", subject, "-out", name+".csr")
	ext := "keyUsage=critical," + keyUsage + "\nsubjectKeyIdentifier=hash\n"
	conf := "[ca]\ndefault_ca = test\n[test]\ndatabase = " + name + ".index\nnew_certs_dir = .\nserial = " + name + ".serial\n" +
		"default_md = sha256\npolicy = any\nunique_subject = no\n[any]\norganizationName = optional\ncommonName = supplied\n"
	for file, text := range map[string]string{name + ".ext": ext, name + ".cnf": conf, name + ".index": "", name + ".serial": "1000\n"} {
		if err := os.WriteFile(filepath.Join(p.Dir, file), []byte(text), 0o600); err != nil {
			p.t.Fatal(err)
		}
	}
	const asn1Time = "20060102150405Z"
	OpenSSL(p.t, p.Dir, "ca", "-batch", "-config", name+".cnf", "-in", name+".csr", "-cert", "ca.crt", "-keyfile", "ca.key",
		"-startdate", notBefore.UTC().Format(asn1Time), "-enddate", notAfter.UTC().Format(asn1Time),
		"-extfile", name+".ext", "-notext", "-out", name+".crt")
	return p.load(name+".crt", key)
}

// CRL is a DER CRL signed by issuer's brainpoolP256r1 key listing revoked
// (crypto/x509 cannot sign with the curve: it builds the TBS with a
// stand-in P-256 key, which is signed again with the issuer's key).
func CRL(t testing.TB, issuer KeyPair, thisUpdate, nextUpdate time.Time, revoked ...*x509.Certificate) []byte {
	t.Helper()
	standIn, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	iss := *issuer.Cert
	iss.KeyUsage |= x509.KeyUsageCRLSign // CreateRevocationList asks for it; the checker reads the real certificate
	if len(iss.SubjectKeyId) == 0 {
		iss.SubjectKeyId = []byte{1}
	}
	tmpl := &x509.RevocationList{Number: big.NewInt(1), ThisUpdate: thisUpdate, NextUpdate: nextUpdate}
	for _, r := range revoked {
		tmpl.RevokedCertificateEntries = append(tmpl.RevokedCertificateEntries, x509.RevocationListEntry{SerialNumber: r.SerialNumber, RevocationTime: thisUpdate})
	}
	der, err := x509.CreateRevocationList(rand.Reader, tmpl, &iss, standIn)
	if err != nil {
		t.Fatal(err)
	}
	rl, err := x509.ParseRevocationList(der)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(rl.RawTBSRevocationList)
	sig, err := issuer.Key.Sign(rand.Reader, sum[:], nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := asn1.Marshal(struct {
		TBS asn1.RawValue
		Alg pkix.AlgorithmIdentifier
		Sig asn1.BitString
	}{asn1.RawValue{FullBytes: rl.RawTBSRevocationList}, pkix.AlgorithmIdentifier{Algorithm: asn1.ObjectIdentifier{1, 2, 840, 10045, 4, 3, 2}},
		asn1.BitString{Bytes: sig, BitLength: len(sig) * 8}})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Party issues the three key pairs of a market partner.
func (p *PKI) Party(id string) Party {
	p.t.Helper()
	return Party{
		ID:      id,
		TLS:     p.Issue(id+"-tls", "/O=BDEW test/CN="+id+".tls", "digitalSignature", "extendedKeyUsage=serverAuth,clientAuth"),
		Signing: p.Issue(id+"-sig", "/O=BDEW test/CN="+id+".sig", "digitalSignature,nonRepudiation"),
		Encrypt: p.Issue(id+"-enc", "/O=BDEW test/CN="+id+".enc", "keyAgreement"),
	}
}
