package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/internal/metrics"
	"github.com/edigateway/gateway/outbound"
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
