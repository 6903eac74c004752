package endpoint_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/edigateway/gateway/as4"
)

// TestMinimalPartnerRequiresEncryption: an AS4 partner file with only its
// party, certificates and P-Mode requires encrypted payloads (the secure
// default); a message that is signed but not encrypted is refused through
// the real endpoint with EBMS:0103 and reaches no handler, an encrypted one
// is received. require_encryption: false is the explicit opt-out.
func TestMinimalPartnerRequiresEncryption(t *testing.T) {
	k := getKeys(t)
	certs := filepath.Join(t.TempDir(), "acme.pem")
	writePEM(t, certs, k.partnerRSA.Cert)
	partner := func(extra string) map[string]string {
		return map[string]string{"acme.yaml": fmt.Sprintf("id: acme\nas4:\n  party_id: %s\n  party_type: %s\n  certificates: [%s]\n%s  pmodes:\n    - id: invoice\n      service: %s\n      action: %s\n",
			acmeParty.Value, acmeParty.Type, certs, extra, testService, testAction)}
	}
	for _, tc := range []struct {
		name, yaml string
		// signedOnly is the outcome of a message that is not encrypted:
		// "" for a receipt, else the ebMS error code.
		signedOnly string
	}{
		{"minimal", "", as4.CodePolicyNoncompliance},
		{"opt-out", "  require_encryption: false\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessOptions{partnerYAML: partner(tc.yaml)})
			for i, encrypt := range []bool{false, true} {
				c := rsaClient(k)
				if !encrypt {
					c.Encryption = nil
				}
				out, err := c.Build(testMessage(fmt.Sprintf("defaults-%s-%d@acme.test", tc.name, i)))
				if err != nil {
					t.Fatal(err)
				}
				before := h.handler.count()
				resp, err := c.Post(context.Background(), h.url, out)
				want := ""
				if !encrypt {
					want = tc.signedOnly
				}
				if want == "" {
					if err != nil || resp.Receipt == nil {
						t.Fatalf("encrypted %v: want a receipt, got %v", encrypt, err)
					}
					if h.handler.count() != before+1 {
						t.Errorf("encrypted %v: not handled", encrypt)
					}
					continue
				}
				if code, _ := signalCode(t, k, resp); code != want {
					t.Fatalf("encrypted %v: error %s, want %s", encrypt, code, want)
				}
				if h.handler.count() != before {
					t.Errorf("encrypted %v: a refused message reached the handler", encrypt)
				}
			}
		})
	}
}
