package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	as2client "github.com/edigateway/gateway/as2/client"
)

// claimsNode is one gateway of a fleet sharing a PostgreSQL store, for the
// claim lease tests.
type claimsNode struct {
	addr string
	cmd  *exec.Cmd
}

// claimsFleetHandler is an exec handler that leaves a marker file per run
// in dir (so runs are counted across nodes) and then sleeps for sleep.
func claimsFleetHandler(dir string, sleep time.Duration) string {
	return fmt.Sprintf(`handlers:
  - name: erp
    type: exec
    exec:
      command: [sh, -c, 'touch "$0/run.$$"; exec sleep %d', %q]
      timeout: 2m
`, int(sleep/time.Second), dir)
}

// startClaimsNode starts `gateway serve` on the shared store with the demo
// partner and keys, extra (lease settings) and handler (a handlers block).
func startClaimsNode(t *testing.T, storeURL, extra, handler string) *claimsNode {
	t.Helper()
	dir := t.TempDir()
	addr := freePort(t)
	cfg := filepath.Join(dir, "gateway.yaml")
	body := gatewayYAML(t, addr, storeURL, "", "admin:\n  listen: 127.0.0.1:0\nshutdown_timeout: 1s\n"+extra+handler)
	if err := os.WriteFile(cfg, body, 0o600); err != nil {
		t.Fatal(err)
	}
	return &claimsNode{addr: addr, cmd: startGateway(t, cfg, addr)}
}

// claimsAS2Client sends as the demo partner to node.
func claimsAS2Client(t *testing.T, n *claimsNode) *as2client.Client {
	demo := filepath.Dir(demoConfig(t))
	partner := readKeyPair(t, filepath.Join(demo, "partners", "demo-partner.pem"), filepath.Join(demo, "keys", "demo-partner.key"))
	gw := readKeyPair(t, filepath.Join(demo, "keys", "gateway.pem"), filepath.Join(demo, "keys", "gateway.key"))
	return &as2client.Client{URL: "http://" + n.addr + "/as2", From: "DEMO", To: "GATEWAY",
		SignCert: partner.Cert, SignKey: partner.Key, SignDigest: "sha256",
		RecipientCerts: []*x509.Certificate{gw.Cert}, Cipher: "aes256-cbc", MDN: as2client.MDNSync, SignedMDN: true}
}

// claimsSendAS4 sends payload under messageID to node as the demo partner
// with the CLI's send-as4 (in process) and returns its exit code and output.
func claimsSendAS4(t *testing.T, n *claimsNode, messageID, payload string) (int, string) {
	demo := filepath.Dir(demoConfig(t))
	var out, errb bytes.Buffer
	code := run([]string{"send-as4", "-url", "http://" + n.addr + "/as4", "-timeout", "90s",
		"-key", filepath.Join(demo, "keys", "demo-partner.key"), "-cert", filepath.Join(demo, "partners", "demo-partner.pem"),
		"-receipt-cert", filepath.Join(demo, "keys", "gateway.pem"), "-encrypt-cert", filepath.Join(demo, "keys", "gateway.pem"),
		"-from", "urn:demo:partner", "-from-type", "urn:oasis:names:tc:ebcore:partyid-type:unregistered",
		"-to", "urn:demo:gateway", "-to-type", "urn:oasis:names:tc:ebcore:partyid-type:unregistered",
		"-service", "urn:demo:invoicing", "-action", "Deliver", "-message-id", messageID, payload}, &out, &errb)
	return code, out.String() + errb.String()
}

func claimsRuns(dir string) int {
	names, _ := filepath.Glob(filepath.Join(dir, "run.*"))
	return len(names)
}

// TestFleetClaimsKilledNodeFreedWithinDefaultLease: two gateways on one
// PostgreSQL database with the default lease. A message of each protocol
// is in its handler on node 1 when node 1 is killed (SIGKILL); the
// partner's retransmissions to node 2 are answered 503 until the dead
// node's claim expires and are then processed, within 35 s of the kill
// (the default lease is 30 s; it was 5 minutes). Each message is handled
// once more on node 2 (at least once: node 1 died before accepting) and
// then answered as a duplicate.
func TestFleetClaimsKilledNodeFreedWithinDefaultLease(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two gateways and waits for a lease")
	}
	storeURL := pgStoreURL(t)
	slow, fast := t.TempDir(), t.TempDir()
	node1 := startClaimsNode(t, storeURL, "", claimsFleetHandler(slow, 90*time.Second))
	node2 := startClaimsNode(t, storeURL, "", claimsFleetHandler(fast, 0))

	as2c1, as2c2 := claimsAS2Client(t, node1), claimsAS2Client(t, node2)
	msg, err := as2c1.Prepare([]byte("UNB+UNOA:2+DEMO:14+GATEWAY:14+261204:1200+KILL1'UNH+1+INVOIC:D:96A:UN'UNT+2+1'UNZ+1+KILL1'"),
		"application/edifact", "invoice.edi")
	if err != nil {
		t.Fatal(err)
	}
	payload := filepath.Join(t.TempDir(), "order.xml")
	os.WriteFile(payload, []byte("<Order><ID>kill-as4</ID></Order>"), 0o600)
	as4ID := fmt.Sprintf("claims-kill-%d@demo", time.Now().UnixNano())
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		as2c1.Send(ctx, msg) // answered never: node 1 is killed
	}()
	go claimsSendAS4(t, node1, as4ID, payload)
	waitFor(t, func() bool { return claimsRuns(slow) == 2 }, "both messages in node 1's handler")
	if err := node1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	node1.cmd.Wait()
	killed := time.Now()

	var wg sync.WaitGroup
	took := map[string]time.Duration{}
	var mu sync.Mutex
	retransmit := func(proto string, send func() (ok bool, busy bool, detail string)) {
		defer wg.Done()
		busyCount := 0
		for time.Since(killed) < 40*time.Second {
			ok, busy, detail := send()
			if ok {
				mu.Lock()
				took[proto] = time.Since(killed)
				mu.Unlock()
				t.Logf("%s: retransmission processed by node 2 %v after the kill (%d answered 503 before)", proto,
					time.Since(killed).Round(100*time.Millisecond), busyCount)
				return
			}
			if !busy {
				t.Errorf("%s retransmission: %s, want 503 (in flight) or processed", proto, detail)
				return
			}
			busyCount++
			time.Sleep(time.Second)
		}
		t.Errorf("%s: retransmission still not processed %v after the kill", proto, time.Since(killed).Round(time.Second))
	}
	wg.Add(2)
	go retransmit("AS2", func() (bool, bool, string) {
		res, err := as2c2.Send(context.Background(), msg)
		if err != nil {
			return false, false, err.Error()
		}
		return res.OK(), res.Status == 503, fmt.Sprintf("HTTP %d %v", res.Status, res.Problems)
	})
	go retransmit("AS4", func() (bool, bool, string) {
		code, out := claimsSendAS4(t, node2, as4ID, payload)
		return code == 0 && strings.Contains(out, "signature valid"), strings.Contains(out, "HTTP 503"), fmt.Sprintf("exit %d: %s", code, out)
	})
	wg.Wait()
	for proto, d := range took {
		if d > 35*time.Second {
			t.Errorf("%s: processed %v after the kill, want within 35 s (default lease 30 s)", proto, d.Round(time.Second))
		}
	}
	if n := claimsRuns(fast); n != 2 {
		t.Errorf("node 2 ran the handler %d times, want 2 (one per message)", n)
	}
	// Once processed, a retransmission is a duplicate: no further run.
	if res, err := as2c2.Send(context.Background(), msg); err != nil || !res.OK() || !strings.Contains(res.MDN.Disposition.String(), "duplicate-document") {
		t.Errorf("AS2 retransmission after processing: %v %+v", err, res)
	}
	if code, out := claimsSendAS4(t, node2, as4ID, payload); code != 0 {
		t.Errorf("AS4 retransmission after processing: exit %d: %s", code, out)
	}
	if n := claimsRuns(fast); n != 2 {
		t.Errorf("node 2 ran the handler %d times after the duplicates, want 2", n)
	}
}

// TestFleetClaimsSlowHandlerKeepsClaim: two gateways on one PostgreSQL
// database, lease 3 s, a handler that runs 10 s on node 1. The partner's
// copies of the same message sent to node 2 meanwhile are answered 503 (in
// flight) throughout, over both protocols; the handler runs exactly once
// (the claim was renewed about every second), node 1 answers positively,
// and node 2 answers the copies after it as duplicates.
func TestFleetClaimsSlowHandlerKeepsClaim(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two gateways")
	}
	const run = 10 * time.Second
	storeURL := pgStoreURL(t)
	runs := t.TempDir()
	lease := "lease: 3s\n"
	node1 := startClaimsNode(t, storeURL, lease, claimsFleetHandler(runs, run))
	node2 := startClaimsNode(t, storeURL, lease, claimsFleetHandler(runs, run))

	as2c1, as2c2 := claimsAS2Client(t, node1), claimsAS2Client(t, node2)
	msg, err := as2c1.Prepare([]byte("UNB+UNOA:2+DEMO:14+GATEWAY:14+261204:1300+SLOW1'UNH+1+INVOIC:D:96A:UN'UNT+2+1'UNZ+1+SLOW1'"),
		"application/edifact", "invoice.edi")
	if err != nil {
		t.Fatal(err)
	}
	payload := filepath.Join(t.TempDir(), "order.xml")
	os.WriteFile(payload, []byte("<Order><ID>slow-as4</ID></Order>"), 0o600)
	as4ID := fmt.Sprintf("claims-slow-%d@demo", time.Now().UnixNano())

	type outcome struct {
		as2 *as2client.Result
		err error
	}
	first2 := make(chan outcome, 1)
	first4 := make(chan string, 1)
	go func() {
		res, err := as2c1.Send(context.Background(), msg)
		first2 <- outcome{res, err}
	}()
	go func() {
		code, out := claimsSendAS4(t, node1, as4ID, payload)
		first4 <- fmt.Sprintf("exit %d: %s", code, out)
	}()
	waitFor(t, func() bool { return claimsRuns(runs) == 2 }, "both messages in node 1's handler")
	started := time.Now()
	copies := 0
	for time.Since(started) < run-2*time.Second {
		res, err := as2c2.Send(context.Background(), msg)
		if err != nil || res.Status != 503 {
			t.Fatalf("AS2 copy to node 2 %v into a %v handler run under a 3s lease: %v %+v, want 503 in flight",
				time.Since(started).Round(100*time.Millisecond), run, err, res)
		}
		if res.RetryAfter < time.Second || res.RetryAfter > 3*time.Second {
			t.Errorf("AS2 copy: Retry-After %v, want 1…3 s (never beyond the lease left)", res.RetryAfter)
		}
		code, out := claimsSendAS4(t, node2, as4ID, payload)
		if code == 0 || !strings.Contains(out, "HTTP 503") {
			t.Fatalf("AS4 copy to node 2 %v into the handler run: exit %d %s, want 503 in flight",
				time.Since(started).Round(100*time.Millisecond), code, out)
		}
		copies += 2
		time.Sleep(500 * time.Millisecond)
	}
	o := <-first2
	if o.err != nil || !o.as2.OK() {
		t.Fatalf("AS2 first delivery on node 1: %v %+v", o.err, o.as2)
	}
	if out := <-first4; !strings.HasPrefix(out, "exit 0") || !strings.Contains(out, "signature valid") {
		t.Fatalf("AS4 first delivery on node 1: %s", out)
	}
	if n := claimsRuns(runs); n != 2 {
		t.Fatalf("the handler ran %d times for two messages, want 2", n)
	}
	res, err := as2c2.Send(context.Background(), msg)
	if err != nil || !res.OK() || !strings.Contains(res.MDN.Disposition.String(), "duplicate-document") {
		t.Errorf("AS2 copy after acceptance: %v %+v", err, res)
	}
	if code, out := claimsSendAS4(t, node2, as4ID, payload); code != 0 {
		t.Errorf("AS4 copy after acceptance: exit %d: %s", code, out)
	}
	if n := claimsRuns(runs); n != 2 {
		t.Errorf("the handler ran %d times after the duplicates, want 2", n)
	}
	t.Logf("%d copies answered 503 on node 2 during a %v handler run under a 3s lease", copies, run)
}
