package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"log/slog"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/beevik/etree"

	as2client "github.com/edigateway/gateway/as2/client"
	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/server"
)

// servedDemo is the whole demo gateway (server.New, AS2 and AS4) served on a loopback test server
// (SQLite store and inbox in a temporary directory), with a count of
// handler runs and ready AS2 and AS4 senders of the demo partner.
type servedDemo struct {
	s    *server.Server
	url  string
	runs *atomic.Int32
	demo string
	as2  *as2client.Client
}

func newServedDemo(t *testing.T) *servedDemo {
	t.Helper()
	demo := filepath.Dir(demoConfig(t))
	cfg, err := config.Load(demoConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg.Store = "sqlite:" + filepath.Join(dir, "gw.db")
	cfg.Handler.Inbox = filepath.Join(dir, "inbox")
	cfg.Audit.File = ""
	s, err := server.New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	runs := &atomic.Int32{}
	inner := s.Pipeline.Handler
	s.SetHandler(exchange.HandlerFunc(func(ctx context.Context, m *exchange.Message) error {
		runs.Add(1)
		return inner.Handle(ctx, m)
	}))
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	partner := readKeyPair(t, filepath.Join(demo, "partners", "demo-partner.pem"), filepath.Join(demo, "keys", "demo-partner.key"))
	gw := readKeyPair(t, filepath.Join(demo, "keys", "gateway.pem"), filepath.Join(demo, "keys", "gateway.key"))
	c := &as2client.Client{URL: srv.URL + "/as2", From: "DEMO", To: "GATEWAY", SignCert: partner.Cert, SignKey: partner.Key,
		SignDigest: "sha256", RecipientCerts: []*x509.Certificate{gw.Cert}, Cipher: "aes128-cbc", MDN: as2client.MDNSync, SignedMDN: true}
	return &servedDemo{s: s, url: srv.URL, runs: runs, demo: demo, as2: c}
}

// sendAS4 runs `gateway send-as4` with the demo partner's keys: payload as
// one attachment of type mime under eb:MessageId id, extra flags added. It
// returns the exit code, the output and the answer's bytes.
func (g *servedDemo) sendAS4(t *testing.T, id, mime string, payload []byte, extra ...string) (int, string, []byte) {
	t.Helper()
	dir := t.TempDir()
	file, answer := filepath.Join(dir, "payload.bin"), filepath.Join(dir, "answer.xml")
	if err := os.WriteFile(file, payload, 0o600); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"send-as4", "-url", g.url + "/as4",
		"-key", filepath.Join(g.demo, "keys", "demo-partner.key"), "-cert", filepath.Join(g.demo, "partners", "demo-partner.pem"),
		"-receipt-cert", filepath.Join(g.demo, "keys", "gateway.pem"), "-encrypt-cert", filepath.Join(g.demo, "keys", "gateway.pem"),
		"-from", "urn:demo:partner", "-from-type", "urn:oasis:names:tc:ebcore:partyid-type:unregistered",
		"-to", "urn:demo:gateway", "-to-type", "urn:oasis:names:tc:ebcore:partyid-type:unregistered",
		"-service", "urn:demo:invoicing", "-action", "Deliver", "-message-id", id, "-mime", mime, "-save-receipt", answer, "-quiet"},
		extra...)
	var out, errb bytes.Buffer
	code := run(append(args, file), &out, &errb)
	body, _ := os.ReadFile(answer)
	return code, out.String() + errb.String(), body
}

// decisions lists the dedup decisions audited for a message id.
func (g *servedDemo) decisions(t *testing.T, id string) []string {
	t.Helper()
	recs, err := g.s.Backend.AuditSink().(audit.Reader).Query(context.Background(), audit.Query{MessageID: id})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range recs {
		if r.Step == audit.StepDecision {
			out = append(out, r.Decision)
		}
	}
	return out
}

// randomAfterLT is '<' followed by 10,000 random bytes, as the load test's
// random application/octet-stream payloads are one time in 256.
func randomAfterLT(seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 0x3c))
	b := make([]byte, 10_001)
	b[0] = '<'
	for i := 1; i < len(b); i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestRandomBinaryStartingWithLTIsOpaque: an application/octet-stream
// payload of '<' and 10,000 random bytes is an opaque payload on AS2 and
// AS4 (transport dedup only): it is processed (MDN processed, signed
// receipt), its retransmission is a duplicate, and the handler runs once per
// protocol. It was refused for good as a damaged business envelope
// ("malformed XML before the root element"), retransmissions too.
func TestRandomBinaryStartingWithLTIsOpaque(t *testing.T) {
	g := newServedDemo(t)

	msg, err := g.as2.Prepare(randomAfterLT(1), "application/octet-stream", "blob.bin")
	if err != nil {
		t.Fatal(err)
	}
	for i, wantWarning := range []bool{false, true} {
		res, err := g.as2.Send(context.Background(), msg)
		if err != nil || !res.OK() || res.MDN.Disposition.IsWarning() != wantWarning {
			t.Fatalf("AS2 send %d: %v %+v", i+1, err, res)
		}
	}
	if got := strings.Join(g.decisions(t, strings.Trim(msg.ID, "<>")), " "); got != "new duplicate" {
		t.Errorf("AS2 decisions %q, want \"new duplicate\"", got)
	}

	code, out, _ := g.sendAS4(t, "as4-random-lt@demo", "application/octet-stream", randomAfterLT(2), "-repeat", "2")
	if code != 0 || strings.Count(out, "signature valid") != 2 {
		t.Fatalf("AS4 send exit %d:\n%s", code, out)
	}
	if got := strings.Join(g.decisions(t, "as4-random-lt@demo"), " "); got != "new duplicate" {
		t.Errorf("AS4 decisions %q, want \"new duplicate\"", got)
	}
	if n := g.runs.Load(); n != 2 {
		t.Errorf("handler ran %d times, want 2 (once per protocol)", n)
	}
}

// goPackagePrefix matches the prefix of a Go error of our packages or of
// the standard library ("envelope: ", "xml: ") and the lower-case standard
// labels of envelope's error text ("edifact: "), none of which a partner
// is told.
var goPackagePrefix = regexp.MustCompile(`\b(envelope|exchange|as2|as4|endpoint|dedup|xml|mime|multipart|io|edifact|x12|ubl|sbdh|peppol-sbdh): `)

// TestDamagedEnvelopeSameReasonOnAS2AndAS4: a damaged EDIFACT interchange
// and an XML document (declared by its XML declaration, sent as
// application/octet-stream) that breaks in its root start tag are refused
// on both protocols with the same reason, which names the damage: in the
// AS2 MDN's text, and in the AS4 error's eb:Description (it was EBMS:0004's
// generic "Another error occurred.") and eb:ErrorDetail; no Go package
// prefix; the handler does not run.
func TestDamagedEnvelopeSameReasonOnAS2AndAS4(t *testing.T) {
	g := newServedDemo(t)
	for i, tc := range []struct {
		name, mime, payload, reason string
	}{
		{"EDIFACT UNZ reference differs", "application/edifact",
			"UNA:+.? 'UNB+UNOA:2+DEMO:14+GATEWAY:14+261130:1200+XCLS1'UNH+1+INVOIC:D:96A:UN'BGM+380+INV-9+9'UNT+3+1'UNZ+1+XCLS2'",
			`its business envelope is damaged: payload 1: EDIFACT: UNZ 0020 "XCLS2" does not match UNB 0020 "XCLS1"`},
		{"XML declaration then a broken root start tag", "application/octet-stream",
			"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Invoice xmlns=\"urn:oasis:names:specification:ubl:schema:xsd:Invoice-2\" \x01>",
			"its business envelope is damaged: payload 1: XML: malformed XML before the root element (line 2)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg, err := g.as2.Prepare([]byte(tc.payload), tc.mime, "doc")
			if err != nil {
				t.Fatal(err)
			}
			res, err := g.as2.Send(context.Background(), msg)
			if err != nil || res.MDN == nil || !res.MDN.Disposition.IsError() {
				t.Fatalf("AS2: %v %+v", err, res)
			}
			mdnText := strings.Join(strings.Fields(res.MDN.MDN.Report.HumanText), " ")

			code, out, answer := g.sendAS4(t, "as4-damaged-"+string(rune('a'+i))+"@demo", tc.mime, []byte(tc.payload))
			if code == 0 {
				t.Fatalf("AS4 accepted:\n%s", out)
			}
			doc := etree.NewDocument()
			if err := doc.ReadFromBytes(answer); err != nil {
				t.Fatalf("AS4 answer: %v\n%s", err, answer)
			}
			ebErr := doc.FindElement("//Error")
			if ebErr == nil || ebErr.SelectAttrValue("errorCode", "") != "EBMS:0004" {
				t.Fatalf("AS4 answer is no EBMS:0004:\n%s", answer)
			}
			desc, detail := "", ""
			if d := ebErr.FindElement("Description"); d != nil {
				desc = d.Text()
			}
			if d := ebErr.FindElement("ErrorDetail"); d != nil {
				detail = d.Text()
			}

			for what, text := range map[string]string{"AS2 MDN text": mdnText, "AS4 eb:Description": desc, "AS4 eb:ErrorDetail": detail} {
				if !strings.Contains(text, tc.reason) {
					t.Errorf("%s lacks %q:\n%s", what, tc.reason, text)
				}
				if p := goPackagePrefix.FindString(text); p != "" {
					t.Errorf("%s carries the Go package prefix %q:\n%s", what, p, text)
				}
			}
			if strings.Contains(desc, "Another error occurred") {
				t.Errorf("AS4 eb:Description is the generic one: %s", desc)
			}
		})
	}
	if n := g.runs.Load(); n != 0 {
		t.Errorf("handler ran %d times", n)
	}
}
