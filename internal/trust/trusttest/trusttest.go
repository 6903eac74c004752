// Package trusttest builds CA hierarchies, CRLs and a real `openssl ocsp`
// responder on loopback for the tests of the trust checks (trust, as2,
// as4/endpoint, peppol). It is for _test.go files only.
package trusttest

import (
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edigateway/gateway/internal/testpki"
)

// Validity of generated certificates unless a Leaf says otherwise.
var (
	NotBefore = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	NotAfter  = time.Date(2045, 1, 1, 0, 0, 0, 0, time.UTC)
)

// CA is a generated certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	// Dir holds ca.pem and ca.key (for openssl).
	Dir string

	mu     sync.Mutex
	serial int64
	issued []*x509.Certificate
}

var keyIndex struct {
	sync.Mutex
	next int
}

// key returns a fresh cached test key; indexes from 100 on, so that they do
// not collide with the keys a package's other tests use.
func key(t testing.TB) crypto.Signer {
	keyIndex.Lock()
	i := 100 + keyIndex.next
	keyIndex.next++
	keyIndex.Unlock()
	return testpki.RSAKey(t, i)
}

// NewRoot makes a self-signed root CA.
func NewRoot(t testing.TB, cn string) *CA {
	t.Helper()
	k := key(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn, Organization: []string{"trusttest"}},
		NotBefore: NotBefore, NotAfter: NotAfter, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	return newCA(t, tmpl, tmpl, k, k)
}

// NewIntermediate makes a CA issued by ca.
func (ca *CA) NewIntermediate(t testing.TB, cn string) *CA {
	t.Helper()
	k := key(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.nextSerial()), Subject: pkix.Name{CommonName: cn, Organization: []string{"trusttest"}},
		NotBefore: NotBefore, NotAfter: NotAfter, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	return newCA(t, tmpl, ca.Cert, k, ca.Key)
}

func newCA(t testing.TB, tmpl, parent *x509.Certificate, k, signer crypto.Signer) *CA {
	t.Helper()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, k.Public(), signer)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{Cert: c, Key: k, Dir: t.TempDir(), serial: 100}
	write(t, filepath.Join(ca.Dir, "ca.pem"), testpki.CertPEM(c))
	write(t, filepath.Join(ca.Dir, "ca.key"), testpki.KeyPEM(t, k))
	return ca
}

func write(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func (ca *CA) nextSerial() int64 {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	ca.serial++
	return ca.serial
}

// Leaf describes an end-entity certificate; zero fields take defaults.
type Leaf struct {
	CommonName   string
	Organization []string
	DNSNames     []string
	// NotBefore/NotAfter default to the package values.
	NotBefore, NotAfter time.Time
	// KeyUsage defaults to digitalSignature | keyEncipherment.
	KeyUsage    x509.KeyUsage
	ExtKeyUsage []x509.ExtKeyUsage
	OCSP        string // AIA OCSP URL
	CRL         string // CRL distribution point
	// Key is the subject key (default: a fresh test key).
	Key crypto.Signer
}

// Issued is a certificate with its key.
type Issued struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// Issue makes an end-entity certificate signed by ca.
func (ca *CA) Issue(t testing.TB, l Leaf) Issued {
	t.Helper()
	if l.Key == nil {
		l.Key = key(t)
	}
	if l.NotBefore.IsZero() {
		l.NotBefore = NotBefore
	}
	if l.NotAfter.IsZero() {
		l.NotAfter = NotAfter
	}
	if l.KeyUsage == 0 {
		l.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.nextSerial()), Subject: pkix.Name{CommonName: l.CommonName, Organization: l.Organization},
		DNSNames: l.DNSNames, NotBefore: l.NotBefore, NotAfter: l.NotAfter, KeyUsage: l.KeyUsage, ExtKeyUsage: l.ExtKeyUsage,
	}
	if l.OCSP != "" {
		tmpl.OCSPServer = []string{l.OCSP}
	}
	if l.CRL != "" {
		tmpl.CRLDistributionPoints = []string{l.CRL}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, l.Key.Public(), ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca.mu.Lock()
	ca.issued = append(ca.issued, c)
	ca.mu.Unlock()
	return Issued{Cert: c, Key: l.Key}
}

// CRL returns a DER CRL of ca listing revoked, valid from thisUpdate to
// nextUpdate.
func (ca *CA) CRL(t testing.TB, thisUpdate, nextUpdate time.Time, revoked ...*x509.Certificate) []byte {
	t.Helper()
	var entries []x509.RevocationListEntry
	for _, r := range revoked {
		entries = append(entries, x509.RevocationListEntry{SerialNumber: r.SerialNumber, RevocationTime: thisUpdate.Add(-time.Hour)})
	}
	der, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{
		Number: big.NewInt(ca.nextSerial()), ThisUpdate: thisUpdate, NextUpdate: nextUpdate, RevokedCertificateEntries: entries,
	}, ca.Cert, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// Files serves byte contents by path on loopback (CRLs); Set replaces them,
// Hits counts requests per path.
type Files struct {
	URL  string
	srv  *httptest.Server
	mu   sync.Mutex
	body map[string][]byte
	hits map[string]int
}

// ServeFiles starts the server.
func ServeFiles(t testing.TB) *Files {
	f := &Files{body: map[string][]byte{}, hits: map[string]int{}}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		b, ok := f.body[r.URL.Path]
		f.hits[r.URL.Path]++
		f.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/pkix-crl")
		_, _ = w.Write(b)
	}))
	t.Cleanup(f.srv.Close)
	f.URL = f.srv.URL
	return f
}

// Set serves b at path.
func (f *Files) Set(path string, b []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.body[path] = b
}

// Hits is the number of requests for path.
func (f *Files) Hits(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hits[path]
}

// OCSP is a running `openssl ocsp` responder for one CA.
type OCSP struct {
	URL    string
	cmd    *exec.Cmd
	log    *strings.Builder
	exited chan struct{} // closed once the process has ended
}

// OpenSSL is the openssl binary the responder runs.
const OpenSSL = "/usr/bin/openssl"

// StartOCSP runs `openssl ocsp` on a loopback port for ca, signing with the
// CA key (or with responder, a delegated responder certificate, when set)
// and answering from an index in which revoked are marked revoked and every
// other certificate ca issued is valid. nextUpdate is set nmin minutes
// ahead (0: none). The test is skipped when openssl is missing.
func (ca *CA) StartOCSP(t testing.TB, responder *Issued, nmin int, revoked ...*x509.Certificate) *OCSP {
	t.Helper()
	// The port was free when DownURL looked; another process may take it
	// before openssl binds it: a new port then.
	for attempt := 1; ; attempt++ {
		o, err := ca.startOCSP(t, responder, DownURL(t), nmin, revoked...)
		if err == nil {
			return o
		}
		if !errors.Is(err, errPortTaken) || attempt == 5 {
			t.Fatal(err)
		}
	}
}

// StartOCSPAt is StartOCSP listening at url, a DownURL reserved earlier
// (for example to write it into a certificate's AIA before the responder's
// index is made). A port another process took meanwhile is tried again a
// few times.
func (ca *CA) StartOCSPAt(t testing.TB, responder *Issued, url string, nmin int, revoked ...*x509.Certificate) *OCSP {
	t.Helper()
	for attempt := 1; ; attempt++ {
		o, err := ca.startOCSP(t, responder, url, nmin, revoked...)
		if err == nil {
			return o
		}
		if !errors.Is(err, errPortTaken) || attempt == 5 {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(attempt) * 200 * time.Millisecond)
	}
}

// errPortTaken: openssl ocsp could not bind its port.
var errPortTaken = errors.New("port taken")

func (ca *CA) startOCSP(t testing.TB, responder *Issued, url string, nmin int, revoked ...*x509.Certificate) (*OCSP, error) {
	t.Helper()
	var port int
	if _, err := fmt.Sscanf(url, "http://127.0.0.1:%d/", &port); err != nil {
		t.Fatalf("OCSP url %q: %v", url, err)
	}
	if _, err := os.Stat(OpenSSL); err != nil {
		t.Skipf("openssl not available: %v", err)
	}
	dir := t.TempDir()
	isRevoked := map[string]bool{}
	for _, r := range revoked {
		isRevoked[r.SerialNumber.String()] = true
	}
	var idx strings.Builder
	ca.mu.Lock()
	for _, c := range ca.issued {
		exp := c.NotAfter.UTC().Format("060102150405Z")
		serial := strings.ToUpper(c.SerialNumber.Text(16))
		if len(serial)%2 == 1 {
			serial = "0" + serial
		}
		if isRevoked[c.SerialNumber.String()] {
			fmt.Fprintf(&idx, "R\t%s\t%s\t%s\tunknown\t/CN=%s\n", exp, time.Now().Add(-time.Hour).UTC().Format("060102150405Z"), serial, c.Subject.CommonName)
		} else {
			fmt.Fprintf(&idx, "V\t%s\t\t%s\tunknown\t/CN=%s\n", exp, serial, c.Subject.CommonName)
		}
	}
	ca.mu.Unlock()
	write(t, filepath.Join(dir, "index.txt"), []byte(idx.String()))
	write(t, filepath.Join(dir, "index.txt.attr"), []byte("unique_subject = no\n"))
	rsigner, rkey := filepath.Join(ca.Dir, "ca.pem"), filepath.Join(ca.Dir, "ca.key")
	if responder != nil {
		rsigner, rkey = filepath.Join(dir, "rsigner.pem"), filepath.Join(dir, "rsigner.key")
		write(t, rsigner, testpki.CertPEM(responder.Cert))
		write(t, rkey, testpki.KeyPEM(t, responder.Key))
	}
	args := []string{"ocsp", "-index", filepath.Join(dir, "index.txt"), "-CA", filepath.Join(ca.Dir, "ca.pem"),
		"-rsigner", rsigner, "-rkey", rkey, "-port", fmt.Sprint(port), "-ignore_err", "-timeout", "5"}
	if nmin > 0 {
		args = append(args, "-nmin", fmt.Sprint(nmin))
	}
	cmd := exec.Command(OpenSSL, args...)
	logs := &strings.Builder{}
	lw := &lockedWriter{b: logs}
	cmd.Stdout, cmd.Stderr = lw, lw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	o := &OCSP{URL: fmt.Sprintf("http://127.0.0.1:%d/", port), cmd: cmd, log: logs, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(o.exited)
	}()
	// Wait for its banner: a probing connection that sends nothing would
	// block the single-threaded responder.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(lw.String(), "waiting for OCSP client connections") {
		select {
		case <-o.exited:
			if strings.Contains(lw.String(), "Address already in use") {
				return nil, fmt.Errorf("openssl ocsp on %d: %w: %s", port, errPortTaken, lw.String())
			}
			return nil, fmt.Errorf("openssl ocsp exited on %d: %s", port, lw.String())
		default:
		}
		if time.Now().After(deadline) {
			o.Stop()
			return nil, fmt.Errorf("openssl ocsp did not start on %d: %s", port, lw.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Cleanup(o.Stop)
	return o, nil
}

// Stop ends the responder (it is then "down").
func (o *OCSP) Stop() {
	select {
	case <-o.exited:
	default:
		_ = o.cmd.Process.Kill()
		<-o.exited
	}
}

type lockedWriter struct {
	mu sync.Mutex
	b  *strings.Builder
}

func (w *lockedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// DownURL is a loopback URL where nothing listens.
func DownURL(t testing.TB) string {
	return fmt.Sprintf("http://127.0.0.1:%d/", freePort(t))
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
