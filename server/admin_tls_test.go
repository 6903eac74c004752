package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/outbox"
)

// selfSigned writes a self-signed ECDSA certificate and key for 127.0.0.1
// and returns the paths and the TLS pair.
func selfSigned(t *testing.T, dir, name string, usage x509.ExtKeyUsage) (certPath, keyPath string, pair tls.Certificate, cert *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ = x509.ParseCertificate(der)
	k8, _ := x509.MarshalPKCS8PrivateKey(key)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: k8})
	certPath, keyPath = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key")
	os.WriteFile(certPath, certPEM, 0o600)
	os.WriteFile(keyPath, keyPEM, 0o600)
	pair, err = tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return certPath, keyPath, pair, cert
}

// TestAdminMutualTLS serves the admin listener over HTTPS with a client CA:
// a client without a certificate, or with one the CA did not issue, is
// refused in the handshake; the operator's certificate gets /metrics.
func TestAdminMutualTLS(t *testing.T) {
	dir := t.TempDir()
	srvCert, srvKey, _, srvX := selfSigned(t, dir, "admin-server", x509.ExtKeyUsageServerAuth)
	caCert, _, operator, _ := selfSigned(t, dir, "operator", x509.ExtKeyUsageClientAuth)
	_, _, stranger, _ := selfSigned(t, dir, "stranger", x509.ExtKeyUsageClientAuth)
	cfg := demoConfig(t)
	cfg.Admin.TLS.Cert, cfg.Admin.TLS.Key, cfg.Admin.TLS.ClientCA = srvCert, srvKey, caCert
	s, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, admin := serveBoth(t, s)
	admin = "https" + admin[len("http"):]
	roots := x509.NewCertPool()
	roots.AddCert(srvX)
	client := func(certs ...tls.Certificate) *http.Client {
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: certs}}}
	}
	if resp, err := client().Get(admin + "/metrics"); err == nil {
		resp.Body.Close()
		t.Fatalf("no client certificate: %d, want a refused handshake", resp.StatusCode)
	}
	if resp, err := client(stranger).Get(admin + "/metrics"); err == nil {
		resp.Body.Close()
		t.Fatalf("unknown client certificate: %d, want a refused handshake", resp.StatusCode)
	}
	resp, err := client(operator).Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("operator certificate: %d", resp.StatusCode)
	}
}

// TestConsoleOverMutualTLS: the client certificate is the console's
// credential; its session cookie is Secure, and an action is audited with
// the certificate's subject.
func TestConsoleOverMutualTLS(t *testing.T) {
	dir := t.TempDir()
	srvCert, srvKey, _, srvX := selfSigned(t, dir, "admin-server", x509.ExtKeyUsageServerAuth)
	caCert, _, operator, _ := selfSigned(t, dir, "operator", x509.ExtKeyUsageClientAuth)
	cfg := demoConfig(t)
	cfg.Admin.TLS.Cert, cfg.Admin.TLS.Key, cfg.Admin.TLS.ClientCA = srvCert, srvKey, caCert
	s, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	// A delivery that failed once and is due in an hour (before serving,
	// so that the dispatcher does not take it first).
	ob := s.Backend.Outbox()
	if err := ob.Enqueue(ctx, outbox.Delivery{ID: "d1", Partner: "demo", MessageID: "m@demo", URL: "http://127.0.0.1:1/"}); err != nil {
		t.Fatal(err)
	}
	if _, err := ob.Lease(ctx, 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := ob.Retry(ctx, "d1", "", time.Now().Add(time.Hour), "connection refused"); err != nil {
		t.Fatal(err)
	}
	_, admin := serveBoth(t, s)
	admin = "https" + admin[len("http"):]
	roots := x509.NewCertPool()
	roots.AddCert(srvX)
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Timeout: 5 * time.Second, Jar: jar, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{operator}}}}
	resp, err := c.Get(admin + "/console/outbox")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if sc := resp.Header.Get("Set-Cookie"); !strings.Contains(sc, "Secure") || !strings.Contains(sc, "HttpOnly") || !strings.Contains(sc, "SameSite=Strict") {
		t.Errorf("session cookie over TLS: %q", sc)
	}
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindSubmatch(b)
	if resp.StatusCode != 200 || m == nil || !strings.Contains(string(b), "client certificate CN=operator") {
		t.Fatalf("outbox page over mTLS: %d %.500s", resp.StatusCode, b)
	}
	resp, err = c.PostForm(admin+"/console/outbox/retry", url.Values{"id": {"d1"}, "csrf": {string(m[1])}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("retry now: %d", resp.StatusCode)
	}
	recs, err := s.Backend.AuditSink().(audit.Reader).Query(ctx, audit.Query{Partner: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	var actor string
	for _, r := range recs {
		if r.Step == audit.StepOperator && r.Decision == "retry-now" {
			actor = r.Actor
		}
	}
	if actor != "client certificate CN=operator" {
		t.Fatalf("retry audit: actor %q in %+v", actor, recs)
	}
}

// TestConsoleBesideAdminToken: with an admin token, / sends a browser to
// the console, the console's login form is reachable without the header,
// and every other admin path still needs the bearer token.
func TestConsoleBesideAdminToken(t *testing.T) {
	cfg := demoConfig(t)
	cfg.Admin.Token = "0123456789abcdef-token"
	s, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h := s.AdminHandler()
	for _, tc := range []struct {
		path, token string
		want        int
	}{
		{"/", "", http.StatusSeeOther},
		{"/console/login", "", http.StatusOK},
		{"/console/", "", http.StatusUnauthorized},
		{"/console/", cfg.Admin.Token, http.StatusOK},
		{"/console/static/style.css", "", http.StatusOK},
		{"/metrics", "", http.StatusUnauthorized},
		{"/readyz", "", http.StatusUnauthorized},
		// cleaned by the console's mux into a redirect to /metrics, which needs the token
		{"/console/../metrics", "", http.StatusTemporaryRedirect},
	} {
		req := httptest.NewRequest("GET", tc.path, nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("GET %s (token %v): %d, want %d", tc.path, tc.token != "", rec.Code, tc.want)
		}
	}
}
