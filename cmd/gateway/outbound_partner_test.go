package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/internal/submitapi"
	"github.com/edigateway/gateway/server"
)

// Helpers of the tests that send with the real gateway binary to partners
// the test process plays: obSender is the sending gateway (identity
// GATEWAY, SQLite store, its submission API on the admin listener), its
// partners written by the test; obReceiver a real gateway (package server)
// receiving as a partner; obFront a partner endpoint the test controls.

// obSender is a gateway binary that sends.
type obSender struct {
	dir, admin, auditFile string
}

// startObSender runs the gateway binary with the partner files given
// (name → YAML; demo-partner.pem is copied beside them).
func startObSender(t *testing.T, partnerFiles map[string]string) *obSender {
	t.Helper()
	dir := t.TempDir()
	pdir := filepath.Join(dir, "partners")
	if err := os.Mkdir(pdir, 0o755); err != nil {
		t.Fatal(err)
	}
	fixture := filepath.Dir(demoConfig(t))
	pem, err := os.ReadFile(filepath.Join(fixture, "partners", "demo-partner.pem"))
	if err != nil {
		t.Fatal(err)
	}
	partnerFiles["demo-partner.pem"] = string(pem)
	for name, text := range partnerFiles {
		if err := os.WriteFile(filepath.Join(pdir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s := &obSender{dir: dir, admin: freePort(t), auditFile: filepath.Join(dir, "audit.jsonl")}
	addr := freePort(t)
	rest := fmt.Sprintf("handler: {type: dir, inbox: %s}\naudit: {file: %s}\nshutdown_timeout: 2s\ndrain_period: 0s\n",
		filepath.Join(dir, "inbox"), s.auditFile)
	cfg := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(cfg, gatewayYAML(t, addr, "sqlite:"+filepath.Join(dir, "gw.db"), pdir, rest), 0o600); err != nil {
		t.Fatal(err)
	}
	startGateway(t, cfg, addr, "GATEWAY_ADMIN_LISTEN="+s.admin)
	return s
}

// submit queues payload for partner through the HTTP submission API;
// query adds parameters (subject=…).
func (s *obSender) submit(t *testing.T, partner, query string, payload []byte) submitapi.Status {
	t.Helper()
	u := "http://" + s.admin + "/api/v1/outbound/messages?partner=" + url.QueryEscape(partner) + query
	resp, err := http.Post(u, "application/octet-stream", bytes.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st submitapi.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("submit to %s: %s, %v", partner, resp.Status, err)
	}
	return st
}

// status is the message's status from the submission API.
func (s *obSender) status(t *testing.T, id string) submitapi.Status {
	t.Helper()
	resp, err := http.Get("http://" + s.admin + "/api/v1/outbound/messages/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st submitapi.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("status of %s: %s, %v", id, resp.Status, err)
	}
	return st
}

// waitStatus polls the status of id until ok holds for it.
func (s *obSender) waitStatus(t *testing.T, id string, within time.Duration, what string, ok func(submitapi.Status) bool) submitapi.Status {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		st := s.status(t, id)
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not %s within %s: state %s, attempts %d, last_error %q, reason %q", id, what, within, st.State, st.Attempts, st.LastError, st.Reason)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sends are the audit records (step send) of the message with transport
// id messageID, in order.
func (s *obSender) sends(t *testing.T, messageID string) []audit.Record {
	t.Helper()
	f, err := os.Open(s.auditFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []audit.Record
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r audit.Record
		if json.Unmarshal(sc.Bytes(), &r) == nil && r.Step == audit.StepSend && r.MessageID == messageID {
			out = append(out, r)
		}
	}
	return out
}

// sendDecisions lists the records' decisions.
func sendDecisions(rs []audit.Record) []string {
	var d []string
	for _, r := range rs {
		d = append(d, r.Decision)
	}
	return d
}

// obReceiver is a gateway served in the test process, receiving AS2 as
// the partner with AS2 id as2ID (the demo partner's keys) from GATEWAY.
type obReceiver struct {
	URL string
	mu  sync.Mutex
	// got counts the payloads delivered.
	got int
}

func (r *obReceiver) delivered() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got
}

// newObReceiver serves the receiving gateway. refuse makes it refuse every
// message for good with a signed negative MDN (its agreement with GATEWAY
// allows only SHA-512 signatures; the sender signs with SHA-256): a
// permanent refusal. A failing handler would not do: it is answered HTTP
// 503, which the sender retries.
func newObReceiver(t *testing.T, as2ID string, refuse bool) *obReceiver {
	t.Helper()
	fixture := filepath.Dir(demoConfig(t))
	dir := t.TempDir()
	pdir := filepath.Join(dir, "partners")
	if err := os.Mkdir(pdir, 0o755); err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(filepath.Join(fixture, "keys", "gateway.pem"))
	if err != nil {
		t.Fatal(err)
	}
	gw := "listen: 127.0.0.1:0\nadmin:\n  listen: 127.0.0.1:0\nstore: \"memory:\"\npartners: partners\nquarantine_dir: quarantine\nspool_dir: spool\n" +
		"identity:\n  as2_id: " + as2ID + "\n  party_id: urn:demo:partner\n  party_type: urn:oasis:names:tc:ebcore:partyid-type:unregistered\n" +
		"  keys:\n    - cert: " + filepath.Join(fixture, "partners", "demo-partner.pem") + "\n      key: " + filepath.Join(fixture, "keys", "demo-partner.key") + "\n" +
		"handler: {type: dir, inbox: inbox}\naudit:\n  file: audit.jsonl\nshutdown_timeout: 2s\ndrain_period: 0s\n"
	agreement := "id: gw\nas2:\n  as2_id: GATEWAY\n  certificates: [gateway.pem]\n"
	if refuse {
		agreement += "  allowed_digests: [sha512]\n"
	}
	files := map[string]string{
		"gateway.yaml":         gw,
		"partners/gw.yaml":     agreement,
		"partners/gateway.pem": string(pem),
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := config.Load(filepath.Join(dir, "gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	r := &obReceiver{}
	srv.SetHandler(exchange.HandlerFunc(func(ctx context.Context, m *exchange.Message) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.got++
		return nil
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	r.URL = "http://" + ln.Addr().String()
	return r
}

// obFront is the partner's endpoint as the sender sees it, at a fixed
// address: closed until open, then answering each request as answer says
// (by its number, from 1): "500", "503", "hang" (no answer until the
// sender gives up), or "pass" (to the real receiver behind).
type obFront struct {
	addr   string
	answer func(n int) string
	target string

	mu    sync.Mutex
	times []time.Time // when each request arrived
}

func newObFront(t *testing.T, target string, answer func(n int) string) *obFront {
	return &obFront{addr: freePort(t), target: target, answer: answer}
}

func (f *obFront) URL() string { return "http://" + f.addr + "/as2" }

// open starts listening at the front's address.
func (f *obFront) open(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	var proxy http.Handler = http.NotFoundHandler()
	if f.target != "" {
		u, _ := url.Parse(f.target)
		proxy = httputil.NewSingleHostReverseProxy(u)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.times = append(f.times, time.Now())
		n := len(f.times)
		f.mu.Unlock()
		switch a := f.answer(n); a {
		case "500", "503":
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(map[string]int{"500": 500, "503": 503}[a])
			fmt.Fprintf(w, "front: answer %s to request %d\n", a, n)
		case "hang":
			select {
			case <-r.Context().Done():
			case <-time.After(30 * time.Second):
			}
		default:
			proxy.ServeHTTP(w, r)
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

func (f *obFront) requests() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.times...)
}

// partnerYAML is the sender's file of a partner with AS2 id as2ID sending
// to url on the schedule 1s, 2s, 4s, 4s, … for giveUp, each attempt
// bounded by timeout.
func partnerYAML(id, as2ID, url, timeout, giveUp string) string {
	return fmt.Sprintf("id: %s\nas2:\n  as2_id: %s\n  certificates: [demo-partner.pem]\n  send:\n    url: %q\n    timeout: %s\n"+
		"    retry: {first: 1s, factor: 2, max: 4s, give_up_after: %s}\n", id, as2ID, url, timeout, giveUp)
}

// checkSchedule asserts that consecutive attempts (times t, in order)
// were at least the retry policy's delays apart (1s, 2s, 4s, 4s, …) less
// tol; it never bounds them from above.
func checkSchedule(t *testing.T, what string, times []time.Time, tol time.Duration) {
	t.Helper()
	delay := time.Second
	for i := 1; i < len(times); i++ {
		gap := times[i].Sub(times[i-1])
		t.Logf("%s: attempt %d came %s after attempt %d (policy: at least %s)", what, i+1, gap.Round(time.Millisecond), i, delay)
		if gap < delay-tol {
			t.Errorf("%s: attempt %d came %s after attempt %d; the policy says at least %s", what, i+1, gap, i, delay)
		}
		if delay < 4*time.Second {
			delay *= 2
		}
	}
}

// auditTimes are the records' times.
func auditTimes(rs []audit.Record) []time.Time {
	var ts []time.Time
	for _, r := range rs {
		ts = append(ts, r.Time)
	}
	return ts
}

// opaque is a payload of random bytes (our receiver takes opaque bytes
// as they are; a business document would be checked and deduplicated).
func opaque(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// contains reports whether s contains any of subs, ignoring case.
func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(strings.ToLower(s), strings.ToLower(sub)) {
			return true
		}
	}
	return false
}
