package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/internal/submitapi"
	"github.com/edigateway/gateway/outbound"
)

// fakeQueue is outbound.Queue's stand-in behind the submission API: it
// knows partner "acme" (AS2, or AS4 when asked for).
type fakeQueue struct{ store outbound.Store }

func (q fakeQueue) Submit(ctx context.Context, s outbound.Submission) (outbound.Message, bool, error) {
	if s.Partner != "acme" {
		return outbound.Message{}, false, outbound.ErrNotFound
	}
	p := outbound.AS2
	if s.Protocol == outbound.AS4 {
		p = outbound.AS4
	}
	id := outbound.NewID(time.Now())
	return q.store.Submit(ctx, outbound.Message{ID: id, MessageID: "<" + id + "@test>", Partner: s.Partner, Protocol: p,
		IdempotencyKey: s.IdempotencyKey, Source: s.Source, Filename: s.Filename, ContentType: s.ContentType,
		Properties: s.Properties}, s.Payload)
}

const submitTestToken = "submit-test-token-0123456789"

// submitAPI serves the submission API behind a bearer token check, as the
// admin listener does.
func submitAPI(t *testing.T) (*httptest.Server, *outbound.Memory) {
	t.Helper()
	st := outbound.NewMemory()
	h := submitapi.New(submitapi.Config{Submitter: fakeQueue{st}, Store: st,
		Errors: []submitapi.ErrorStatus{{Err: outbound.ErrNotFound, Status: http.StatusNotFound}}})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+submitTestToken {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, st
}

func submitFiles(t *testing.T) (payload, tokenFile string) {
	t.Helper()
	dir := t.TempDir()
	payload = filepath.Join(dir, "invoice.edi")
	if err := os.WriteFile(payload, []byte("ISA*00*invoice~"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokenFile = filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(submitTestToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return payload, tokenFile
}

func runSubmit(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(append([]string{"submit"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestSubmitCommandQueuesAFileOnce(t *testing.T) {
	srv, st := submitAPI(t)
	payload, tokenFile := submitFiles(t)
	code, out, errOut := runSubmit("-url", srv.URL, "-token-file", tokenFile, "-partner", "acme", "-file", payload, "-content-type", "application/edi-x12")
	if code != 0 {
		t.Fatalf("exit %d: %s %s", code, out, errOut)
	}
	ms, _ := st.List(context.Background(), outbound.Filter{})
	if len(ms) != 1 {
		t.Fatalf("%d messages", len(ms))
	}
	m := ms[0]
	for _, want := range []string{"id:         " + m.ID, "message id: " + m.MessageID, "status:     " + srv.URL + submitapi.StatusURL(m.ID)} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if m.Filename != "invoice.edi" || m.ContentType != "application/edi-x12" || m.Source != "http" || !strings.HasPrefix(m.IdempotencyKey, "file-") {
		t.Fatalf("queued %+v", m)
	}
	// Twice: queued once.
	code, out, _ = runSubmit("-url", srv.URL, "-token-file", tokenFile, "-partner", "acme", "-file", payload)
	if ms, _ := st.List(context.Background(), outbound.Filter{}); code != 0 || len(ms) != 1 || !strings.Contains(out, "already queued") || !strings.Contains(out, m.ID) {
		t.Fatalf("second run: exit %d, %d messages:\n%s", code, len(ms), out)
	}
	// Another key: another message.
	if code, _, _ = runSubmit("-url", srv.URL, "-token-file", tokenFile, "-partner", "acme", "-file", payload, "-idempotency-key", "other"); code != 0 {
		t.Fatal("exit", code)
	}
	if ms, _ := st.List(context.Background(), outbound.Filter{}); len(ms) != 2 {
		t.Fatalf("%d messages, want 2", len(ms))
	}
	// Refusals end with status 1 and the API's words; usage mistakes 2.
	if code, _, errOut = runSubmit("-url", srv.URL, "-token-file", tokenFile, "-partner", "nobody", "-file", payload); code != 1 || !strings.Contains(errOut, "404") || !strings.Contains(errOut, "incident GW-") {
		t.Fatalf("unknown partner: exit %d %s", code, errOut)
	}
	if code, _, errOut = runSubmit("-url", srv.URL, "-partner", "acme", "-file", payload); code != 1 || !strings.Contains(errOut, "401") {
		t.Fatalf("without the token: exit %d %s", code, errOut)
	}
	if code, _, _ = runSubmit("-url", srv.URL, "-file", payload); code != 2 {
		t.Fatalf("without -partner: exit %d", code)
	}
}

func TestSubmitCommandWaitsForTheOutcome(t *testing.T) {
	srv, st := submitAPI(t)
	payload, tokenFile := submitFiles(t)
	// The sender's stand-in: ends every message it leases, delivered for
	// key "good", failed otherwise.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			ms, _ := st.Lease(ctx, 10, time.Minute)
			for _, m := range ms {
				if m.IdempotencyKey == "good" {
					_ = st.Delivered(ctx, m.ID, m.LeaseToken, &outbound.Evidence{Kind: "mdn", Disposition: "processed", Signer: "CN=acme"})
				} else {
					_ = st.Failed(ctx, m.ID, m.LeaseToken, "decryption-failed", nil)
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	common := []string{"-url", srv.URL, "-token-file", tokenFile, "-partner", "acme", "-file", payload, "-wait", "10s", "-poll", "20ms"}
	code, out, errOut := runSubmit(append(common, "-idempotency-key", "good")...)
	if code != 0 || !strings.Contains(out, "delivered") || !strings.Contains(out, "signed by CN=acme") {
		t.Fatalf("delivered: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runSubmit(append(common, "-idempotency-key", "bad")...)
	if code != 1 || !strings.Contains(errOut, "failed: decryption-failed") {
		t.Fatalf("failed: exit %d\n%s%s", code, out, errOut)
	}
	cancel()
	// Never final within -wait: status 1, the message stays queued.
	code, _, errOut = runSubmit("-url", srv.URL, "-token-file", tokenFile, "-partner", "acme", "-file", payload,
		"-idempotency-key", "slow", "-wait", "100ms", "-poll", "20ms")
	if code != 1 || !strings.Contains(errOut, "still queued after 100ms") {
		t.Fatalf("timeout: exit %d %s", code, errOut)
	}
}

func TestSubmitCommandReadsTheAdminAddressFromTheConfig(t *testing.T) {
	srv, st := submitAPI(t)
	payload, _ := submitFiles(t)
	cfg := filepath.Join(t.TempDir(), "gateway.yaml")
	addr := strings.TrimPrefix(srv.URL, "http://")
	if err := os.WriteFile(cfg, []byte("listen: \":9999\"\nstore: \"memory:\"\nadmin:\n  listen: \""+addr+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GATEWAY_ADMIN_TOKEN", submitTestToken)
	code, out, errOut := runSubmit("-config", cfg, "-partner", "acme", "-file", payload)
	if ms, _ := st.List(context.Background(), outbound.Filter{}); code != 0 || len(ms) != 1 {
		t.Fatalf("exit %d, %d messages\n%s%s", code, len(ms), out, errOut)
	}
	if got := dialable("0.0.0.0:8079"); got != "127.0.0.1:8079" {
		t.Fatalf("dialable: %s", got)
	}
	if got := dialable(":8079"); got != "127.0.0.1:8079" {
		t.Fatalf("dialable: %s", got)
	}
}

// TestSubmitCommandPresentsAClientCertificate: an admin listener that asks
// for a client certificate (admin.tls.client_ca) is reached with
// -client-cert and -client-key over https, its self-made certificate
// trusted through -ca-file; without the certificate the connection is
// refused (exit 1) and nothing is queued.
func TestSubmitCommandPresentsAClientCertificate(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := submitTestCert(t, dir, "ca", nil, nil)
	_, _ = submitTestCert(t, dir, "ops", ca, caKey)
	srvCert, srvKey := submitTestCert(t, dir, "server", ca, caKey)
	srv, st := submitAPI(t)
	srv.Close() // the plain one; the same API behind mutual TLS:
	tlsSrv := httptest.NewUnstartedServer(srv.Config.Handler)
	clients := x509.NewCertPool()
	clients.AddCert(ca)
	tlsSrv.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clients, MinVersion: tls.VersionTLS12,
		Certificates: []tls.Certificate{{Certificate: [][]byte{srvCert.Raw}, PrivateKey: srvKey}}}
	tlsSrv.StartTLS()
	t.Cleanup(tlsSrv.Close)
	payload, tokenFile := submitFiles(t)
	base := []string{"-url", tlsSrv.URL, "-token-file", tokenFile, "-ca-file", filepath.Join(dir, "ca.pem"), "-partner", "acme", "-file", payload}

	// Refused in the handshake; with TLS 1.3 the client may learn it only
	// as its write fails (a reset or broken pipe instead of the alert).
	if code, _, errOut := runSubmit(base...); code != 1 || !strings.Contains(errOut, "submit:") {
		t.Fatalf("without a client certificate: exit %d %s", code, errOut)
	}
	if ms, _ := st.List(context.Background(), outbound.Filter{}); len(ms) != 0 {
		t.Fatalf("%d messages queued without a client certificate", len(ms))
	}
	code, out, errOut := runSubmit(append(base, "-client-cert", filepath.Join(dir, "ops.pem"), "-client-key", filepath.Join(dir, "ops.key"))...)
	if ms, _ := st.List(context.Background(), outbound.Filter{}); code != 0 || len(ms) != 1 {
		t.Fatalf("with the client certificate: exit %d, %d messages\n%s%s", code, len(ms), out, errOut)
	}
	if code, _, errOut = runSubmit(append(base, "-client-cert", filepath.Join(dir, "ops.pem"))...); code != 2 || !strings.Contains(errOut, "go together") {
		t.Fatalf("-client-cert alone: exit %d %s", code, errOut)
	}
}

// submitTestCert writes name.pem and name.key (PEM) to dir: a CA
// certificate when issuer is nil, else a certificate for 127.0.0.1 that
// issuer signed.
func submitTestCert(t *testing.T, dir, name string, issuer *x509.Certificate, issuerKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	parent, signer := tmpl, key
	if issuer == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid, tmpl.KeyUsage = true, true, x509.KeyUsageCertSign
	} else {
		parent, signer = issuer, issuerKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// -property NAME=VALUE (repeated) sends AS4 part properties in their
// order; a malformed or invalid one, or one for AS2, is a usage error
// (exit 2) and nothing is queued.
func TestSubmitCommandProperties(t *testing.T) {
	srv, st := submitAPI(t)
	payload, tokenFile := submitFiles(t)
	base := []string{"-url", srv.URL, "-token-file", tokenFile, "-partner", "acme", "-file", payload}
	code, out, errOut := runSubmit(append(base, "-protocol", "as4", "-property", "BDEWDocumentType=UTILMD",
		"-property", "BDEWDocumentNo=47=11", "-property", "BDEWDocumentDate=2026-12-05", "-property", "app:Note=Grüße & <gut>")...)
	if code != 0 {
		t.Fatalf("exit %d: %s %s", code, out, errOut)
	}
	ms, _ := st.List(context.Background(), outbound.Filter{})
	want := []outbound.Property{{Name: "BDEWDocumentType", Value: "UTILMD"}, {Name: "BDEWDocumentNo", Value: "47=11"},
		{Name: "BDEWDocumentDate", Value: "2026-12-05"}, {Name: "app:Note", Value: "Grüße & <gut>"}}
	if len(ms) != 1 || !outbound.EqualProperties(ms[0].Properties, want) {
		t.Fatalf("queued %d messages, properties %q; want 1 with %q", len(ms), ms[0].Properties, want)
	}
	for _, c := range []struct {
		args   []string
		reason string
	}{
		{[]string{"-protocol", "as4", "-property", "NoValue"}, "want NAME=VALUE"},
		{[]string{"-protocol", "as4", "-property", "bad name=x"}, "only A-Z"},
		{[]string{"-protocol", "as4", "-property", "MimeType=text/plain"}, "reserved"},
		{[]string{"-protocol", "as4", "-property", "A=1", "-property", "a=2"}, "twice"},
		{[]string{"-protocol", "as2", "-property", "A=1"}, "AS2"},
	} {
		code, _, errOut := runSubmit(append(append(base, c.args...), "-idempotency-key", "k-"+c.reason)...)
		if code != 2 || !strings.Contains(errOut, c.reason) {
			t.Errorf("%q: exit %d, %q; want 2 saying %q", c.args, code, errOut, c.reason)
		}
	}
	if ms, _ := st.List(context.Background(), outbound.Filter{}); len(ms) != 1 {
		t.Fatalf("%d messages queued, want 1", len(ms))
	}
	// The default key covers the properties, as a pickup sidecar's do: the
	// same file with the same properties is queued once; with another
	// value it is another message (before, the API answered 409).
	same := append(base, "-protocol", "as4", "-property", "BDEWDocumentType=UTILMD",
		"-property", "BDEWDocumentNo=47=11", "-property", "BDEWDocumentDate=2026-12-05", "-property", "app:Note=Grüße & <gut>")
	if code, out, errOut := runSubmit(same...); code != 0 || !strings.Contains(out, "already queued") {
		t.Fatalf("same properties again: exit %d: %s %s", code, out, errOut)
	}
	if code, out, errOut := runSubmit(append(base, "-protocol", "as4", "-property", "BDEWDocumentType=MSCONS")...); code != 0 {
		t.Fatalf("other properties: exit %d: %s %s", code, out, errOut)
	}
	if ms, _ := st.List(context.Background(), outbound.Filter{}); len(ms) != 2 {
		t.Fatalf("%d messages queued, want 2", len(ms))
	}
}
