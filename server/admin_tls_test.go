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
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
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
