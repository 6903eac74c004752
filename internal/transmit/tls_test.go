package transmit_test

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/edigateway/gateway/internal/testpki"
	"github.com/edigateway/gateway/internal/transmit"
	"github.com/edigateway/gateway/mdn"
	"github.com/edigateway/gateway/outbound"
)

// The partner's HTTPS endpoint is trusted as its TLS settings say: its CA
// file, or its pinned certificate (and no other); a partner that asks for
// our client certificate gets it. Without them the attempt is retried.
func TestTLSSettings(t *testing.T) {
	gw := theirs(t)
	p := &scripted{mic: func(d string) string { return d }, key: &gw, disp: mdn.DispProcessed}
	var mu sync.Mutex
	var presented *x509.Certificate // the client certificate of the last request
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		presented = nil
		if len(r.TLS.PeerCertificates) > 0 {
			presented = r.TLS.PeerCertificates[0]
		}
		mu.Unlock()
		p.ServeHTTP(w, r)
	}))
	srv.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	srv.StartTLS()
	defer srv.Close()
	dir := t.TempDir()
	serverPEM := filepath.Join(dir, "server.pem")
	if err := os.WriteFile(serverPEM, testpki.CertPEM(srv.Certificate()), 0o600); err != nil {
		t.Fatal(err)
	}
	otherKey := testpki.RSAKey(t, 1)
	other := testpki.SelfSigned(t, otherKey, testpki.Cert{CommonName: "not the partner"})
	otherPEM := filepath.Join(dir, "other.pem")
	if err := os.WriteFile(otherPEM, testpki.CertPEM(other), 0o600); err != nil {
		t.Fatal(err)
	}
	clientCert, clientKey := testpki.WriteKeyPair(t, dir, "client", other, otherKey)
	for _, c := range []struct {
		name   string
		tls    transmit.TLS
		want   outbound.Outcome
		client *x509.Certificate
	}{
		{"system roots", transmit.TLS{}, outbound.Retry, nil},
		{"CA file", transmit.TLS{CAFile: serverPEM}, outbound.Deliver, nil},
		{"wrong CA file", transmit.TLS{CAFile: otherPEM}, outbound.Retry, nil},
		{"pinned", transmit.TLS{PinnedCertificate: serverPEM}, outbound.Deliver, nil},
		{"pinned other", transmit.TLS{PinnedCertificate: otherPEM}, outbound.Retry, nil},
		{"client certificate", transmit.TLS{CAFile: serverPEM, ClientCertificate: clientCert, ClientKey: clientKey}, outbound.Deliver, other},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := as2To(t, srv.URL, func(s *transmit.AS2Settings) { s.TLS = c.tls })
			a := p.attempt(t, tr, as2Message(t))
			if a.Outcome != c.want {
				t.Fatalf("attempt %+v", a)
			}
			mu.Lock()
			got := presented
			mu.Unlock()
			if c.want == outbound.Deliver && (got == nil) != (c.client == nil) || got != nil && c.client != nil && !got.Equal(c.client) {
				t.Fatalf("client certificate presented: %v", got)
			}
		})
	}
}
