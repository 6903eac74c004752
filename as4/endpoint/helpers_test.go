package endpoint_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"mime"
	"mime/multipart"
	"net/http/httptest"
	"net/textproto"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/beevik/etree"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/as4/client"
	"github.com/edigateway/gateway/as4/endpoint"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/internal/peppol"
	"github.com/edigateway/gateway/internal/xmlenc"
	"github.com/edigateway/gateway/partners"
	"github.com/edigateway/gateway/receipt"
	"github.com/edigateway/gateway/store/sqlitestore"
)

// Parties of the generated test agreement.
var (
	acmeParty    = as4.PartyID{Value: "urn:acme:ap", Type: "urn:oasis:names:tc:ebcore:partyid-type:unregistered"}
	strictParty  = as4.PartyID{Value: "urn:strict:ap", Type: "urn:oasis:names:tc:ebcore:partyid-type:unregistered"}
	gatewayParty = as4.PartyID{Value: "urn:gateway:ap", Type: "urn:oasis:names:tc:ebcore:partyid-type:unregistered"}
)

const (
	testService = "urn:test:invoicing"
	testAction  = "Deliver"
)

// testKeys are generated once for the whole package.
type testKeys struct {
	gatewayRSA    xmlenc.KeyPair // signs receipts, RSA-OAEP recipient
	gatewayX25519 xmlenc.KeyPair // eDelivery AS4 2.0 recipient
	partnerRSA    xmlenc.KeyPair
	partnerEd     xmlenc.KeyPair
	strangerRSA   xmlenc.KeyPair // a valid key no partner configured
}

var (
	keysOnce sync.Once
	keys     testKeys
	keysErr  error
)

func getKeys(t testing.TB) testKeys {
	t.Helper()
	keysOnce.Do(func() { keys, keysErr = generateKeys() })
	if keysErr != nil {
		t.Fatal(keysErr)
	}
	return keys
}

func generateKeys() (testKeys, error) {
	var k testKeys
	var wg sync.WaitGroup
	rsaKeys := make([]*rsa.PrivateKey, 3)
	errs := make([]error, 3)
	for i := range rsaKeys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rsaKeys[i], errs[i] = rsa.GenerateKey(rand.Reader, 2048)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return k, err
	}
	var err error
	if k.gatewayRSA, err = selfSigned("gateway test AP", 101, rsaKeys[0]); err != nil {
		return k, err
	}
	if k.partnerRSA, err = selfSigned("acme test AP", 102, rsaKeys[1]); err != nil {
		return k, err
	}
	if k.strangerRSA, err = selfSigned("acme test AP", 103, rsaKeys[2]); err != nil {
		return k, err
	}
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return k, err
	}
	if k.partnerEd, err = selfSigned("acme test AP (eDelivery 2.0)", 104, edKey); err != nil {
		return k, err
	}
	k.gatewayX25519, err = x25519Pair("gateway test AP (X25519)", 105)
	return k, err
}

func selfSigned(cn string, serial int64, key crypto.Signer) (xmlenc.KeyPair, error) {
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"gateway tests"}},
		NotBefore:    time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:     time.Date(2045, 1, 1, 0, 0, 0, 0, time.UTC),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return xmlenc.KeyPair{}, err
	}
	cert, err := x509.ParseCertificate(der)
	return xmlenc.KeyPair{Cert: cert, Key: key}, err
}

// x25519Pair makes an X25519 certificate issued by a throwaway Ed25519 CA.
// crypto/x509 cannot issue certificates for X25519 keys, so it issues one
// for a placeholder Ed25519 key (same SubjectPublicKeyInfo length), swaps
// the key in and signs the TBS part again.
func x25519Pair(cn string, serial int64) (xmlenc.KeyPair, error) {
	caPub, caKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return xmlenc.KeyPair{}, err
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gateway test CA"},
		NotBefore: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), NotAfter: time.Date(2045, 1, 1, 0, 0, 0, 0, time.UTC),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caPub, caKey)
	if err != nil {
		return xmlenc.KeyPair{}, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return xmlenc.KeyPair{}, err
	}
	priv, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return xmlenc.KeyPair{}, err
	}
	placeholder, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return xmlenc.KeyPair{}, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: ca.NotBefore, NotAfter: ca.NotAfter, KeyUsage: x509.KeyUsageKeyAgreement}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, placeholder, caKey)
	if err != nil {
		return xmlenc.KeyPair{}, err
	}
	first, err := x509.ParseCertificate(der)
	if err != nil {
		return xmlenc.KeyPair{}, err
	}
	spki, err := x509.MarshalPKIXPublicKey(priv.PublicKey())
	if err != nil {
		return xmlenc.KeyPair{}, err
	}
	if len(spki) != len(first.RawSubjectPublicKeyInfo) {
		return xmlenc.KeyPair{}, errors.New("X25519 SPKI length differs from the placeholder's")
	}
	der = bytes.Replace(der, first.RawSubjectPublicKeyInfo, spki, 1)
	patched, err := x509.ParseCertificate(der)
	if err != nil {
		return xmlenc.KeyPair{}, err
	}
	copy(der[len(der)-ed25519.SignatureSize:], ed25519.Sign(caKey, patched.RawTBSCertificate))
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return xmlenc.KeyPair{}, err
	}
	return xmlenc.KeyPair{Cert: cert, Key: priv}, cert.CheckSignatureFrom(ca)
}

func writePEM(t testing.TB, path string, certs ...*x509.Certificate) {
	t.Helper()
	var buf bytes.Buffer
	for _, c := range certs {
		pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

// recorder is the business handler of the tests: it counts calls and keeps
// every payload it was given.
type recorder struct {
	mu    sync.Mutex
	calls int
	msgs  []recorded
	// before, if set, runs first; its error fails the delivery.
	before func(call int) error
	// observe, if set, sees every message handed to the handler.
	observe func(m *exchange.Message)
}

type recorded struct {
	msg      *exchange.Message
	payloads [][]byte
}

func (r *recorder) Handle(ctx context.Context, m *exchange.Message) error {
	r.mu.Lock()
	r.calls++
	n := r.calls
	before, observe := r.before, r.observe
	r.mu.Unlock()
	if observe != nil {
		observe(m)
	}
	if before != nil {
		if err := before(n); err != nil {
			return err
		}
	}
	rec := recorded{msg: m}
	for _, p := range m.Payloads {
		rc, err := p.Open()
		if err != nil {
			return err
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return err
		}
		rec.payloads = append(rec.payloads, b)
	}
	r.mu.Lock()
	r.msgs = append(r.msgs, rec)
	r.mu.Unlock()
	return nil
}

func (r *recorder) count() int { r.mu.Lock(); defer r.mu.Unlock(); return r.calls }

func (r *recorder) delivered() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recorded(nil), r.msgs...)
}

// harness is a gateway AS4 endpoint behind a real HTTP server, over a
// SQLite store in a temporary directory.
type harness struct {
	url      string
	handler  *recorder
	store    *sqlitestore.Store
	logs     *logBuffer
	pipeline *exchange.Pipeline
	// quarantine is the pipeline's quarantine directory.
	quarantine string
}

type harnessOptions struct {
	partnerYAML map[string]string // file name → YAML; certificate paths absolute
	keys        []xmlenc.KeyPair
	party       as4.PartyID
	now         func() time.Time
	maxBody     int64
	spoolDir    string // default: a fresh temporary directory
	lease       time.Duration
	// ledger turns on business-level (interchange) dedup; onDrift replaces
	// acme's on_drift (default reject); quarantine is set as the
	// pipeline's quarantine directory in either case.
	ledger  bool
	onDrift string
	// peppol turns on the Peppol AP mode.
	peppol *peppol.AP
	// configure, when set, changes the endpoint configuration last.
	configure func(*endpoint.Config)
}

// defaultPartners is the generated agreement: acme (RSA and Ed25519
// certificates, encryption optional: its explicit opt-out) and strict
// (encryption required, the default).
func defaultPartners(t testing.TB, k testKeys) map[string]string {
	dir := t.TempDir()
	acmeCerts := filepath.Join(dir, "acme.pem")
	writePEM(t, acmeCerts, k.partnerRSA.Cert, k.partnerEd.Cert)
	return map[string]string{
		"acme.yaml": fmt.Sprintf(`id: acme
on_drift: reject
as4:
  party_id: %s
  party_type: %s
  certificates: [%s]
  require_encryption: false
  clock_skew: 5m
  pmodes:
    - id: invoice
      service: %s
      action: %s
`, acmeParty.Value, acmeParty.Type, acmeCerts, testService, testAction),
		"strict.yaml": fmt.Sprintf(`id: strict
as4:
  party_id: %s
  party_type: %s
  certificates: [%s]
  pmodes:
    - id: invoice
      service: %s
      action: %s
`, strictParty.Value, strictParty.Type, acmeCerts, testService, testAction),
	}
}

func newHarness(t testing.TB, o harnessOptions) *harness {
	t.Helper()
	k := getKeys(t)
	if o.partnerYAML == nil {
		o.partnerYAML = defaultPartners(t, k)
		if o.onDrift != "" {
			o.partnerYAML["acme.yaml"] = strings.Replace(o.partnerYAML["acme.yaml"], "on_drift: reject", "on_drift: "+o.onDrift, 1)
		}
	}
	if o.keys == nil {
		o.keys = []xmlenc.KeyPair{k.gatewayRSA, k.gatewayX25519}
	}
	if o.party == (as4.PartyID{}) {
		o.party = gatewayParty
	}
	if o.lease == 0 {
		o.lease = time.Minute
	}
	dir := loadPartners(t, o.partnerYAML)
	st, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "gateway.db"), dedup.Options{Lease: o.lease})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h := &harness{handler: &recorder{}, store: st, logs: &logBuffer{}, quarantine: filepath.Join(t.TempDir(), "quarantine")}
	log := slog.New(slog.NewJSONHandler(h.logs, nil))
	pl := &exchange.Pipeline{Store: st, Audit: st.AuditSink(), Handler: h.handler, Log: log, Lease: o.lease, Quarantine: h.quarantine}
	if o.ledger {
		pl.Ledger = st
	}
	if o.spoolDir == "" {
		o.spoolDir = t.TempDir()
	}
	cfg := endpoint.Config{
		Partners: dir, Keys: o.keys, Pipeline: pl,
		PartyID: o.party.Value, PartyType: o.party.Type,
		Limits: as4.Limits{MaxMessageSize: o.maxBody},
		Now:    o.now, Log: log, Host: "gateway.test",
		SpoolDir: o.spoolDir, SpoolThreshold: 64 << 10, Peppol: o.peppol,
	}
	if o.configure != nil {
		o.configure(&cfg)
	}
	ep, err := endpoint.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(ep)
	t.Cleanup(srv.Close)
	h.url = srv.URL + "/as4"
	h.pipeline = pl
	return h
}

// loadPartners writes partner files to a temporary directory and loads it.
func loadPartners(t testing.TB, files map[string]string) *partners.Directory {
	t.Helper()
	pdir := filepath.Join(t.TempDir(), "partners")
	if err := os.Mkdir(pdir, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, y := range files {
		if err := os.WriteFile(filepath.Join(pdir, name), []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	dir, err := partners.Load(pdir)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// logBuffer collects log lines safely.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.buf.String() }

// rsaClient is acme's sender: RSA signature, RSA-OAEP to the gateway.
func rsaClient(k testKeys) *client.Client {
	return &client.Client{
		Signer: k.partnerRSA.Key.(crypto.Signer), Certificate: k.partnerRSA.Cert,
		Encryption:     &client.Encryption{Recipient: k.gatewayRSA.Cert},
		ReceiptSigners: []*x509.Certificate{k.gatewayRSA.Cert},
		Host:           "acme.test",
	}
}

var invoiceXML = []byte(`<?xml version="1.0" encoding="UTF-8"?>
<Invoice xmlns="urn:oasis:names:specification:ubl:schema:xsd:Invoice-2" xmlns:cbc="urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2"><cbc:ID>INV-4711</cbc:ID></Invoice>
`)

// binaryPayload is 10 KB of deterministic bytes.
var binaryPayload = func() []byte {
	b := make([]byte, 10<<10)
	h := sha256.Sum256([]byte("seed"))
	for i := range b {
		if i%32 == 0 && i > 0 {
			h = sha256.Sum256(h[:])
		}
		b[i] = h[i%32]
	}
	return b
}()

func testMessage(id string) *client.Message {
	return &client.Message{
		MessageID: id,
		From:      acmeParty, To: gatewayParty,
		Service: testService, Action: testAction,
		ConversationID: "conv-1",
		Properties:     []as4.Property{{Name: "originalSender", Value: "urn:acme:erp"}},
		Payloads: []client.Payload{
			{MimeType: "application/xml", Data: invoiceXML, Compress: true},
			{MimeType: "application/octet-stream", Data: binaryPayload, Compress: true},
		},
	}
}

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// signalCode verifies an answer with the gateway's certificate and returns
// the code of its (single) eb:Error, failing if it is not an error signal.
func signalCode(t testing.TB, k testKeys, resp *client.Response) (string, *as4.Error) {
	t.Helper()
	if resp == nil {
		t.Fatal("no response")
	}
	_, err := client.VerifyReceipt(resp.ContentType, resp.Body, client.ReceiptCheck{Trusted: []*x509.Certificate{k.gatewayRSA.Cert}})
	var se *receipt.SignalError
	if !errors.As(err, &se) {
		t.Fatalf("answer (HTTP %d) is not a verified error signal: %v\n%s", resp.Status, err, resp.Body)
	}
	if len(se.Errors) != 1 {
		t.Fatalf("%d errors in the signal", len(se.Errors))
	}
	return se.Errors[0].Code, se.Errors[0]
}

// mimeMessage is a built message split into its parts, for tampering.
type mimeMessage struct {
	params  map[string]string
	headers []textproto.MIMEHeader
	bodies  [][]byte
}

func splitMIME(t testing.TB, out *client.Outgoing) *mimeMessage {
	t.Helper()
	mt, params, err := mime.ParseMediaType(out.ContentType)
	if err != nil || mt != "multipart/related" {
		t.Fatalf("not multipart: %q %v", out.ContentType, err)
	}
	m := &mimeMessage{params: params}
	mr := multipart.NewReader(bytes.NewReader(out.Body), params["boundary"])
	for {
		p, err := mr.NextRawPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(p)
		if err != nil {
			t.Fatal(err)
		}
		m.headers = append(m.headers, p.Header)
		m.bodies = append(m.bodies, b)
	}
	return m
}

func (m *mimeMessage) join(t testing.TB, out *client.Outgoing) *client.Outgoing {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	if err := mw.SetBoundary(m.params["boundary"]); err != nil {
		t.Fatal(err)
	}
	for i, h := range m.headers {
		w, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(m.bodies[i])
	}
	mw.Close()
	c := *out
	c.Body = buf.Bytes()
	return &c
}

// editSOAP parses the SOAP part, lets edit change it and writes it back.
func (m *mimeMessage) editSOAP(t testing.TB, edit func(doc *etree.Document)) {
	t.Helper()
	doc := etree.NewDocument()
	if err := doc.ReadFromBytes(m.bodies[0]); err != nil {
		t.Fatal(err)
	}
	edit(doc)
	b, err := doc.WriteToBytes()
	if err != nil {
		t.Fatal(err)
	}
	m.bodies[0] = b
}

// find returns the first element {ns}local below el (el included).
func find(el *etree.Element, ns, local string) *etree.Element {
	if el.Tag == local && el.NamespaceURI() == ns {
		return el
	}
	for _, c := range el.ChildElements() {
		if f := find(c, ns, local); f != nil {
			return f
		}
	}
	return nil
}

func wsuID(el *etree.Element) string {
	v, _ := as4.Attr(el, as4.NSWSU, "Id")
	return v
}

// incidentRE matches an incident reference (exchange.NewIncident).
var incidentRE = regexp.MustCompile(`GW-[0-9A-HJKMNP-TV-Z]{6}`)
