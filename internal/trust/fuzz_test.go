package trust

import (
	"bytes"
	"net/http"
	"testing"
	"time"

	"github.com/edigateway/gateway/internal/trust/trusttest"

	"golang.org/x/crypto/ocsp"
)

// FuzzParseRevocation feeds arbitrary responder bytes to the OCSP and CRL
// parsers: never a panic, and nothing unsigned is believed. Seeds: a real
// CRL and a real openssl ocsp response.
func FuzzParseRevocation(f *testing.F) {
	root := trusttest.NewRoot(f, "Fuzz Root")
	leaf := root.Issue(f, trusttest.Leaf{CommonName: "leaf"})
	now := time.Now()
	f.Add(root.CRL(f, now.Add(-time.Hour), now.Add(time.Hour), leaf.Cert))
	o := root.StartOCSP(f, nil, 60)
	req, err := ocsp.CreateRequest(leaf.Cert, root.Cert, nil)
	if err != nil {
		f.Fatal(err)
	}
	if resp, err := http.Post(o.URL, "application/ocsp-request", bytes.NewReader(req)); err == nil {
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		resp.Body.Close()
		f.Add(b.Bytes())
	}
	o.Stop()
	f.Add([]byte("-----BEGIN X509 CRL-----\nMAA=\n-----END X509 CRL-----\n"))
	f.Add([]byte{0x30, 0x03, 0x0a, 0x01, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, _, err := parseOCSP(b, leaf.Cert, root.Cert, now); err == nil && r == nil {
			t.Fatal("nil OCSP result without error")
		}
		if r, _, err := parseCRL(b, root.Cert, now); err == nil && r == nil {
			t.Fatal("nil CRL result without error")
		}
	})
}
