package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/internal/metrics"
	"github.com/edigateway/gateway/outbound"
	"github.com/edigateway/gateway/outbound/outboundtest"
	"github.com/edigateway/gateway/store"
)

// TestOutboundFinalCountedOnce: every way a message ends (the Sender's
// Delivered and Failed, an asynchronous MDN's Settle, an operator's Cancel)
// counts once in gateway_outbound_final_total, a duplicate MDN or a second
// cancel not at all; the queue's figures are read at scrape.
func TestOutboundFinalCountedOnce(t *testing.T) {
	ctx := context.Background()
	m := metrics.New("test")
	m.SetPartners([]string{"acme"})
	ob := countedOutbound{Store: outbound.NewMemory(), m: m}
	m.WatchOutbound(func() ([]outbound.Stats, error) { return ob.Stats(ctx) })
	for i := 1; i <= 5; i++ {
		id := fmt.Sprintf("m%d", i)
		if _, _, err := ob.Submit(ctx, outbound.Message{ID: id, Partner: "acme", Protocol: outbound.AS2, MessageID: "<" + id + "@gw>"},
			strings.NewReader("UNB+"+id+"'")); err != nil {
			t.Fatal(err)
		}
	}
	leased, err := ob.Lease(ctx, 4, time.Minute)
	if err != nil || len(leased) != 4 {
		t.Fatalf("lease: %d %v", len(leased), err)
	}
	tok := map[string]string{}
	for _, l := range leased {
		tok[l.ID] = l.LeaseToken
	}
	var ids []string
	for id := range tok {
		ids = append(ids, id)
	}
	ev := &outbound.Evidence{Kind: "mdn", Disposition: "processed", Received: time.Now()}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(ob.Delivered(ctx, ids[0], tok[ids[0]], ev))
	must(ob.Failed(ctx, ids[1], tok[ids[1]], "negative MDN", ev))
	must(ob.Awaiting(ctx, ids[2], tok[ids[2]], time.Now().Add(time.Hour)))
	a, _ := ob.Get(ctx, ids[2])
	for range 2 { // the second MDN is a duplicate
		if _, _, err := ob.Settle(ctx, "acme", a.MessageID, true, "", ev); err != nil {
			t.Fatal(err)
		}
	}
	must(ob.Cancel(ctx, ids[3], "operator"))
	if err := ob.Cancel(ctx, ids[3], "again"); !errors.Is(err, outbound.ErrFinal) {
		t.Fatalf("second cancel: %v", err)
	}
	if err := ob.Delivered(ctx, ids[0], tok[ids[0]], ev); err == nil {
		t.Fatal("a second outcome under a released lease was taken")
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b, _ := io.ReadAll(rec.Body)
	out := string(b)
	for _, want := range []string{
		`gateway_outbound_final_total{partner="acme",protocol="as2",state="delivered"} 2`,
		`gateway_outbound_final_total{partner="acme",protocol="as2",state="failed"} 1`,
		`gateway_outbound_final_total{partner="acme",protocol="as2",state="cancelled"} 1`,
		`gateway_outbound_queued{partner="acme",protocol="as2"} 1`,
		`gateway_outbound_awaiting_mdn{partner="acme",protocol="as2"} 0`,
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("scrape lacks %s", want)
		}
	}
}

// withOutbound is a store with an outbound queue (until store.Backend
// has one).
type withOutbound struct {
	store.Backend
	ob outbound.Store
}

func (w withOutbound) Outbound() outbound.Store { return w.ob }

// ClaimRecord keeps the store's dedup.ClaimReader (the console's replies).
func (w withOutbound) ClaimRecord(ctx context.Context, key dedup.Key) (dedup.ClaimRecord, error) {
	return w.Backend.(dedup.ClaimReader).ClaimRecord(ctx, key)
}

// TestOutboundWiredIntoConsoleAndMetrics: the store's outbound queue
// gets the console's Outbound page (whose actions wake the Sender and
// count in the metrics) and the queue's figures on /metrics.
func TestOutboundWiredIntoConsoleAndMetrics(t *testing.T) {
	ctx := context.Background()
	s, err := New(ctx, demoConfig(t), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	admin := httptest.NewServer(s.AdminHandler())
	get := func(u string) (int, string) {
		resp, err := http.Get(admin.URL + u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	admin.Close()

	// Every store has an outbound queue (store.Backend.Outbound); the
	// console and /metrics read the server's, counted.
	mem := s.Backend.Outbound()
	woken := 0
	s.wakeSender = func() { woken++ }
	admin = httptest.NewServer(s.AdminHandler())
	defer admin.Close()
	if _, _, err := mem.Submit(ctx, outbound.Message{ID: "o1", Partner: "demo", Protocol: outbound.AS2, MessageID: "<o1@gw>"}, strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	if code, b := get("/console/outbound"); code != 200 || !strings.Contains(b, "/console/outbound/message?id=o1") {
		t.Fatalf("outbound page: %d %.1000s", code, b)
	}
	if _, b := get("/metrics"); !strings.Contains(b, `gateway_outbound_queued{partner="demo",protocol="as2"} 1`) {
		t.Errorf("/metrics lacks the queued message:\n%s", b)
	}
	// Cancel from the console (loopback, no token: a session cookie).
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	resp, err := c.Get(admin.URL + "/console/outbound/message?id=o1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(string(b))
	if m == nil {
		t.Fatalf("no CSRF token: %.1000s", b)
	}
	resp, err = c.PostForm(admin.URL+"/console/outbound/cancel", url.Values{"id": {"o1"}, "csrf": {m[1]}, "reason": {"test"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if o, _ := mem.Get(ctx, "o1"); o.State != outbound.Cancelled || woken != 1 {
		t.Fatalf("after cancel: %s, woken %d", o.State, woken)
	}
	if _, b := get("/metrics"); !strings.Contains(b, `gateway_outbound_final_total{partner="demo",protocol="as2",state="cancelled"} 1`) {
		t.Errorf("/metrics lacks the cancel:\n%s", b)
	}
}

// TestCountedOutboundKeepsTheContract: the metrics wrapper passes the
// outbound Store conformance kit over the memory store.
func TestCountedOutboundKeepsTheContract(t *testing.T) {
	outboundtest.Exercise(t, func(*testing.T) outbound.Store {
		m := metrics.New("test")
		return countedOutbound{Store: outbound.NewMemory(), m: m}
	})
}
