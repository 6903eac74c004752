package deliver

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/internal/testpki"
)

type seenRequest struct {
	header http.Header
	body   string
	length int64
}

func recorder(t *testing.T, status int) (*httptest.Server, func() []seenRequest) {
	var mu sync.Mutex
	var seen []seenRequest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, seenRequest{r.Header.Clone(), string(b), r.ContentLength})
		mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []seenRequest { mu.Lock(); defer mu.Unlock(); return append([]seenRequest(nil), seen...) }
}

func newHTTP(t *testing.T, c HTTPConfig) *HTTP {
	t.Helper()
	if c.Name == "" {
		c.Name = "erp"
	}
	h, err := NewHTTP(c)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestHTTPPostsEachPayloadWithMetadataAndIdempotencyKey(t *testing.T) {
	srv, seen := recorder(t, http.StatusAccepted)
	t.Setenv("ERP_AUTH", "Bearer s3cret")
	h := newHTTP(t, HTTPConfig{URL: srv.URL + "/inbound", AuthHeaderEnv: "ERP_AUTH"})
	m := testMessage()
	if err := h.Handle(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	got := seen()
	if len(got) != 2 {
		t.Fatalf("%d requests, want one per payload", len(got))
	}
	first, second := got[0], got[1]
	want := map[string]string{
		"Idempotency-Key":                   m.Payloads[0].IdempotencyKey,
		"X-Gateway-Message-Idempotency-Key": m.IdempotencyKey,
		"X-Gateway-Partner":                 "acme",
		"X-Gateway-Protocol":                "as4",
		"X-Gateway-Message-Id":              "m-1@acme.example",
		"X-Gateway-Content-Type":            "application/EDIFACT",
		"Content-Type":                      "application/EDIFACT",
		"X-Gateway-Filename":                "rechnung-%C3%BC%0D%0AX-Evil: 1.edi",
		"X-Gateway-Sha256":                  m.Payloads[0].SHA256,
		"X-Gateway-Interchange-Key":         m.Payloads[0].IdempotencyKey,
		"X-Gateway-Interchange-Standard":    "EDIFACT",
		"X-Gateway-Reference":               "REF1",
		"X-Gateway-Service":                 "urn:invoicing",
		"X-Gateway-Action":                  "Deliver",
		"X-Gateway-Payload-Index":           "1",
		"X-Gateway-Payload-Count":           "2",
		"X-Gateway-Received":                "2026-12-01T09:00:00Z",
		"Authorization":                     "Bearer s3cret",
	}
	for k, v := range want {
		if g := first.header.Get(k); g != v {
			t.Errorf("%s = %q, want %q", k, g, v)
		}
	}
	if first.header.Get("X-Evil") != "" {
		t.Error("a file name injected a header")
	}
	if first.body != "UNB+UNOC:3+ACME+US+261201:0900+REF1'" || first.length != m.Payloads[0].Size {
		t.Errorf("body %q length %d", first.body, first.length)
	}
	if second.header.Get("Idempotency-Key") != m.Payloads[1].IdempotencyKey || second.header.Get("X-Gateway-Reference") != "" ||
		second.header.Get("Content-Type") != "text/plain; charset=utf-8" || second.body != "notes" {
		t.Errorf("second: %v %q", second.header, second.body)
	}
	// A retransmission posts the same keys again.
	if err := h.Handle(context.Background(), testMessage()); err != nil {
		t.Fatal(err)
	}
	if again := seen(); again[2].header.Get("Idempotency-Key") != first.header.Get("Idempotency-Key") {
		t.Error("idempotency key changed on retransmission")
	}
}

func TestHTTPFailureStatusFailsWithTruncatedResponse(t *testing.T) {
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, "database down\n"+strings.Repeat("x", 4<<20))
	}))
	defer srv.Close()
	h := newHTTP(t, HTTPConfig{URL: srv.URL + "/in?api_key=tok3n", MaxResponseBytes: 1 << 20})
	err := h.Handle(context.Background(), testMessage())
	if err == nil || !strings.Contains(err.Error(), "status 500") || !strings.Contains(err.Error(), "database down") {
		t.Fatalf("err = %v", err)
	}
	if strings.Contains(err.Error(), "tok3n") {
		t.Errorf("error shows the URL's query: %v", err)
	}
	if len(err.Error()) > 1024 {
		t.Errorf("error holds %d bytes of response", len(err.Error()))
	}
	if hits != 1 {
		t.Errorf("%d requests: the second payload was posted after the first failed", hits)
	}
}

func TestHTTPTimeoutFails(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	h := newHTTP(t, HTTPConfig{URL: srv.URL, Timeout: 200 * time.Millisecond})
	start := time.Now()
	err := h.Handle(context.Background(), testMessage())
	if err == nil || !strings.Contains(err.Error(), "no response within 200ms") || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %s", d)
	}
}

func TestHTTPRedirectIsNotFollowed(t *testing.T) {
	target, seen := recorder(t, http.StatusOK)
	for _, code := range []int{http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		srv := httptest.NewServer(http.RedirectHandler(target.URL, code))
		h := newHTTP(t, HTTPConfig{URL: srv.URL})
		err := h.Handle(context.Background(), testMessage())
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("status %d (redirects are not followed)", code)) {
			t.Errorf("%d: err = %v", code, err)
		}
		srv.Close()
	}
	if n := len(seen()); n != 0 {
		t.Fatalf("redirect target got %d requests", n)
	}
}

// slowBody hands out its first chunk, then waits until the server has read
// it: a client that read the whole payload before sending would deadlock.
type slowBody struct {
	first, rest int
	gotFirst    chan struct{}
}

func (b slowBody) Open() (io.ReadCloser, error) {
	pr, pw := io.Pipe()
	go func() {
		chunk := []byte(strings.Repeat("a", 64<<10))
		for n := 0; n < b.first; n += len(chunk) {
			pw.Write(chunk)
		}
		select {
		case <-b.gotFirst:
		case <-time.After(5 * time.Second):
			pw.CloseWithError(errors.New("the server never saw the first bytes: the body was not streamed"))
			return
		}
		for n := 0; n < b.rest; n += len(chunk) {
			pw.Write(chunk)
		}
		pw.Close()
	}()
	return pr, nil
}

func TestHTTPStreamsThePayload(t *testing.T) {
	const first, rest = 4 << 20, 28 << 20
	got := make(chan struct{})
	var received int64
	var sum string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, _ := io.CopyN(h, r.Body, first)
		close(got)
		m, _ := io.Copy(h, r.Body)
		received, sum = n+m, hex.EncodeToString(h.Sum(nil))
	}))
	defer srv.Close()
	want := sha256.Sum256([]byte(strings.Repeat("a", first+rest)))
	p := exchange.NewPayload(exchange.Payload{ContentType: "application/octet-stream", Size: first + rest,
		SHA256: hex.EncodeToString(want[:])}, slowBody{first, rest, got})
	m := testMessage()
	m.Payloads = []exchange.Payload{p}
	if err := newHTTP(t, HTTPConfig{URL: srv.URL, Timeout: 20 * time.Second}).Handle(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	if received != first+rest || sum != p.SHA256 {
		t.Fatalf("received %d bytes, sha %s", received, sum)
	}
}

func TestHTTPTLSWithCustomCAAndClientCertificate(t *testing.T) {
	dir := t.TempDir()
	clientKey := testpki.RSAKey(t, 0)
	clientCert := testpki.SelfSigned(t, clientKey, testpki.Cert{CommonName: "gateway", ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	certFile, keyFile := testpki.WriteKeyPair(t, dir, "client", clientCert, clientKey)
	clients := x509.NewCertPool()
	clients.AddCert(clientCert)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TLS.PeerCertificates) == 0 {
			w.WriteHeader(http.StatusForbidden)
		}
	}))
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clients}
	srv.StartTLS()
	defer srv.Close()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, testpki.CertPEM(srv.Certificate()), 0o600); err != nil {
		t.Fatal(err)
	}
	m := testMessage()
	// The system pool does not know the test CA.
	if err := newHTTP(t, HTTPConfig{URL: srv.URL}).Handle(context.Background(), m); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("without ca_file: %v", err)
	}
	// The server requires a client certificate.
	if err := newHTTP(t, HTTPConfig{URL: srv.URL, CAFile: ca}).Handle(context.Background(), m); err == nil {
		t.Error("without a client certificate: no error")
	}
	if err := newHTTP(t, HTTPConfig{URL: srv.URL, CAFile: ca, CertFile: certFile, KeyFile: keyFile}).Handle(context.Background(), m); err != nil {
		t.Errorf("with ca_file and client certificate: %v", err)
	}
}

func TestHTTPConfigErrors(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	os.WriteFile(notPEM, []byte("not a certificate"), 0o600)
	os.Unsetenv("GATEWAY_TEST_UNSET_AUTH")
	for _, tc := range []struct {
		c    HTTPConfig
		want string
	}{
		{HTTPConfig{URL: "ftp://erp/x"}, "not an http:// or https:// URL"},
		{HTTPConfig{URL: "https://user:pw@/x"}, "not an http"},
		{HTTPConfig{URL: "https://erp/x", AuthHeaderEnv: "GATEWAY_TEST_UNSET_AUTH"}, "GATEWAY_TEST_UNSET_AUTH (auth_header_env) is not set"},
		{HTTPConfig{URL: "https://erp/x", CAFile: notPEM}, "holds no PEM certificate"},
		{HTTPConfig{URL: "https://erp/x", CAFile: filepath.Join(dir, "missing.pem")}, "ca_file"},
		{HTTPConfig{URL: "https://erp/x", CertFile: "a.pem"}, "cert_file and key_file must be set together"},
	} {
		_, err := NewHTTP(tc.c)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want %q", tc.c, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "pw") {
			t.Errorf("error shows the URL's password: %v", err)
		}
	}
}
