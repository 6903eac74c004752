package endpoint_test

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/as4/client"
	"github.com/edigateway/gateway/as4/endpoint"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/internal/brainpool/bptest"
	"github.com/edigateway/gateway/internal/trust/trusttest"
	"github.com/edigateway/gateway/internal/xmlenc"
	"github.com/edigateway/gateway/partners"
	"github.com/edigateway/gateway/receipt"
)

// TestBDEWTrustCA: a bdew partner under trust: ca (the energy sector's
// brainpool PKI, CRLs): a signing certificate the CA issued is accepted
// without being configured (it was refused: crypto/x509 cannot check a
// brainpoolP256r1 signature, and the token's certificate was not read); a
// revoked one, one of another CA and a CRL that is not the CA's are
// refused with EBMS:0101.
func TestBDEWTrustCA(t *testing.T) {
	pki := bptest.New(t)
	gw, sw := pki.Party("9900000000001"), pki.Party("9900000000002")
	renewed := pki.Issue("sw-sig-2", "/O=BDEW test/CN=9900000000002.sig2", "digitalSignature,nonRepudiation")
	revoked := pki.Issue("sw-sig-old", "/O=BDEW test/CN=9900000000002.sig-old", "digitalSignature,nonRepudiation")
	foreign := bptest.New(t).Party("9900000000002")
	crls := trusttest.ServeFiles(t)
	now := time.Now()
	crls.Set("/bdew.crl", bptest.CRL(t, pki.CA, now.Add(-time.Hour), now.Add(time.Hour), revoked.Cert))
	crls.Set("/forged.crl", bptest.CRL(t, foreign.Signing, now.Add(-time.Hour), now.Add(time.Hour)))

	dir := t.TempDir()
	tlsCert, _ := os.ReadFile(sw.TLS.CertFile)
	os.WriteFile(filepath.Join(dir, "sw-tls.pem"), tlsCert, 0o600)
	partner := func(id, party, crl string) {
		os.WriteFile(filepath.Join(dir, id+".yaml"), []byte(fmt.Sprintf(`id: %s
as4:
  profile: bdew
  party_id: "%s"
  trust: ca
  ca_certificates: [%s]
  revocation: {mode: crl, crl_urls: ["%s"]}
  tls_certificates: [sw-tls.pem]
  pmodes:
    - id: mp
      agreement: https://www.bdew.de/as4/communication/agreement
      service: https://www.bdew.de/as4/communication/services/MP
      action: http://docs.oasis-open.org/ebxml-msg/as4/200902/action
`, id, party, pki.CA.CertFile, crl)), 0o600)
	}
	partner("stadtwerke", sw.ID, crls.URL+"/bdew.crl")
	partner("forged-crl", "9900000000003", crls.URL+"/forged.crl")
	d, err := partners.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	pl := &exchange.Pipeline{Store: dedup.NewMemoryStore(dedup.Options{Lease: time.Minute}), Log: slog.New(slog.DiscardHandler),
		Handler: exchange.HandlerFunc(func(ctx context.Context, m *exchange.Message) error { calls.Add(1); return nil })}
	ep, err := endpoint.New(endpoint.Config{Partners: d, Pipeline: pl, Log: slog.New(slog.DiscardHandler),
		Keys:    []xmlenc.KeyPair{{Cert: gw.Signing.Cert, Key: gw.Signing.Key}, {Cert: gw.Encrypt.Cert, Key: gw.Encrypt.Key}},
		PartyID: gw.ID, PartyType: partners.PartyTypeGLN, ClientCertHeader: clientCertHeader, TrustedProxies: loopback})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(ep)
	t.Cleanup(srv.Close)

	send := func(id, from string, signer bptest.KeyPair) error {
		cl := &client.Client{
			HTTP:   &http.Client{Transport: headerTransport{clientCertHeader, base64.StdEncoding.EncodeToString(sw.TLS.Cert.Raw)}},
			Signer: signer.Key, Certificate: signer.Cert, PKIPath: true,
			Encryption:     &client.Encryption{Recipient: gw.Encrypt.Cert, KeyReference: xmlenc.ByX509SKI},
			ReceiptSigners: []*x509.Certificate{gw.Signing.Cert},
		}
		_, _, err := cl.Send(context.Background(), srv.URL, &client.Message{MessageID: id,
			From: as4.PartyID{Value: from, Type: partners.PartyTypeGLN}, To: as4.PartyID{Value: gw.ID, Type: partners.PartyTypeGLN},
			AgreementRef: partners.BDEWAgreement, Service: "https://www.bdew.de/as4/communication/services/MP",
			Action:   "http://docs.oasis-open.org/ebxml-msg/as4/200902/action",
			Payloads: []client.Payload{{MimeType: "application/edifact", Data: []byte(utilmd), Compress: true}}})
		return err
	}
	delivered := int64(0)
	for _, tc := range []struct {
		name, from string
		signer     bptest.KeyPair
		want       []string // nil: accepted
	}{
		{"certificate issued by the CA", sw.ID, sw.Signing, nil},
		{"renewed certificate, not configured", sw.ID, renewed, nil},
		{"revoked certificate", sw.ID, revoked, []string{"9900000000002.sig-old", "is revoked"}},
		{"certificate of another CA", sw.ID, foreign.Signing, []string{"does not chain to a configured CA"}},
		{"CRL not signed by the CA", "9900000000003", sw.Signing, []string{"revocation status", "could not be determined"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := send(strings.ReplaceAll(tc.name, " ", "-")+"@"+tc.from, tc.from, tc.signer)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				delivered++
				return
			}
			var se *receipt.SignalError
			if !errors.As(err, &se) || se.Errors[0].Code != as4.CodeFailedAuthentication {
				t.Fatalf("err = %v, want EBMS:0101", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(se.Errors[0].Detail, w) {
					t.Errorf("detail lacks %q: %s", w, se.Errors[0].Detail)
				}
			}
		})
	}
	if calls.Load() != delivered {
		t.Fatalf("handler ran %d times, want %d", calls.Load(), delivered)
	}
}
