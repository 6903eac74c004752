package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edigateway/gateway/internal/pgtest"
	"github.com/edigateway/gateway/outbox"
)

// serveBoth runs s on two loopback listeners and returns their base URLs.
func serveBoth(t *testing.T, s *Server) (partner, admin string) {
	t.Helper()
	pln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	aln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.ServeListeners(ctx, pln, aln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return "http://" + pln.Addr().String(), "http://" + aln.Addr().String()
}

func get(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestAdminEndpointsOnlyOnAdminListener(t *testing.T) {
	cfg := demoConfig(t)
	s, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	partner, admin := serveBoth(t, s)
	for _, p := range []string{"/healthz", "/readyz", "/metrics", "/debug/vars", "/debug/pprof/"} {
		if code, _ := get(t, partner+p, ""); code != http.StatusNotFound {
			t.Errorf("partner listener %s: %d, want 404", p, code)
		}
	}
	if code, body := get(t, admin+"/healthz", ""); code != 200 || body != "ok\n" {
		t.Errorf("admin /healthz: %d %q", code, body)
	}
	code, body := get(t, admin+"/readyz", "")
	var rd readiness
	if err := json.Unmarshal([]byte(body), &rd); err != nil || code != 200 || !rd.Ready ||
		rd.Checks["store"] != "ok" || rd.Checks["audit"] != "ok" || rd.Checks["partners"] != "ok" {
		t.Errorf("admin /readyz: %d %s", code, body)
	}
	if code, body := get(t, admin+"/metrics", ""); code != 200 || !strings.Contains(body, "gateway_build_info{") {
		t.Errorf("admin /metrics: %d %.200s", code, body)
	}
	if code, _ := get(t, admin+"/debug/pprof/", ""); code != http.StatusNotFound {
		t.Errorf("pprof without admin.pprof: %d", code)
	}
	// The protocol endpoints are still there.
	if code, _ := get(t, partner+"/as2", ""); code == http.StatusNotFound {
		t.Error("/as2 missing on the partner listener")
	}
}

func TestAdminTokenAndPprof(t *testing.T) {
	cfg := demoConfig(t)
	cfg.Admin.Token = "0123456789abcdef-token"
	cfg.Admin.Pprof = true
	s, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, admin := serveBoth(t, s)
	for _, tok := range []string{"", "wrong", "0123456789abcdef-toke", "0123456789abcdef-tokenX"} {
		if code, _ := get(t, admin+"/metrics", tok); code != http.StatusUnauthorized {
			t.Errorf("token %q: %d, want 401", tok, code)
		}
	}
	for _, p := range []string{"/metrics", "/healthz", "/readyz", "/debug/pprof/"} {
		if code, _ := get(t, admin+p, cfg.Admin.Token); code != 200 {
			t.Errorf("%s with the token: %d", p, code)
		}
	}
}

func TestReadyzNamesFailingAuditAndPartners(t *testing.T) {
	cfg := demoConfig(t)
	s, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, admin := serveBoth(t, s)
	// The audit file was removed under the running gateway: records would
	// go to an unlinked file.
	if err := os.Remove(cfg.Audit.File); err != nil {
		t.Fatal(err)
	}
	code, body := get(t, admin+"/readyz", "")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, `"audit":"error:`) || !strings.Contains(body, `"store":"ok"`) {
		t.Errorf("/readyz without the audit file: %d %s", code, body)
	}
	s.AddReadyCheck("reload", func(context.Context) error { return io.ErrUnexpectedEOF })
	if _, body := get(t, admin+"/readyz", ""); !strings.Contains(body, `"reload":"error: unexpected EOF"`) {
		t.Errorf("added check not shown: %s", body)
	}

	cfg2 := demoConfig(t)
	cfg2.Partners = t.TempDir()
	s2, err := New(context.Background(), cfg2, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	_, admin2 := serveBoth(t, s2)
	if code, body := get(t, admin2+"/readyz", ""); code != http.StatusServiceUnavailable || !strings.Contains(body, "no partners loaded") {
		t.Errorf("/readyz without partners: %d %s", code, body)
	}
}

// proxy forwards loopback TCP connections to target until stopped; Stop
// also cuts the connections it carries, as a database going away does.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

func startProxy(t *testing.T, addr, target string) *proxy {
	t.Helper()
	var ln net.Listener
	var err error
	for i := 0; i < 50; i++ { // the port of a stopped proxy may take a moment to free
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { io.Copy(u, c); u.Close() }()
			go func() { io.Copy(c, u); c.Close() }()
		}
	}()
	return p
}

func (p *proxy) Stop() {
	p.ln.Close()
	p.wg.Wait()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
}

// TestReadyzFollowsPostgreSQL reaches PostgreSQL through a proxy: /readyz
// is 200, turns 503 naming the store within the timeout when the database
// goes away, and 200 again when it is back; /healthz stays 200 throughout.
func TestReadyzFollowsPostgreSQL(t *testing.T) {
	dsn, schema := pgtest.Schema(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	p := startProxy(t, "127.0.0.1:0", target)
	addr := p.ln.Addr().String()
	u.Host = addr
	q := u.Query()
	q.Set("schema", schema)
	u.RawQuery = q.Encode()

	cfg := demoConfig(t)
	cfg.Store = u.String()
	cfg.Admin.ReadyTimeout = 500 * time.Millisecond
	s, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, admin := serveBoth(t, s)
	if code, body := get(t, admin+"/readyz", ""); code != 200 {
		t.Fatalf("/readyz with the database up: %d %s", code, body)
	}

	p.Stop()
	start := time.Now()
	code, body := get(t, admin+"/readyz", "")
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("/readyz took %s with the database down (timeout 500ms)", took)
	}
	if code != http.StatusServiceUnavailable || !strings.Contains(body, `"store":"error:`) || !strings.Contains(body, `"ready":false`) {
		t.Fatalf("/readyz with the database down: %d %s", code, body)
	}
	if code, _ := get(t, admin+"/healthz", ""); code != 200 {
		t.Errorf("/healthz with the database down: %d", code)
	}

	p = startProxy(t, addr, target)
	defer p.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body = get(t, admin+"/readyz", "")
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz did not recover: %d %s", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// outboxGauges reads the outbox gauges from the server's registry.
func outboxGauges(t *testing.T, s *Server) (depth, age float64) {
	t.Helper()
	mfs, err := s.Metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	depth, age = -1, -1
	for _, mf := range mfs {
		switch mf.GetName() {
		case "gateway_mdn_outbox_depth":
			depth = mf.GetMetric()[0].GetGauge().GetValue()
		case "gateway_mdn_outbox_oldest_age_seconds":
			age = mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return depth, age
}

func testOutboxGauges(t *testing.T, s *Server) {
	t.Helper()
	if d, a := outboxGauges(t, s); d != 0 || a != 0 {
		t.Fatalf("empty outbox: depth %v age %v", d, a)
	}
	ob := s.Backend.Outbox()
	for i, id := range []string{"d1", "d2"} {
		if err := ob.Enqueue(context.Background(), outbox.Delivery{ID: id, URL: "http://127.0.0.1:1/mdn", Body: []byte("x"),
			Created: time.Now().Add(-time.Duration(i+1) * time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := ob.Delivered(context.Background(), "d1", ""); err != nil {
		t.Fatal(err)
	}
	if d, a := outboxGauges(t, s); d != 1 || a < 2*3600-60 || a > 2*3600+60 {
		t.Fatalf("one pending delivery two hours old: depth %v age %v", d, a)
	}
}

func TestOutboxGaugesSQLite(t *testing.T) {
	s, err := New(context.Background(), demoConfig(t), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	testOutboxGauges(t, s)
}

func TestOutboxGaugesPostgreSQL(t *testing.T) {
	dsn, schema := pgtest.Schema(t)
	cfg := demoConfig(t)
	cfg.Store = dsn + "&schema=" + schema
	s, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	testOutboxGauges(t, s)
}

// TestStartupLogNamesListeners checks the "gateway listening" line: both
// addresses, the endpoints, the admin authentication and the partner count.
func TestStartupLogNamesListeners(t *testing.T) {
	cfg := demoConfig(t)
	var logs syncBuffer
	s, err := New(context.Background(), cfg, slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	partner, admin := serveBoth(t, s)
	var line map[string]any
	for i := 0; line == nil; i++ {
		if i > 200 {
			t.Fatalf("no start-up line: %s", logs.String())
		}
		for _, l := range strings.Split(logs.String(), "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(l), &rec) == nil && rec["msg"] == "gateway listening" {
				line = rec
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if line["addr"] != strings.TrimPrefix(partner, "http://") || line["admin"] != strings.TrimPrefix(admin, "http://") ||
		line["partners"] != float64(1) || line["admin_auth"] != "none (loopback)" {
		t.Errorf("start-up line: %v", line)
	}
	eps, _ := line["endpoints"].([]any)
	if len(eps) != 2 || eps[0] != "as2 /as2" || eps[1] != "as4 /as4" {
		t.Errorf("endpoints: %v", line["endpoints"])
	}
}

// TestReloadMetricsAndReadiness: a broken partner file counts a failed
// reload and shows on /readyz without making the gateway unready; the
// next good reload counts a success and a partner it added becomes a
// label value.
func TestReloadMetricsAndReadiness(t *testing.T) {
	f := newReloadFixture(t)
	s := f.srv
	readyz := func() (int, readiness) {
		rec := httptest.NewRecorder()
		s.AdminHandler().ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1/readyz", nil))
		var rd readiness
		if err := json.Unmarshal(rec.Body.Bytes(), &rd); err != nil {
			t.Fatalf("/readyz: %v %s", err, rec.Body.String())
		}
		return rec.Code, rd
	}
	reloads := func(result string) float64 {
		return testutil.ToFloat64(s.Metrics.ConfigReloads().WithLabelValues(result))
	}
	if s.Metrics.Partner("new") != "unknown" {
		t.Fatal("a partner not configured yet is a label value")
	}
	f.replace(filepath.Join(f.pdir, "broken.yaml"), "id: broken\nas2:\n  colour: red\n")
	if st := f.next("broken file"); st.OK {
		t.Fatalf("broken file reloaded: %s", st)
	}
	if reloads("failure") != 1 || reloads("success") != 0 {
		t.Errorf("after the broken file: failure %v success %v", reloads("failure"), reloads("success"))
	}
	code, rd := readyz()
	if code != 200 || !rd.Ready || !strings.Contains(rd.Reload, "reload failed") || !strings.Contains(rd.Reload, "broken.yaml") {
		t.Errorf("/readyz after a failed reload: %d %+v", code, rd)
	}
	os.Remove(filepath.Join(f.pdir, "broken.yaml"))
	f.writePartner("new", false)
	if st := f.next("new partner"); !st.OK {
		t.Fatalf("reload with the new partner: %s", st)
	}
	if reloads("success") != 1 {
		t.Errorf("after the good reload: success %v", reloads("success"))
	}
	if s.Metrics.Partner("new") != "new" {
		t.Error("the partner added by the reload is not a label value")
	}
	if _, rd := readyz(); !strings.Contains(rd.Reload, "reload ok") {
		t.Errorf("/readyz after a good reload: %+v", rd)
	}
}

// TestAdminBearerThrottled: wrong bearer tokens on the admin endpoints
// outside the console (/metrics, /healthz, pprof) count into the console's
// login throttle, so a source cannot guess the admin token there at full
// speed (it could, while only the console's login was throttled).
func TestAdminBearerThrottled(t *testing.T) {
	cfg := demoConfig(t)
	cfg.Admin.Token = "0123456789abcdef-token"
	cfg.Admin.Pprof = true
	s, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, admin := serveBoth(t, s)
	from := func(src string) *http.Client {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	}
	do := func(c *http.Client, method, path, token string, body io.Reader) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, admin+path, body)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	attacker, operator := from("127.0.0.3"), from("127.0.0.4")
	// A request without a token is no guess: it never counts.
	for range 10 {
		if resp := do(attacker, "GET", "/metrics", "", nil); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("no token: %d, want 401", resp.StatusCode)
		}
	}
	paths := []string{"/metrics", "/healthz", "/readyz", "/debug/pprof/", "/metrics"}
	for i, p := range paths {
		if resp := do(attacker, "GET", p, fmt.Sprintf("guess-%d", i), nil); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("wrong token %d on %s: %d, want 401", i, p, resp.StatusCode)
		}
	}
	resp := do(attacker, "GET", "/healthz", "guess-6", nil)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("6th wrong token: %d Retry-After %q, want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	// Blocked means not compared: the right token from that source waits too,
	// and so does the console's login form (one throttle for the listener).
	if resp := do(attacker, "GET", "/metrics", cfg.Admin.Token, nil); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("right token from the blocked source: %d, want 429", resp.StatusCode)
	}
	if resp := do(attacker, "POST", "/console/login", "", strings.NewReader("token="+cfg.Admin.Token)); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("console login from the blocked source: %d, want 429", resp.StatusCode)
	}
	// Another source is not affected.
	if resp := do(operator, "GET", "/metrics", cfg.Admin.Token, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("operator from another source: %d, want 200", resp.StatusCode)
	}
}
