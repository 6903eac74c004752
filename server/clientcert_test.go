package server

import (
	"context"
	"crypto"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/as4/client"
	"github.com/edigateway/gateway/receipt"
)

type headerRT struct{ name, value string }

func (h headerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if h.value != "" {
		r.Header.Set(h.name, h.value)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// The served gateway passes as4.client_cert_header and as4.trusted_proxies
// to the AS4 endpoint: a partner with tls_certificates is accepted with its
// certificate forwarded from a trusted proxy (loopback here), refused
// without it.
func TestServeAS4ForwardedClientCertificate(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	demo := filepath.Join(filepath.Dir(file), "..", "testdata", "fixture")
	pem, _ := os.ReadFile(filepath.Join(demo, "partners", "demo-partner.pem"))
	cfg := demoConfig(t)
	cfg.Partners = demoPartners(t, func(y string) string {
		return strings.Replace(y, "  clock_skew: 5m\n", "  clock_skew: 5m\n  tls_certificates: [demo-partner.pem]\n", 1)
	})
	cfg.AS4.ClientCertHeader = "X-SSL-Client-Cert"
	cfg.AS4.TrustedProxies = []string{"127.0.0.1", "::1"}
	s, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Serve(ctx, ln)

	kp, gw := demoAS4Keys(t)
	send := func(id, header string) error {
		c := &client.Client{Signer: kp.Key.(crypto.Signer), Certificate: kp.Cert, ReceiptSigners: gw, HTTP: &http.Client{Transport: headerRT{"X-SSL-Client-Cert", header}},
			Encryption: &client.Encryption{Recipient: gw[0]}}
		_, _, err := c.Send(context.Background(), "http://"+ln.Addr().String()+"/as4", &client.Message{MessageID: id,
			From:    as4.PartyID{Value: "urn:demo:partner", Type: "urn:oasis:names:tc:ebcore:partyid-type:unregistered"},
			To:      as4.PartyID{Value: "urn:demo:gateway", Type: "urn:oasis:names:tc:ebcore:partyid-type:unregistered"},
			Service: "urn:demo:invoicing", Action: "Deliver",
			Payloads: []client.Payload{{MimeType: "application/xml", Data: []byte("<Invoice/>"), Compress: true}}})
		return err
	}
	if err := send("tls-1@demo", url.QueryEscape(string(pem))); err != nil {
		t.Fatalf("with the forwarded certificate: %v", err)
	}
	err = send("tls-2@demo", "")
	var se *receipt.SignalError
	if !errors.As(err, &se) || se.Errors[0].Code != "EBMS:0101" {
		t.Fatalf("without a certificate: %v", err)
	}
}
