package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edigateway/gateway/inbox"
	"github.com/edigateway/gateway/internal/submitapi"
)

// sendKillSubmissions is the number of submissions per store.
const sendKillSubmissions = 300

// sendKillPhases are the kill points of TestSendKillMatrix: the first,
// third and fourth by the sending gateway's own fault injection
// (GATEWAY_FAULT_KILL=send-*, server/fault.go), "during" from outside by
// the recording proxy while it holds the POST.
var sendKillPhases = []string{"send-before", "during", "send-after", "send-awaiting"}

// TestSendKillMatrix: the SENDING gateway (A, the real binary) is killed
// with SIGKILL again and again while it sends sendKillSubmissions
// submissions (made through its HTTP submission API, with an
// Idempotency-Key, retried while it is down) to a receiving gateway (B, the
// real binary, table handler) behind a recording proxy that logs every
// transmission's Message-ID / eb:MessageId. The kill points rotate: after
// Posting is recorded and before the message leaves (send-before); during
// the POST, the proxy having read half the body, or B having answered and
// the proxy holding the answer (during); the answer received, the outcome
// not recorded (send-after); Awaiting recorded and the asynchronous MDN not
// arrived (send-awaiting). Half the cycles send AS2 with mdn: async, the
// others with a sync MDN; every other submission is AS4. A restarts each
// time on the same store (SQLite, PostgreSQL) and must resume: in the end
// every submission is one message, delivered with verified evidence, every
// transmission of it carried its one Message-ID, and B accepted each
// payload exactly once, under that id.
func TestSendKillMatrix(t *testing.T) {
	n := sendKillSubmissions
	if testing.Short() {
		n = 40
	}
	stores := []struct {
		name string
		url  func(t *testing.T, dir, who string) string
	}{
		{"sqlite", func(t *testing.T, dir, who string) string { return "sqlite:" + filepath.Join(dir, who+".db") }},
		{"postgres", func(t *testing.T, dir, who string) string { return pgStoreURL(t) }},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			r := runSendKillMatrix(t, dir, st.url(t, dir, "a"), st.url(t, dir, "b"), n)
			t.Logf("SEND KILL MATRIX %s: %d submissions (%d AS2, %d AS4), %d kills (send-before %d, during %d "+
				"[body half read %d, answer held %d], send-after %d, send-awaiting %d, timer %d), %d restarts, "+
				"%d transmissions (AS2 %d, AS4 %d), %d retransmissions, %d answered as duplicates by the receiver, %d submission retries; %s",
				st.name, n, r.as2, r.as4, r.kills(), r.byPhase["send-before"], r.byPhase["during"], r.partial.Load(), r.held.Load(),
				r.byPhase["send-after"], r.byPhase["send-awaiting"], r.byPhase["timer"], r.restarts, r.transmissions,
				r.transmissions-r.transmissionsAS4, r.transmissionsAS4,
				r.transmissions-r.distinct, r.duplicates, r.submitRetries.Load(), r.elapsed.Round(time.Millisecond))
			for _, ph := range sendKillPhases {
				if r.byPhase[ph] == 0 {
					t.Errorf("no kill at %s", ph)
				}
			}
		})
	}
}

type sendKillResult struct {
	byPhase                 map[string]int
	restarts                int
	as2, as4                int
	partial, held           atomic.Int64
	submitRetries           atomic.Int64
	transmissions, distinct int
	transmissionsAS4        int
	duplicates              int
	elapsed                 time.Duration
}

func (r *sendKillResult) kills() int {
	n := 0
	for _, v := range r.byPhase {
		n += v
	}
	return n
}

// sendKillSub is one submission: its payload and what A answered.
type sendKillSub struct {
	key      string
	protocol string
	ctype    string
	payload  []byte
	sha      string
	id       string // A's queue id, once answered
	msgID    string
}

func sendKillPayloads(n int) []*sendKillSub {
	subs := make([]*sendKillSub, n)
	for i := range subs {
		s := &sendKillSub{key: fmt.Sprintf("sk-%04d", i), protocol: "as2", ctype: "application/octet-stream"}
		if i%2 == 1 {
			s.protocol = "as4"
		}
		if i%3 == 0 {
			ref := fmt.Sprintf("SK%06d", i)
			s.payload = []byte("UNA:+.? 'UNB+UNOA:2+GATEWAY:14+DEMO:14+261204:1200+" + ref + "'UNH+1+INVOIC:D:96A:UN'BGM+380+" +
				ref + "+9'UNT+3+1'UNZ+1+" + ref + "'")
			s.ctype = "application/edifact"
		} else {
			// Opaque bytes, some large enough that "half the body" is
			// mid-stream.
			s.payload = make([]byte, 1024+mrand.IntN(192*1024))
			_, _ = rand.Read(s.payload)
		}
		sum := sha256.Sum256(s.payload)
		s.sha = hex.EncodeToString(sum[:])
		subs[i] = s
	}
	return subs
}

// sendKillSetup writes the two gateways' configurations: A (GATEWAY) sends
// to partner "b" through the proxy; B (DEMO) receives into its table and
// posts async MDNs to A directly.
func sendKillSetup(t *testing.T, dir, aStore, bStore, aAddr, bAddr, proxyAddr string) (aCfg, bCfg string, writeA func(mdn string)) {
	t.Helper()
	fixture := filepath.Dir(demoConfig(t))
	keys := filepath.Join(fixture, "keys")
	for _, sub := range []string{"a", "b", "a/partners", "b/partners"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	copyFile := func(from, to string) {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		write(to, string(b))
	}
	copyFile(filepath.Join(fixture, "partners", "demo-partner.pem"), "a/partners/demo-partner.pem")
	copyFile(filepath.Join(keys, "gateway.pem"), "b/partners/gateway.pem")
	const pmodes = `  pmodes: [{id: inv, service: "urn:demo:invoicing", action: Deliver}]
`
	write("b/partners/a.yaml", fmt.Sprintf(`id: a
as2:
  as2_id: GATEWAY
  certificates: [gateway.pem]
  async_mdn_urls: ["http://%s/as2"]
  async_mdn_private_networks: ["127.0.0.0/8"]
as4:
  party_id: urn:demo:gateway
  party_type: urn:oasis:names:tc:ebcore:partyid-type:unregistered
  certificates: [gateway.pem]
`+pmodes, aAddr))
	writeA = func(mdn string) {
		write("a/partners/b.yaml", fmt.Sprintf(`id: b
as2:
  as2_id: DEMO
  certificates: [demo-partner.pem]
  send:
    url: "http://%[1]s/as2"
    mdn: %[2]s
    mdn_timeout: 3s
    retry: {first: 300ms, factor: 1.5, max: 2s}
as4:
  party_id: urn:demo:partner
  party_type: urn:oasis:names:tc:ebcore:partyid-type:unregistered
  certificates: [demo-partner.pem]
`+pmodes+`  send:
    url: "http://%[1]s/as4"
    pmode: {id: inv}
    retry: {first: 300ms, factor: 1.5, max: 2s}
`, proxyAddr, mdn))
	}
	writeA("sync")
	aCfg = filepath.Join(dir, "a", "gateway.yaml")
	write("a/gateway.yaml", string(gatewayYAML(t, aAddr, aStore, filepath.Join(dir, "a", "partners"), fmt.Sprintf(`lease: 2s
handler: {type: dir, inbox: %s}
audit: {file: %s}
outbound: {lease: 2s, workers: 8}
shutdown_timeout: 1s
`, filepath.Join(dir, "a", "inbox"), filepath.Join(dir, "a", "audit.jsonl")))))
	bCfg = filepath.Join(dir, "b", "gateway.yaml")
	write("b/gateway.yaml", fmt.Sprintf(`listen: %s
store: %s
partners: %s
identity:
  as2_id: DEMO
  party_id: urn:demo:partner
  party_type: urn:oasis:names:tc:ebcore:partyid-type:unregistered
  keys: [{cert: %s, key: %s}]
lease: 2s
handler: {type: table}
audit: {file: %s}
shutdown_timeout: 1s
`, bAddr, bStore, filepath.Join(dir, "b", "partners"), filepath.Join(fixture, "partners", "demo-partner.pem"),
		filepath.Join(keys, "demo-partner.key"), filepath.Join(dir, "b", "audit.jsonl")))
	return aCfg, bCfg, writeA
}

// recProxy forwards A's POSTs to B and records each one's transport id; it
// kills A (kill) at the killAt-th request: after reading half its body
// (nothing forwarded), or after B answered (the answer dropped).
type recProxy struct {
	target  string
	count   atomic.Int64
	killAt  atomic.Int64
	kill    func(idx int64)
	r       *sendKillResult
	mu      sync.Mutex
	sent    []string // transport id of every transmission that reached B
	sentAS4 int      // of which AS4
	unknown int      // requests without a readable transport id
}

var ebMessageID = regexp.MustCompile(`MessageId>\s*([^<\s]+)\s*<`)

func (p *recProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	idx := p.count.Add(1)
	kill := p.killAt.Load() == idx
	if kill && idx%2 == 0 {
		// Body partly sent: half read, then A dies.
		half := r.ContentLength / 2
		if half <= 0 {
			half = 512
		}
		_, _ = io.CopyN(io.Discard, r.Body, half)
		p.r.partial.Add(1)
		p.kill(idx)
		dropConn(w)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return // A died meanwhile
	}
	id := r.Header.Get("Message-Id")
	if strings.HasSuffix(r.URL.Path, "/as4") {
		id = ""
		if m := ebMessageID.FindSubmatch(body); m != nil {
			id = string(m[1])
		}
	}
	req, err := http.NewRequestWithContext(context.WithoutCancel(r.Context()), r.Method, p.target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	p.mu.Lock()
	if id == "" {
		p.unknown++
	} else {
		p.sent = append(p.sent, strings.Trim(id, "<>"))
		if strings.HasSuffix(r.URL.Path, "/as4") {
			p.sentAS4++
		}
	}
	p.mu.Unlock()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if kill {
		// B took it; A dies before it hears so.
		p.r.held.Add(1)
		p.kill(idx)
		dropConn(w)
		return
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(answer)
}

func dropConn(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if c, _, err := hj.Hijack(); err == nil {
			c.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

// submitAll makes every submission through A's submission API, each
// retried (same Idempotency-Key) until A answers 202 or 200.
func submitAll(ctx context.Context, admin string, subs []*sendKillSub, r *sendKillResult) error {
	work := make(chan *sendKillSub)
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range work {
				if err := submitOne(ctx, admin, s, r); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	go func() {
		defer close(work)
		for _, s := range subs {
			select {
			case work <- s:
			case <-ctx.Done():
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	return <-errs
}

func submitOne(ctx context.Context, admin string, s *sendKillSub, r *sendKillResult) error {
	q := url.Values{"partner": {"b"}, "protocol": {s.protocol}, "filename": {s.key + ".dat"}}
	for try := 0; ; try++ {
		if ctx.Err() != nil {
			return fmt.Errorf("submission %s not taken in time", s.key)
		}
		if try > 0 {
			r.submitRetries.Add(1)
			time.Sleep(100 * time.Millisecond)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+admin+"/api/v1/outbound/messages?"+q.Encode(),
			bytes.NewReader(s.payload))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", s.ctype)
		req.Header.Set("Idempotency-Key", s.key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			continue // A is down
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusAccepted, http.StatusOK:
		case http.StatusInternalServerError, http.StatusServiceUnavailable:
			continue
		default:
			return fmt.Errorf("submission %s: HTTP %d: %s", s.key, resp.StatusCode, b)
		}
		var sub submitapi.Submitted
		if err := json.Unmarshal(b, &sub); err != nil {
			return fmt.Errorf("submission %s: %w", s.key, err)
		}
		if s.id != "" && (s.id != sub.ID || s.msgID != sub.MessageID) {
			return fmt.Errorf("submission %s answered as %s %s, before as %s %s", s.key, sub.ID, sub.MessageID, s.id, s.msgID)
		}
		s.id, s.msgID = sub.ID, sub.MessageID
		if try > 0 && resp.StatusCode == http.StatusAccepted && mrand.IntN(2) == 0 {
			continue // replay it once more: must answer the same message
		}
		return nil
	}
}

// listOutbound lists all of A's messages through its API (nil while A
// does not answer).
func listOutbound(admin, states string) ([]submitapi.Status, error) {
	var all []submitapi.Status
	before, beforeID := "", ""
	for {
		u := "http://" + admin + "/api/v1/outbound/messages?limit=1000"
		if states != "" {
			u += "&state=" + states
		}
		if before != "" {
			u += "&before=" + url.QueryEscape(before) + "&before_id=" + url.QueryEscape(beforeID)
		}
		resp, err := http.Get(u)
		if err != nil {
			return nil, err
		}
		var l submitapi.List
		err = json.NewDecoder(resp.Body).Decode(&l)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("list: HTTP %d: %v", resp.StatusCode, err)
		}
		all = append(all, l.Messages...)
		if l.NextBefore == nil {
			return all, nil
		}
		before, beforeID = l.NextBefore.Format(time.RFC3339Nano), l.NextBeforeID
	}
}

func runSendKillMatrix(t *testing.T, dir, aStore, bStore string, count int) *sendKillResult {
	start := time.Now()
	bin := faultGateway(t)
	aAddr, bAddr, proxyAddr, aAdmin := freePort(t), freePort(t), freePort(t), freePort(t)
	aCfg, bCfg, writeA := sendKillSetup(t, dir, aStore, bStore, aAddr, bAddr, proxyAddr)
	r := &sendKillResult{byPhase: map[string]int{}}

	// B: the receiver, never killed (the production build).
	startGateway(t, bCfg, bAddr)
	var current atomic.Pointer[exec.Cmd]
	var proxy *recProxy
	proxy = &recProxy{target: "http://" + bAddr, r: r, kill: func(idx int64) {
		// A sends before its start-up is seen (current set): the request
		// is held until then, unless the cycle ended meanwhile.
		for range 200 {
			if c := current.Load(); c != nil {
				_ = c.Process.Signal(syscall.SIGKILL)
				return
			}
			if proxy.killAt.Load() != idx {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}}
	ln, err := net.Listen("tcp", proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	psrv := &http.Server{Handler: proxy}
	go psrv.Serve(ln)
	t.Cleanup(func() { psrv.Close() })

	subs := sendKillPayloads(count)
	for _, s := range subs {
		if s.protocol == "as2" {
			r.as2++
		} else {
			r.as4++
		}
	}
	bound := 240 * time.Second
	if testing.Short() {
		bound = 90 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	submitted := make(chan error, 1)
	go func() { submitted <- submitAll(ctx, aAdmin, subs, r) }()

	stopA := sendKillCycles(t, ctx, bin, aCfg, aAddr, aAdmin, count, writeA, proxy, &current, submitted, r)
	r.elapsed = time.Since(start)
	checkSendKill(t, aAdmin, bStore, filepath.Join(dir, "b", "audit.jsonl"), subs, proxy, r)
	stopA()
	return r
}

// sendKillCycles runs A, lets it be killed at the cycle's kill point,
// restarts it, until every submission is taken and no message is left
// unfinished; A is left running for the checks, stopA stops it.
func sendKillCycles(t *testing.T, ctx context.Context, bin, aCfg, aAddr, aAdmin string, count int, writeA func(string),
	proxy *recProxy, current *atomic.Pointer[exec.Cmd], submitted <-chan error, r *sendKillResult) (stopA func()) {
	subsDone := false
	for cycle := 0; ; cycle++ {
		phase := sendKillPhases[cycle%len(sendKillPhases)]
		mdn := "sync"
		if phase == "send-awaiting" || (cycle/len(sendKillPhases))%2 == 1 {
			mdn = "async"
		}
		writeA(mdn)
		at := 1 + mrand.IntN(max(5, count/20)) // some 40 kills for 300 submissions
		env := []string{"GATEWAY_ADMIN_LISTEN=" + aAdmin}
		if phase == "during" {
			proxy.killAt.Store(proxy.count.Load() + int64(at))
		} else {
			proxy.killAt.Store(-1)
			env = append(env, fmt.Sprintf("GATEWAY_FAULT_KILL=%s:%d", phase, at))
		}
		cmd := startGatewayBinary(t, bin, aCfg, aAddr, env...)
		current.Store(cmd)
		r.restarts++
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		// A cycle whose kill point is not reached (too few messages left
		// for it) ends by a kill from outside after a while.
		timer := time.NewTimer(6 * time.Second)
		poll := time.NewTicker(300 * time.Millisecond)
		killed := ""
		stop := func() {
			current.Store(nil)
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-exited
		}
		for killed == "" {
			select {
			case err := <-exited:
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
					t.Fatalf("gateway A exited without a kill: %v (logs in %s)", err, filepath.Dir(aCfg))
				}
				killed = phase
			case <-timer.C:
				stop()
				killed = "timer"
			case err := <-submitted:
				if err != nil {
					stop()
					t.Fatal(err)
				}
				subsDone, submitted = true, nil
			case <-poll.C:
				if !subsDone {
					continue
				}
				open, err := listOutbound(aAdmin, "queued,awaiting-mdn")
				if err == nil && len(open) == 0 {
					proxy.killAt.Store(-1)
					timer.Stop()
					poll.Stop()
					return stop
				}
			case <-ctx.Done():
				// What is wrong is in the checks that follow.
				t.Errorf("send kill matrix timed out (logs in %s)", filepath.Dir(aCfg))
				proxy.killAt.Store(-1)
				timer.Stop()
				poll.Stop()
				return stop
			}
		}
		timer.Stop()
		poll.Stop()
		current.Store(nil)
		r.byPhase[killed]++
	}
}

// checkSendKill asserts the outcome: every submission one message,
// delivered with evidence; every transmission under its message's id; B's
// table one row per message with its payload.
func checkSendKill(t *testing.T, aAdmin, bStore, bAudit string, subs []*sendKillSub, proxy *recProxy, r *sendKillResult) {
	t.Helper()
	msgs, err := listOutbound(aAdmin, "")
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string][]submitapi.Status{}
	ids := map[string]submitapi.Status{}
	for _, m := range msgs {
		byKey[m.IdempotencyKey] = append(byKey[m.IdempotencyKey], m)
		ids[strings.Trim(m.MessageID, "<>")] = m
	}
	if len(msgs) != len(subs) {
		t.Errorf("%d messages in A's queue for %d submissions", len(msgs), len(subs))
	}
	rows := tableRowsSHA(t, bStore)
	shaIDs := map[string]map[string]bool{}
	rowsByID := map[string][]string{}
	for _, row := range rows {
		id := strings.Trim(row[0], "<>")
		rowsByID[id] = append(rowsByID[id], row[1])
		if shaIDs[row[1]] == nil {
			shaIDs[row[1]] = map[string]bool{}
		}
		shaIDs[row[1]][id] = true
	}
	lost, doubled := 0, 0
	for _, s := range subs {
		ms := byKey[s.key]
		if len(ms) != 1 {
			t.Errorf("submission %s: %d messages", s.key, len(ms))
			continue
		}
		m := ms[0]
		id := strings.Trim(m.MessageID, "<>")
		switch {
		case m.ID != s.id || m.MessageID != s.msgID:
			t.Errorf("submission %s: answered as %s %s, queued as %s %s", s.key, s.id, s.msgID, m.ID, m.MessageID)
		case m.SHA256 != s.sha || m.Protocol != s.protocol:
			t.Errorf("submission %s: queued with %s %s, sent %s %s", s.key, m.Protocol, m.SHA256, s.protocol, s.sha)
		case m.State != "delivered":
			t.Errorf("submission %s (%s): %s: %s %s", s.key, m.MessageID, m.State, m.Reason, m.LastError)
		case m.Evidence == nil || m.Evidence.Signer == "" || m.Evidence.Size == 0 ||
			(m.Evidence.Kind != "mdn" && m.Evidence.Kind != "receipt"):
			t.Errorf("submission %s: delivered without verified evidence: %+v", s.key, m.Evidence)
		}
		switch got := rowsByID[id]; {
		case len(got) == 0:
			lost++
		case len(got) > 1:
			doubled++
		case got[0] != s.sha:
			t.Errorf("submission %s: B accepted a payload %s under %s, not %s", s.key, got[0], id, s.sha)
		}
		if len(shaIDs[s.sha]) > 1 {
			t.Errorf("submission %s: its payload accepted under %d ids", s.key, len(shaIDs[s.sha]))
		}
	}
	if lost != 0 || doubled != 0 || len(rows) != len(subs) {
		t.Errorf("receiver: %d payloads lost, %d accepted more than once, %d rows for %d submissions", lost, doubled, len(rows), len(subs))
	}
	proxy.mu.Lock()
	defer proxy.mu.Unlock()
	seen := map[string]bool{}
	strangers, stranger := 0, ""
	for _, id := range proxy.sent {
		if _, ok := ids[id]; !ok {
			strangers, stranger = strangers+1, id
		}
		seen[id] = true
	}
	if strangers != 0 {
		t.Errorf("%d transmissions under no submission's Message-ID (one: %s)", strangers, stranger)
	}
	if proxy.unknown != 0 {
		t.Errorf("%d transmissions without a readable Message-ID", proxy.unknown)
	}
	r.transmissions, r.distinct, r.transmissionsAS4 = len(proxy.sent), len(seen), proxy.sentAS4
	r.duplicates = countAuditDecision(t, bAudit, "duplicate")
}

// tableRowsSHA returns B's table rows as (message_id, sha256).
func tableRowsSHA(t *testing.T, storeURL string) [][2]string {
	t.Helper()
	ctx := context.Background()
	var out [][2]string
	if path, ok := strings.CutPrefix(storeURL, "sqlite:"); ok {
		db, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		rows, err := db.QueryContext(ctx, `SELECT message_id, sha256 FROM `+inbox.TableName)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var r [2]string
			if err := rows.Scan(&r[0], &r[1]); err != nil {
				t.Fatal(err)
			}
			out = append(out, r)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	u, err := url.Parse(storeURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	schema := q.Get("schema")
	q.Del("schema")
	q.Del("pool_max_conns") // a pool setting: pgx.Connect refuses it
	u.RawQuery = q.Encode()
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT message_id, sha256 FROM `+pgx.Identifier{schema, inbox.TableName}.Sanitize())
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var r [2]string
		if err := rows.Scan(&r[0], &r[1]); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// countAuditDecision counts an audit file's records with decision.
func countAuditDecision(t *testing.T, path, decision string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var rec struct {
			Decision string `json:"decision"`
		}
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Decision == decision {
			n++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}
