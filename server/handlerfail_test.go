package server

import (
	"context"
	"crypto/x509"
	"errors"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	as2client "github.com/edigateway/gateway/as2/client"
	"github.com/edigateway/gateway/exchange"
)

// TestAS2HandlerFailureIs503AndCounted: through the whole server, a message
// the business handler fails on is answered HTTP 503 with Retry-After (no
// negative MDN, which senders take as final), counted as
// outcome="handler_failed" (not rejected), logged once with its incident
// and without the payload; the partner's retransmission is then processed
// and counted as such.
func TestAS2HandlerFailureIs503AndCounted(t *testing.T) {
	cfg := demoConfig(t)
	logs := &syncBuffer{}
	s, err := New(context.Background(), cfg, slog.New(slog.NewJSONHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var calls atomic.Int32
	s.SetHandler(exchange.HandlerFunc(func(context.Context, *exchange.Message) error {
		if calls.Add(1) == 1 {
			return errors.New("disk full")
		}
		return nil
	}))
	partnerURL, admin := serveBoth(t, s)

	partner, gw := demoAS2KeyPairs(t)
	c := &as2client.Client{URL: partnerURL + "/as2", From: "DEMO", To: "GATEWAY", SignCert: partner.Cert,
		SignKey: partner.Key, SignDigest: "sha256", RecipientCerts: []*x509.Certificate{gw.Cert}, Cipher: "aes128-cbc",
		MDN: as2client.MDNSync, SignedMDN: true, MDNCerts: []*x509.Certificate{gw.Cert}}
	msg, err := c.Prepare([]byte("PAYLOAD-MARKER-503"), "text/plain", "order.txt")
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Send(context.Background(), msg)
	if err != nil || r.Status != http.StatusServiceUnavailable || r.RetryAfter != 60*time.Second || r.MDN != nil {
		t.Fatalf("handler failure: %v %+v, want HTTP 503 with Retry-After 60 and no MDN", err, r)
	}
	incident := regexp.MustCompile(`GW-[0-9A-Z]{6}`).FindString(strings.Join(r.Problems, " "))
	if incident == "" {
		t.Fatalf("no incident in %q", r.Problems)
	}
	waitMetric(t, admin, `outcome="handler_failed"`, 1)
	var lines []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, incident) {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || strings.Contains(lines[0], "PAYLOAD-MARKER") || !strings.Contains(lines[0], "disk full") {
		t.Errorf("log lines with the incident %s: %q, want one with the error and without the payload", incident, lines)
	}

	r, err = c.Send(context.Background(), msg)
	if err != nil || !r.OK() || r.MDN == nil || r.MDN.Disposition.IsWarning() {
		t.Fatalf("retransmission: %v %+v, want a positive MDN", err, r)
	}
	waitMetric(t, admin, `outcome="processed"`, 1)
	_, body := get(t, admin+"/metrics", "")
	if strings.Contains(body, `outcome="rejected"`) {
		t.Errorf("a handler failure counted as rejected:\n%s", grepLines(body, "gateway_messages_total"))
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("handler ran %d times, want 2", n)
	}
}

// waitMetric waits up to 5s for the as2 partner demo's
// gateway_messages_total line with the label (outcome="…") to read want.
func waitMetric(t *testing.T, admin, label string, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, body := get(t, admin+"/metrics", "")
		for _, l := range strings.Split(body, "\n") {
			if strings.HasPrefix(l, "gateway_messages_total{") && strings.Contains(l, `protocol="as2"`) &&
				strings.Contains(l, `partner="demo"`) && strings.Contains(l, label) && strings.HasSuffix(l, " "+strconv.Itoa(want)) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway_messages_total{%s} is not %d:\n%s", label, want, grepLines(body, "gateway_messages_total"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func grepLines(body, prefix string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
