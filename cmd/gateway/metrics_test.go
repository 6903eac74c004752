package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	as2client "github.com/edigateway/gateway/as2/client"
	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/server"
)

// liveGateway is a gateway serving both listeners on loopback ports.
type liveGateway struct {
	srv            *server.Server
	cfg            *config.Config
	partner, admin string // base URLs
	demo           string // testdata/fixture
	stop           func()
}

func startLive(t *testing.T, edit func(*config.Config)) *liveGateway {
	t.Helper()
	return startLiveLog(t, edit, nil)
}

// startLiveLog is startLive with the gateway's JSON log written to logw.
func startLiveLog(t *testing.T, edit func(*config.Config), logw io.Writer) *liveGateway {
	t.Helper()
	demo := filepath.Dir(demoConfig(t))
	cfg, err := config.Load(demoConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg.Store = "sqlite:" + filepath.Join(dir, "gw.db")
	cfg.Handler.Inbox = filepath.Join(dir, "inbox")
	cfg.Audit.File = filepath.Join(dir, "audit.jsonl")
	cfg.QuarantineDir = filepath.Join(dir, "quarantine")
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.DrainPeriod = 0
	if edit != nil {
		edit(cfg)
	}
	log := slog.New(slog.DiscardHandler)
	if logw != nil {
		log = slog.New(slog.NewJSONHandler(logw, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	s, err := server.New(context.Background(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
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
	g := &liveGateway{srv: s, cfg: cfg, partner: "http://" + pln.Addr().String(), admin: "http://" + aln.Addr().String(), demo: demo}
	g.stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		s.Close()
	}
	t.Cleanup(func() {
		if g.stop != nil {
			g.stop()
		}
	})
	return g
}

func (g *liveGateway) as2Client(t *testing.T, from string, signKey string) *as2client.Client {
	partner := readKeyPair(t, filepath.Join(g.demo, "partners", "demo-partner.pem"), filepath.Join(g.demo, "keys", "demo-partner.key"))
	gw := readKeyPair(t, filepath.Join(g.demo, "keys", "gateway.pem"), filepath.Join(g.demo, "keys", "gateway.key"))
	c := &as2client.Client{URL: g.partner + "/as2", From: from, To: "GATEWAY", SignCert: partner.Cert, SignKey: partner.Key,
		SignDigest: "sha256", RecipientCerts: []*x509.Certificate{gw.Cert}, Cipher: "aes128-cbc", MDN: as2client.MDNSync, SignedMDN: true}
	if signKey == "gateway" { // signed with a key the partner's certificate does not match
		c.SignCert, c.SignKey = gw.Cert, gw.Key
	}
	return c
}

func postAS2(t *testing.T, c *as2client.Client, m *as2client.Message) *as2client.Result {
	t.Helper()
	res, err := c.Send(context.Background(), m)
	if err != nil {
		t.Fatalf("AS2 send: %v", err)
	}
	return res
}

func (g *liveGateway) sendAS4(t *testing.T, from, messageID string, payload []byte) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "invoice.edi")
	os.WriteFile(file, payload, 0o600)
	var out, errb bytes.Buffer
	run([]string{"send-as4", "-url", g.partner + "/as4",
		"-key", filepath.Join(g.demo, "keys", "demo-partner.key"), "-cert", filepath.Join(g.demo, "partners", "demo-partner.pem"),
		"-receipt-cert", filepath.Join(g.demo, "keys", "gateway.pem"), "-encrypt-cert", filepath.Join(g.demo, "keys", "gateway.pem"),
		"-from", from, "-from-type", "urn:oasis:names:tc:ebcore:partyid-type:unregistered",
		"-to", "urn:demo:gateway", "-to-type", "urn:oasis:names:tc:ebcore:partyid-type:unregistered",
		"-service", "urn:demo:invoicing", "-action", "Deliver", "-message-id", messageID, file}, &out, &errb)
	return out.String() + errb.String()
}

// scrape reads the admin listener's /metrics.
func scrape(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: %d %s", resp.StatusCode, b)
	}
	return string(b)
}

// metricValue finds the sample of name whose labels include want.
func metricValue(body, name string, want map[string]string) (float64, bool) {
	for _, line := range strings.Split(body, "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		labels := map[string]string{}
		if strings.HasPrefix(rest, "{") {
			end := strings.LastIndex(rest, "}")
			for _, kv := range splitLabels(rest[1:end]) {
				k, v, _ := strings.Cut(kv, "=")
				labels[k], _ = strconv.Unquote(v)
			}
			rest = rest[end+1:]
		}
		match := true
		for k, v := range want {
			match = match && labels[k] == v
		}
		if match {
			f, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return f, err == nil
		}
	}
	return 0, false
}

func splitLabels(s string) []string {
	var out []string
	inQuote, start := false, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			inQuote = !inQuote
		case ',':
			if !inQuote {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// TestMetricsAfterMixedTraffic sends real AS2 and AS4 traffic (processed,
// duplicate, drift, rejected) to the partner listener and scrapes the
// admin listener's /metrics.
func TestMetricsAfterMixedTraffic(t *testing.T) {
	g := startLive(t, nil)
	edi := func(ref string) []byte {
		return []byte("UNA:+.? 'UNB+UNOA:2+DEMO:14+GATEWAY:14+261130:1200+" + ref + "'UNH+1+INVOIC:D:96A:UN'BGM+380+INV-77+9'UNT+3+1'UNZ+1+" + ref + "'")
	}

	// AS2: processed, duplicate, drift, rejected (unknown partner, bad signature).
	c := g.as2Client(t, "DEMO", "")
	m1, err := c.Prepare(edi("M1"), "application/edifact", "a.edi")
	if err != nil {
		t.Fatal(err)
	}
	if res := postAS2(t, c, m1); !res.OK() || res.MDN.Disposition.IsWarning() {
		t.Fatalf("AS2 first: %+v", res)
	}
	if res := postAS2(t, c, m1); !res.OK() {
		t.Fatalf("AS2 duplicate: %+v", res)
	}
	m2, _ := c.Prepare(edi("M2"), "application/edifact", "a.edi")
	m2.ID = m1.ID
	m2.Header.Set("Message-Id", m1.ID)
	if res := postAS2(t, c, m2); res.OK() {
		t.Fatalf("AS2 drift accepted: %+v", res)
	}
	stranger := g.as2Client(t, "NOBODY", "")
	m3, _ := stranger.Prepare(edi("M3"), "application/edifact", "a.edi")
	postAS2(t, stranger, m3)
	forger := g.as2Client(t, "DEMO", "gateway")
	m4, _ := forger.Prepare(edi("M4"), "application/edifact", "a.edi")
	if res := postAS2(t, forger, m4); res.OK() {
		t.Fatalf("AS2 forged signature accepted: %+v", res)
	}

	// AS4: processed, duplicate, drift, rejected (unknown party).
	if out := g.sendAS4(t, "urn:demo:partner", "m-1@demo", edi("A1")); !strings.Contains(out, "signature valid") {
		t.Fatalf("AS4 first: %s", out)
	}
	g.sendAS4(t, "urn:demo:partner", "m-1@demo", edi("A1"))
	g.sendAS4(t, "urn:demo:partner", "m-1@demo", edi("A2"))
	g.sendAS4(t, "urn:demo:stranger", "m-2@demo", edi("A3"))

	body := scrape(t, g.admin)
	for _, c := range []struct {
		protocol, partner, outcome, reason string
		want                               float64
	}{
		{"as2", "demo", "processed", "", 1},
		{"as2", "demo", "duplicate", "", 1},
		{"as2", "demo", "drift", "", 1},
		{"as2", "unknown", "rejected", "unknown-trading-partner", 1},
		{"as2", "demo", "rejected", "authentication-failed", 1},
		{"as4", "demo", "processed", "", 1},
		{"as4", "demo", "duplicate", "", 1},
		{"as4", "demo", "drift", "", 1},
		{"as4", "unknown", "rejected", "EBMS:0010", 1},
	} {
		got, ok := metricValue(body, "gateway_messages_total", map[string]string{"protocol": c.protocol, "partner": c.partner, "outcome": c.outcome, "reason": c.reason})
		if !ok || got != c.want {
			t.Errorf("gateway_messages_total{%s,%s,%s,%s} = %v (found %v), want %v", c.protocol, c.partner, c.outcome, c.reason, got, ok, c.want)
		}
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		min    float64
	}{
		{"gateway_request_duration_seconds_count", map[string]string{"protocol": "as2", "code": "200"}, 4},
		{"gateway_request_duration_seconds_count", map[string]string{"protocol": "as4", "code": "200"}, 2},
		{"gateway_handler_duration_seconds_count", map[string]string{"protocol": "as2", "result": "ok"}, 1},
		{"gateway_handler_duration_seconds_count", map[string]string{"protocol": "as4", "result": "ok"}, 1},
		{"gateway_received_bytes_total", map[string]string{"protocol": "as2"}, 1000},
		{"gateway_received_bytes_total", map[string]string{"protocol": "as4"}, 1000},
		{"gateway_store_operation_duration_seconds_count", map[string]string{"op": "claim"}, 6},
		{"gateway_store_operation_duration_seconds_count", map[string]string{"op": "accept"}, 2},
		{"gateway_store_operation_duration_seconds_count", map[string]string{"op": "claim_interchange"}, 2},
		{"gateway_certificate_expiry_seconds", map[string]string{"partner": "demo", "kind": "as2"}, 86400},
		{"gateway_certificate_expiry_seconds", map[string]string{"partner": "demo", "kind": "as4"}, 86400},
		{"gateway_certificate_expiry_seconds", map[string]string{"partner": "self", "kind": "identity"}, 86400},
		{"gateway_build_info", map[string]string{"version": server.Version}, 1},
		{"gateway_mdn_outbox_depth", nil, 0},
		{"gateway_config_reloads_total", map[string]string{"result": "failure"}, 0},
	} {
		got, ok := metricValue(body, c.name, c.labels)
		if !ok || got < c.min {
			t.Errorf("%s%v = %v (found %v), want >= %v", c.name, c.labels, got, ok, c.min)
		}
	}
	if v, ok := metricValue(body, "gateway_exchanges_in_flight", map[string]string{"protocol": "as2"}); !ok || v != 0 {
		t.Errorf("gateway_exchanges_in_flight{as2} = %v %v after the traffic", v, ok)
	}
	if strings.Contains(body, "stranger") || strings.Contains(body, "NOBODY") {
		t.Error("a partner name from request bytes became a label value")
	}
	if testing.Verbose() {
		for _, line := range strings.Split(body, "\n") {
			if strings.HasPrefix(line, "gateway_") && !strings.Contains(line, "_bucket{") {
				fmt.Println(line)
			}
		}
	}
}
