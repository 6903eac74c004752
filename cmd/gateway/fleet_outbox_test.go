package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	as2client "github.com/edigateway/gateway/as2/client"
	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/outbox"
)

// outboxFleet is gateways sharing one PostgreSQL database and a partner
// whose async MDN endpoint (the receiver) answers slowly: the async MDN
// queue (outbox) of a fleet, issue 26.
type outboxFleet struct {
	dir, storeURL, partners string
	recv                    *outboxReceiver
	client                  *as2client.Client
}

// outboxReceiver is the partner's async MDN endpoint: it reads each POST
// whole, records it, then answers 200 after delay(n) (n counts the POSTs
// from 1), or never when delay is negative (until the poster goes away).
type outboxReceiver struct {
	mu      sync.Mutex
	posts   []outboxPost
	arrived chan struct{}
	delay   func(n int) time.Duration
	stop    chan struct{}
	srv     *httptest.Server
}

type outboxPost struct {
	at, answered time.Time
	body         [32]byte // sha256 of the MDN: one queued MDN, one body
}

func newOutboxReceiver(t *testing.T, delay func(n int) time.Duration) *outboxReceiver {
	r := &outboxReceiver{arrived: make(chan struct{}, 64), delay: delay, stop: make(chan struct{})}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.posts = append(r.posts, outboxPost{at: time.Now(), body: sha256.Sum256(b)})
		n := len(r.posts)
		r.mu.Unlock()
		r.arrived <- struct{}{}
		d := r.delay(n)
		var wait <-chan time.Time
		if d >= 0 {
			wait = time.After(d)
		}
		select {
		case <-wait:
		case <-req.Context().Done():
			return
		case <-r.stop:
			return
		}
		r.mu.Lock()
		r.posts[n-1].answered = time.Now()
		r.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(r.srv.Close)
	t.Cleanup(func() { close(r.stop) }) // runs first: hanging handlers return
	return r
}

func (r *outboxReceiver) snapshot() []outboxPost {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]outboxPost(nil), r.posts...)
}

// waitPosts waits until the receiver got n POSTs.
func (r *outboxReceiver) waitPosts(t *testing.T, n int, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for len(r.snapshot()) < n {
		select {
		case <-r.arrived:
		case <-deadline:
			t.Fatalf("the partner got %d async MDN POSTs in %s, want %d", len(r.snapshot()), within, n)
		}
	}
}

// perMDN counts the POSTs of each queued MDN.
func (r *outboxReceiver) perMDN() map[[32]byte]int {
	out := map[[32]byte]int{}
	for _, p := range r.snapshot() {
		out[p.body]++
	}
	return out
}

func newOutboxFleet(t *testing.T, delay func(n int) time.Duration) *outboxFleet {
	t.Helper()
	if testing.Short() {
		t.Skip("runs gateways on PostgreSQL")
	}
	f := &outboxFleet{dir: t.TempDir(), storeURL: pgStoreURL(t), recv: newOutboxReceiver(t, delay)}
	mdnURL := f.recv.srv.URL + "/mdn"
	f.partners = filepath.Join(f.dir, "partners")
	if err := os.MkdirAll(f.partners, 0o750); err != nil {
		t.Fatal(err)
	}
	pem, _ := os.ReadFile(demoPath(t, "partners/demo-partner.pem"))
	yml, _ := os.ReadFile(demoPath(t, "partners/demo.yaml"))
	yml = bytes.Replace(yml, []byte("http://127.0.0.1:8078/mdn"), []byte(mdnURL), 1)
	if !bytes.Contains(yml, []byte(mdnURL)) {
		t.Fatal("the demo partner no longer lists http://127.0.0.1:8078/mdn in as2.async_mdn_urls")
	}
	if err := os.WriteFile(filepath.Join(f.partners, "demo-partner.pem"), pem, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.partners, "demo.yaml"), yml, 0o600); err != nil {
		t.Fatal(err)
	}
	partner := readKeyPair(t, demoPath(t, "partners/demo-partner.pem"), demoPath(t, "keys/demo-partner.key"))
	gw := readKeyPair(t, demoPath(t, "keys/gateway.pem"), demoPath(t, "keys/gateway.key"))
	f.client = &as2client.Client{From: "DEMO", To: "GATEWAY", SignCert: partner.Cert, SignKey: partner.Key,
		SignDigest: "sha256", RecipientCerts: []*x509.Certificate{gw.Cert}, Cipher: "aes128-cbc",
		MDN: as2client.MDNAsync, AsyncURL: mdnURL, SignedMDN: true}
	return f
}

// outboxNode is one `gateway serve` process of the fleet.
type outboxNode struct {
	name, addr string
	cmd        *exec.Cmd
	exited     chan struct{}
	exitErr    error
	exitAt     time.Time
}

// start runs a gateway of the fleet; extra is YAML added to its
// configuration (e.g. an outbox: section). Without it the node runs with
// the defaults of outbox.lease and outbox.heartbeat.
func (f *outboxFleet) start(t *testing.T, name, extra string) *outboxNode {
	t.Helper()
	n := &outboxNode{name: name, addr: freePort(t), exited: make(chan struct{})}
	dir := filepath.Join(f.dir, name)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(cfg, gatewayYAML(t, n.addr, f.storeURL, f.partners, "handler:\n  type: table\nshutdown_timeout: 10s\n"+extra), 0o600); err != nil {
		t.Fatal(err)
	}
	n.cmd = startGateway(t, cfg, n.addr)
	go func() {
		n.exitErr = n.cmd.Wait()
		n.exitAt = time.Now()
		close(n.exited)
	}()
	return n
}

// waitExit waits for the node's process to end.
func (n *outboxNode) waitExit(t *testing.T, within time.Duration) {
	t.Helper()
	select {
	case <-n.exited:
	case <-time.After(within):
		t.Fatalf("gateway %s did not exit within %s", n.name, within)
	}
}

// log is the node's log so far.
func (n *outboxNode) log() string {
	names, _ := filepath.Glob(filepath.Join(filepath.Dir(n.cmd.Args[len(n.cmd.Args)-1]), "serve-*.log"))
	var b strings.Builder
	for _, name := range names {
		s, _ := os.ReadFile(name)
		b.Write(s)
	}
	return b.String()
}

// send posts message i to node n and wants 200 (the MDN is queued).
func (f *outboxFleet) send(t *testing.T, n *outboxNode, i int) {
	t.Helper()
	c := *f.client
	c.URL = "http://" + n.addr + "/as2"
	m, err := c.Prepare([]byte(fmt.Sprintf("fleet outbox message %d", i)), "text/plain", fmt.Sprintf("m%d.txt", i))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := c.Send(ctx, m)
	if err != nil || res.Status != http.StatusOK {
		t.Fatalf("send %d to %s: %v %+v", i, n.name, err, res)
	}
}

// states counts the outbox rows by state.
func (f *outboxFleet) states(t *testing.T) map[string]int {
	t.Helper()
	u, err := url.Parse(f.storeURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	schema := q.Get("schema")
	q.Del("schema")
	q.Del("pool_max_conns") // a pool setting: pgx.Connect refuses it
	u.RawQuery = q.Encode()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT state, count(*) FROM `+pgx.Identifier{schema, "outbox_deliveries"}.Sanitize()+` GROUP BY state`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var st string
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			t.Fatal(err)
		}
		out[st] = n
	}
	return out
}

// waitDelivered waits until n rows are delivered.
func (f *outboxFleet) waitDelivered(t *testing.T, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		st := f.states(t)
		if st[string(outbox.Delivered)] == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("outbox rows %v after %s, want %d delivered", st, within, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// exitedCleanly wants the node to have exited 0 (a graceful stop).
func (n *outboxNode) exitedCleanly(t *testing.T) {
	t.Helper()
	if n.exitErr != nil {
		t.Errorf("gateway %s exited with %v after SIGTERM, want 0", n.name, n.exitErr)
	}
}

// TestFleetOutboxSIGTERMLetsMDNInFlightFinish: SIGTERM reaches a gateway
// while its async MDN POST waits for the partner's answer (1.5 s): the
// gateway waits for the answer (shutdown_timeout 10 s), records the MDN
// delivered and exits; the partner gets it exactly once, and the second
// gateway of the fleet does not post it again.
func TestFleetOutboxSIGTERMLetsMDNInFlightFinish(t *testing.T) {
	f := newOutboxFleet(t, func(int) time.Duration { return 1500 * time.Millisecond })
	a := f.start(t, "a", "")
	f.send(t, a, 1)
	f.recv.waitPosts(t, 1, 20*time.Second)
	f.start(t, "b", "")
	termAt := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	a.waitExit(t, 30*time.Second)
	a.exitedCleanly(t)
	posts := f.recv.snapshot()
	t.Logf("gateway a exited %s after SIGTERM, %s after the partner answered the MDN POST in flight",
		a.exitAt.Sub(termAt).Round(time.Millisecond), a.exitAt.Sub(posts[0].answered).Round(time.Millisecond))
	if posts[0].answered.IsZero() || a.exitAt.Before(posts[0].answered) {
		t.Errorf("gateway a exited at %s, before the partner answered its MDN POST (%s)",
			a.exitAt.Format(time.StampMilli), posts[0].answered.Format(time.StampMilli))
	}
	f.waitDelivered(t, 1, 5*time.Second)
	// Longer than b's poll interval: a row left pending or handed back
	// would be posted again by b now.
	time.Sleep(outbox.DefaultPollInterval + 2*time.Second)
	if n := len(f.recv.snapshot()); n != 1 {
		t.Errorf("the partner got the MDN %d times, want exactly once", n)
	}
	if st := f.states(t); st[string(outbox.Delivered)] != 1 || len(st) != 1 {
		t.Errorf("outbox rows %v, want 1 delivered", st)
	}
	if !strings.Contains(a.log(), `"msg":"outbox: delivered"`) {
		t.Errorf("gateway a did not log the delivery it finished while stopping:\n%s", a.log())
	}
}

// TestFleetOutboxStopHandsBackLeasedMDNs: a gateway stopping with async
// MDNs it leased but has not started posting hands them back: another
// gateway posts them at once, not after the lease; the ones in flight
// finish; every MDN reaches the partner exactly once.
func TestFleetOutboxStopHandsBackLeasedMDNs(t *testing.T) {
	const total = 8
	f := newOutboxFleet(t, func(int) time.Duration { return 3 * time.Second })
	a := f.start(t, "a", "")
	// The first MDN keeps a's dispatcher busy while the other seven are
	// queued; then a leases those seven in one batch and posts four at a
	// time (outbox.DefaultConcurrency).
	f.send(t, a, 0)
	f.recv.waitPosts(t, 1, 20*time.Second)
	for i := 1; i < total; i++ {
		f.send(t, a, i)
	}
	f.recv.waitPosts(t, 1+outbox.DefaultConcurrency, 20*time.Second)
	termAt := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	f.start(t, "b", "")
	a.waitExit(t, 30*time.Second)
	a.exitedCleanly(t)
	handedBack := total - 1 - outbox.DefaultConcurrency
	if got := strings.Count(a.log(), `"msg":"outbox: stopping; delivery handed back"`); got != handedBack {
		t.Errorf("gateway a handed %d deliveries back, want %d", got, handedBack)
	}
	f.waitDelivered(t, total, 15*time.Second)
	posts := f.recv.snapshot()
	for _, p := range posts[1+outbox.DefaultConcurrency:] {
		after := p.at.Sub(termAt)
		t.Logf("a handed-back MDN was posted by gateway b %s after SIGTERM to gateway a (a exited after %s)",
			after.Round(time.Millisecond), a.exitAt.Sub(termAt).Round(time.Millisecond))
		if after > config.DefaultOutboxLease/2 {
			t.Errorf("a handed-back MDN was posted %s after gateway a was stopped: it waited for the lease", after.Round(time.Millisecond))
		}
	}
	per := f.recv.perMDN()
	if len(per) != total {
		t.Errorf("the partner got %d distinct MDNs, want %d", len(per), total)
	}
	for _, n := range per {
		if n != 1 {
			t.Errorf("an MDN was posted %d times, want once (posts %d)", n, len(posts))
		}
	}
}

// TestFleetOutboxSIGKILLAnotherNodePostsWithinDefaultLease: a gateway is
// killed while its async MDN POST waits for the partner (which never
// answers it); with the default outbox.lease (30 s) the other gateway
// posts the MDN within the lease plus one poll interval, and with
// outbox.lease: 4s within that. The partner gets it twice: the first POST
// may have been processed (documented at-least-once after a kill).
func TestFleetOutboxSIGKILLAnotherNodePostsWithinDefaultLease(t *testing.T) {
	for _, c := range []struct {
		name, extra string
		lease       time.Duration
	}{
		{"default", "", config.DefaultOutboxLease},
		{"lease-4s", "outbox:\n  lease: 4s\n", 4 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newOutboxFleet(t, func(n int) time.Duration {
				if n == 1 {
					return -1 // never answered: the poster is killed
				}
				return 0
			})
			a := f.start(t, "a", c.extra)
			f.send(t, a, 1)
			f.recv.waitPosts(t, 1, 20*time.Second)
			f.start(t, "b", c.extra)
			killed := time.Now()
			if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			a.waitExit(t, 10*time.Second)
			bound := c.lease + outbox.DefaultPollInterval + 3*time.Second
			f.recv.waitPosts(t, 2, bound)
			took := f.recv.snapshot()[1].at.Sub(killed)
			t.Logf("the killed gateway's MDN was posted by the other gateway %s after the kill (outbox.lease %s)",
				took.Round(time.Millisecond), c.lease)
			f.waitDelivered(t, 1, 5*time.Second)
			if n := len(f.recv.snapshot()); n != 2 {
				t.Errorf("the partner got %d POSTs, want 2 (the killed gateway's and b's)", n)
			}
		})
	}
}
