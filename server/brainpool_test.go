package server

import (
	"crypto/x509"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/internal/brainpool"
	"github.com/edigateway/gateway/internal/brainpool/bptest"
	"github.com/edigateway/gateway/internal/testpki"
	"github.com/edigateway/gateway/outbound"
	"github.com/edigateway/gateway/partners"
)

// A BDEW identity's brainpoolP256r1 signing and encryption keys, as openssl
// writes them, load through the served gateway's key path (PEM, DER or
// PKCS#12 via keyfile, handed on as PEM) and reach the AS4 endpoint as
// brainpool keys; AS2 cannot use them and says so.
func TestBrainpoolIdentityKeysLoad(t *testing.T) {
	pki := bptest.New(t)
	gw := pki.Party("9900000000002")
	s := &Server{Log: slog.New(slog.DiscardHandler)}
	as2Keys, as4Keys, err := s.loadIdentityKeys(config.Identity{PartyID: gw.ID, Keys: []config.KeyPair{
		{Cert: gw.Signing.CertFile, Key: gw.Signing.KeyFile},
		{Cert: gw.Encrypt.CertFile, Key: gw.Encrypt.KeyFile},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(as2Keys) != 0 {
		t.Errorf("%d brainpool keys offered to AS2", len(as2Keys))
	}
	if len(as4Keys) != 2 {
		t.Fatalf("%d AS4 keys, want 2", len(as4Keys))
	}
	for i, want := range []bptest.KeyPair{gw.Signing, gw.Encrypt} {
		k, ok := as4Keys[i].Key.(*brainpool.PrivateKey)
		if !ok || !k.PublicKey().Equal(want.Key.PublicKey()) || !as4Keys[i].Cert.Equal(want.Cert) {
			t.Errorf("key %d: %T, certificate %s; want the brainpool pair of %s", i, as4Keys[i].Key, as4Keys[i].Cert.Subject, want.CertFile)
		}
	}
}

// The identity a partner sends as (as4.send.from_party_id) signs with its
// own keys: for a bdew partner its first brainpoolP256r1 key whose
// certificate allows signatures (here its second key: the first is the
// key-agreement-only encryption key), as our receipts to bdew partners
// do; for other partners its first key. A partner without from_party_id
// gets the first identity.
func TestBDEWSendKeyPerIdentity(t *testing.T) {
	pki := bptest.New(t)
	us, sw := pki.Party("9900000000001"), pki.Party("9900000000002")
	dir := t.TempDir()
	rsaCert := testpki.SelfSigned(t, testpki.RSAKey(t, 0), testpki.Cert{CommonName: "gw"})
	certFile, keyFile := testpki.WriteKeyPair(t, dir, "gw", rsaCert, testpki.RSAKey(t, 0))
	pdir := filepath.Join(dir, "partners")
	files := map[string]string{
		filepath.Join(pdir, "gw.pem"): string(testpki.CertPEM(rsaCert)),
		filepath.Join(pdir, "sw.yaml"): "id: stadtwerke\nas4:\n  profile: bdew\n  party_id: \"" + sw.ID + "\"\n  certificates: [sw.pem]\n  tls_certificates: [sw-tls.pem]\n" +
			"  pmodes:\n    - id: mp\n      agreement: " + partners.BDEWAgreement + "\n" +
			"  send: {url: \"https://sw.example/as4\", pmode: {id: mp}, from_party_id: \"" + us.ID + "\"}\n",
		filepath.Join(pdir, "plain.yaml"): "id: plain\nas4:\n  party_id: urn:plain\n  certificates: [gw.pem]\n  pmodes: [{id: p}]\n" +
			"  send: {url: \"https://plain.example/as4\", from_party_id: \"" + us.ID + "\"}\n",
		filepath.Join(pdir, "first.yaml"): "id: first\nas4:\n  party_id: urn:first\n  certificates: [gw.pem]\n  pmodes: [{id: p}]\n  send: {url: \"https://first.example/as4\"}\n",
	}
	for name, file := range map[string]string{"sw.pem": sw.Signing.CertFile, "sw-tls.pem": sw.TLS.CertFile} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.Join(pdir, name)] = string(b)
	}
	writeFiles(t, files)
	d, err := partners.Load(pdir)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &config.Config{
		Identity: config.Identity{AS2ID: "GW", PartyID: "urn:gw", Keys: []config.KeyPair{{Cert: certFile, Key: keyFile}}},
		Identities: []config.Identity{{PartyID: us.ID, PartyType: partners.PartyTypeGLN, Keys: []config.KeyPair{
			{Cert: us.Encrypt.CertFile, Key: us.Encrypt.KeyFile}, {Cert: us.Signing.CertFile, Key: us.Signing.KeyFile}}}},
	}
	if err := d.CheckIdentities(cfg.AllIdentities()); err != nil {
		t.Fatal(err)
	}
	s := &Server{Log: slog.New(slog.DiscardHandler), Config: cfg}
	snap := &Snapshot{Partners: d}
	for _, id := range cfg.AllIdentities() {
		_, as4Keys, err := s.loadIdentityKeys(id)
		if err != nil {
			t.Fatal(err)
		}
		snap.sends = append(snap.sends, loadSendKeys(id, id.Keys, as4Keys))
	}
	s.reload.current.Store(snap)
	for _, c := range []struct {
		partner, party string
		cert           *x509.Certificate
	}{{"stadtwerke", us.ID, us.Signing.Cert}, {"plain", us.ID, us.Encrypt.Cert}, {"first", "urn:gw", rsaCert}} {
		id, err := s.sendIdentity(outbound.AS4, c.partner)
		if err != nil {
			t.Errorf("%s: %v", c.partner, err)
			continue
		}
		if id.PartyID != c.party || id.Cert == nil || !id.Cert.Equal(c.cert) {
			t.Errorf("%s: sent as %s with %v; want %s with %s", c.partner, id.PartyID, id.Cert.Subject, c.party, c.cert.Subject)
		}
	}
	if _, err := s.sendIdentity(outbound.AS4, "nobody"); err == nil {
		t.Error("an identity for a partner not in the directory")
	}
}
