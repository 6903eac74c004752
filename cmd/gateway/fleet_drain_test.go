package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	as2client "github.com/edigateway/gateway/as2/client"
	"github.com/edigateway/gateway/as4"
	as4client "github.com/edigateway/gateway/as4/client"
)

// The drain's rule for a load balancer: drain_period must cover the time the
// balancer needs to take a node out after its /readyz turns 503 (check
// interval × failures before out, plus a check's own time and a margin).
const (
	fleetDrainCheckInterval = 250 * time.Millisecond
	fleetDrainFall          = 2 // failed checks before a node is out
	fleetDrainRise          = 2 // good checks before it is back in
	fleetDrainPeriod        = 3 * time.Second
	// fleetDrainPause is each client's pause between two messages: far
	// shorter than the drain period, so that every kept-alive connection
	// sends a request while its node drains.
	fleetDrainPause = 250 * time.Millisecond
)

// fleetDrainBalancer is a TCP load balancer in the manner of HAProxy's
// mode tcp: round robin over the nodes in rotation, each client connection
// spliced to one node's partner listener for its life; a node is taken out
// after fleetDrainFall failed GET /readyz on its admin listener and put
// back after fleetDrainRise good ones. A node that refuses the connection
// is skipped for the next one (HAProxy's redispatch); a client connection
// for which no node accepts is closed without an answer.
type fleetDrainBalancer struct {
	ln    net.Listener
	nodes []*fleetDrainBackend
	next  atomic.Uint64
	wg    sync.WaitGroup
	stop  chan struct{}
}

type fleetDrainBackend struct {
	name, partner, admin string
	up                   atomic.Bool
	conns                atomic.Int64 // client connections given to this node
	dialFailed           atomic.Int64
}

func newFleetDrainBalancer(t *testing.T, nodes []*fleetDrainBackend) *fleetDrainBalancer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &fleetDrainBalancer{ln: ln, nodes: nodes, stop: make(chan struct{})}
	for _, n := range nodes {
		b.wg.Add(1)
		go b.check(n)
	}
	b.wg.Add(1)
	go b.accept()
	t.Cleanup(func() { close(b.stop); ln.Close(); b.wg.Wait() })
	return b
}

func (b *fleetDrainBalancer) addr() string { return b.ln.Addr().String() }

// check is the health check of one node.
func (b *fleetDrainBalancer) check(n *fleetDrainBackend) {
	defer b.wg.Done()
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	good, bad := 0, 0
	t := time.NewTicker(fleetDrainCheckInterval)
	defer t.Stop()
	for {
		ok := false
		if resp, err := hc.Get("http://" + n.admin + "/readyz"); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			ok = resp.StatusCode == http.StatusOK
		}
		if ok {
			good, bad = good+1, 0
			if good >= fleetDrainRise {
				n.up.Store(true)
			}
		} else {
			good, bad = 0, bad+1
			if bad >= fleetDrainFall {
				n.up.Store(false)
			}
		}
		select {
		case <-b.stop:
			return
		case <-t.C:
		}
	}
}

func (b *fleetDrainBalancer) accept() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.splice(c)
		}()
	}
}

func (b *fleetDrainBalancer) splice(c net.Conn) {
	defer c.Close()
	start := int(b.next.Add(1))
	var backend net.Conn
	for i := range b.nodes {
		n := b.nodes[(start+i)%len(b.nodes)]
		if !n.up.Load() {
			continue
		}
		bc, err := net.DialTimeout("tcp", n.partner, time.Second)
		if err != nil {
			n.dialFailed.Add(1)
			continue
		}
		n.conns.Add(1)
		backend = bc
		break
	}
	if backend == nil {
		return
	}
	defer backend.Close()
	go func() {
		io.Copy(backend, c)
		backend.(*net.TCPConn).CloseWrite()
	}()
	io.Copy(c, backend)
}

// fleetDrainNode is one `gateway serve` process of the fleet.
type fleetDrainNode struct {
	backend *fleetDrainBackend
	cfg     string
	cmd     *exec.Cmd
}

func (n *fleetDrainNode) start(t *testing.T) {
	t.Helper()
	n.cmd = startGatewayBinary(t, os.Args[0], n.cfg, n.backend.partner,
		"GATEWAY_ADMIN_LISTEN="+n.backend.admin, fmt.Sprintf("GATEWAY_DRAIN_PERIOD=%s", fleetDrainPeriod))
}

// stop sends SIGTERM and waits for the process to exit on its own.
func (n *fleetDrainNode) stop(t *testing.T) time.Duration {
	t.Helper()
	start := time.Now()
	if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- n.cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("%s: exit after SIGTERM: %v", n.backend.name, err)
		}
	case <-time.After(40 * time.Second):
		t.Fatalf("%s: still running 40 s after SIGTERM", n.backend.name)
	}
	return time.Since(start)
}

// waitInRotation waits until the balancer has the node in rotation.
func (n *fleetDrainNode) waitInRotation(t *testing.T) {
	t.Helper()
	waitFor(t, n.backend.up.Load, n.backend.name+" in the balancer's rotation")
}

// fleetDrainLoad is the partners' traffic through the balancer: each
// client sends its messages one after the other on keep-alive connections.
// A 503 is retried as a partner would (the same message again); a request
// that got no answer is never retried: it is counted, as is any negative
// answer.
type fleetDrainLoad struct {
	mu         sync.Mutex
	answered   []string       // message ids answered positively
	noAnswer   []string       // "id: error" of requests without an answer
	negative   []string       // "id: problem" of negative answers
	sent       atomic.Int64   // requests, retries included
	retried503 atomic.Int64   // 503 answers retried
	reused     atomic.Int64   // requests on a kept-alive connection
	closedBy   atomic.Int64   // replies that closed their connection
	perClient  map[string]int // messages answered per client
}

func (l *fleetDrainLoad) result(client, id string, answered bool, noAnswer, negative string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case answered:
		l.answered = append(l.answered, id)
		l.perClient[client]++
	case noAnswer != "":
		l.noAnswer = append(l.noAnswer, id+": "+noAnswer)
	default:
		l.negative = append(l.negative, id+": "+negative)
	}
}

// fleetDrainHTTP is a partner's keep-alive HTTP client, in the manner of
// many AS2 and AS4 products (and Python's http.client): it keeps one
// connection open and sends its next request on it without first checking
// whether the server closed it, and it never resends a request on its own.
// (Go's http.Transport notices a closed idle connection and resends a
// request that was not written, which would hide the requests a node's
// stop leaves without an answer.) A reply with "Connection: close" makes it
// open a new connection for the next request.
func (l *fleetDrainLoad) fleetDrainHTTP(addr string) *http.Client {
	return &http.Client{Timeout: 60 * time.Second, Transport: &fleetDrainConn{addr: addr, load: l}}
}

type fleetDrainConn struct {
	addr string
	load *fleetDrainLoad
	mu   sync.Mutex
	conn net.Conn
	br   *bufio.Reader
}

func (c *fleetDrainConn) RoundTrip(req *http.Request) (*http.Response, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.load.sent.Add(1)
	if c.conn == nil {
		conn, err := net.DialTimeout("tcp", c.addr, 5*time.Second)
		if err != nil {
			return nil, err
		}
		c.conn, c.br = conn, bufio.NewReader(conn)
	} else {
		c.load.reused.Add(1)
	}
	if d, ok := req.Context().Deadline(); ok {
		c.conn.SetDeadline(d)
	} else {
		c.conn.SetDeadline(time.Now().Add(60 * time.Second))
	}
	resp, err := c.exchange(req)
	if err != nil || resp.Close {
		c.conn.Close()
		c.conn = nil
	}
	if err == nil && resp.Close {
		c.load.closedBy.Add(1)
	}
	return resp, err
}

func (c *fleetDrainConn) exchange(req *http.Request) (*http.Response, error) {
	if err := req.Write(c.conn); err != nil {
		return nil, fmt.Errorf("writing the request: %w", err)
	}
	resp, err := http.ReadResponse(c.br, req)
	if err != nil {
		return nil, fmt.Errorf("no response: %w", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("reading the response body: %w", err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}

// TestFleetRollingRestartUnderLoad runs three `gateway serve` nodes on one
// PostgreSQL schema (table handler) behind a TCP load balancer that
// health-checks /readyz, sends AS2 and AS4 messages through it from six
// keep-alive clients, and restarts every node in turn with SIGTERM while
// they do: no request may go without an answer, every message must be
// answered positively with exactly one table row, and none may have two.
// Before the drain, a node closed its listener and its idle keep-alive
// connections at the moment its /readyz turned 503, and requests sent on
// them then got no answer.
func TestFleetRollingRestartUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a fleet of three gateways")
	}
	storeURL := pgStoreURL(t)
	demo := filepath.Dir(demoConfig(t))
	root := t.TempDir()
	var nodes []*fleetDrainNode
	var backends []*fleetDrainBackend
	for i := range 3 {
		dir := filepath.Join(root, fmt.Sprintf("node%d", i+1))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		b := &fleetDrainBackend{name: fmt.Sprintf("node%d", i+1), partner: freePort(t), admin: freePort(t)}
		cfg := filepath.Join(dir, "gateway.yaml")
		if err := os.WriteFile(cfg, gatewayYAML(t, b.partner, storeURL, "", "handler:\n  type: table\nshutdown_timeout: 10s\nreload_on_change: false\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, &fleetDrainNode{backend: b, cfg: cfg})
		backends = append(backends, b)
	}
	// The first node creates the schema's tables; the others start on them.
	nodes[0].start(t)
	for _, n := range nodes[1:] {
		n.start(t)
	}
	lb := newFleetDrainBalancer(t, backends)
	for _, n := range nodes {
		n.waitInRotation(t)
	}

	partner := readKeyPair(t, filepath.Join(demo, "partners", "demo-partner.pem"), filepath.Join(demo, "keys", "demo-partner.key"))
	gw := readKeyPair(t, filepath.Join(demo, "keys", "gateway.pem"), filepath.Join(demo, "keys", "gateway.key"))
	load := &fleetDrainLoad{perClient: map[string]int{}}
	const maxMessages = 450
	var issued atomic.Int64
	restarted := make(chan struct{})
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	// retry503 waits as a partner would after a 503 (bounded for the test).
	retry503 := func(d time.Duration) {
		load.retried503.Add(1)
		time.Sleep(min(max(d, 100*time.Millisecond), time.Second))
	}
	more := func() bool {
		select {
		case <-restarted:
			return false
		case <-ctx.Done():
			return false
		default:
			return issued.Add(1) <= maxMessages
		}
	}
	for c := range 4 {
		name := fmt.Sprintf("as2-%d", c)
		client := &as2client.Client{URL: "http://" + lb.addr() + "/as2", From: "DEMO", To: "GATEWAY",
			SignCert: partner.Cert, SignKey: partner.Key, SignDigest: "sha256", RecipientCerts: []*x509.Certificate{gw.Cert},
			Cipher: "aes128-cbc", MDN: as2client.MDNSync, SignedMDN: true, HTTP: load.fleetDrainHTTP(lb.addr())}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; more(); i++ {
				ref := fmt.Sprintf("FD%d%05d", c, i)
				body := "UNA:+.? 'UNB+UNOA:2+DEMO:14+GATEWAY:14+261204:1200+" + ref + "'UNH+1+INVOIC:D:96A:UN'BGM+380+" + ref + "+9'UNT+3+1'UNZ+1+" + ref + "'"
				m, err := client.Prepare([]byte(body), "application/edifact", ref+".edi")
				if err != nil {
					t.Error(err)
					return
				}
				id := strings.Trim(m.ID, "<>")
				for {
					res, err := client.Send(ctx, m)
					switch {
					case err != nil:
						load.result(name, id, false, err.Error(), "")
					case res.Status == http.StatusServiceUnavailable:
						retry503(res.RetryAfter)
						continue
					case res.Status == http.StatusOK && res.OK():
						load.result(name, id, true, "", "")
					default:
						load.result(name, id, false, "", fmt.Sprintf("HTTP %d %v", res.Status, res.Problems))
					}
					break
				}
				time.Sleep(fleetDrainPause)
			}
		}()
	}
	for c := range 2 {
		name := fmt.Sprintf("as4-%d", c)
		client := &as4client.Client{Signer: partner.Key, Certificate: partner.Cert, Encryption: &as4client.Encryption{Recipient: gw.Cert},
			ReceiptSigners: []*x509.Certificate{gw.Cert}, Host: "fleet.test", HTTP: load.fleetDrainHTTP(lb.addr())}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; more(); i++ {
				id := fmt.Sprintf("fleet-%d-%05d@fleet.test", c, i)
				out, err := client.Build(&as4client.Message{MessageID: id,
					From:    as4.PartyID{Value: "urn:demo:partner", Type: "urn:oasis:names:tc:ebcore:partyid-type:unregistered"},
					To:      as4.PartyID{Value: "urn:demo:gateway", Type: "urn:oasis:names:tc:ebcore:partyid-type:unregistered"},
					Service: "urn:demo:invoicing", Action: "Deliver",
					Payloads: []as4client.Payload{{ContentID: fmt.Sprintf("p%d-%d@fleet.test", c, i), MimeType: "application/xml",
						Data: []byte(fmt.Sprintf("<invoice n=%q/>", id))}}})
				if err != nil {
					t.Error(err)
					return
				}
				for {
					resp, err := client.Post(ctx, "http://"+lb.addr()+"/as4", out)
					switch {
					case resp == nil:
						load.result(name, id, false, fmt.Sprint(err), "")
					case resp.Status == http.StatusServiceUnavailable:
						d, _ := time.ParseDuration(resp.RetryAfter + "s")
						retry503(d)
						continue
					case err == nil && resp.Receipt != nil:
						load.result(name, id, true, "", "")
					default:
						load.result(name, id, false, "", fmt.Sprintf("HTTP %d: %v", resp.Status, err))
					}
					break
				}
				time.Sleep(fleetDrainPause)
			}
		}()
	}

	// The rolling restart, under that load.
	time.Sleep(time.Second)
	for _, n := range nodes {
		took := n.stop(t)
		t.Logf("%s: SIGTERM → exit in %s", n.backend.name, took.Round(time.Millisecond))
		if took < fleetDrainPeriod {
			t.Errorf("%s exited %s after SIGTERM, before its drain period (%s)", n.backend.name, took, fleetDrainPeriod)
		}
		n.start(t)
		n.waitInRotation(t)
	}
	time.Sleep(time.Second)
	if issued.Load() > maxMessages {
		t.Errorf("the load reached its bound (%d messages) before the rolling restart was over", maxMessages)
	}
	close(restarted)
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatal("the load did not finish in time")
	}

	rows := countTableRows(t, storeURL)
	lost, doubled := 0, 0
	answered := map[string]bool{}
	for _, id := range load.answered {
		answered[id] = true
		switch rows[id] {
		case 0:
			lost++
			t.Errorf("message %s answered positively, but has no table row", id)
		case 1:
		default:
			doubled++
			t.Errorf("message %s has %d table rows", id, rows[id])
		}
	}
	for id, n := range rows {
		if n > 1 && !answered[id] {
			doubled++
			t.Errorf("message %s (not answered positively) has %d table rows", id, n)
		}
	}
	var perNode []string
	for _, b := range backends {
		perNode = append(perNode, fmt.Sprintf("%s %d (dial failures %d)", b.name, b.conns.Load(), b.dialFailed.Load()))
	}
	t.Logf("FLEET ROLLING RESTART: %d messages answered positively (%v), %d requests (%d on kept-alive connections, %d replies closing their connection, %d 503s retried); "+
		"%d without an answer, %d negative, %d lost, %d doubled; balancer connections: %s",
		len(load.answered), load.perClient, load.sent.Load(), load.reused.Load(), load.closedBy.Load(), load.retried503.Load(),
		len(load.noAnswer), len(load.negative), lost, doubled, strings.Join(perNode, ", "))
	if len(load.noAnswer) > 0 {
		t.Errorf("%d requests got no answer: %v", len(load.noAnswer), load.noAnswer)
	}
	if len(load.negative) > 0 {
		t.Errorf("%d messages answered negatively: %v", len(load.negative), load.negative)
	}
	if len(load.answered) < 50 {
		t.Errorf("only %d messages answered: not the steady load the test needs", len(load.answered))
	}
	if load.reused.Load() == 0 {
		t.Error("no request reused a keep-alive connection: the test did not exercise keep-alive")
	}
	for _, p := range []string{"as2-0", "as4-0"} {
		if load.perClient[p] == 0 {
			t.Errorf("client %s had no message answered", p)
		}
	}
}

// TestSecondSIGTERMEndsTheDrain: the real binary drains on SIGTERM
// (/readyz 503, the partner listener still answering, /healthz 200),
// reloads on SIGHUP while draining, and a second SIGTERM ends the drain at
// once: the process exits 0 long before its drain period is over.
func TestSecondSIGTERMEndsTheDrain(t *testing.T) {
	dir := t.TempDir()
	addr, admin := freePort(t), freePort(t)
	cfg := filepath.Join(dir, "gateway.yaml")
	os.WriteFile(cfg, gatewayYAML(t, addr, "sqlite:gw.db", "", "handler:\n  inbox: inbox\nshutdown_timeout: 2s\nreload_on_change: false\n"), 0o600)
	n := &fleetDrainNode{backend: &fleetDrainBackend{name: "gateway", partner: addr, admin: admin}, cfg: cfg}
	n.cmd = startGatewayBinary(t, os.Args[0], cfg, addr, "GATEWAY_ADMIN_LISTEN="+admin, "GATEWAY_DRAIN_PERIOD=60s")
	logs := func() string {
		m, _ := filepath.Glob(filepath.Join(dir, "serve-*.log"))
		b, _ := os.ReadFile(m[0])
		return string(b)
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	status := func(url string) int {
		resp, err := hc.Get(url)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	waitFor(t, func() bool { return status("http://"+admin+"/readyz") == http.StatusOK }, "/readyz 200")

	exited := make(chan error, 1)
	n.cmd.Process.Signal(syscall.SIGTERM)
	go func() { exited <- n.cmd.Wait() }()
	waitFor(t, func() bool { return status("http://"+admin+"/readyz") == http.StatusServiceUnavailable }, "/readyz 503 after SIGTERM")
	if got := status("http://" + admin + "/healthz"); got != http.StatusOK {
		t.Errorf("/healthz while draining: %d, want 200", got)
	}
	if got := status("http://" + addr + "/as2"); got != http.StatusMethodNotAllowed {
		t.Errorf("GET /as2 while draining: %d, want the endpoint's 405 (still serving)", got)
	}
	n.cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, func() bool { return strings.Contains(logs(), `"msg":"configuration reloaded","trigger":"sighup"`) }, "the reload on SIGHUP while draining")
	select {
	case err := <-exited:
		t.Fatalf("exited while draining, before the second SIGTERM: %v; log:\n%s", err, logs())
	default:
	}
	second := time.Now()
	n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		if err != nil {
			t.Fatalf("exit after the second SIGTERM: %v; log:\n%s", err, logs())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("still running 10 s after the second SIGTERM; log:\n%s", logs())
	}
	t.Logf("exit %s after the second SIGTERM", time.Since(second).Round(time.Millisecond))
	l := logs()
	for _, want := range []string{`"msg":"stop: draining`, `"msg":"stop: drain ended early by a second signal`, `"msg":"shutting down; waiting for in-flight exchanges"`} {
		if !strings.Contains(l, want) {
			t.Errorf("no %s in the log:\n%s", want, l)
		}
	}
}
