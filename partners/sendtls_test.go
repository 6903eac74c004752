package partners

import (
	"crypto/tls"
	"encoding/pem"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/edigateway/gateway/outbound"
)

// TestSendTLSConfig: the TLS of a send block trusts ca_file's roots,
// holds the server to the pinned certificate (with or without ca_file),
// presents our client certificate, and without settings trusts the
// system's roots only.
func TestSendTLSConfig(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cn := "-"
		if len(r.TLS.PeerCertificates) > 0 {
			cn = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		io.WriteString(w, cn)
	}))
	srv.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes are expected
	srv.StartTLS()
	defer srv.Close()
	dir := t.TempDir()
	writeFile(t, dir, "server.pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})))
	writeCert(t, dir, "other.pem")
	writeKeyPair(t, dir, "client.pem", "client.key")
	get := func(tlsBlock string) (string, error) {
		t.Helper()
		writeFile(t, dir, "p.yaml", "id: p\nas2:\n  as2_id: P\n  certificates: [other.pem]\n  send:\n    url: "+srv.URL+"\n    tls: "+tlsBlock+"\n")
		d, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := d.SendTLSConfig(d.Partners[0], outbound.AS2)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.MinVersion != tls.VersionTLS12 {
			t.Errorf("MinVersion %x", cfg.MinVersion)
		}
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
		resp, err := c.Get(srv.URL)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b), nil
	}
	for name, c := range map[string]struct{ block, want, fail string }{
		"system roots":       {"{}", "", "certificate"},
		"ca_file":            {"{ca_file: server.pem}", "-", ""},
		"pinned":             {"{pinned_certificate: server.pem}", "-", ""},
		"pinned other":       {"{pinned_certificate: other.pem}", "", "is not the one"},
		"ca_file and pin":    {"{ca_file: server.pem, pinned_certificate: other.pem}", "", "is not the one"},
		"client certificate": {"{ca_file: server.pem, client_certificate: client.pem, client_key: client.key}", "client.pem", ""},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := get(c.block)
			if c.fail != "" {
				if err == nil || !strings.Contains(err.Error(), c.fail) {
					t.Fatalf("err %v, want one saying %q", err, c.fail)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %q, %v; want %q", got, err, c.want)
			}
		})
	}
	d, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.SendTLSConfig(d.Partners[0], outbound.AS4); err == nil {
		t.Error("a TLS configuration for a protocol the partner does not send with")
	}
}
