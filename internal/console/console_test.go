package console

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/internal/certs"
	"github.com/edigateway/gateway/outbox"
	"github.com/edigateway/gateway/partners"
)

type fixture struct {
	srv      *httptest.Server
	audit    *audit.Memory
	store    *dedup.MemoryStore
	outbox   *outbox.Memory
	qdir     string
	released []string
	key      dedup.Key
	con      *Console
}

func newFixture(t *testing.T, token string) *fixture {
	t.Helper()
	f := &fixture{audit: &audit.Memory{}, store: dedup.NewMemoryStore(dedup.Options{}), outbox: outbox.NewMemory(), qdir: t.TempDir()}
	ctx := context.Background()
	f.key = dedup.TransportKey("as2", "as2", "ACME", "m1@acme")
	d, _ := f.store.Claim(ctx, dedup.ClaimRequest{Key: f.key, PayloadSHA256: strings.Repeat("a", 64)})
	stored, _ := exchange.EncodeReply(exchange.Reply{Status: 200, Header: http.Header{"Content-Type": {"message/disposition-notification"}},
		Body: []byte("Disposition: automatic-action/MDN-sent-automatically; processed\r\n"), Disposition: "processed"})
	if err := f.store.Accept(ctx, f.key, d.Token, stored); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	for i, step := range []struct {
		s        audit.Step
		decision string
		disp     string
	}{{audit.StepReceived, "", ""}, {audit.StepDecision, "new", ""}, {audit.StepHandler, "ok", ""}, {audit.StepReply, "accepted", "processed"}} {
		f.audit.Write(ctx, audit.Record{Time: now.Add(time.Duration(i) * time.Millisecond), Step: step.s, Partner: "acme", Protocol: "as2",
			MessageID: "m1@acme", Key: string(f.key), Decision: step.decision, Disposition: step.disp, Reference: "REF1"})
	}
	// A quarantined payload.
	os.MkdirAll(filepath.Join(f.qdir, "acme"), 0o750)
	os.WriteFile(filepath.Join(f.qdir, "acme", "0123456789abcdef-fedcba9876543210.payload"), []byte("UNB+changed'"), 0o640)
	meta, _ := json.Marshal(map[string]any{"partner": "acme", "protocol": "as2", "message_id": "m2@acme", "what": "message id m2@acme",
		"payload_sha256": strings.Repeat("b", 64), "stored_sha256": strings.Repeat("c", 64), "quarantined": now})
	os.WriteFile(filepath.Join(f.qdir, "acme", "0123456789abcdef-fedcba9876543210.json"), meta, 0o640)
	if err := f.outbox.Enqueue(ctx, outbox.Delivery{ID: "d1", Partner: "acme", MessageID: "m1@acme", URL: "http://127.0.0.1:1/mdn"}); err != nil {
		t.Fatal(err)
	}
	f.outbox.Lease(ctx, 1, time.Hour)
	f.outbox.Retry(ctx, "d1", "", now.Add(time.Hour), "connection refused")
	c, err := New(Source{
		Audit: f.audit, Record: f.audit.Write, Ledger: f.store, Claims: f.store, Outbox: f.outbox, QuarantineDir: f.qdir,
		Partners: func() (*partners.Directory, []certs.Cert, time.Duration) {
			return &partners.Directory{Partners: []*partners.Partner{{ID: "acme", AS2: &partners.AS2{ID: "ACME"}}}}, nil, 30 * 24 * time.Hour
		},
		Release: func(ctx context.Context, it QuarantineItem, actor string) (ReleaseResult, error) {
			f.released = append(f.released, it.ID+" by "+actor)
			MoveItem(f.qdir, releasedDir, it)
			return ReleaseResult{HandlerRan: true, Key: string(f.key)}, nil
		},
	}, token, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	f.con = c
	f.srv = httptest.NewServer(c.Handler())
	t.Cleanup(f.srv.Close)
	return f
}

// client is a browser: a cookie jar, no redirects followed automatically
// unless asked.
func (f *fixture) client(t *testing.T) *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar}
}

func body(t *testing.T, resp *http.Response, err error) string {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func get(t *testing.T, c *http.Client, u string) string {
	t.Helper()
	resp, err := c.Get(u)
	return body(t, resp, err)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

func TestConsoleNeedsTokenAndLoginSetsStrictCookie(t *testing.T) {
	f := newFixture(t, "s3cret")
	c := f.client(t)
	req, _ := http.NewRequest("GET", f.srv.URL+"/console/", nil)
	req.Header.Set("Accept", "text/html")
	resp, err := c.Do(req)
	if b := body(t, resp, err); !strings.Contains(b, `name="token"`) {
		t.Fatalf("without a session the browser is not sent to the login form: %d %s", resp.StatusCode, b)
	}
	resp, err = http.Get(f.srv.URL + "/console/messages")
	if body(t, resp, err); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("API request without token: %d, want 401", resp.StatusCode)
	}
	resp, err = c.PostForm(f.srv.URL+"/console/login", url.Values{"token": {"wrong"}})
	if body(t, resp, err); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong token: %d", resp.StatusCode)
	}
	noFollow := *c
	noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err = noFollow.PostForm(f.srv.URL+"/console/login", url.Values{"token": {"s3cret"}})
	body(t, resp, err)
	sc := resp.Header.Get("Set-Cookie")
	for _, want := range []string{"HttpOnly", "SameSite=Strict", "Path=/console/"} {
		if !strings.Contains(sc, want) {
			t.Errorf("session cookie %q lacks %s", sc, want)
		}
	}
	if strings.Contains(sc, "Secure") {
		t.Errorf("cookie Secure on plain HTTP: %q", sc)
	}
	resp, err = c.Get(f.srv.URL + "/console/")
	b := body(t, resp, err)
	if resp.StatusCode != 200 || !strings.Contains(b, "Messages per hour") || !strings.Contains(b, "<svg") {
		t.Fatalf("dashboard after login: %d %.300s", resp.StatusCode, b)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.HasPrefix(csp, "default-src 'self'") {
		t.Errorf("CSP %q", csp)
	}
	// The bearer header works for scripts.
	req, _ = http.NewRequest("GET", f.srv.URL+"/console/messages?partner=acme", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err = http.DefaultClient.Do(req)
	if b := body(t, resp, err); resp.StatusCode != 200 || !strings.Contains(b, "m1@acme") {
		t.Fatalf("bearer search: %d", resp.StatusCode)
	}
}

func TestConsoleActionsNeedCSRFAndAreAudited(t *testing.T) {
	f := newFixture(t, "")
	c := f.client(t)
	b := get(t, c, f.srv.URL+"/console/outbox")
	m := csrfRE.FindStringSubmatch(b)
	if m == nil || !strings.Contains(b, "connection refused") {
		t.Fatalf("outbox page without CSRF token or delivery: %.500s", b)
	}
	for _, bad := range []string{"", strings.Repeat("0", len(m[1])), m[1][:10]} {
		resp, err := c.PostForm(f.srv.URL+"/console/outbox/retry", url.Values{"id": {"d1"}, "csrf": {bad}})
		if body(t, resp, err); resp.StatusCode != http.StatusForbidden {
			t.Fatalf("retry with CSRF %q: %d, want 403", bad, resp.StatusCode)
		}
	}
	// Another session's token does not do.
	other := f.client(t)
	b2 := get(t, other, f.srv.URL+"/console/outbox")
	if m2 := csrfRE.FindStringSubmatch(b2); m2 == nil || m2[1] == m[1] {
		t.Fatalf("sessions share a CSRF token")
	}
	if d, _, _ := f.outbox.Get(context.Background(), "d1"); !d.NextAttempt.After(time.Now().Add(30 * time.Minute)) {
		t.Fatalf("refused retries changed the delivery: next %v", d.NextAttempt)
	}
	resp, err := c.PostForm(f.srv.URL+"/console/outbox/retry", url.Values{"id": {"d1"}, "csrf": {m[1]}})
	if b := body(t, resp, err); resp.StatusCode != 200 || !strings.Contains(b, "is due now") {
		t.Fatalf("retry now: %d %.300s", resp.StatusCode, b)
	}
	if got, _ := f.outbox.Lease(context.Background(), 10, time.Minute); len(got) != 1 {
		t.Fatalf("after retry now the delivery is not due")
	}
	recs, _ := f.audit.Query(context.Background(), audit.Query{Partner: "acme"})
	last := recs[len(recs)-1]
	if last.Step != audit.StepOperator || last.Decision != "retry-now" || !strings.Contains(last.Actor, "127.0.0.1") {
		t.Fatalf("retry not audited with who: %+v", last)
	}

	// The list links to the item page, which offers release and discard.
	id := "acme/0123456789abcdef-fedcba9876543210"
	b = get(t, c, f.srv.URL+"/console/quarantine")
	link := regexp.MustCompile(`href="(/console/quarantine/item\?id=[^"]+)"`).FindStringSubmatch(b)
	if link == nil {
		t.Fatalf("quarantine list without item link: %.1000s", b)
	}
	if b := get(t, c, f.srv.URL+strings.ReplaceAll(link[1], "&amp;", "&")); !strings.Contains(b, `id="release"`) || !strings.Contains(b, "changed") {
		t.Fatalf("item page %s: %.1000s", link[1], b)
	}
	// Discard needs a reason, is audited and moves the files.
	resp, err = c.PostForm(f.srv.URL+"/console/quarantine/discard", url.Values{"id": {id}, "csrf": {m[1]}})
	if b := body(t, resp, err); !strings.Contains(b, "needs a reason") {
		t.Fatalf("discard without reason: %.300s", b)
	}
	resp, err = c.PostForm(f.srv.URL+"/console/quarantine/discard", url.Values{"id": {id}, "csrf": {m[1]}, "reason": {"test data"}})
	if b := body(t, resp, err); !strings.Contains(b, "Discarded: the payload was moved out of the quarantine") {
		t.Fatalf("discard: %.300s", b)
	}
	if _, err := os.Stat(filepath.Join(f.qdir, discardedDir, "acme", "0123456789abcdef-fedcba9876543210.payload")); err != nil {
		t.Fatalf("discarded payload not moved: %v", err)
	}
	recs, _ = f.audit.Query(context.Background(), audit.Query{MessageID: "m2@acme"})
	if len(recs) != 1 || recs[0].Decision != "discarded" || recs[0].Error != "reason: test data" || recs[0].Actor == "" {
		t.Fatalf("discard audit: %+v", recs)
	}
	resp, err = c.PostForm(f.srv.URL+"/console/quarantine/release", url.Values{"id": {id}, "csrf": {m[1]}})
	if b := body(t, resp, err); resp.StatusCode != http.StatusConflict || !strings.Contains(b, "was already discarded at ") || !strings.Contains(b, "cannot be released now") || len(f.released) != 0 {
		t.Fatalf("release of a discarded item: %.300s %v", b, f.released)
	}
	// Path tricks are refused.
	for _, bad := range []string{"../acme/x-y", "acme/../../etc", "ACME/0-0"} {
		resp, err = c.Get(f.srv.URL + "/console/quarantine/payload?id=" + url.QueryEscape(bad))
		if body(t, resp, err); resp.StatusCode != http.StatusNotFound {
			t.Errorf("quarantine payload %q: %d", bad, resp.StatusCode)
		}
	}
}

func TestConsoleSearchDetailAndReply(t *testing.T) {
	f := newFixture(t, "")
	c := f.client(t)
	b := get(t, c, f.srv.URL+"/console/messages?message_id=%3Cm1%40acme%3E&decision=processed")
	if !strings.Contains(b, "/console/message?key="+string(f.key)) || !strings.Contains(b, "1 message(s)") {
		t.Fatalf("search by message id with brackets: %.2000s", b)
	}
	b = get(t, c, f.srv.URL+"/console/messages?decision=rejected")
	if !strings.Contains(b, "0 message(s)") {
		t.Fatalf("decision filter: %.500s", b)
	}
	b = get(t, c, f.srv.URL+"/console/messages?reference=REF1")
	if !strings.Contains(b, "1 message(s)") {
		t.Fatalf("reference filter")
	}
	b = get(t, c, f.srv.URL+"/console/message?key="+string(f.key))
	if !strings.Contains(b, "MDN-sent-automatically; processed") || !strings.Contains(b, "accepted") {
		t.Fatalf("detail lacks the stored reply: %.3000s", b)
	}
	resp, err := c.Get(f.srv.URL + "/console/message/reply?download=1&key=" + string(f.key))
	b = body(t, resp, err)
	if !strings.Contains(resp.Header.Get("Content-Disposition"), "attachment") || !strings.Contains(b, "Content-Type: message/disposition-notification") {
		t.Fatalf("reply download: %v %q", resp.Header, b)
	}
	resp, err = c.Get(f.srv.URL + "/console/message?key=notakey")
	if body(t, resp, err); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("bad key: %d", resp.StatusCode)
	}
	b = get(t, c, f.srv.URL+"/console/partners")
	if !strings.Contains(b, "AS2-From <b>ACME</b>") || !strings.Contains(b, "1 message(s)") {
		t.Fatalf("partners page: %.2000s", b)
	}
}

// TestPagesNeedNothingTheCSPBlocks: no inline style or script, nothing
// from another origin, on every page (default-src 'self' would block it).
func TestPagesNeedNothingTheCSPBlocks(t *testing.T) {
	f := newFixture(t, "")
	c := f.client(t)
	inline := regexp.MustCompile(`(?i)\sstyle=|<script>|<script [^>]*>[^<]|\son[a-z]+=|(src|href)="(https?:)?//`)
	for _, p := range []string{"/console/", "/console/messages", "/console/message?key=" + string(f.key), "/console/quarantine",
		"/console/quarantine/item?id=acme%2F0123456789abcdef-fedcba9876543210", "/console/partners", "/console/outbox"} {
		b := get(t, c, f.srv.URL+p)
		if !strings.Contains(b, "</html>") {
			t.Errorf("%s: not a whole page: %.300s", p, b)
		}
		if m := inline.FindString(b); m != "" {
			t.Errorf("%s: %q is blocked by the CSP", p, m)
		}
	}
	css := get(t, c, f.srv.URL+"/console/static/style.css")
	for _, o := range outcomes {
		if !strings.Contains(css, ".o-"+o+"{") {
			t.Errorf("style.css has no class for outcome %s", o)
		}
	}
}

func TestOutcomeOf(t *testing.T) {
	for want, decisions := range map[string][]string{
		"processed":   {"new", "new-interchange", "reply:accepted"},
		"duplicate":   {"duplicate"},
		"quarantined": {"new", "quarantined"},
		"drift":       {"drift"},
		"rejected":    {"new", "rejected"},
		"failed":      {"new", "handler:error"},
		"in-flight":   {"in-flight"},
	} {
		var recs []audit.Record
		for _, d := range decisions {
			r := audit.Record{Step: audit.StepDecision, Decision: d}
			if s, v, ok := strings.Cut(d, ":"); ok {
				r.Step, r.Decision = audit.Step(s), v
			}
			recs = append(recs, r)
		}
		if got := outcomeOf(recs); got != want {
			t.Errorf("%v: %s, want %s", decisions, got, want)
		}
	}
}

func TestSessionsBoundedAndExpire(t *testing.T) {
	s := newSessions()
	now := time.Now()
	first := s.create("a", now)
	for i := range maxSessions + 50 {
		s.create(fmt.Sprint(i), now.Add(time.Duration(i+1)*time.Millisecond))
	}
	if n := len(s.byID); n > maxSessions {
		t.Fatalf("%d sessions held, want at most %d", n, maxSessions)
	}
	if _, ok := s.get(first, now); ok {
		t.Errorf("the oldest session survived the bound")
	}
	id := s.create("b", now)
	if _, ok := s.get(id, now.Add(sessionTTL-time.Second)); !ok {
		t.Errorf("session gone before its TTL")
	}
	if _, ok := s.get(id, now.Add(sessionTTL)); ok {
		t.Errorf("session alive after its TTL")
	}
}

func TestLogoutEndsTheSession(t *testing.T) {
	f := newFixture(t, "s3cret")
	c := f.client(t)
	resp, err := c.PostForm(f.srv.URL+"/console/login", url.Values{"token": {"s3cret"}})
	b := body(t, resp, err)
	m := csrfRE.FindStringSubmatch(b)
	if m == nil {
		t.Fatalf("no CSRF token after login: %.300s", b)
	}
	u, _ := url.Parse(f.srv.URL + "/console/")
	cookies := c.Jar.Cookies(u)
	if resp, err = c.PostForm(f.srv.URL+"/console/logout", url.Values{"csrf": {m[1]}}); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// The old cookie, replayed, no longer works.
	req, _ := http.NewRequest("GET", f.srv.URL+"/console/messages", nil)
	for _, ck := range cookies {
		req.AddCookie(ck)
	}
	resp, err = http.DefaultClient.Do(req)
	if body(t, resp, err); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("replayed cookie after logout: %d", resp.StatusCode)
	}
}

// TestQuarantineItemLayouts: an item described without a payload list (one
// payload, as quarantined before lists existed) reads as one payload; an
// item of several reads and moves all of its files, named by position.
func TestQuarantineItemLayouts(t *testing.T) {
	dir := t.TempDir()
	pdir := filepath.Join(dir, "acme")
	os.MkdirAll(pdir, 0o750)
	os.WriteFile(filepath.Join(pdir, "aaaa-bbbb.payload"), []byte("one"), 0o640)
	os.WriteFile(filepath.Join(pdir, "aaaa-bbbb.json"), []byte(`{"payload_sha256":"bbbb","content_type":"text/plain","filename":"a.txt"}`), 0o640)
	it, err := ReadItem(dir, "acme/aaaa-bbbb")
	if err != nil || len(it.Payloads) != 1 || it.Payloads[0].SHA256 != "bbbb" || it.Payloads[0].Path != it.Path ||
		it.Payloads[0].Filename != "a.txt" || it.Size != 3 {
		t.Fatalf("legacy item: %+v %v", it, err)
	}
	os.WriteFile(filepath.Join(pdir, "cccc-dddd.payload"), []byte("first"), 0o640)
	os.WriteFile(filepath.Join(pdir, "cccc-dddd.2.payload"), []byte("second"), 0o640)
	os.WriteFile(filepath.Join(pdir, "cccc-dddd.json"), []byte(`{"payload_sha256":"dddd","payloads":[
		{"file":"cccc-dddd.payload","sha256":"11"},{"file":"../../etc/passwd","sha256":"22"}]}`), 0o640)
	it, err = ReadItem(dir, "acme/cccc-dddd")
	if err != nil || len(it.Payloads) != 2 || it.Payloads[1].Path != filepath.Join(pdir, "cccc-dddd.2.payload") || it.Size != 11 {
		t.Fatalf("item of two: %+v %v", it, err)
	}
	if err := MoveItem(dir, releasedDir, it); err != nil {
		t.Fatal(err)
	}
	left, _ := filepath.Glob(filepath.Join(pdir, "cccc-dddd*"))
	moved, _ := filepath.Glob(filepath.Join(dir, releasedDir, "acme", "cccc-dddd*"))
	if len(left) != 0 || len(moved) != 3 {
		t.Errorf("after the move: left %v, moved %v", left, moved)
	}
	// A description naming a payload file that is missing is no item.
	os.WriteFile(filepath.Join(pdir, "eeee-ffff.payload"), []byte("x"), 0o640)
	os.WriteFile(filepath.Join(pdir, "eeee-ffff.json"), []byte(`{"payloads":[{"sha256":"1"},{"sha256":"2"}]}`), 0o640)
	if _, err := ReadItem(dir, "acme/eeee-ffff"); err == nil {
		t.Error("item with a missing payload file read")
	}
}

// TestSearchTimesAreUTC: From and To are read as UTC in the ISO forms
// (minutes, seconds, a date alone, a trailing Z); anything else is a 400
// that does not repeat the value.
func TestSearchTimesAreUTC(t *testing.T) {
	f := newFixture(t, "")
	c := f.client(t)
	now := time.Now().UTC()
	for _, tc := range []struct {
		from, to string
		want     string
	}{
		{now.Add(-time.Hour).Format("2006-01-02T15:04"), now.Add(time.Hour).Format("2006-01-02T15:04"), "1 message(s)"},
		{now.Add(-time.Hour).Format("2006-01-02T15:04:05Z"), "", "1 message(s)"},
		{now.Format("2006-01-02"), now.Add(48 * time.Hour).Format("2006-01-02"), "1 message(s)"},
		{now.Add(time.Minute).Format("2006-01-02 15:04"), "", "0 message(s)"},
		{"", now.Add(-time.Minute).Format("2006-01-02T15:04"), "0 message(s)"},
	} {
		b := get(t, c, f.srv.URL+"/console/messages?from="+url.QueryEscape(tc.from)+"&to="+url.QueryEscape(tc.to))
		if !strings.Contains(b, tc.want) {
			t.Errorf("from %q to %q: want %s: %.300s", tc.from, tc.to, tc.want, b)
		}
	}
	resp, err := c.Get(f.srv.URL + "/console/messages?from=" + url.QueryEscape("12/04/2026 Call +1 555"))
	if b := body(t, resp, err); resp.StatusCode != http.StatusBadRequest || strings.Contains(b, "Call +1 555") || !strings.Contains(b, "YYYY-MM-DDTHH:MM") {
		t.Errorf("a time in another form: %d %.500s", resp.StatusCode, b)
	}
}
