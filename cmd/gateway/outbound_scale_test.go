package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/store"
	"github.com/edigateway/gateway/store/pgstore"
	"github.com/edigateway/gateway/store/sqlitestore"
)

// The queue at scale: scaleWaiting messages wait for a partner that is
// down, scaleAPI of them submitted through the submission API (and tried
// once: 503, retried in an hour), the rest written into the store in bulk.
const (
	scaleWaiting = 100_000
	scaleAPI     = 3_000
	scaleFew     = 100
	// scaleRSSBound: how much more the gateway may hold resident with
	// scaleWaiting messages waiting than with scaleFew (nothing loads the
	// queue into memory: the metrics, the console and the Sender read
	// aggregates, pages and due messages).
	scaleRSSBound = 64 << 20
)

// TestOutboundQueueAtScale: with 100,000 messages waiting for a partner
// that answers 503, the real gateway still delivers a new message for a
// partner that is up (its time from submit to delivered is printed for
// 100 and for 100,000 waiting), the Sender's lease query walks the due
// index (SQLite's and PostgreSQL's plans), /metrics and the console's
// outbound pages answer (timings printed) with the right figures, and the
// gateway's resident memory does not grow with the queue (within
// scaleRSSBound).
func TestOutboundQueueAtScale(t *testing.T) {
	if testing.Short() {
		t.Skip("queues 100,000 messages in a real gateway")
	}
	t.Run("sqlite", func(t *testing.T) {
		runQueueAtScale(t, "sqlite:"+filepath.Join(t.TempDir(), "gw.db"))
	})
	t.Run("postgres", func(t *testing.T) {
		runQueueAtScale(t, pgStoreURL(t))
	})
}

// scaleGateway is a gateway under test (identity DEMO) with partner "gw"
// (up: the served demo gateway) and partner "down" (answers 503; first
// retry after an hour).
type scaleGateway struct {
	admin, token string
	pid          int
	backend      store.Backend
	downHits     *atomic.Int64
}

// scaleFigures are one stage's measurements.
type scaleFigures struct {
	deliver []time.Duration
	metrics time.Duration
	console map[string]time.Duration
	// rss after the measures, peak the highest during them (bytes).
	rss, peak, queued int64
}

func runQueueAtScale(t *testing.T, storeURL string) {
	g := startScaleGateway(t, storeURL)
	// Warm up (connections, the first MDN) and queue the few.
	g.deliver(t)
	g.submitDown(t, 0, scaleFew)
	g.waitDownTried(t, scaleFew)
	few := g.measure(t, scaleFew)

	start := time.Now()
	g.submitDown(t, scaleFew, scaleAPI)
	api := time.Since(start)
	g.waitDownTried(t, scaleAPI)
	tried := time.Since(start)
	start = time.Now()
	g.fill(t, scaleWaiting-scaleAPI)
	t.Logf("queued %d through the API in %v (8 clients), all tried once (503) after %v; %d written in bulk in %v",
		scaleAPI-scaleFew, api.Round(time.Millisecond), tried.Round(time.Millisecond), scaleWaiting-scaleAPI,
		time.Since(start).Round(time.Millisecond))
	plan := g.leasePlan(t)
	many := g.measure(t, scaleWaiting)

	for _, f := range []struct {
		n int
		f scaleFigures
	}{{scaleFew, few}, {scaleWaiting, many}} {
		t.Logf("%6d waiting: submit→delivered %v; /metrics %v; console %v; RSS %.1f MiB after the measures, %.1f MiB at their peak",
			f.n, f.f.deliver, f.f.metrics, f.f.console, float64(f.f.rss)/(1<<20), float64(f.f.peak)/(1<<20))
	}
	t.Logf("lease plan with %d waiting:\n%s", scaleWaiting, plan)
	if !leasePlanOK(plan) {
		t.Errorf("the Sender's lease query does not walk the due index:\n%s", plan)
	}
	if few.queued != scaleFew || many.queued != scaleWaiting {
		t.Errorf("gateway_outbound_queued for down: %d and %d, want %d and %d", few.queued, many.queued, scaleFew, scaleWaiting)
	}
	if few.rss > 0 {
		if grown := many.peak - few.rss; grown > scaleRSSBound {
			t.Errorf("resident memory at its peak grew by %.1f MiB with the queue (%d → %d waiting), bound %d MiB",
				float64(grown)/(1<<20), scaleFew, scaleWaiting, scaleRSSBound>>20)
		}
	}
	if hits := g.downHits.Load(); hits < scaleAPI || hits > scaleAPI+scaleAPI/10 {
		t.Errorf("the down partner was tried %d times for %d submissions: the waiting messages are sent again", hits, scaleAPI)
	}
}

// startScaleGateway starts the gateway binary on storeURL and opens the
// same store in the test, for the bulk fill and the lease plan.
func startScaleGateway(t *testing.T, storeURL string) *scaleGateway {
	t.Helper()
	fixture := filepath.Dir(demoConfig(t))
	up := newServedDemo(t)
	g := &scaleGateway{downHits: &atomic.Int64{}, token: "scale-test-token-0123456789"}
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.downHits.Add(1)
		io.Copy(io.Discard, r.Body)
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
	}))
	t.Cleanup(down.Close)

	dir := t.TempDir()
	parts := filepath.Join(dir, "partners")
	if err := os.Mkdir(parts, 0o700); err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(filepath.Join(fixture, "keys", "gateway.pem"))
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		"gateway.pem": string(pem),
		"gw.yaml":     "id: gw\nas2:\n  as2_id: GATEWAY\n  certificates: [gateway.pem]\n  send: {url: \"" + up.url + "/as2\"}\n",
		"down.yaml": "id: down\nas2:\n  as2_id: DOWN\n  certificates: [gateway.pem]\n  send:\n    url: \"" + down.URL + "/as2\"\n" +
			"    retry: {first: 1h}\n",
	} {
		if err := os.WriteFile(filepath.Join(parts, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	addr := freePort(t)
	g.admin = freePort(t)
	cfg := filepath.Join(dir, "gateway.yaml")
	yaml := fmt.Sprintf(`listen: %s
store: %q
partners: %s
identity:
  as2_id: DEMO
  party_id: urn:demo:partner
  party_type: urn:oasis:names:tc:ebcore:partyid-type:unregistered
  keys: [{cert: %s, key: %s}]
handler: {type: dir, inbox: %s}
outbound: {workers: 16}
shutdown_timeout: 1s
`, addr, storeURL, parts, filepath.Join(fixture, "partners", "demo-partner.pem"), filepath.Join(fixture, "keys", "demo-partner.key"),
		filepath.Join(dir, "inbox"))
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := startGatewayBinary(t, os.Args[0], cfg, addr, "GATEWAY_ADMIN_LISTEN="+g.admin, "GATEWAY_ADMIN_TOKEN="+g.token)
	g.pid = cmd.Process.Pid
	g.backend, err = store.Open(context.Background(), storeURL, dedup.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.backend.Close() })
	return g
}

// call sends an admin request with the token (safe in any goroutine).
func (g *scaleGateway) call(method, path, key string, body []byte) (int, []byte, error) {
	req, err := http.NewRequest(method, "http://"+g.admin+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+g.token)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// do is call in the test's goroutine.
func (g *scaleGateway) do(t *testing.T, method, path, key string, body []byte) (int, []byte) {
	t.Helper()
	code, b, err := g.call(method, path, key, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return code, b
}

// post queues size random bytes for partner through the API and returns
// the message's id (safe in any goroutine).
func (g *scaleGateway) post(partner, key string, size int) (string, error) {
	payload := make([]byte, size)
	rand.Read(payload)
	code, b, err := g.call(http.MethodPost, "/api/v1/outbound/messages?partner="+partner, key, payload)
	if err != nil {
		return "", fmt.Errorf("submit for %s: %w", partner, err)
	}
	var st struct{ ID string }
	if err := json.Unmarshal(b, &st); code != http.StatusAccepted || err != nil || st.ID == "" {
		return "", fmt.Errorf("submit for %s: %d %s", partner, code, b)
	}
	return st.ID, nil
}

// submit is post in the test's goroutine.
func (g *scaleGateway) submit(t *testing.T, partner, key string, size int) string {
	t.Helper()
	id, err := g.post(partner, key, size)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// submitDown queues messages from..to-1 for the down partner, 8 at a time.
func (g *scaleGateway) submitDown(t *testing.T, from, to int) {
	t.Helper()
	var wg sync.WaitGroup
	next := atomic.Int64{}
	next.Store(int64(from))
	for range 8 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(to) && !t.Failed(); i = next.Add(1) - 1 {
				if _, err := g.post("down", "down-"+strconv.FormatInt(i, 10), 256); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// waitDownTried waits until the down partner was tried n times (every
// message submitted for it is then waiting for its retry in an hour).
func (g *scaleGateway) waitDownTried(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for g.downHits.Load() < int64(n) {
		if time.Now().After(deadline) {
			t.Fatalf("the down partner was tried %d times in 90 s, want %d", g.downHits.Load(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// deliver submits one message for the up partner and returns the time
// until the status API says delivered.
func (g *scaleGateway) deliver(t *testing.T) time.Duration {
	t.Helper()
	start := time.Now()
	id := g.submit(t, "gw", "", 1024)
	for {
		code, b := g.do(t, http.MethodGet, "/api/v1/outbound/messages/"+id, "", nil)
		var st struct{ State, LastError string }
		if err := json.Unmarshal(b, &st); code != http.StatusOK || err != nil {
			t.Fatalf("status of %s: %d %s", id, code, b)
		}
		switch {
		case st.State == "delivered":
			return time.Since(start)
		case st.State == "failed" || st.State == "cancelled" || st.LastError != "":
			t.Fatalf("message %s for the up partner: %s", id, b)
		case time.Since(start) > 30*time.Second:
			t.Fatalf("message %s for the up partner not delivered in 30 s: %s", id, b)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

var downQueuedRE = regexp.MustCompile(`(?m)^gateway_outbound_queued\{partner="down",protocol="as2"\} (\d+)$`)

// measure takes one stage's figures: three deliveries, a /metrics scrape
// and the console's outbound pages (each the best of three), and the
// resident memory (after, and the peak growth during).
func (g *scaleGateway) measure(t *testing.T, waiting int) scaleFigures {
	t.Helper()
	f := scaleFigures{console: map[string]time.Duration{}}
	timed := func(path string) (time.Duration, []byte) {
		var best time.Duration
		var body []byte
		for range 3 {
			start := time.Now()
			code, b := g.do(t, http.MethodGet, path, "", nil)
			if code != http.StatusOK {
				t.Fatalf("%s with %d waiting: %d %.500s", path, waiting, code, b)
			}
			if d := time.Since(start); best == 0 || d < best {
				best, body = d, b
			}
		}
		return best, body
	}
	idle, growth := rssPeak(t, g.pid, func() {
		for range 3 {
			f.deliver = append(f.deliver, g.deliver(t).Round(time.Millisecond))
		}
		var b []byte
		f.metrics, b = timed("/metrics")
		if m := downQueuedRE.FindSubmatch(b); m != nil {
			f.queued, _ = strconv.ParseInt(string(m[1]), 10, 64)
		}
		for _, p := range []string{"/console/", "/console/outbound", "/console/outbound?state=queued",
			"/console/outbound?state=failed", "/console/outbound?state=sending", "/console/outbound?partner=gw"} {
			f.console[p], _ = timed(p)
		}
	})
	f.metrics = f.metrics.Round(100 * time.Microsecond)
	for p, d := range f.console {
		f.console[p] = d.Round(100 * time.Microsecond)
	}
	slices.Sort(f.deliver)
	f.rss = rssOf(g.pid, "VmRSS")
	f.peak = max(idle+growth, f.rss)
	return f
}

// fill writes n waiting messages for the down partner (due in a day,
// tried once) into the store, as many submissions would have, and
// refreshes the planner's statistics.
func (g *scaleGateway) fill(t *testing.T, n int) {
	t.Helper()
	ctx := context.Background()
	switch b := g.backend.(type) {
	case *sqlitestore.Store:
		const now = `CAST(round(unixepoch('subsec') * 1000) AS INTEGER)`
		if _, err := b.DB().ExecContext(ctx, `WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < ?1)
INSERT INTO outbound_messages (id, partner, protocol, message_id, payload, size, sha256, state, attempts, next_attempt,
	created, updated)
SELECT printf('w%08d', i), 'down', 'as2', printf('<w%08d@gw.test>', i), printf('w%08d', i), 0, '', 'queued', 1,
	`+now+` + 86400000, `+now+`, `+now+` FROM g`, n); err != nil {
			t.Fatal(err)
		}
		if _, err := b.DB().ExecContext(ctx, `ANALYZE outbound_messages`); err != nil {
			t.Fatal(err)
		}
	case *pgstore.Store:
		table := pgx.Identifier{b.Schema(), "outbound_messages"}.Sanitize()
		if _, err := b.Pool().Exec(ctx, `INSERT INTO `+table+` (id, partner, protocol, message_id, payload, size,
	sha256, state, attempts, next_attempt, created, updated)
SELECT 'w' || lpad(i::text, 8, '0'), 'down', 'as2', '<w' || i || '@gw.test>', 'w' || i, 0, '', 'queued', 1,
	now() + interval '1 day', now(), now()
FROM generate_series(1, $1::int) AS i`, n); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Pool().Exec(ctx, `ANALYZE `+table); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("store %T: no bulk fill", g.backend)
	}
}

// leasePlan is the store's plan of the Sender's lease query.
func (g *scaleGateway) leasePlan(t *testing.T) string {
	t.Helper()
	var (
		plan string
		err  error
	)
	switch b := g.backend.(type) {
	case *sqlitestore.Store:
		plan, err = b.OutboundQueue().LeaseQueryPlan(context.Background())
	case *pgstore.Store:
		plan, err = b.OutboundQueue().LeaseQueryPlan(context.Background())
	default:
		t.Fatalf("store %T: no lease plan", g.backend)
	}
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

// leasePlanOK: the plan walks outbound_messages_due in order (SQLite's
// SEARCH, PostgreSQL's Index Scan) with no scan of the table and no sort.
func leasePlanOK(plan string) bool {
	sqlite := strings.Contains(plan, "SEARCH outbound_messages USING INDEX outbound_messages_due") &&
		!strings.Contains(plan, "SCAN") && !strings.Contains(plan, "TEMP B-TREE")
	pg := strings.Contains(plan, "Index Scan using outbound_messages_due") && !strings.Contains(plan, "Seq Scan") &&
		!strings.Contains(plan, "Sort")
	return sqlite || pg
}
