package metrics

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/outbound"
)

// scrape returns the /metrics text.
func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}

func TestOutboundMetricsInTheScrape(t *testing.T) {
	m := New("test")
	m.SetPartners([]string{"acme", "beta"})
	now := time.Now()
	var stats []outbound.Stats
	var statsErr error
	m.WatchOutbound(func() ([]outbound.Stats, error) { return stats, statsErr })
	stats = []outbound.Stats{
		{Partner: "acme", Protocol: outbound.AS2, Queued: 3, OldestQueued: now.Add(-90 * time.Second), Awaiting: 2, Delivered: 7},
		{Partner: "acme", Protocol: outbound.AS4, Queued: 0, Awaiting: 1},
		// Two partners since removed from the directory: one series.
		{Partner: "gone1", Protocol: outbound.AS2, Queued: 1, OldestQueued: now.Add(-1000 * time.Second)},
		{Partner: "gone2", Protocol: outbound.AS2, Queued: 2, OldestQueued: now.Add(-10 * time.Second), Awaiting: 4},
	}
	m.Attempt("acme", outbound.AS2, "retry", 2*time.Second)
	m.Attempt("acme", outbound.AS2, "retry", time.Second)
	m.Attempt("acme", outbound.AS2, "gave-up", time.Second)
	m.Attempt("beta", outbound.AS4, "delivered", time.Second)
	m.Attempt("<evil>", outbound.AS4, "something new", time.Second)
	m.OutboundFinal("acme", outbound.AS2, outbound.Failed)
	m.OutboundFinal("beta", outbound.AS4, outbound.Delivered)
	m.OutboundFinal("beta", outbound.AS4, outbound.Cancelled)
	m.OutboundFinal("beta", outbound.AS4, outbound.Queued) // not final: not counted
	out := scrape(t, m)
	for _, want := range []string{
		`gateway_outbound_queued{partner="acme",protocol="as2"} 3`,
		`gateway_outbound_queued{partner="acme",protocol="as4"} 0`,
		`gateway_outbound_queued{partner="unknown",protocol="as2"} 3`,
		`gateway_outbound_awaiting_mdn{partner="acme",protocol="as2"} 2`,
		`gateway_outbound_awaiting_mdn{partner="acme",protocol="as4"} 1`,
		`gateway_outbound_awaiting_mdn{partner="unknown",protocol="as2"} 4`,
		`gateway_outbound_oldest_queued_seconds{partner="acme",protocol="as4"} 0`,
		`gateway_outbound_attempts_total{outcome="retry",partner="acme",protocol="as2"} 2`,
		`gateway_outbound_attempts_total{outcome="gave_up",partner="acme",protocol="as2"} 1`,
		`gateway_outbound_attempts_total{outcome="delivered",partner="beta",protocol="as4"} 1`,
		`gateway_outbound_attempts_total{outcome="other",partner="unknown",protocol="as4"} 1`,
		`gateway_outbound_attempt_duration_seconds_count{protocol="as2"} 3`,
		`gateway_outbound_final_total{partner="acme",protocol="as2",state="failed"} 1`,
		`gateway_outbound_final_total{partner="beta",protocol="as4",state="delivered"} 1`,
		`gateway_outbound_final_total{partner="beta",protocol="as4",state="cancelled"} 1`,
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("scrape lacks %s", want)
		}
	}
	if strings.Contains(out, `state="queued"`) || strings.Contains(out, "evil") {
		t.Error("a state that is not final or a partner not in the directory became a label")
	}
	for series, want := range map[string][2]float64{
		`gateway_outbound_oldest_queued_seconds{partner="acme",protocol="as2"} `:    {89, 120},
		`gateway_outbound_oldest_queued_seconds{partner="unknown",protocol="as2"} `: {999, 1030},
	} {
		var v float64
		i := strings.Index(out, series)
		if i < 0 {
			t.Errorf("no %s", series)
			continue
		}
		if _, err := fmt.Sscan(out[i+len(series):], &v); err != nil || v < want[0] || v > want[1] {
			t.Errorf("%s= %v (%v), want %v..%v", series, v, err, want[0], want[1])
		}
	}
	if !strings.Contains(out, `gateway_scrape_source_up{source="outbound"} 1`) {
		t.Errorf("no source up:\n%s", out)
	}
	// A failing read leaves the outbound figures out and says so; the rest
	// of the scrape is served (200) and the error logged.
	var logged bytes.Buffer
	m.SetLogger(slog.New(slog.NewJSONHandler(&logged, nil)))
	statsErr = errors.New("database down")
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	out = rec.Body.String()
	if rec.Code != 200 || strings.Contains(out, "gateway_outbound_queued{") || !strings.Contains(out, `gateway_scrape_source_up{source="outbound"} 0`) ||
		!strings.Contains(out, "gateway_outbound_final_total{") || !strings.Contains(out, "go_goroutines") {
		t.Errorf("scrape with a failing read: %d\n%s", rec.Code, out)
	}
	if !strings.Contains(logged.String(), "database down") {
		t.Errorf("the read error was not logged: %q", logged.String())
	}
}

// TestOutboxReadFailureLeavesTheRestOfTheScrape: the async MDN outbox's
// figures too; both sources' failures at once still serve the rest.
func TestOutboxReadFailureLeavesTheRestOfTheScrape(t *testing.T) {
	m := New("test")
	m.SetLogger(slog.New(slog.NewJSONHandler(io.Discard, nil)))
	var err error
	m.WatchOutbox(func() (int, time.Time, error) { return 2, time.Now().Add(-time.Minute), err })
	m.WatchOutbound(func() ([]outbound.Stats, error) { return nil, err })
	if out := scrape(t, m); !strings.Contains(out, "gateway_mdn_outbox_depth 2") || !strings.Contains(out, `gateway_scrape_source_up{source="mdn_outbox"} 1`) {
		t.Fatalf("scrape:\n%s", out)
	}
	err = errors.New("store down")
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	out := rec.Body.String()
	if rec.Code != 200 || strings.Contains(out, "gateway_mdn_outbox_depth") || !strings.Contains(out, `gateway_scrape_source_up{source="mdn_outbox"} 0`) ||
		!strings.Contains(out, `gateway_scrape_source_up{source="outbound"} 0`) || !strings.Contains(out, "gateway_messages_total") && !strings.Contains(out, "go_goroutines") {
		t.Fatalf("scrape with both reads failing: %d\n%s", rec.Code, out)
	}
}

func TestAttemptOutcomeIsBounded(t *testing.T) {
	for in, want := range map[string]string{"delivered": "delivered", "Gave-Up": "gave_up", "gave_up": "gave_up", "awaiting": "awaiting",
		"lease-lost": "lease_lost", "retry": "retry", "refused": "refused", "": OtherOutcome, "<x>": OtherOutcome} {
		if got := AttemptOutcome(in); got != want {
			t.Errorf("AttemptOutcome(%q) = %q, want %q", in, got, want)
		}
	}
}
