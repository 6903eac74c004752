package main

import (
	"bytes"
	"context"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edigateway/gateway/as2"
	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/internal/cms"
	"github.com/edigateway/gateway/outbox"
	"github.com/edigateway/gateway/partners"
)

// demoGateway runs the AS2 endpoint with the demo identity and partners
// (testdata/fixture) on a memory store, and writes a gateway YAML pointing at
// it.
type demoGateway struct {
	url, config string
	// mdnAddr is the address the demo partner's copy lists for async MDNs.
	mdnAddr string
	// busy is how many requests get 503 Retry-After: 1 before the endpoint
	// answers.
	busy atomic.Int32
	mu   sync.Mutex
	runs map[string]int
}

func (g *demoGateway) Handle(ctx context.Context, m *exchange.Message) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.runs[m.MessageID]++
	return nil
}

func (g *demoGateway) total() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, v := range g.runs {
		n += v
	}
	return n
}

func demoPath(t *testing.T, rel string) string {
	p, err := filepath.Abs(filepath.Join(filepath.Dir(demoConfig(t)), rel))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func startDemoGateway(t *testing.T) *demoGateway {
	t.Helper()
	certPEM, _ := os.ReadFile(demoPath(t, "keys/gateway.pem"))
	keyPEM, _ := os.ReadFile(demoPath(t, "keys/gateway.key"))
	kp, err := cms.ParseKeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	// The demo partner lists http://127.0.0.1:8078/mdn for async MDNs; the
	// tests' copy lists a free port instead.
	tmp := t.TempDir()
	pdir := filepath.Join(tmp, "partners")
	if err := os.MkdirAll(pdir, 0o750); err != nil {
		t.Fatal(err)
	}
	pem, _ := os.ReadFile(demoPath(t, "partners/demo-partner.pem"))
	yml, _ := os.ReadFile(demoPath(t, "partners/demo.yaml"))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mdnAddr := ln.Addr().String()
	ln.Close()
	yml = bytes.Replace(yml, []byte("http://127.0.0.1:8078/mdn"), []byte("http://"+mdnAddr+"/mdn"), 1)
	if err := os.WriteFile(filepath.Join(pdir, "demo-partner.pem"), pem, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pdir, "demo.yaml"), yml, 0o600); err != nil {
		t.Fatal(err)
	}
	dir, err := partners.Load(pdir)
	if err != nil {
		t.Fatal(err)
	}
	g := &demoGateway{runs: map[string]int{}, mdnAddr: mdnAddr}
	log := slog.New(slog.DiscardHandler)
	pl := &exchange.Pipeline{Store: dedup.NewMemoryStore(dedup.Options{}), Audit: &audit.Memory{}, Handler: g, Log: log}
	ob := outbox.NewMemory()
	disp := &outbox.Dispatcher{Store: ob, Log: log, PollInterval: 50 * time.Millisecond, Authorize: as2.AsyncMDNAuthorizer(dir)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); disp.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	ep, err := as2.NewEndpoint(as2.Config{Partners: dir, OurID: "GATEWAY", Keys: []cms.KeyPair{kp}, Pipeline: pl,
		Outbox: ob, Notify: disp.Notify, Log: log, SpoolDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.busy.Add(-1) >= 0 {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "in flight", http.StatusServiceUnavailable)
			return
		}
		ep.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	g.url = srv.URL + "/as2"
	g.config = filepath.Join(tmp, "gateway.yaml")
	cfg := "listen: " + strings.TrimPrefix(srv.URL, "http://") + "\nstore: memory\npartners: " + pdir +
		"\nidentity:\n  as2_id: GATEWAY\n  keys:\n    - cert: " + demoPath(t, "keys/gateway.pem") + "\n      key: " + demoPath(t, "keys/gateway.key") +
		"\nhandler:\n  type: dir\n  inbox: " + filepath.Join(tmp, "inbox") + "\n"
	if err := os.WriteFile(g.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return g
}

func writePayload(t *testing.T, name string, b []byte) string {
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSendDemoCommand runs the README's command line against the endpoint,
// twice with the same bytes.
func TestSendDemoCommand(t *testing.T) {
	g := startDemoGateway(t)
	file := writePayload(t, "order.edi", []byte("UNB+UNOC:3+DEMO+GATEWAY+260101:1200+1'\nUNZ+0+1'\n"))
	var out, errb bytes.Buffer
	code := run([]string{"send", "-as2-from", "DEMO", "-as2-to", "GATEWAY",
		"-key", demoPath(t, "keys/demo-partner.key"), "-cert", demoPath(t, "partners/demo-partner.pem"),
		"-recipient-cert", demoPath(t, "keys/gateway.pem"), "-url", g.url, "-file", file, "-repeat", "2"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	o := out.String()
	for _, want := range []string{
		"disposition:  automatic-action/MDN-sent-automatically; processed\n",
		"disposition:  automatic-action/MDN-sent-automatically; processed/warning: duplicate-document\n",
		"mdn:          signed, signature verified (CN=gateway demo",
		"protection:   signed sha256, then encrypted aes256-cbc\n",
		"from/to:      DEMO -> GATEWAY\n",
	} {
		if !strings.Contains(o, want) {
			t.Errorf("output lacks %q:\n%s", want, o)
		}
	}
	if strings.Count(o, "(matches)") != 2 || strings.Count(o, "result:       OK") != 2 || g.total() != 1 {
		t.Fatalf("handler runs %d, output:\n%s", g.total(), o)
	}
}

// TestSendAsPartnerFromConfig derives URL, AS2 ids and the gateway's
// certificate from the configuration, receives the async MDN itself and
// shows no progress bar for a large file when stderr is not a terminal.
func TestSendAsPartnerFromConfig(t *testing.T) {
	g := startDemoGateway(t)
	big := make([]byte, 2<<20) // incompressible, so the body stays above the progress threshold
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range big {
		big[i] = byte(rng.Uint32())
	}
	file := writePayload(t, "big.bin", big)
	var out, errb bytes.Buffer
	code := run([]string{"send", "-config", g.config, "-partner", "demo", "-key", demoPath(t, "keys/demo-partner.key"),
		"-file", file, "-compress", "-encrypt", "aes128-gcm", "-sign", "sha512", "-mdn", "async", "-async-listen", g.mdnAddr, "-wait", "20s"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	o := out.String()
	if !strings.Contains(o, "disposition:  automatic-action/MDN-sent-automatically; processed\n") || !strings.Contains(o, "sha-512 (matches)") ||
		!strings.Contains(o, "protection:   compressed, then signed sha512, then encrypted aes128-gcm") || !strings.Contains(o, "result:       OK") {
		t.Fatalf("output:\n%s", o)
	}
	if e := errb.String(); e != "" {
		t.Errorf("stderr is not a terminal, and it got %q", e)
	}
	if g.total() != 1 {
		t.Fatalf("handler runs %d", g.total())
	}
}

func TestSendRetriesWhileInFlight(t *testing.T) {
	g := startDemoGateway(t)
	g.busy.Store(1)
	file := writePayload(t, "x.edi", []byte("UNB'"))
	var out, errb bytes.Buffer
	code := run([]string{"send", "-config", g.config, "-partner", "demo", "-key", demoPath(t, "keys/demo-partner.key"),
		"-file", file, "-retry-for", "30s"}, &out, &errb)
	if code != 0 || !strings.Contains(out.String(), "busy:         HTTP 503") || !strings.Contains(out.String(), "result:       OK") {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	g.busy.Store(1)
	out.Reset()
	code = run([]string{"send", "-config", g.config, "-partner", "demo", "-key", demoPath(t, "keys/demo-partner.key"), "-file", file}, &out, &errb)
	if code != 1 || !strings.Contains(out.String(), "HTTP 503") {
		t.Fatalf("without -retry-for: exit %d\n%s", code, out.String())
	}
}

func TestSendReportsNegativeMDN(t *testing.T) {
	g := startDemoGateway(t)
	file := writePayload(t, "x.edi", []byte("UNB'"))
	var out, errb bytes.Buffer
	// Encrypted for the partner's own certificate: the gateway cannot decrypt.
	code := run([]string{"send", "-config", g.config, "-partner", "demo", "-key", demoPath(t, "keys/demo-partner.key"),
		"-recipient-cert", demoPath(t, "partners/demo-partner.pem"), "-mdn-unsigned", "-file", file}, &out, &errb)
	if code != 1 || !strings.Contains(out.String(), "processed/error: decryption-failed") || !strings.Contains(out.String(), "result:       FAILED") {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	if g.total() != 0 {
		t.Fatal("handler ran")
	}
}

func TestSendUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"send"},
		{"send", "-file", "x", "-url", "http://x"},
		{"send", "-file", "x", "-url", "http://x", "-as2-from", "A", "-as2-to", "B"}, // signing without -key
		{"send", "-file", "x", "-url", "http://x", "-as2-from", "A", "-as2-to", "B", "-sign", "none", "-encrypt", "aes128", "-mdn-unsigned"},
		{"send", "-file", "x", "-url", "http://x", "-as2-from", "A", "-as2-to", "B", "-sign", "md4"},
		{"send", "-file", "x", "-partner", "demo"},
	} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, stderr %q", args, code, errb.String())
		}
	}
}

// TestSendAsyncAnsweredSynchronously: when the gateway refuses the
// Receipt-Delivery-Option (it is not among the partner's async_mdn_urls)
// it answers with a synchronous MDN; send reports and checks that MDN
// instead of waiting for an async one and reporting "no async MDN arrived".
func TestSendAsyncAnsweredSynchronously(t *testing.T) {
	g := startDemoGateway(t)
	elsewhere := freePort(t) // not the address the partner file lists
	file := writePayload(t, "order.edi", []byte("UNB+UNOC:3+DEMO+GATEWAY+260101:1200+7'\nUNZ+0+7'\n"))
	var out, errb bytes.Buffer
	code := run([]string{"send", "-config", g.config, "-partner", "demo", "-key", demoPath(t, "keys/demo-partner.key"),
		"-file", file, "-mdn", "async", "-async-listen", elsewhere, "-wait", "3s"}, &out, &errb)
	o := out.String()
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, o, errb.String())
	}
	for _, want := range []string{
		"mdn:          the partner answered with a synchronous MDN although async was asked: automatic-action/MDN-sent-automatically; processed\n",
		"mdn:          signed, signature verified (CN=gateway demo",
		"(matches)",
		"result:       OK",
	} {
		if !strings.Contains(o, want) {
			t.Errorf("output lacks %q:\n%s", want, o)
		}
	}
	if strings.Contains(o, "no async MDN arrived") || strings.Contains(o, "waiting up to") {
		t.Errorf("send waited for an async MDN:\n%s", o)
	}
	if g.total() != 1 {
		t.Fatalf("handler runs %d", g.total())
	}
}
