package server

import (
	"context"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"testing"
	"time"

	as2client "github.com/edigateway/gateway/as2/client"
	"github.com/edigateway/gateway/as4/client"
)

// drainConns records, per response, whether it came on a reused
// (keep-alive) connection and whether it closed its connection.
type drainConns struct {
	rt   http.RoundTripper
	mu   sync.Mutex
	last struct{ reused, closed bool }
}

func (d *drainConns) RoundTrip(r *http.Request) (*http.Response, error) {
	var reused bool
	r = r.WithContext(httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused },
	}))
	resp, err := d.rt.RoundTrip(r)
	if err == nil {
		d.mu.Lock()
		d.last.reused, d.last.closed = reused, resp.Close
		d.mu.Unlock()
	}
	return resp, err
}

func (d *drainConns) lastExchange() (reused, closed bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.last.reused, d.last.closed
}

// drainReadyz is the /readyz status and body.
func drainReadyz(t *testing.T, admin string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(admin + "/readyz")
	if err != nil {
		t.Fatalf("/readyz: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestStopDrainsBeforeClosingConnections: when serve is told to stop
// (SIGTERM), /readyz answers 503 "draining" at once while /healthz stays
// 200, and the partner listener keeps serving for drain_period: an AS2
// message sent on a keep-alive connection opened before the stop is
// answered on that connection, an AS4 message on a new connection is
// answered too, and both replies, like that of an exchange already running
// when the stop came, close their connection. After the period the
// listener refuses connections and serve returns. Before the drain,
// /readyz turned 503 at the moment the listener and the idle keep-alive
// connections closed, so a request sent then got no answer.
func TestStopDrainsBeforeClosingConnections(t *testing.T) {
	cfg := demoConfig(t)
	cfg.DrainPeriod = 1500 * time.Millisecond
	var logs syncBuffer
	s, err := New(context.Background(), cfg, slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	release := make(chan struct{})
	s.mux.HandleFunc("POST /slow", func(w http.ResponseWriter, r *http.Request) {
		<-release
		io.WriteString(w, "done")
	})
	pln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	aln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	partner, admin := "http://"+pln.Addr().String(), "http://"+aln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.ServeListeners(ctx, pln, aln) }()

	conns := &drainConns{rt: &http.Transport{MaxIdleConnsPerHost: 1}}
	hc := &http.Client{Transport: conns, Timeout: 30 * time.Second}
	partnerKeys, gw := demoAS2KeyPairs(t)
	as2c := &as2client.Client{URL: partner + "/as2", From: "DEMO", To: "GATEWAY", SignCert: partnerKeys.Cert, SignKey: partnerKeys.Key,
		SignDigest: "sha256", RecipientCerts: []*x509.Certificate{gw.Cert}, Cipher: "aes128-cbc", MDN: as2client.MDNSync, HTTP: hc}
	sendAS2 := func(body string) {
		t.Helper()
		m, err := as2c.Prepare([]byte(body), "text/plain", "drain.txt")
		if err != nil {
			t.Fatal(err)
		}
		res, err := as2c.Send(context.Background(), m)
		if err != nil {
			t.Fatalf("AS2 %q: no answer: %v", body, err)
		}
		if res.Status != http.StatusOK || !res.OK() || res.MDN.Disposition.IsWarning() {
			t.Fatalf("AS2 %q: HTTP %d %v", body, res.Status, res.Problems)
		}
	}
	as4c, _ := demoAS4Sender(t)
	as4c.HTTP = hc
	sendAS4 := func(id string) {
		t.Helper()
		m := demoAS4Message(id, nil)
		m.Payloads = []client.Payload{{MimeType: "text/plain", Data: []byte("drain " + id)}}
		_, resp, err := as4c.Send(context.Background(), partner+"/as4", m)
		if err != nil || resp.Receipt == nil {
			t.Fatalf("AS4 %s: %v", id, err)
		}
	}

	// Serving: keep-alive as usual.
	sendAS2("before the stop")
	if _, closed := conns.lastExchange(); closed {
		t.Fatal("a reply before the stop closed its connection")
	}
	sendAS4("before@drain.test")
	if reused, closed := conns.lastExchange(); !reused || closed {
		t.Fatalf("AS4 before the stop: reused %v, closed %v; want the keep-alive connection, kept open", reused, closed)
	}
	if code, body := drainReadyz(t, admin); code != http.StatusOK {
		t.Fatalf("/readyz before the stop: %d %s", code, body)
	}
	// An exchange running when the stop comes.
	slow := make(chan *http.Response, 1)
	go func() {
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Post(partner+"/slow", "text/plain", strings.NewReader("x"))
		if err != nil {
			t.Errorf("the exchange running at the stop got no answer: %v", err)
			close(slow)
			return
		}
		resp.Body.Close()
		slow <- resp
	}()
	time.Sleep(100 * time.Millisecond)

	stopped := time.Now()
	cancel()
	for {
		code, body := drainReadyz(t, admin)
		if code == http.StatusServiceUnavailable {
			if !strings.Contains(body, "draining") {
				t.Errorf("/readyz while draining: %s, want the phase draining", body)
			}
			break
		}
		if time.Since(stopped) > time.Second {
			t.Fatalf("/readyz still %d %s 1 s after the stop", code, body)
		}
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(stopped)
	t.Logf("/readyz 503 %s after the stop", took.Round(time.Millisecond))
	if took > 100*time.Millisecond {
		t.Errorf("/readyz turned 503 %s after the stop, want at once", took)
	}
	if code, _ := get(t, admin+"/healthz", ""); code != http.StatusOK {
		t.Errorf("/healthz while draining: %d, want 200 (the process is alive)", code)
	}

	// Draining: still served, each reply closing its connection.
	sendAS2("during the drain")
	if reused, closed := conns.lastExchange(); !reused || !closed {
		t.Errorf("AS2 during the drain: reused %v, closed %v; want the keep-alive connection opened before the stop, closed after the reply", reused, closed)
	}
	sendAS4("during@drain.test")
	if reused, closed := conns.lastExchange(); reused || !closed {
		t.Errorf("AS4 during the drain: reused %v, closed %v; want a new connection, closed after the reply", reused, closed)
	}
	close(release)
	if resp := <-slow; resp != nil && !resp.Close {
		t.Error("the exchange running when the stop came kept its connection open")
	}
	select {
	case err := <-done:
		t.Fatalf("serve returned %s after the stop, within the drain period (%v)", time.Since(stopped), err)
	default:
	}

	// After the period: no new connections; serve returns.
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop after the drain period")
	}
	if d := time.Since(stopped); d < cfg.DrainPeriod {
		t.Errorf("serve returned %s after the stop, before the drain period (%s) was over", d, cfg.DrainPeriod)
	}
	if c, err := net.DialTimeout("tcp", pln.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Error("the partner listener still accepts connections after the drain")
	}
	l := logs.String()
	for _, phase := range []string{`"msg":"stop: draining`, `"msg":"stop: drain period over; no longer accepting connections"`,
		`"msg":"shutting down; waiting for in-flight exchanges"`} {
		if !strings.Contains(l, phase) {
			t.Errorf("no %s in the log:\n%s", phase, l)
		}
	}
}

// TestSkipDrainEndsTheDrain: a second stop signal (SkipDrain) ends a long
// drain period at once; with drain_period 0 there is none.
func TestSkipDrainEndsTheDrain(t *testing.T) {
	for _, tc := range []struct {
		name   string
		period time.Duration
		skip   bool
	}{{"skipped", time.Minute, true}, {"no drain", 0, false}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := demoConfig(t)
			cfg.DrainPeriod = tc.period
			s, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			pln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- s.ServeListeners(ctx, pln, nil) }()
			if _, err := http.Get("http://" + pln.Addr().String() + "/as2"); err != nil {
				t.Fatal(err)
			}
			cancel()
			if tc.skip {
				for !s.Draining() {
					time.Sleep(time.Millisecond)
				}
				time.Sleep(50 * time.Millisecond)
				s.SkipDrain()
				s.SkipDrain() // a third signal changes nothing
			}
			select {
			case err := <-done:
				if err != nil && !errors.Is(err, http.ErrServerClosed) {
					t.Fatalf("serve: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("serve still draining 5 s after the stop")
			}
		})
	}
}
