package endpoint_test

import (
	"encoding/pem"
	"strings"
	"testing"

	"crypto/x509"

	"github.com/edigateway/gateway/as4/endpoint"
)

func TestParseKeyPair(t *testing.T) {
	t.Parallel()
	k := getKeys(t)
	certPEM := func(c *x509.Certificate) []byte {
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	keyPEM := func(key any) []byte {
		der, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	}
	for name, pair := range map[string]struct {
		cert *x509.Certificate
		key  any
	}{
		"rsa": {k.gatewayRSA.Cert, k.gatewayRSA.Key}, "ed25519": {k.partnerEd.Cert, k.partnerEd.Key},
		"x25519": {k.gatewayX25519.Cert, k.gatewayX25519.Key},
	} {
		// A leading non-certificate block and a trailing chain are skipped.
		cp := append([]byte("-----BEGIN X-----\nAAAA\n-----END X-----\n"), certPEM(pair.cert)...)
		cp = append(cp, certPEM(k.partnerRSA.Cert)...)
		kp, err := endpoint.ParseKeyPair(cp, keyPEM(pair.key))
		if err != nil || !kp.Cert.Equal(pair.cert) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, tc := range map[string]struct {
		cert, key []byte
		want      string
	}{
		"foreign key":  {certPEM(k.gatewayRSA.Cert), keyPEM(k.partnerRSA.Key), "does not belong"},
		"no cert":      {nil, keyPEM(k.partnerRSA.Key), "no CERTIFICATE"},
		"no key":       {certPEM(k.gatewayRSA.Cert), nil, "no PRIVATE KEY"},
		"encrypted":    {certPEM(k.gatewayRSA.Cert), pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED PRIVATE KEY", Bytes: []byte{1}}), "encrypted"},
		"garbage key":  {certPEM(k.gatewayRSA.Cert), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1, 2}}), "private key"},
		"garbage cert": {pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1}}), keyPEM(k.partnerRSA.Key), "certificate"},
	} {
		if _, err := endpoint.ParseKeyPair(tc.cert, tc.key); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}
