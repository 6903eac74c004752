package as2

import (
	"crypto/rand"
	"crypto/rsa"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/internal/testpki"
	"github.com/edigateway/gateway/mdn"
)

// A signer whose certificate is not yet valid at the endpoint's clock gets
// authentication-failed naming the certificate and its dates, in the words
// AS4's EBMS:0101 uses.
func TestNotYetValidSignerIsAuthenticationFailed(t *testing.T) {
	t.Parallel()
	getKeys(t)
	at := time.Date(2019, 6, 1, 0, 0, 0, 0, time.UTC) // partner 2's certificate starts 2020-01-01
	e := newEnv(t, envOptions{partnerYAML: "  require_signature: true\n", now: func() time.Time { return at }})
	cl := e.client()
	cl.Cipher = ""
	m := prepare(t, cl, "ISA*00*          *00*          *ZZ*ACME*ZZ*GATEWAY~\n")
	resp, body := e.post(t, m.Header, m.Body)
	p := expectMDN(t, resp, body, mdn.DispAuthenticationFailed)
	for _, want := range []string{`certificate "CN=partner 2,O=gateway as2 tests" (serial 1B5B)`, "is not valid before 2020-01-01T00:00:00Z",
		"checked at 2019-06-01T00:00:00Z"} {
		if !strings.Contains(p.Report.HumanText, want) {
			t.Errorf("reason lacks %s: %s", want, p.Report.HumanText)
		}
	}
	if n := e.handler.count(m.ID); n != 0 {
		t.Fatalf("handler ran %d times", n)
	}
}

// A partner signing with an RSA key below 2048 bits gets
// authentication-failed naming the certificate and its size, unless its
// partner file sets as2.allow_weak_keys.
func TestShortSignerKeyIsAuthenticationFailedUnlessAllowed(t *testing.T) {
	t.Parallel()
	getKeys(t)
	weakKey, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	weak := testpki.SelfSigned(t, weakKey, testpki.Cert{CommonName: "legacy", Serial: 99})
	for _, allow := range []bool{false, true} {
		t.Run(fmt.Sprintf("allow_weak_keys=%v", allow), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{
				files: map[string][]byte{"legacy.pem": testpki.CertPEM(weak)},
				extraPartners: map[string]string{"legacy.yaml": fmt.Sprintf(
					"id: legacy\nas2:\n  as2_id: LEGACY\n  certificates: [legacy.pem]\n  require_signature: true\n  allow_weak_keys: %v\n", allow)},
			})
			cl := e.client()
			cl.From, cl.SignCert, cl.SignKey = "LEGACY", weak, weakKey
			m := prepare(t, cl, "ISA*00*          *00*          *ZZ*LEGACY*ZZ*GATEWAY~\n")
			resp, body := e.post(t, m.Header, m.Body)
			if allow {
				expectMDN(t, resp, body, mdn.DispProcessed)
				if n := e.handler.count(m.ID); n != 1 {
					t.Fatalf("handler ran %d times", n)
				}
				return
			}
			p := expectMDN(t, resp, body, mdn.DispAuthenticationFailed)
			if !strings.Contains(p.Report.HumanText, `certificate "CN=legacy" (serial 63) has a 1024-bit RSA key`) {
				t.Errorf("reason: %s", p.Report.HumanText)
			}
			if n := e.handler.count(m.ID); n != 0 {
				t.Fatalf("handler ran %d times", n)
			}
		})
	}
}
