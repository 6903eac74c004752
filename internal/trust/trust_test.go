package trust

import (
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/internal/testpki"
)

func TestCheckSignerValidityAndKeySize(t *testing.T) {
	key := testpki.RSAKey(t, 0)
	c := testpki.SelfSigned(t, key, testpki.Cert{CommonName: "acme", Serial: 0x2a,
		NotBefore: time.Date(2016, 1, 1, 0, 0, 0, 0, time.UTC), NotAfter: time.Date(2016, 12, 31, 0, 0, 0, 0, time.UTC)})
	for _, tc := range []struct {
		at      time.Time
		want    error
		phrases []string
	}{
		{time.Date(2016, 6, 1, 0, 0, 0, 0, time.UTC), nil, nil},
		{time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC), ErrExpired, []string{`"CN=acme"`, "serial 2A", "expired on 2016-12-31T00:00:00Z", "valid from 2016-01-01T00:00:00Z"}},
		{time.Date(2015, 6, 1, 0, 0, 0, 0, time.UTC), ErrNotYetValid, []string{`"CN=acme"`, "not valid before 2016-01-01T00:00:00Z", "2015-06-01"}},
	} {
		err := CheckSigner(c, tc.at, Policy{})
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Fatalf("at %s: got %v, want %v", tc.at, err, tc.want)
		}
		var ce *CertError
		if tc.want != nil && !errors.As(err, &ce) {
			t.Fatalf("at %s: %T is not a *CertError", tc.at, err)
		}
		for _, p := range tc.phrases {
			if !strings.Contains(err.Error(), p) {
				t.Errorf("at %s: %q lacks %q", tc.at, err, p)
			}
		}
	}

	weakKey, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	weak := testpki.SelfSigned(t, weakKey, testpki.Cert{CommonName: "legacy"})
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	err = CheckSigner(weak, now, Policy{})
	if !errors.Is(err, ErrWeakKey) || !strings.Contains(err.Error(), "1024-bit RSA key") || !strings.Contains(err.Error(), `"CN=legacy"`) {
		t.Fatalf("weak key: %v", err)
	}
	if err := CheckSigner(weak, now, Policy{AllowWeakKeys: true}); err != nil {
		t.Fatalf("weak key allowed by policy: %v", err)
	}
	if w, err := CheckKeySize(weak, Policy{AllowWeakKeys: true}); !w || err != nil {
		t.Fatalf("CheckKeySize allowed: weak=%v err=%v", w, err)
	}
	if w, err := CheckKeySize(c, Policy{AllowWeakKeys: true}); w || err != nil {
		t.Fatalf("2048 bits: weak=%v err=%v", w, err)
	}
}

func TestCheckOwnAcceptsNotYetValidRefusesExpired(t *testing.T) {
	key := testpki.RSAKey(t, 0)
	c := testpki.SelfSigned(t, key, testpki.Cert{CommonName: "us",
		NotBefore: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), NotAfter: time.Date(2032, 1, 1, 0, 0, 0, 0, time.UTC)})
	if err := CheckOwn(c, time.Date(2029, 1, 1, 0, 0, 0, 0, time.UTC), Policy{}); err != nil {
		t.Fatalf("not yet valid own key: %v", err)
	}
	if err := CheckOwn(c, time.Date(2033, 1, 1, 0, 0, 0, 0, time.UTC), Policy{}); !errors.Is(err, ErrExpired) {
		t.Fatalf("expired own key: %v", err)
	}
}
