package server

import (
	"log/slog"
	"testing"

	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/internal/brainpool"
	"github.com/edigateway/gateway/internal/brainpool/bptest"
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
