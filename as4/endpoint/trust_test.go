package endpoint_test

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/as4"
)

// A signer whose configured certificate is expired or not yet valid at the
// endpoint's clock is refused with EBMS:0101 naming the certificate (subject,
// serial) and its dates; the handler never runs. The same certificate is
// accepted inside its validity (the acme certificate is valid 2020 to 2045).
func TestSignerValidityIsEBMS0101(t *testing.T) {
	t.Parallel()
	k := getKeys(t)
	for i, tc := range []struct {
		name string
		at   time.Time
		want []string // "" code: accepted
	}{
		{"expired", time.Date(2046, 3, 1, 12, 0, 0, 0, time.UTC), []string{`"CN=acme test AP,O=gateway tests"`, "serial 66", "expired on 2045-01-01T00:00:00Z", "valid from 2020-01-01T00:00:00Z", "checked at 2046-03-01T12:00:00Z"}},
		{"not yet valid", time.Date(2019, 6, 1, 0, 0, 0, 0, time.UTC), []string{`"CN=acme test AP,O=gateway tests"`, "not valid before 2020-01-01T00:00:00Z", "checked at 2019-06-01T00:00:00Z"}},
		{"valid", time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			at := tc.at
			h := newHarness(t, harnessOptions{now: func() time.Time { return at }})
			c := rsaClient(k)
			c.Now = func() time.Time { return at }
			c.ReceiptSigners = nil // the gateway's own certificate is judged at the real clock below
			c.Encryption = nil     // the client would refuse to encrypt to a certificate invalid at its clock
			out, err := c.Build(testMessage(fmt.Sprintf("validity-%d@acme.test", i)))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := c.Post(context.Background(), h.url, out)
			if err != nil && resp == nil {
				t.Fatal(err)
			}
			if tc.want == nil {
				if h.handler.count() != 1 {
					t.Fatalf("valid signer: handler ran %d times: %s", h.handler.count(), resp.Body)
				}
				return
			}
			code, ae := signalCode(t, k, resp)
			if code != as4.CodeFailedAuthentication {
				t.Fatalf("code %s, want %s: %s", code, as4.CodeFailedAuthentication, ae.Detail)
			}
			for _, w := range tc.want {
				if !strings.Contains(ae.Detail, w) {
					t.Errorf("detail lacks %q: %s", w, ae.Detail)
				}
			}
			if n := h.handler.count(); n != 0 {
				t.Fatalf("handler ran %d times", n)
			}
		})
	}
}

// An RSA signer below 2048 bits is refused with EBMS:0101 naming the
// certificate and its size, unless the partner file sets
// as4.allow_weak_keys (legacy peers).
func TestShortSignerKeyIsEBMS0101UnlessAllowed(t *testing.T) {
	t.Parallel()
	k := getKeys(t)
	weakKey, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	weak, err := selfSigned("legacy AP", 201, weakKey)
	if err != nil {
		t.Fatal(err)
	}
	for i, allow := range []bool{false, true} {
		t.Run(fmt.Sprintf("allow_weak_keys=%v", allow), func(t *testing.T) {
			t.Parallel()
			files := defaultPartners(t, k)
			certFile := filepath.Join(t.TempDir(), "legacy.pem")
			writePEM(t, certFile, weak.Cert)
			y := files["acme.yaml"]
			y = strings.Replace(y, "  certificates: [", fmt.Sprintf("  allow_weak_keys: %v\n  certificates: [%s, ", allow, certFile), 1)
			files["acme.yaml"] = y
			h := newHarness(t, harnessOptions{partnerYAML: files})
			c := rsaClient(k)
			c.Signer, c.Certificate = weak.Key.(crypto.Signer), weak.Cert
			c.ReceiptSigners = nil
			out, err := c.Build(testMessage(fmt.Sprintf("weak-%d@acme.test", i)))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := c.Post(context.Background(), h.url, out)
			if err != nil && resp == nil {
				t.Fatal(err)
			}
			if allow {
				if h.handler.count() != 1 {
					t.Fatalf("allowed weak key: handler ran %d times: %s", h.handler.count(), resp.Body)
				}
				return
			}
			code, ae := signalCode(t, k, resp)
			if code != as4.CodeFailedAuthentication || !strings.Contains(ae.Detail, "1024-bit RSA key") || !strings.Contains(ae.Detail, `"CN=legacy AP,O=gateway tests"`) {
				t.Fatalf("got %s %q, want EBMS:0101 naming the 1024-bit certificate", code, ae.Detail)
			}
			if n := h.handler.count(); n != 0 {
				t.Fatalf("handler ran %d times", n)
			}
		})
	}
}
