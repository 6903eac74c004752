package client_test

import (
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/as4/client"
	"github.com/edigateway/gateway/internal/testpki"
	"github.com/edigateway/gateway/internal/trust"
)

// The client refuses to encrypt to a receiver certificate that is expired
// or has a short RSA key (unless AllowWeakKeys), naming it.
func TestBuildRefusesExpiredOrWeakRecipient(t *testing.T) {
	key := testpki.RSAKey(t, 0)
	signer := testpki.SelfSigned(t, key, testpki.Cert{CommonName: "us"})
	expired := testpki.SelfSigned(t, key, testpki.Cert{CommonName: "them", NotAfter: time.Date(2022, 1, 1, 0, 0, 0, 0, time.UTC)})
	weakKey, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	weak := testpki.SelfSigned(t, weakKey, testpki.Cert{CommonName: "legacy"})
	msg := func() *client.Message {
		return &client.Message{From: as4.PartyID{Value: "a"}, To: as4.PartyID{Value: "b"}, Service: "s", Action: "a",
			Payloads: []client.Payload{{MimeType: "application/xml", Data: []byte("<x/>")}}}
	}
	now := func() time.Time { return time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) }
	for _, tc := range []struct {
		name   string
		cert   *client.Encryption
		allow  bool
		want   error
		phrase string
	}{
		{"expired", &client.Encryption{Recipient: expired}, false, trust.ErrExpired, `"CN=them" (serial 01) expired on 2022-01-01`},
		{"weak", &client.Encryption{Recipient: weak}, false, trust.ErrWeakKey, "1024-bit RSA key"},
		{"weak allowed", &client.Encryption{Recipient: weak}, true, nil, ""},
	} {
		c := &client.Client{Signer: key, Certificate: signer, Encryption: tc.cert, Now: now, AllowWeakKeys: tc.allow}
		_, err := c.Build(msg())
		if tc.want == nil {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.phrase) {
			t.Errorf("%s: got %v, want %v with %q", tc.name, err, tc.want, tc.phrase)
		}
	}
}
