package endpoint_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/as4/client"
	"github.com/edigateway/gateway/as4/endpoint"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/internal/brainpool"
	"github.com/edigateway/gateway/internal/brainpool/bptest"
	"github.com/edigateway/gateway/internal/wssec"
	"github.com/edigateway/gateway/internal/xmlenc"
	"github.com/edigateway/gateway/partners"
	"github.com/edigateway/gateway/receipt"
)

const utilmd = "UNA:+.? 'UNB+UNOC:3+9900000000002:500+9900000000001:500+250101:1200+ICR0001++TL'" +
	"UNH+1+UTILMD:D:11A:UN:S2.1'BGM+E01+DOC0001'UNT+3+1'UNZ+1+ICR0001'"

type bdewSetup struct {
	pki     *bptest.PKI
	gw, sw  bptest.Party // the gateway and the sending market partner
	url     string
	calls   *atomic.Int64
	client  *client.Client
	message func(id string) *client.Message
}

// newBDEW builds a brainpool PKI with openssl (three key pairs per market
// partner: TLS, signature, encryption), a partner directory with a bdew
// partner and the real endpoint behind an HTTP server.
func newBDEW(t *testing.T) *bdewSetup { return newBDEWWith(t, "", nil) }

const clientCertHeader = "X-SSL-Client-Cert"

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// newBDEWWith adds partnerExtra to the partner's as4 section and lets mod
// change the endpoint configuration.
func newBDEWWith(t *testing.T, partnerExtra string, mod func(*endpoint.Config)) *bdewSetup {
	t.Helper()
	pki := bptest.New(t)
	s := &bdewSetup{pki: pki, gw: pki.Party("9900000000001"), sw: pki.Party("9900000000002"), calls: &atomic.Int64{}}
	dir := t.TempDir()
	cert, _ := os.ReadFile(s.sw.Signing.CertFile)
	os.WriteFile(filepath.Join(dir, "sw-sig.pem"), cert, 0o600)
	tlsCert, _ := os.ReadFile(s.sw.TLS.CertFile)
	os.WriteFile(filepath.Join(dir, "sw-tls.pem"), tlsCert, 0o600)
	os.WriteFile(filepath.Join(dir, "stadtwerke.yaml"), []byte(`id: stadtwerke
as4:
  profile: bdew
  party_id: "9900000000002"
  certificates: [sw-sig.pem]
  tls_certificates: [sw-tls.pem]
  pmodes:
    - id: mp
      agreement: https://www.bdew.de/as4/communication/agreement
      service: https://www.bdew.de/as4/communication/services/MP
      action: http://docs.oasis-open.org/ebxml-msg/as4/200902/action
`+partnerExtra), 0o600)
	d, err := partners.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	pl := &exchange.Pipeline{Store: dedup.NewMemoryStore(dedup.Options{Lease: time.Minute}), Log: slog.New(slog.DiscardHandler),
		Handler: exchange.HandlerFunc(func(ctx context.Context, m *exchange.Message) error {
			s.calls.Add(1)
			if m.Partner != "stadtwerke" || len(m.Payloads) != 1 {
				return fmt.Errorf("unexpected message %+v", m)
			}
			return nil
		})}
	cfg := endpoint.Config{Partners: d, Pipeline: pl, Log: slog.New(slog.DiscardHandler),
		// Keys[0] (RSA) signs for the other partners; the bdew partner gets
		// receipts signed with the brainpool signing key.
		Keys:    []xmlenc.KeyPair{getKeys(t).gatewayRSA, {Cert: s.gw.Signing.Cert, Key: s.gw.Signing.Key}, {Cert: s.gw.Encrypt.Cert, Key: s.gw.Encrypt.Key}},
		PartyID: s.gw.ID, PartyType: partners.PartyTypeGLN,
		// The profile requires mutual TLS; Go's TLS has no brainpool, so the
		// partner's TLS certificate arrives from a (loopback) proxy.
		ClientCertHeader: clientCertHeader, TrustedProxies: loopback}
	if mod != nil {
		mod(&cfg)
	}
	ep, err := endpoint.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(ep)
	t.Cleanup(srv.Close)
	s.url = srv.URL
	s.client = &client.Client{
		HTTP:   &http.Client{Transport: headerTransport{clientCertHeader, base64.StdEncoding.EncodeToString(s.sw.TLS.Cert.Raw)}},
		Signer: s.sw.Signing.Key, Certificate: s.sw.Signing.Cert, PKIPath: true,
		Encryption:     &client.Encryption{Recipient: s.gw.Encrypt.Cert, KeyReference: xmlenc.ByX509SKI},
		ReceiptSigners: []*x509.Certificate{s.gw.Signing.Cert},
	}
	s.message = func(id string) *client.Message {
		return &client.Message{MessageID: id,
			From: as4.PartyID{Value: s.sw.ID, Type: partners.PartyTypeGLN}, To: as4.PartyID{Value: s.gw.ID, Type: partners.PartyTypeGLN},
			AgreementRef: partners.BDEWAgreement, Service: "https://www.bdew.de/as4/communication/services/MP",
			Action:   "http://docs.oasis-open.org/ebxml-msg/as4/200902/action",
			Payloads: []client.Payload{{MimeType: "application/edifact", Data: []byte(utilmd), Compress: true}}}
	}
	return s
}

func TestBDEWEndToEnd(t *testing.T) {
	s := newBDEW(t)
	ctx := context.Background()
	out, err := s.client.Build(s.message("utilmd-1@9900000000002"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{xmlenc.AlgECDHES, xmlenc.AlgConcatKDF, brainpool.NamedCurveURI, wssec.ValueTypeX509PKIPathv1, wssec.AlgECDSASHA256, "X509SKI"} {
		if !bytes.Contains(out.Body, []byte(want)) {
			t.Fatalf("sent message lacks %s", want)
		}
	}
	var receipts [][]byte
	for i := 0; i < 2; i++ {
		resp, err := s.client.Post(ctx, s.url, out)
		if err != nil {
			t.Fatalf("post %d: %v", i, err)
		}
		if resp.Receipt == nil || resp.Receipt.RefToMessageID != "utilmd-1@9900000000002" {
			t.Fatalf("post %d: no receipt for the message: %+v", i, resp.Receipt)
		}
		receipts = append(receipts, resp.Body)
	}
	if s.calls.Load() != 1 || !bytes.Equal(receipts[0], receipts[1]) {
		t.Fatalf("handler ran %d times; second receipt is the first: %v", s.calls.Load(), bytes.Equal(receipts[0], receipts[1]))
	}
	rc := string(receipts[0])
	if !strings.Contains(rc, wssec.AlgECDSASHA256) || !strings.Contains(rc, wssec.ValueTypeX509PKIPathv1) {
		t.Fatalf("receipt is not signed with ecdsa-sha256 and a PKIPath token: %s", rc)
	}
	// The receipt verified by implementations that are not ours.
	verifyWithXMLSec1(t, receipts[0], s.gw.Signing.CertFile)
}

func TestBDEWRefusals(t *testing.T) {
	s := newBDEW(t)
	ctx := context.Background()
	soapPart := func(out *client.Outgoing, f func(string) string) *client.Outgoing {
		body := string(out.Body)
		i := strings.Index(body, "<S12:Envelope")
		j := strings.Index(body, "</S12:Envelope>") + len("</S12:Envelope>")
		changed := body[:i] + f(body[i:j]) + body[j:]
		if changed == body {
			t.Fatal("mutation did not apply")
		}
		return &client.Outgoing{MessageID: out.MessageID, ContentType: out.ContentType, Body: []byte(changed), References: out.References}
	}
	p256, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p256Point, _ := p256.PublicKey.Bytes()
	for name, c := range map[string]struct {
		build func(t *testing.T) *client.Outgoing
		code  string
	}{
		"tampered eb:Messaging": {func(t *testing.T) *client.Outgoing {
			out, _ := s.client.Build(s.message("tampered@9900000000002"))
			return soapPart(out, func(x string) string {
				return strings.Replace(x, "<eb:ConversationId>tampered@9900000000002", "<eb:ConversationId>other@9900000000002", 1)
			})
		}, "EBMS:0101"},
		"wrong-curve ephemeral key": {func(t *testing.T) *client.Outgoing {
			out, _ := s.client.Build(s.message("curve@9900000000002"))
			return soapPart(out, func(x string) string {
				x = strings.Replace(x, brainpool.NamedCurveURI, "urn:oid:1.2.840.10045.3.1.7", 1)
				re := regexp.MustCompile(`<dsig11:PublicKey>[^<]*</dsig11:PublicKey>`)
				return re.ReplaceAllString(x, "<dsig11:PublicKey>"+base64.StdEncoding.EncodeToString(p256Point)+"</dsig11:PublicKey>")
			})
		}, "EBMS:0103"},
		"wrong-curve signing key": {func(t *testing.T) *client.Outgoing {
			c := *s.client
			c.Signer, c.Certificate = p256, selfSignedP256(t, p256)
			out, err := c.Build(s.message("p256@9900000000002"))
			if err != nil {
				t.Fatal(err)
			}
			return out
		}, "EBMS:0101"},
		"SHA-512 digests": {func(t *testing.T) *client.Outgoing {
			c := *s.client
			c.DigestMethod = wssec.AlgSHA512
			out, _ := c.Build(s.message("sha512@9900000000002"))
			return out
		}, "EBMS:0103"},
		"unencrypted": {func(t *testing.T) *client.Outgoing {
			c := *s.client
			c.Encryption = nil
			out, _ := c.Build(s.message("plain@9900000000002"))
			return out
		}, "EBMS:0103"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := s.client.Post(ctx, s.url, c.build(t))
			var se *receipt.SignalError
			if !errors.As(err, &se) || len(se.Errors) == 0 || se.Errors[0].Code != c.code {
				t.Fatalf("err = %v, want %s", err, c.code)
			}
		})
	}
	if s.calls.Load() != 0 {
		t.Fatalf("handler ran %d times for refused messages", s.calls.Load())
	}
}

func verifyWithXMLSec1(t *testing.T, doc []byte, certFile string) {
	t.Helper()
	path, err := exec.LookPath("xmlsec1")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("xmlsec1 not installed")
		}
		t.Skip("xmlsec1 not installed")
	}
	f := filepath.Join(t.TempDir(), "receipt.xml")
	os.WriteFile(f, doc, 0o600)
	out, err := exec.Command(path, "--verify", "--pubkey-cert-pem", certFile, "--id-attr:Id", "Messaging", "--id-attr:Id", "Body", f).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "OK") {
		t.Fatalf("xmlsec1 does not verify the receipt: %v: %s", err, out)
	}
}

func selfSignedP256(t *testing.T, k *ecdsa.PrivateKey) *x509.Certificate {
	t.Helper()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "9900000000002.sig"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return c
}

// headerTransport adds a header to every request (the TLS-terminating proxy).
type headerTransport struct{ name, value string }

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if h.value != "" {
		r.Header.Set(h.name, h.value)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// The transport note of the profile: behind a TLS-terminating proxy the
// verified client certificate arrives in a header, trusted only from the
// configured proxy addresses, and must be one of the sending partner's TLS
// certificates.
func TestBDEWForwardedClientCertificate(t *testing.T) {
	const header = clientCertHeader
	trusted := newBDEW(t) // lists sw-tls.pem, trusts loopback proxies
	pemOf := func(kp bptest.KeyPair) string {
		b, _ := os.ReadFile(kp.CertFile)
		return url.QueryEscape(string(b)) // nginx $ssl_client_escaped_cert
	}
	ctx := context.Background()
	for name, c := range map[string]struct {
		value string
		code  string // "" = receipt
	}{
		"partner's TLS certificate (URL-encoded PEM)": {pemOf(trusted.sw.TLS), ""},
		"partner's TLS certificate (base64 DER)":      {base64.StdEncoding.EncodeToString(trusted.sw.TLS.Cert.Raw), ""},
		"no certificate":                              {"", "EBMS:0101"},
		"another party's certificate":                 {pemOf(trusted.gw.TLS), "EBMS:0101"},
		"partner's signing, not TLS, certificate":     {pemOf(trusted.sw.Signing), "EBMS:0101"},
		"garbage": {"%%%", "EBMS:0101"},
	} {
		t.Run(name, func(t *testing.T) {
			cl := *trusted.client
			cl.HTTP = &http.Client{Transport: headerTransport{header, c.value}}
			_, resp, err := cl.Send(ctx, trusted.url, trusted.message(strings.ReplaceAll(name, " ", "-")+"@9900000000002"))
			if c.code == "" {
				if err != nil || resp.Receipt == nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var se *receipt.SignalError
			if !errors.As(err, &se) || se.Errors[0].Code != c.code {
				t.Fatalf("err = %v, want %s", err, c.code)
			}
		})
	}
	// From an address that is not a trusted proxy the header is ignored.
	var logs syncBuffer
	untrusted := newBDEWWith(t, "", func(c *endpoint.Config) {
		c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
		c.Log = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	cl := *untrusted.client
	cl.HTTP = &http.Client{Transport: headerTransport{header, pemOf(untrusted.sw.TLS)}}
	_, _, err := cl.Send(ctx, untrusted.url, untrusted.message("untrusted@9900000000002"))
	var se *receipt.SignalError
	if !errors.As(err, &se) || se.Errors[0].Code != "EBMS:0101" {
		t.Fatalf("header from an untrusted address: %v", err)
	}
	if !strings.Contains(logs.String(), "as4 client certificate header ignored: not from a trusted proxy") {
		t.Fatalf("ignored header not logged: %s", logs.String())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Without a brainpool signing key among our keys, a bdew partner's message
// cannot be answered as the profile asks: HTTP 500 (the sender retries), no
// delivery.
func TestBDEWWithoutBrainpoolSigningKey(t *testing.T) {
	s := newBDEWWith(t, "", func(c *endpoint.Config) {
		c.Keys = []xmlenc.KeyPair{c.Keys[0], c.Keys[2]} // RSA and the brainpool encryption key only
	})
	_, resp, err := s.client.Send(context.Background(), s.url, s.message("nokey@9900000000002"))
	if err == nil || resp == nil || resp.Status != 500 {
		t.Fatalf("status %v, err %v", resp, err)
	}
	if s.calls.Load() != 0 {
		t.Fatalf("handler ran %d times for a message that cannot be acknowledged", s.calls.Load())
	}
}
