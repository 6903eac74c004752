package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	as2client "github.com/edigateway/gateway/as2/client"
	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/as4/client"
	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/inbox"
	"github.com/edigateway/gateway/internal/cms"
	"github.com/edigateway/gateway/internal/console"
	"github.com/edigateway/gateway/internal/pgtest"
	"github.com/edigateway/gateway/outbound"
)

// consoleFixture is a real gateway (SQLite, demo partner with on_drift:
// quarantine, admin token) whose handler counts its runs per message id.
type consoleFixture struct {
	s            *Server
	cfg          *config.Config
	partner      string
	admin        string
	as2          *as2client.Client
	mu           sync.Mutex
	runs         map[string]int
	inboxHandler exchange.Handler
	// outbound is the outbound queue the console shows.
	outbound *outbound.Memory
}

const consoleToken = "console-test-token"

func newConsoleFixture(t *testing.T, tune ...func(*config.Config)) *consoleFixture {
	t.Helper()
	return newConsoleFixtureYAML(t, nil, tune...)
}

// newConsoleFixtureYAML is newConsoleFixture with the demo partner file
// edited by editYAML (nil: as it is).
func newConsoleFixtureYAML(t *testing.T, editYAML func([]byte) []byte, tune ...func(*config.Config)) *consoleFixture {
	t.Helper()
	cfg := demoConfig(t)
	_, file, _, _ := runtime.Caller(0)
	demo := filepath.Join(filepath.Dir(file), "..", "testdata", "fixture")
	pdir := t.TempDir()
	yaml, err := os.ReadFile(filepath.Join(demo, "partners", "demo.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	yaml = bytes.Replace(yaml, []byte("on_drift: reject"), []byte("on_drift: quarantine"), 1)
	yaml = []byte(optOutOfEncryption(string(yaml)))
	if editYAML != nil {
		yaml = editYAML(yaml)
	}
	pem, _ := os.ReadFile(filepath.Join(demo, "partners", "demo-partner.pem"))
	os.WriteFile(filepath.Join(pdir, "demo.yaml"), yaml, 0o644)
	os.WriteFile(filepath.Join(pdir, "demo-partner.pem"), pem, 0o644)
	cfg.Partners = pdir
	cfg.QuarantineDir = filepath.Join(t.TempDir(), "quarantine")
	cfg.Admin.Token = consoleToken
	for _, f := range tune {
		f(cfg)
	}
	s, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	f := &consoleFixture{s: s, cfg: cfg, runs: map[string]int{}, inboxHandler: inbox.Dir{Root: cfg.Handler.Inbox}}
	s.SetHandler(exchange.HandlerFunc(func(ctx context.Context, m *exchange.Message) error {
		f.mu.Lock()
		f.runs[m.MessageID]++
		f.mu.Unlock()
		return f.inboxHandler.Handle(ctx, m)
	}))
	// An outbound queue for the console (until store.Backend has one).
	f.outbound = outbound.NewMemory()
	s.Backend = withOutbound{Backend: s.Backend, ob: f.outbound}
	f.partner, f.admin = serveBoth(t, s)
	read := func(p string) []byte {
		b, err := os.ReadFile(filepath.Join(demo, p))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	kp, err := cms.ParseKeyPair(read("partners/demo-partner.pem"), read("keys/demo-partner.key"))
	if err != nil {
		t.Fatal(err)
	}
	gw, err := cms.ParseKeyPair(read("keys/gateway.pem"), read("keys/gateway.key"))
	if err != nil {
		t.Fatal(err)
	}
	f.as2 = &as2client.Client{URL: f.partner + "/as2", From: "DEMO", To: "GATEWAY", SignCert: kp.Cert, SignKey: kp.Key,
		SignDigest: "sha256", RecipientCerts: []*x509.Certificate{gw.Cert}, Cipher: "aes256-cbc", MDN: as2client.MDNSync}
	return f
}

func (f *consoleFixture) runsOf(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.runs[id]
}

func edifact(ref, body string) []byte {
	return []byte(fmt.Sprintf("UNA:+.? 'UNB+UNOA:2+DEMO:14+GATEWAY:14+261130:1200+%s'UNH+1+INVOIC:D:96A:UN'BGM+380+%s+9'UNT+3+1'UNZ+1+%s'", ref, body, ref))
}

// sendAS2 sends payload (under id when given) and returns the message and
// the MDN's disposition.
func (f *consoleFixture) sendAS2(t *testing.T, m *as2client.Message, payload []byte, id string) (*as2client.Message, string) {
	t.Helper()
	if m == nil {
		var err error
		if m, err = f.as2.Prepare(payload, "application/edifact", "invoice.edi"); err != nil {
			t.Fatal(err)
		}
		if id != "" {
			m.ID = "<" + id + ">"
			m.Header.Set("Message-Id", m.ID)
		}
	}
	res, err := f.as2.Send(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	if res.MDN == nil {
		return m, fmt.Sprintf("HTTP %d", res.Status)
	}
	return m, res.MDN.Disposition.String()
}

func (f *consoleFixture) sendAS4(t *testing.T, id string, payload []byte) *client.Outgoing {
	t.Helper()
	out, err := demoAS4Client(t).Build(&client.Message{
		MessageID: id,
		From:      as4.PartyID{Type: "urn:oasis:names:tc:ebcore:partyid-type:unregistered", Value: "urn:demo:partner"},
		To:        as4.PartyID{Type: "urn:oasis:names:tc:ebcore:partyid-type:unregistered", Value: "urn:demo:gateway"},
		Service:   "urn:demo:invoicing", Action: "Deliver",
		Payloads: []client.Payload{{MimeType: "application/edifact", Data: payload}},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.postAS4(t, out)
	return out
}

func (f *consoleFixture) postAS4(t *testing.T, out *client.Outgoing) {
	t.Helper()
	resp, err := http.Post(f.partner+"/as4", out.ContentType, bytes.NewReader(out.Body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "Receipt") {
		t.Fatalf("AS4: HTTP %d %.300q", resp.StatusCode, b)
	}
}

// traffic sends one message of each outcome: processed and duplicate on
// both protocols, two interchange drifts (quarantined) and a damaged
// envelope (rejected).
type consoleTraffic struct {
	ok, dup, q1, q2, rejected string
	q1msg                     *as2client.Message
}

func (f *consoleFixture) traffic(t *testing.T) consoleTraffic {
	t.Helper()
	var tr consoleTraffic
	m, disp := f.sendAS2(t, nil, edifact("REF100", "INV-100"), "ok-100@demo")
	if !strings.HasSuffix(disp, "; processed") {
		t.Fatalf("processed: %s", disp)
	}
	tr.ok = "ok-100@demo"
	if _, disp = f.sendAS2(t, m, nil, ""); !strings.Contains(disp, "duplicate-document") {
		t.Fatalf("duplicate: %s", disp)
	}
	tr.dup = tr.ok
	tr.q1msg, disp = f.sendAS2(t, nil, edifact("REF100", "INV-100-CHANGED"), "drift-101@demo")
	if !strings.Contains(disp, "failed") && !strings.Contains(disp, "error") {
		t.Fatalf("drift: %s", disp)
	}
	tr.q1 = "drift-101@demo"
	f.sendAS2(t, nil, edifact("REF200", "INV-200"), "ok-200@demo")
	f.sendAS2(t, nil, edifact("REF200", "INV-200-CHANGED"), "drift-201@demo")
	tr.q2 = "drift-201@demo"
	bad := []byte("UNA:+.? 'UNB+UNOA:2+DEMO:14+GATEWAY:14+261130:1200+REF300'UNH+1+INVOIC:D:96A:UN'")
	if _, disp = f.sendAS2(t, nil, bad, "bad-300@demo"); !strings.Contains(disp, "error") && !strings.Contains(disp, "failed") {
		t.Fatalf("rejected: %s", disp)
	}
	tr.rejected = "bad-300@demo"
	out := f.sendAS4(t, "as4-400@demo.test", edifact("REF400", "INV-400"))
	f.postAS4(t, out) // duplicate: the stored receipt again
	return tr
}

func findChromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no chromium on PATH (CI=true: .ci/run installs it with apt-get)")
	}
	t.Skip("no chromium on PATH")
	return ""
}

// TestConsoleInBrowser drives the console in headless Chromium against the
// real server after real traffic: log in, dashboard, search, detail,
// release a quarantined payload (the handler runs exactly once; a resend
// is then a duplicate), discard another. With GATEWAY_SCREENSHOTS=1 it
// writes docs/console-*.png.
func TestConsoleInBrowser(t *testing.T) {
	chrome := findChromium(t)
	f := newConsoleFixture(t)
	tr := f.traffic(t)

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chrome),
		chromedp.Flag("headless", true), chromedp.Flag("no-sandbox", true), chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true), chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, 90*time.Second)
	defer cancelT()
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for _, err := range dialogs { // the release and discard confirmations
			if err != nil {
				return
			}
			chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	shots := os.Getenv("GATEWAY_SCREENSHOTS") == "1"
	shot := func(name string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			if !shots {
				return nil
			}
			buf, err := chromedp.FullScreenshot(100)(ctx, tg)
			if err != nil {
				return err
			}
			_, file, _, _ := runtime.Caller(0)
			return os.WriteFile(filepath.Join(filepath.Dir(file), "..", "docs", "console-"+name+".png"), buf, 0o644)
		})
	}
	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			loc, _ := chromedp.Run(ctx, chromedp.Location())
			t.Fatalf("%s: %v (at %s)", what, err, loc)
		}
	}
	// openLink follows the link sel by navigating to its href, which waits
	// for the new page to load: a click returns before the navigation, and
	// an element looked up meanwhile can belong to the page being left
	// ("Could not find node with given id", about once in ten runs on a
	// loaded machine).
	openLink := func(sel string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			a, err := chromedp.AttributeValue(chromedp.CSS(sel), "href")(ctx, tg)
			if err != nil {
				return err
			}
			if !a.Exists {
				return fmt.Errorf("%s has no href", sel)
			}
			href := a.Value
			if strings.HasPrefix(href, "/") {
				href = f.admin + href
			}
			_, err = chromedp.Navigate(href)(ctx, tg)
			return err
		})
	}
	var text string
	textOf := func(sel string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			var err error
			text, err = chromedp.Text(chromedp.CSS(sel))(ctx, tg)
			return err
		})
	}
	// Log in: the console sends a browser without a session to the form.
	run("login",
		chromedp.Navigate(f.admin+"/console/"),
		chromedp.WaitVisible(chromedp.CSS(`input[name=token]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=token]`), consoleToken),
		chromedp.Submit(chromedp.CSS(`input[name=token]`)),
		chromedp.WaitVisible(chromedp.CSS(`svg.chart`)),
		textOf(`main`),
	)
	for _, want := range []string{"Messages per hour", "Drift and rejections needing attention", tr.q1, tr.rejected} {
		if !strings.Contains(text, want) {
			t.Errorf("dashboard lacks %q", want)
		}
	}
	run("dashboard screenshot", shot("dashboard"))

	// Each protocol's panel has its own scale: the busiest hour of AS4 (2
	// messages) fills its panel as the busiest of AS2 (6) fills its own,
	// as drawn by the browser.
	tallest, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]float64](`(() => {
		const cols = {};
		for (const r of document.querySelectorAll("svg.chart rect")) {
			const t = r.querySelector("title");
			if (!t) continue;
			const p = t.textContent.split(" ")[0], x = r.getAttribute("x");
			cols[p] = cols[p] || {};
			cols[p][x] = (cols[p][x] || 0) + r.getBBox().height;
		}
		const out = {};
		for (const p in cols) out[p] = Math.max(...Object.values(cols[p]));
		return out;
	})()`))
	if err != nil {
		t.Fatalf("chart: %v", err)
	}
	for _, p := range []string{"as2", "as4"} {
		if tallest[p] < 140 { // the panel is 150 high
			t.Errorf("the busiest hour of %s is drawn %.0f px high of its 150 px panel (bars per protocol: %v)", p, tallest[p], tallest)
		}
	}

	// The search's From and To are UTC whatever the browser's zone and
	// locale: typed as ISO text in a browser set to UTC+14 and German, they
	// reach the server as typed.
	if _, err := chromedp.Call(ctx, emulation.SetTimezoneOverride, emulation.SetTimezoneOverrideParams{TimezoneID: "Pacific/Kiritimati"}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, emulation.SetLocaleOverride, emulation.SetLocaleOverrideParams{Locale: "de-DE"}); err != nil {
		t.Fatal(err)
	}
	from := time.Now().UTC().Add(-2 * time.Hour).Format("2006-01-02T15:04")
	to := time.Now().UTC().Add(2 * time.Hour).Format("2006-01-02T15:04")
	run("type the times",
		chromedp.Navigate(f.admin+"/console/messages?partner=demo"),
		chromedp.WaitVisible(chromedp.CSS(`input[name=from]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=from]`), from),
		chromedp.SendKeys(chromedp.CSS(`input[name=to]`), to),
	)
	typed, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("input[name=from], input[name=to]")].map(e => e.value)`))
	if err != nil || len(typed) != 2 || typed[0] != from || typed[1] != to {
		t.Fatalf("typed From %s and To %s (UTC), the form holds %q (%v)", from, to, typed, err)
	}
	run("search by time",
		chromedp.Submit(chromedp.CSS(`input[name=from]`)),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`input[name=from][value=%q]`, from))),
		textOf(`main`),
	)
	loc, _ := chromedp.Run(ctx, chromedp.Location())
	if q, _ := url.Parse(loc); q == nil || q.Query().Get("from") != from || q.Query().Get("to") != to {
		t.Errorf("typed From %s and To %s (UTC) were sent as %s", from, to, loc)
	}
	if m := regexp.MustCompile(`(\d+) message\(s\)`).FindStringSubmatch(text); m == nil || m[1] == "0" {
		t.Errorf("search from %s to %s UTC found nothing: %.500s", from, to, text)
	}

	// Search: by message id, then everything of the partner.
	run("search",
		chromedp.Navigate(f.admin+"/console/messages"),
		chromedp.WaitVisible(chromedp.CSS(`input[name=message_id]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=message_id]`), tr.ok),
		chromedp.Submit(chromedp.CSS(`input[name=message_id]`)),
		// the results page, not the empty search form (which lists everything)
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`input[name=message_id][value=%q]`, tr.ok))),
		textOf(`main`),
	)
	if !strings.Contains(text, "2 message(s)") || !strings.Contains(text, "processed") || !strings.Contains(text, "duplicate") {
		t.Errorf("search by message id: %s", text)
	}
	run("search all", chromedp.Navigate(f.admin+"/console/messages?partner=demo"), chromedp.WaitVisible(chromedp.CSS(`table`)),
		textOf(`main`), shot("search"))
	for _, want := range []string{"processed", "duplicate", "quarantined", "rejected", "as4"} {
		if !strings.Contains(text, want) {
			t.Errorf("search of partner demo lacks %q", want)
		}
	}

	// Detail of the processed message: the MDN we sent, the ledger and the payload.
	run("detail",
		chromedp.Navigate(f.admin+"/console/messages?message_id="+tr.ok+"&decision=processed"),
		chromedp.WaitVisible(chromedp.CSS(`a[href^="/console/message?key="]`)),
		chromedp.Click(chromedp.CSS(`a[href^="/console/message?key="]`)),
		chromedp.WaitVisible(chromedp.CSS(`#message-detail`)),
		textOf(`main`),
		shot("detail"),
	)
	for _, want := range []string{"Replies the partner got", "automatic-action/MDN-sent-automatically; processed", "REF100", "Transport ids that carried it",
		"ok-100@demo", "Payload", tr.ok + "_REF100"} {
		if !strings.Contains(text, want) {
			t.Errorf("detail lacks %q", want)
		}
	}

	// Release the first quarantined payload.
	if n := f.runsOf(tr.q1); n != 0 {
		t.Fatalf("handler ran %d times for the quarantined message before the release", n)
	}
	run("release",
		chromedp.Navigate(f.admin+"/console/quarantine"),
		chromedp.WaitVisible(chromedp.CSS(`table`)),
		textOf(`main`),
	)
	if !strings.Contains(text, tr.q1) || !strings.Contains(text, tr.q2) {
		t.Fatalf("quarantine list: %s", text)
	}
	run("open item",
		openLink(fmt.Sprintf(`a[data-message-id=%q]`, tr.q1)),
		chromedp.WaitVisible(chromedp.CSS(`#release`)))
	run("click release",
		chromedp.Click(chromedp.CSS(`#release`)),
		chromedp.WaitVisible(chromedp.CSS(`.flash`)),
		textOf(`.flash`),
	)
	if !strings.Contains(text, "processed by the handler") {
		t.Errorf("release flash: %q", text)
	}
	if n := f.runsOf(tr.q1); n != 1 {
		t.Fatalf("handler ran %d times for the released message, want 1", n)
	}
	// The partner resends the released payload: a duplicate now, not run again.
	if _, disp := f.sendAS2(t, tr.q1msg, nil, ""); !strings.Contains(disp, "processed") || !strings.Contains(disp, "duplicate-document") {
		t.Errorf("resend of the released payload: %s, want a duplicate", disp)
	}
	if n := f.runsOf(tr.q1); n != 1 {
		t.Fatalf("handler ran %d times after the resend, want 1", n)
	}
	run("released item gone", chromedp.Navigate(f.admin+"/console/quarantine"), chromedp.WaitVisible(chromedp.CSS(`table`)), textOf(`main`))
	if strings.Contains(text, tr.q1) {
		t.Errorf("released payload still listed")
	}

	// Discard the second one with a reason.
	run("discard",
		openLink(fmt.Sprintf(`a[data-message-id=%q]`, tr.q2)),
		chromedp.WaitVisible(chromedp.CSS(`#reason`)),
		chromedp.SendKeys(chromedp.CSS(`#reason`), "sent by mistake, confirmed with the partner"),
		chromedp.Click(chromedp.CSS(`#discard`)),
		chromedp.WaitVisible(chromedp.CSS(`.flash`)),
		textOf(`main`),
	)
	if !strings.Contains(text, "Discarded: the payload was moved out of the quarantine") || !strings.Contains(text, "The quarantine is empty") {
		t.Errorf("after discard: %s", text)
	}
	if n := f.runsOf(tr.q2); n != 0 {
		t.Errorf("handler ran %d times for the discarded message", n)
	}
	if m, _ := filepath.Glob(filepath.Join(f.cfg.QuarantineDir, ".discarded", "demo", "*.payload")); len(m) != 1 {
		t.Errorf("discarded files: %v", m)
	}
	// The outbound queue: the nav links to it; cancel a message with a
	// reason on its detail page.
	if _, _, err := f.outbound.Submit(context.Background(), outbound.Message{ID: "ob1", Partner: "demo", Protocol: outbound.AS2,
		MessageID: "<ob1@gateway>", Filename: "order.edi"}, strings.NewReader("UNB+ob1'")); err != nil {
		t.Fatal(err)
	}
	run("outbound", chromedp.Navigate(f.admin+"/console/"), openLink(`#nav-outbound`), chromedp.WaitVisible(chromedp.CSS(`#outbound-list`)),
		textOf(`#outbound-list`))
	if !strings.Contains(text, "<ob1@gateway>") || !strings.Contains(text, "order.edi") {
		t.Errorf("outbound list: %s", text)
	}
	run("outbound cancel",
		openLink(`a[href="/console/outbound/message?id=ob1"]`),
		chromedp.WaitVisible(chromedp.CSS(`#outbound-cancel-reason`)),
		chromedp.SendKeys(chromedp.CSS(`#outbound-cancel-reason`), "wrong partner"),
		chromedp.Click(chromedp.CSS(`#outbound-cancel`)),
		chromedp.WaitVisible(chromedp.CSS(`.flash`)),
		textOf(`main`),
	)
	if !strings.Contains(text, "Cancelled: no further attempt is made") || !strings.Contains(text, "wrong partner") {
		t.Errorf("after the outbound cancel: %s", text)
	}
	if m, _ := f.outbound.Get(context.Background(), "ob1"); m.State != outbound.Cancelled {
		t.Errorf("outbound message after cancel: %s", m.State)
	}
	// The actions are audited with who took them.
	recs, err := f.s.Backend.AuditSink().(audit.Reader).Query(context.Background(), audit.Query{Partner: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	actions := map[string]string{}
	for _, r := range recs {
		if r.Step == audit.StepOperator {
			actions[r.MessageID+" "+r.Decision] = r.Actor
		}
	}
	if actions[tr.q1+" released"] != "admin token" || actions[tr.q2+" discarded"] != "admin token" || actions["ob1@gateway cancelled"] != "admin token" {
		t.Errorf("operator actions audited: %v", actions)
	}
}

// TestReleaseRunsHandlerOnce releases a quarantined payload, puts its files
// back (as after a crash between the accept and the move, or a second
// gateway reading the same quarantine) and releases it again, twice at
// once: the handler ran once, the later releases say so, and a release
// of a payload whose file was changed is refused.
func TestReleaseRunsHandlerOnce(t *testing.T) {
	// An EDI payload (its interchange is claimed in the ledger too) and a
	// payload without a business envelope (only the release key guards it).
	t.Run("edifact", func(t *testing.T) { testReleaseOnce(t, edifact("REF500", "INV-500"), edifact("REF501", "INV-501")) })
	t.Run("plain", func(t *testing.T) { testReleaseOnce(t, []byte("plain one"), []byte("plain two")) })
}

func testReleaseOnce(t *testing.T, first, second []byte) {
	f := newConsoleFixture(t)
	f.sendAS2(t, nil, first, "ok-500@demo")
	// A resend of the id with another payload: drift on the message id.
	f.sendAS2(t, nil, second, "ok-500@demo")
	items, err := console.ListItems(f.cfg.QuarantineDir)
	if err != nil || len(items) != 1 {
		t.Fatalf("quarantine: %v %v", items, err)
	}
	it := items[0]
	saved := map[string][]byte{}
	for _, ext := range []string{".payload", ".json"} {
		p := strings.TrimSuffix(it.Path, ".payload") + ext
		saved[p], _ = os.ReadFile(p)
	}
	res, err := f.s.ReleaseQuarantined(context.Background(), it, "tester")
	if err != nil || !res.HandlerRan {
		t.Fatalf("release: %+v %v", res, err)
	}
	if n := f.runsOf("ok-500@demo"); n != 2 {
		t.Fatalf("handler runs for ok-500@demo: %d, want 2 (the original and the release)", n)
	}
	for p, b := range saved {
		os.WriteFile(p, b, 0o640)
	}
	var wg sync.WaitGroup
	results := make([]console.ReleaseResult, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = f.s.ReleaseQuarantined(context.Background(), it, "tester")
		}()
	}
	wg.Wait()
	for i := range 2 {
		if errs[i] == nil && results[i].HandlerRan {
			t.Errorf("release %d ran the handler again: %+v", i, results[i])
		}
	}
	if n := f.runsOf("ok-500@demo"); n != 2 {
		t.Fatalf("handler runs after repeated releases: %d, want 2", n)
	}
	// The message id now carries the released payload: its resend is a
	// duplicate, not drift.
	m, _ := f.as2.Prepare(second, "application/edifact", "invoice.edi")
	m.ID = "<ok-500@demo>"
	m.Header.Set("Message-Id", m.ID)
	if _, disp := f.sendAS2(t, m, nil, ""); !strings.Contains(disp, "duplicate-document") {
		t.Errorf("resend of the released payload under its id: %s, want duplicate", disp)
	}
	if n := f.runsOf("ok-500@demo"); n != 2 {
		t.Fatalf("handler runs after the resend: %d", n)
	}
	// A file that no longer has the quarantined bytes is not released.
	for p, b := range saved {
		os.WriteFile(p, b, 0o640)
	}
	os.WriteFile(it.Path, []byte("tampered"), 0o640)
	if _, err := f.s.ReleaseQuarantined(context.Background(), it, "tester"); err == nil || !strings.Contains(err.Error(), "SHA-256") {
		t.Errorf("release of a changed file: %v", err)
	}
}

// TestConsoleTablePayloadDownload: with the table handler the detail page
// lists the message's inbox_payloads rows and downloads their bytes.
func TestConsoleTablePayloadDownload(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testTablePayload(t, "") })
	t.Run("postgres", func(t *testing.T) {
		dsn, schema := pgtest.Schema(t)
		testTablePayload(t, dsn+"&schema="+schema)
	})
}

func testTablePayload(t *testing.T, storeURL string) {
	f := newConsoleFixture(t, func(c *config.Config) {
		c.Handler.Type = "table"
		if storeURL != "" {
			c.Store = storeURL
		}
	})
	payload := edifact("REF600", "INV-600")
	f.sendAS2(t, nil, payload, "table-600@demo")
	recs, err := f.s.Backend.AuditSink().(audit.Reader).Query(context.Background(), audit.Query{MessageID: "table-600@demo"})
	if err != nil || len(recs) == 0 {
		t.Fatalf("audit: %v %v", recs, err)
	}
	key := recs[0].Key
	get := func(path string) (int, string) {
		req, _ := http.NewRequest("GET", f.admin+path, nil)
		req.Header.Set("Authorization", "Bearer "+consoleToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, page := get("/console/message?key=" + key)
	link := regexp.MustCompile(`href="(/console/message/payload\?key=[0-9a-f]+&amp;row=[0-9]+)"`).FindStringSubmatch(page)
	if code != 200 || link == nil {
		t.Fatalf("detail: %d, no inbox_payloads link: %.3000s", code, page)
	}
	code, body := get(strings.ReplaceAll(link[1], "&amp;", "&"))
	if code != 200 || body != string(payload) {
		t.Fatalf("table payload download: %d %q", code, body)
	}
	if code, _ := get("/console/message/payload?key=" + key + "&row=999999"); code != http.StatusNotFound {
		t.Errorf("unknown row: %d", code)
	}
	other := strings.Repeat("0", 64)
	if code, _ := get(strings.Replace(strings.ReplaceAll(link[1], "&amp;", "&"), key, other, 1)); code != http.StatusNotFound {
		t.Errorf("row of another message: %d", code)
	}
}

// buildAS4 builds an AS4 message of the demo partner under id with one
// payload per element of payloads.
func (f *consoleFixture) buildAS4(t *testing.T, id string, payloads ...[]byte) *client.Outgoing {
	t.Helper()
	var pls []client.Payload
	for _, p := range payloads {
		pls = append(pls, client.Payload{MimeType: "application/edifact", Data: p})
	}
	out, err := demoAS4Client(t).Build(&client.Message{
		MessageID: id,
		From:      as4.PartyID{Type: "urn:oasis:names:tc:ebcore:partyid-type:unregistered", Value: "urn:demo:partner"},
		To:        as4.PartyID{Type: "urn:oasis:names:tc:ebcore:partyid-type:unregistered", Value: "urn:demo:gateway"},
		Service:   "urn:demo:invoicing", Action: "Deliver",
		Payloads: pls,
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestReleaseAS4 releases AS4 messages quarantined for drift on the
// eb:MessageId: with one payload, and with two, which are quarantined as
// one item and released together as one message (its hash over both
// payloads), so that the partner's resend is a duplicate.
func TestReleaseAS4(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		testReleaseAS4(t, [][]byte{[]byte("as4 plain one")}, [][]byte{[]byte("as4 plain two")})
	})
	t.Run("two-payloads", func(t *testing.T) {
		testReleaseAS4(t, [][]byte{edifact("REF700", "INV-700"), []byte("attachment one")},
			[][]byte{edifact("REF701", "INV-701"), []byte("attachment two")})
	})
}

func testReleaseAS4(t *testing.T, first, second [][]byte) {
	f := newConsoleFixture(t)
	var mu sync.Mutex
	var seen [][]string // per handler run, the payload hashes
	inner := f.inboxHandler
	f.inboxHandler = exchange.HandlerFunc(func(ctx context.Context, m *exchange.Message) error {
		var hs []string
		for _, p := range m.Payloads {
			hs = append(hs, p.SHA256)
		}
		mu.Lock()
		seen = append(seen, hs)
		mu.Unlock()
		return inner.Handle(ctx, m)
	})
	const id = "as4-700@demo.test"
	f.postAS4(t, f.buildAS4(t, id, first...))
	// The same eb:MessageId with other payloads: drift, quarantined.
	out := f.buildAS4(t, id, second...)
	resp, err := http.Post(f.partner+"/as4", out.ContentType, bytes.NewReader(out.Body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(b), "Receipt") {
		t.Fatalf("drift answered with a receipt: %.300q", b)
	}
	items, err := console.ListItems(f.cfg.QuarantineDir)
	if err != nil || len(items) != 1 {
		t.Fatalf("quarantine: %+v %v", items, err)
	}
	it := items[0]
	want := &exchange.Message{}
	for _, p := range second {
		want.Payloads = append(want.Payloads, exchange.Payload{SHA256: sha256Hex(p)})
	}
	if it.PayloadSHA256 != exchange.PayloadSHA256(want) {
		t.Errorf("quarantined item's hash %s, want the message's %s", it.PayloadSHA256, exchange.PayloadSHA256(want))
	}
	if len(it.Payloads) != len(second) {
		t.Fatalf("quarantined payloads: %d, want %d: %+v", len(it.Payloads), len(second), it.Payloads)
	}
	for i, p := range it.Payloads {
		b, err := os.ReadFile(p.Path)
		if err != nil || !bytes.Equal(b, second[i]) || p.SHA256 != sha256Hex(second[i]) {
			t.Errorf("quarantined payload %d: %q %s %v", i, b, p.SHA256, err)
		}
	}
	// The console's item page lists the payloads and downloads each one.
	get := func(path string) (int, string) {
		req, _ := http.NewRequest("GET", f.admin+path, nil)
		req.Header.Set("Authorization", "Bearer "+consoleToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, page := get("/console/quarantine/item?id=" + it.ID); code != 200 || (len(second) > 1) != strings.Contains(page, `id="payload-2"`) {
		t.Errorf("item page: %d %.2000s", code, page)
	}
	for i, p := range second {
		if code, body := get(fmt.Sprintf("/console/quarantine/payload?id=%s&n=%d", it.ID, i+1)); code != 200 || body != string(p) {
			t.Errorf("download of payload %d: %d %q", i+1, code, body)
		}
	}
	if code, _ := get(fmt.Sprintf("/console/quarantine/payload?id=%s&n=%d", it.ID, len(second)+1)); code != http.StatusNotFound {
		t.Errorf("download of a payload the item does not have: %d", code)
	}
	res, err := f.s.ReleaseQuarantined(context.Background(), it, "tester")
	if err != nil || !res.HandlerRan {
		t.Fatalf("release: %+v %v", res, err)
	}
	if n := f.runsOf(id); n != 2 {
		t.Fatalf("handler runs for %s: %d, want 2 (the original and the release)", id, n)
	}
	mu.Lock()
	if len(seen) != 2 || len(seen[1]) != len(second) {
		t.Errorf("handler payloads per run: %v, want the release with %d", seen, len(second))
	}
	mu.Unlock()
	if left, _ := console.ListItems(f.cfg.QuarantineDir); len(left) != 0 {
		t.Errorf("quarantine after release: %+v", left)
	}
	rel, _ := filepath.Glob(filepath.Join(f.cfg.QuarantineDir, ".released", "*", "*.payload"))
	if len(rel) != len(second) {
		t.Errorf("released payload files: %v, want %d", rel, len(second))
	}
	// The partner's resend of the released message is a duplicate: its
	// stored receipt, no handler run.
	f.postAS4(t, out)
	if n := f.runsOf(id); n != 2 {
		t.Fatalf("handler runs after the resend: %d, want 2", n)
	}
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
