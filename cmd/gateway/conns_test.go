//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	as2client "github.com/edigateway/gateway/as2/client"
)

// In the child gateway, GATEWAY_TEST_NOFILE sets the descriptor limit
// (soft and hard) before serve starts, as LimitNOFILE does under systemd:
// the connection test reproduces descriptor exhaustion with a few hundred
// connections instead of 65536.
func init() {
	if os.Getenv("GATEWAY_TEST_RUN_MAIN") != "1" {
		return
	}
	if n, err := strconv.ParseUint(os.Getenv("GATEWAY_TEST_NOFILE"), 10, 64); err == nil && n > 0 {
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n}); err != nil {
			fmt.Fprintln(os.Stderr, "GATEWAY_TEST_NOFILE:", err)
			os.Exit(3)
		}
	}
}

// attackConn is one of the attacker's idle keep-alive connections.
type attackConn struct {
	c        net.Conn
	answered atomic.Bool // got the reply to its one request
	closed   atomic.Bool // the gateway closed it afterwards (or refused it)
}

// idleAttack opens n connections to addr from the loopback addresses
// 127.0.0.2 … 127.0.0.9, each sending one request and then holding the
// connection open without a further request (a keep-alive connection left
// idle), as many clients, or one attacker, can.
func idleAttack(t *testing.T, addr string, n int) []*attackConn {
	t.Helper()
	conns := make([]*attackConn, 0, n)
	for i := 0; i < n; i++ {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%8))}, Timeout: time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			continue // the backlog is full: the attack goes on with those open
		}
		a := &attackConn{c: c}
		conns = append(conns, a)
		t.Cleanup(func() { c.Close() })
		c.SetWriteDeadline(time.Now().Add(time.Second))
		if _, err := c.Write([]byte("GET /as2 HTTP/1.1\r\nHost: gateway\r\n\r\n")); err != nil {
			a.closed.Store(true)
			continue
		}
		go func() {
			r := bufio.NewReader(c)
			resp, err := http.ReadResponse(r, nil)
			if err == nil {
				a.answered.Store(true)
				resp.Body.Close()
				// Idle: never another request; wait for the gateway to close.
				_, _ = r.ReadByte()
			}
			a.closed.Store(true)
		}()
	}
	return conns
}

// TestIdleConnectionsDoNotStarveTheGateway runs the real binary under a
// descriptor limit of 256 (the systemd unit's LimitNOFILE, scaled down)
// and opens 300 idle keep-alive connections from eight loopback addresses.
// Without connection limits they take every descriptor: both listeners log
// "accept4: too many open files", the admin /healthz times out and
// partners' messages are not processed. With them, the gateway closes the
// idle connections it has no room for (and, above the high-water mark,
// every idle one after 5 s), /healthz answers throughout, and a partner's
// AS2 and AS4 messages sent during the attack are processed.
func TestIdleConnectionsDoNotStarveTheGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the gateway")
	}
	demo := filepath.Dir(demoConfig(t))
	dir := t.TempDir()
	addr, adminAddr := freePort(t), freePort(t)
	cfg := filepath.Join(dir, "gateway.yaml")
	os.WriteFile(cfg, gatewayYAML(t, addr, "sqlite:gw.db", "", "reload_on_change: false\nhandler:\n  inbox: inbox\nshutdown_timeout: 2s\n"), 0o600)
	gw := startGateway(t, cfg, addr, "GATEWAY_TEST_NOFILE=256", "GATEWAY_ADMIN_LISTEN="+adminAddr)
	logs := func() string {
		files, _ := filepath.Glob(filepath.Join(dir, "serve-*.log"))
		var b strings.Builder
		for _, f := range files {
			x, _ := os.ReadFile(f)
			b.Write(x)
		}
		return b.String()
	}

	// /healthz on fresh connections every 100 ms for the whole attack, as
	// a liveness probe does.
	probe := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	healthz := func() error {
		resp, err := probe.Get("http://" + adminAddr + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	if err := healthz(); err != nil {
		t.Fatalf("/healthz before the attack: %v", err)
	}
	var probeMu sync.Mutex
	var probes int
	var probeFailures []string
	stopProbe := make(chan struct{})
	probeDone := make(chan struct{})
	go func() {
		defer close(probeDone)
		for {
			err := healthz()
			probeMu.Lock()
			probes++
			if err != nil {
				probeFailures = append(probeFailures, err.Error())
			}
			probeMu.Unlock()
			select {
			case <-stopProbe:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()

	attack := idleAttack(t, addr, 300)
	time.Sleep(500 * time.Millisecond) // the gateway accepts (or cannot)

	// A legitimate partner sends from 127.0.0.1 during the attack.
	partner := readKeyPair(t, filepath.Join(demo, "partners", "demo-partner.pem"), filepath.Join(demo, "keys", "demo-partner.key"))
	gwKeys := readKeyPair(t, filepath.Join(demo, "keys", "gateway.pem"), filepath.Join(demo, "keys", "gateway.key"))
	as2c := &as2client.Client{URL: "http://" + addr + "/as2", From: "DEMO", To: "GATEWAY", SignCert: partner.Cert, SignKey: partner.Key,
		SignDigest: "sha256", RecipientCerts: []*x509.Certificate{gwKeys.Cert}, Cipher: "aes128-cbc", MDN: as2client.MDNSync, SignedMDN: true,
		MDNCerts: []*x509.Certificate{gwKeys.Cert}}
	msg, err := as2c.Prepare([]byte("UNB+UNOA:2+DEMO:14+GATEWAY:14+261204:1200+CONN1'UNH+1+INVOIC:D:96A:UN'UNT+2+1'UNZ+1+CONN1'"), "application/edifact", "invoice.edi")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	res, err := as2c.Send(ctx, msg)
	cancel()
	switch {
	case err != nil:
		t.Errorf("AS2 message during the attack: %v", err)
	case res.MDN == nil || !strings.HasSuffix(res.MDN.Disposition.String(), "; processed"):
		t.Errorf("AS2 message during the attack: status %d, problems %v, MDN %+v", res.Status, res.Problems, res.MDN)
	}

	payload := filepath.Join(t.TempDir(), "invoice.edi")
	os.WriteFile(payload, []byte("UNB+UNOA:2+DEMO:14+GATEWAY:14+261204:1200+CONN2'UNH+1+INVOIC:D:96A:UN'UNT+2+1'UNZ+1+CONN2'"), 0o600)
	as4Done := make(chan string, 1)
	go func() {
		var out, errb bytes.Buffer
		code := run([]string{"send-as4", "-url", "http://" + addr + "/as4", "-timeout", "15s", "-quiet",
			"-key", filepath.Join(demo, "keys", "demo-partner.key"), "-cert", filepath.Join(demo, "partners", "demo-partner.pem"),
			"-receipt-cert", filepath.Join(demo, "keys", "gateway.pem"), "-encrypt-cert", filepath.Join(demo, "keys", "gateway.pem"),
			"-from", "urn:demo:partner", "-from-type", "urn:oasis:names:tc:ebcore:partyid-type:unregistered",
			"-to", "urn:demo:gateway", "-to-type", "urn:oasis:names:tc:ebcore:partyid-type:unregistered",
			"-service", "urn:demo:invoicing", "-action", "Deliver", "-message-id", "conn-attack@demo", payload}, &out, &errb)
		if code != 0 || !strings.Contains(out.String(), "signature valid") {
			as4Done <- fmt.Sprintf("exit %d: %s %s", code, out.String(), errb.String())
			return
		}
		as4Done <- ""
	}()
	select {
	case msg := <-as4Done:
		if msg != "" {
			t.Errorf("AS4 message during the attack: %s", msg)
		}
	case <-time.After(40 * time.Second):
		t.Error("AS4 message during the attack: no receipt in 40 s")
	}

	// Under pressure the idle connections are closed after 5 s.
	time.Sleep(6 * time.Second)
	close(stopProbe)
	<-probeDone
	var answered, closed, open int
	for _, a := range attack {
		if a.answered.Load() {
			answered++
		}
		if a.closed.Load() {
			closed++
		} else {
			open++
		}
	}
	t.Logf("attack: %d connections made, %d answered, %d closed by the gateway, %d still open; /healthz probes: %d, failed %d",
		len(attack), answered, closed, open, probes, len(probeFailures))
	if len(probeFailures) > 0 {
		t.Errorf("/healthz failed %d of %d times during the attack: %v", len(probeFailures), probes, probeFailures[:min(5, len(probeFailures))])
	}
	if closed == 0 {
		t.Error("no idle connection was closed under pressure")
	}
	// Idle connections left open are fewer than the high-water mark
	// (three quarters of 160): above it they would have been closed.
	if open >= 120 {
		t.Errorf("%d idle connections still open after the pressure", open)
	}
	if l := logs(); strings.Contains(l, "too many open files") {
		i := strings.Index(l, "too many open files")
		t.Errorf("the gateway ran out of descriptors: %s", l[max(0, i-200):min(len(l), i+100)])
	}
	if l := logs(); !strings.Contains(l, `"msg":"connections above the high-water mark`) {
		t.Errorf("no pressure logged; log:\n%s", l[max(0, len(l)-3000):])
	}
	if err := healthz(); err != nil {
		t.Errorf("/healthz after the attack: %v", err)
	}
	// The partner limit derived from 256 descriptors: 64 reserved, 32 for
	// the admin listener, 160 for partners.
	m := scrape(t, "http://"+adminAddr)
	max, _ := metricValue(m, "gateway_connections_max", map[string]string{"listener": "partner"})
	closedIdle, _ := metricValue(m, "gateway_connections_idle_closed_total", map[string]string{"listener": "partner"})
	openNow, _ := metricValue(m, "gateway_connections_open", map[string]string{"listener": "partner"})
	t.Logf("partner listener: max %v, idle connections closed by the limiter %v, open %v", max, closedIdle, openNow)
	if max != 160 || openNow > max {
		t.Errorf("partner listener: max %v (want 160), open %v", max, openNow)
	}
	gw.Process.Signal(syscall.SIGTERM)
}
