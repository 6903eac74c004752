package as2

import (
	"context"
	"crypto/x509"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	as2client "github.com/edigateway/gateway/as2/client"
	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/inbox"
	"github.com/edigateway/gateway/internal/cms"
	"github.com/edigateway/gateway/internal/testpki"
	"github.com/edigateway/gateway/mdn"
	"github.com/edigateway/gateway/outbox"
	"github.com/edigateway/gateway/partners"
	"github.com/edigateway/gateway/store/sqlitestore"
)

// Test identities: the gateway's two key pairs (rollover) and the partner's
// two (rollover). Generated once per test binary.
type testKeys struct {
	gw1, gw2, p1, p2 cms.KeyPair
}

var (
	keysMu sync.Mutex
	keysOK bool
	keys   testKeys
)

func getKeys(t testing.TB) testKeys {
	t.Helper()
	keysMu.Lock()
	defer keysMu.Unlock()
	if !keysOK {
		rsaKeys := testpki.RSAKeys(t, 4)
		out := []*cms.KeyPair{&keys.gw1, &keys.gw2, &keys.p1, &keys.p2}
		names := []string{"gateway 1", "gateway 2", "partner 1", "partner 2"}
		for i, kp := range out {
			*kp = cms.KeyPair{Key: rsaKeys[i], Cert: testpki.SelfSigned(t, rsaKeys[i], testpki.Cert{
				CommonName:   names[i],
				Organization: []string{"gateway as2 tests"},
				Serial:       int64(7000 + i),
				NotAfter:     time.Date(2045, 1, 1, 0, 0, 0, 0, time.UTC),
			})}
		}
		keysOK = true
	}
	return keys
}

func writeCertPEM(t testing.TB, path string, certs ...*x509.Certificate) {
	t.Helper()
	if err := os.WriteFile(path, testpki.CertPEM(certs...), 0o600); err != nil {
		t.Fatal(err)
	}
}

// countingInbox is the inbox dir handler, counting runs per Message-ID and
// keeping the payload bytes; fail, when set, makes a run fail.
type countingInbox struct {
	dir  inbox.Dir
	mu   sync.Mutex
	runs map[string]int
	got  map[string][][]byte
	fail func(m *exchange.Message) error
}

func (h *countingInbox) Handle(ctx context.Context, m *exchange.Message) error {
	h.mu.Lock()
	h.runs[m.MessageID]++
	fail := h.fail
	h.mu.Unlock()
	if fail != nil {
		if err := fail(m); err != nil {
			return err
		}
	}
	var bodies [][]byte
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
		bodies = append(bodies, b)
	}
	if err := h.dir.Handle(ctx, m); err != nil {
		return err
	}
	h.mu.Lock()
	h.got[m.MessageID] = bodies
	h.mu.Unlock()
	return nil
}

func (h *countingInbox) count(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.runs[dedup.NormalizeMessageID(id)]
}

func (h *countingInbox) payloads(id string) [][]byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.got[dedup.NormalizeMessageID(id)]
}

func (h *countingInbox) setFail(f func(m *exchange.Message) error) {
	h.mu.Lock()
	h.fail = f
	h.mu.Unlock()
}

// mdnReceiver is the partner's async MDN endpoint.
type mdnReceiver struct {
	srv  *httptest.Server
	mu   sync.Mutex
	mdns map[string][]receivedMDN // by normalised Original-Message-ID
	cond *sync.Cond
}

type receivedMDN struct {
	header http.Header
	body   []byte
}

func newMDNReceiver(t testing.TB) *mdnReceiver {
	r := &mdnReceiver{mdns: map[string][]receivedMDN{}}
	r.cond = sync.NewCond(&r.mu)
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		p, err := mdn.ParseHTTP(req.Header, b)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		id := dedup.NormalizeMessageID(p.Report.OriginalMessageID)
		r.mdns[id] = append(r.mdns[id], receivedMDN{req.Header.Clone(), b})
		r.cond.Broadcast()
		r.mu.Unlock()
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// wait returns the n-th async MDN for a message, waiting up to 20s.
func (r *mdnReceiver) wait(t testing.TB, id string, n int) receivedMDN {
	t.Helper()
	id = dedup.NormalizeMessageID(id)
	deadline := time.Now().Add(20 * time.Second)
	timer := time.AfterFunc(20*time.Second, func() { r.mu.Lock(); r.cond.Broadcast(); r.mu.Unlock() })
	defer timer.Stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.mdns[id]) < n {
		if time.Now().After(deadline) {
			t.Fatalf("async MDN %d for %s did not arrive", n, id)
		}
		r.cond.Wait()
	}
	return r.mdns[id][n-1]
}

// env is a running gateway: the endpoint behind a real HTTP server, a
// pipeline on SQLite, the inbox dir handler, an outbox with its dispatcher
// and the partner's async MDN receiver.
type env struct {
	srv     *httptest.Server
	ep      *Endpoint
	dir     *partners.Directory
	handler *countingInbox
	audit   audit.Sink
	store   *sqlitestore.Store
	outbox  outbox.Store
	mdns    *mdnReceiver
	root    string
	logs    *syncBuffer
}

type envOptions struct {
	// partnerYAML is the as2 section's policy lines (indented by 2);
	// "{{MDN}}" stands for the async MDN receiver's base URL. The default
	// opts out of the secure defaults (unsigned and unencrypted messages
	// are accepted: the suite sends every combination) and lists the
	// receiver's /mdn.
	partnerYAML string
	maxBody     int64
	now         func() time.Time
	// extraPartners are more partner files: name → content (certificate
	// paths relative to the partners directory).
	extraPartners map[string]string
	// files are written into the partners directory.
	files map[string][]byte
	keys  []cms.KeyPair
	ourID string
	// memory uses the memory store and outbox and discards logs (fuzzing).
	memory bool
	// ledger turns on business-level (interchange) dedup.
	ledger bool
	// onDrift is acme's on_drift (default: none, i.e. reject).
	onDrift string
	// lookup replaces the dispatcher's resolver.
	lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	// streamThreshold is the endpoint's StreamThreshold; 0 means
	// GATEWAY_TEST_STREAM_THRESHOLD, else 1: the suite's messages are
	// unwrapped as streams (the in-memory path is what small messages take
	// in the server and cmd tests; GATEWAY_TEST_STREAM_THRESHOLD=-1 runs
	// this suite on it).
	streamThreshold int64
	// lease is the store's and the pipeline's lease (default a minute).
	lease time.Duration
	// mdnIn receives asynchronous MDNs for messages we sent (Config.MDNs);
	// maxMDN is Config.MaxMDNBytes.
	mdnIn  MDNReceiver
	maxMDN int64
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func newEnv(t testing.TB, o envOptions) *env {
	t.Helper()
	k := getKeys(t)
	root := t.TempDir()
	pdir := filepath.Join(root, "partners")
	if err := os.MkdirAll(pdir, 0o750); err != nil {
		t.Fatal(err)
	}
	writeCertPEM(t, filepath.Join(pdir, "acme-1.pem"), k.p1.Cert)
	writeCertPEM(t, filepath.Join(pdir, "acme-2.pem"), k.p2.Cert)
	// The partner's async MDN receiver exists before its partner file,
	// which may list it: "{{MDN}}" in partnerYAML is its base URL.
	mdns := newMDNReceiver(t)
	policy := o.partnerYAML
	if policy == "" {
		policy = "  require_signature: false\n  require_encryption: false\n  async_mdn_urls: [\"{{MDN}}/mdn\"]\n"
	}
	policy = strings.ReplaceAll(policy, "{{MDN}}", mdns.srv.URL)
	acme := "id: acme\nname: ACME\n"
	if o.onDrift != "" {
		acme += "on_drift: " + o.onDrift + "\n"
	}
	acme += "as2:\n  as2_id: ACME\n  certificates: [acme-1.pem, acme-2.pem]\n" + policy
	if err := os.WriteFile(filepath.Join(pdir, "acme.yaml"), []byte(acme), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, b := range o.files {
		if err := os.WriteFile(filepath.Join(pdir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for name, y := range o.extraPartners {
		if err := os.WriteFile(filepath.Join(pdir, name), []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	dir, err := partners.Load(pdir)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := &countingInbox{dir: inbox.Dir{Root: filepath.Join(root, "inbox")}, runs: map[string]int{}, got: map[string][][]byte{}}
	if o.lease == 0 {
		o.lease = time.Minute
	}
	pl := &exchange.Pipeline{Handler: h, Log: log, Lease: o.lease, Quarantine: filepath.Join(root, "quarantine")}
	var st *sqlitestore.Store
	var ob outbox.Store
	if o.memory {
		log = slog.New(slog.DiscardHandler)
		pl.Log = log
		mem := dedup.NewMemoryStore(dedup.Options{Lease: o.lease})
		pl.Store = mem
		if o.ledger {
			pl.Ledger = mem
		}
		pl.Audit = &audit.Memory{}
		ob = outbox.NewMemory()
	} else {
		var err error
		st, err = sqlitestore.Open(context.Background(), filepath.Join(root, "gateway.db"), dedup.Options{Lease: o.lease})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		pl.Store, pl.Audit = st, st.AuditSink()
		if o.ledger {
			pl.Ledger = st
		}
		ob = st.Outbox() // the durable outbox in the same database
	}
	disp := &outbox.Dispatcher{Store: ob, Log: log, PollInterval: 50 * time.Millisecond, BaseBackoff: 50 * time.Millisecond, Timeout: 10 * time.Second,
		Authorize: AsyncMDNAuthorizer(dir), Audit: pl.Audit, LookupNetIP: o.lookup}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = disp.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	ourKeys := o.keys
	if ourKeys == nil {
		ourKeys = []cms.KeyPair{k.gw1, k.gw2}
	}
	ourID := o.ourID
	if ourID == "" {
		ourID = "GATEWAY"
	}
	ep, err := NewEndpoint(Config{Partners: dir, OurID: ourID, Keys: ourKeys, Pipeline: pl, Outbox: ob,
		Notify: disp.Notify, SpoolDir: root, MaxBodyBytes: o.maxBody, Log: log, Now: o.now, StreamThreshold: streamThreshold(o),
		MDNs: o.mdnIn, MaxMDNBytes: o.maxMDN})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(ep)
	t.Cleanup(srv.Close)
	return &env{srv: srv, ep: ep, dir: dir, handler: h, audit: pl.Audit, store: st, outbox: ob, mdns: mdns, root: root, logs: logs}
}

func streamThreshold(o envOptions) int64 {
	if o.streamThreshold != 0 {
		return o.streamThreshold
	}
	if n, err := strconv.ParseInt(os.Getenv("GATEWAY_TEST_STREAM_THRESHOLD"), 10, 64); err == nil && n != 0 {
		return n
	}
	return 1
}

// client returns a sender acting as the partner ACME (signing with its
// second, rolled-over certificate) addressing the gateway.
func (e *env) client() *as2client.Client {
	k := keys
	return &as2client.Client{
		URL: e.srv.URL + "/as2", From: "ACME", To: "GATEWAY",
		SignCert: k.p2.Cert, SignKey: k.p2.Key, SignDigest: "sha256",
		RecipientCerts: []*x509.Certificate{k.gw2.Cert}, MDNCerts: []*x509.Certificate{k.gw1.Cert},
		Cipher: "aes128-cbc", MDN: as2client.MDNSync, SignedMDN: true,
		AsyncURL: e.mdns.srv.URL + "/mdn",
	}
}

// post sends raw headers and body to the endpoint.
func (e *env) post(t testing.TB, h http.Header, body []byte) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/as2", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// auditFor returns the audit records of a message from ACME (or from
// the given AS2-From).
func (e *env) auditFor(t testing.TB, from, messageID string) []audit.Record {
	t.Helper()
	recs, err := e.store.Audit().ByKey(context.Background(), string(dedup.TransportKey("as2", "as2", from, messageID)))
	if err != nil {
		t.Fatal(err)
	}
	return recs
}
