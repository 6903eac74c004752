package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// overlapProxy forwards the sending gateways' POSTs to the receiver and
// counts, per transport id, transmissions that were in flight at the same
// time (two gateways working one message at once).
type overlapProxy struct {
	target   string
	mu       sync.Mutex
	inflight map[string]int
	overlaps []string
	sent     int
}

func (p *overlapProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	id := strings.Trim(r.Header.Get("Message-Id"), "<>")
	if strings.HasSuffix(r.URL.Path, "/as4") {
		id = ""
		if m := ebMessageID.FindSubmatch(body); m != nil {
			id = string(m[1])
		}
	}
	p.mu.Lock()
	p.inflight[id]++
	if p.inflight[id] > 1 {
		p.overlaps = append(p.overlaps, id)
	}
	p.sent++
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.inflight[id]--
		p.mu.Unlock()
	}()
	// Widen the window in which a second gateway could take the message.
	time.Sleep(20 * time.Millisecond)
	req, err := http.NewRequestWithContext(context.WithoutCancel(r.Context()), r.Method, p.target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(answer)
}

// TestSendFleetSharesTheQueue: two sending gateways (the real binary) on
// one PostgreSQL schema share the outbound queue: submissions through
// either node's API, one node killed -9 while it sends and restarted; every
// submission is delivered once, no message is ever transmitted by both
// nodes at the same time, each payload reaches the receiver once, and both
// nodes sent messages.
func TestSendFleetSharesTheQueue(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three gateways")
	}
	dir := t.TempDir()
	aStore, bStore := pgStoreURL(t), "sqlite:"+filepath.Join(dir, "b.db")
	a1, a2, bAddr, proxyAddr := freePort(t), freePort(t), freePort(t), freePort(t)
	admin1, admin2 := freePort(t), freePort(t)
	aCfg, bCfg, _ := sendKillSetup(t, dir, aStore, bStore, a1, bAddr, proxyAddr)
	// Node 2: the same configuration with its own listener, inbox and
	// audit file.
	raw, err := os.ReadFile(aCfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg2 := strings.NewReplacer(a1, a2, "audit.jsonl", "audit2.jsonl", filepath.Join(dir, "a", "inbox"), filepath.Join(dir, "a", "inbox2")).Replace(string(raw))
	a2Cfg := filepath.Join(dir, "a", "gateway2.yaml")
	if err := os.WriteFile(a2Cfg, []byte(cfg2), 0o600); err != nil {
		t.Fatal(err)
	}

	startGateway(t, bCfg, bAddr)
	proxy := &overlapProxy{target: "http://" + bAddr, inflight: map[string]int{}}
	ln, err := net.Listen("tcp", proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	psrv := &http.Server{Handler: proxy}
	go psrv.Serve(ln)
	t.Cleanup(func() { psrv.Close() })
	node1 := startGateway(t, aCfg, a1, "GATEWAY_ADMIN_LISTEN="+admin1)
	startGateway(t, a2Cfg, a2, "GATEWAY_ADMIN_LISTEN="+admin2)

	subs := sendKillPayloads(120)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	r := &sendKillResult{byPhase: map[string]int{}}
	var wg sync.WaitGroup
	errs := make(chan error, len(subs))
	for i, s := range subs {
		admin := admin1
		if i%2 == 1 {
			admin = admin2
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := submitOne(ctx, admin, s, r); err != nil {
				errs <- err
			}
		}()
		if i == len(subs)/3 {
			// Node 1 dies while it sends; its leased messages go to node 2
			// after the 2 s lease, then node 1 comes back.
			_ = node1.Process.Signal(syscall.SIGKILL)
			time.Sleep(3 * time.Second)
			startGateway(t, aCfg, a1, "GATEWAY_ADMIN_LISTEN="+admin1)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	waitUntil := time.Now().Add(120 * time.Second)
	var delivered int
	for time.Now().Before(waitUntil) {
		all, err := listOutbound(admin2, "delivered")
		if err == nil {
			delivered = len(all)
			if delivered == len(subs) {
				break
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	if delivered != len(subs) {
		t.Fatalf("%d of %d submissions delivered", delivered, len(subs))
	}
	all, err := listOutbound(admin1, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(subs) {
		t.Errorf("the shared queue holds %d messages for %d submissions", len(all), len(subs))
	}
	proxy.mu.Lock()
	overlaps, sent := append([]string(nil), proxy.overlaps...), proxy.sent
	proxy.mu.Unlock()
	if len(overlaps) > 0 {
		t.Errorf("%d transmissions while another of the same message was in flight, e.g. %v", len(overlaps), overlaps[:min(3, len(overlaps))])
	}
	rows := tableRowsSHA(t, bStore)
	seen := map[string]int{}
	for _, row := range rows {
		seen[row[1]]++
	}
	for _, s := range subs {
		if seen[s.sha] != 1 {
			t.Errorf("submission %s: payload received %d times", s.key, seen[s.sha])
		}
	}
	d1 := countAuditDecision(t, filepath.Join(dir, "a", "audit.jsonl"), "delivered")
	d2 := countAuditDecision(t, filepath.Join(dir, "a", "audit2.jsonl"), "delivered")
	if d1 == 0 || d2 == 0 {
		t.Errorf("deliveries recorded by node 1: %d, node 2: %d; want both to send", d1, d2)
	}
	t.Logf("SEND FLEET: %d submissions over 2 nodes on one PostgreSQL, node 1 killed once: %d transmissions, %d delivered by node 1, %d by node 2, %d overlaps",
		len(subs), sent, d1, d2, len(overlaps))
}
