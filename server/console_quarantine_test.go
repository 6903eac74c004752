package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edigateway/gateway/internal/console"
	"github.com/edigateway/gateway/outbox"
)

// postConsole posts a console action with the bearer token (no CSRF
// token needed) and returns the answer without following redirects.
func postConsole(t *testing.T, f *consoleFixture, path string, form url.Values) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", f.admin+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+consoleToken)
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// attentionOf is the dashboard's attention list and count.
func attentionOf(t *testing.T, f *consoleFixture) (string, string) {
	t.Helper()
	code, page := get(t, f.admin+"/console/", consoleToken)
	if code != 200 {
		t.Fatalf("dashboard: %d", code)
	}
	m := regexp.MustCompile(`id="attention-count">(\d+)<`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("dashboard without attention count")
	}
	list := page[strings.Index(page, "needing attention</h2>"):]
	return list[:strings.Index(list, "</table>")], m[1]
}

// TestConsoleQuarantineLifecycle: an AS2 and an AS4 message quarantined
// for drift on their message id need attention until an operator releases
// (AS2) or discards (AS4) them; a second release or discard says when and
// by whom it was done and does nothing again (a release that waited for
// another finds the item gone); the release key's detail page says no
// reply went to anyone for it and shows the negative reply the partner's
// delivery got.
func TestConsoleQuarantineLifecycle(t *testing.T) {
	f := newConsoleFixture(t)
	const as2ID, as4ID = "q-as2@demo", "q-as4@demo.test"
	f.sendAS2(t, nil, []byte("first version"), as2ID)
	_, partnerGot := f.sendAS2(t, nil, []byte("second version"), as2ID)
	if strings.HasSuffix(partnerGot, "; processed") {
		t.Fatalf("drift answered %q", partnerGot)
	}
	f.postAS4(t, f.buildAS4(t, as4ID, []byte("as4 first")))
	out := f.buildAS4(t, as4ID, []byte("as4 second"))
	resp, err := http.Post(f.partner+"/as4", out.ContentType, bytes.NewReader(out.Body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	items, err := console.ListItems(f.cfg.QuarantineDir)
	if err != nil || len(items) != 2 {
		t.Fatalf("quarantine: %+v %v", items, err)
	}
	byID := map[string]console.QuarantineItem{}
	for _, it := range items {
		byID[it.MessageID] = it
	}
	list, n := attentionOf(t, f)
	if !strings.Contains(list, as2ID) || !strings.Contains(list, as4ID) || n != "2" {
		t.Fatalf("attention before release: %s %s", n, list)
	}

	// Release the AS2 one.
	it := byID[as2ID]
	resp, _ = postConsole(t, f, "/console/quarantine/release", url.Values{"id": {it.ID}})
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.Contains(loc, "flash=released") {
		t.Fatalf("release: %d %q", resp.StatusCode, loc)
	}
	releaseKey := regexp.MustCompile(`key=([0-9a-f]{64})`).FindStringSubmatch(loc)[1]
	// Again: already released, when and by whom; nothing runs again.
	resp, page := postConsole(t, f, "/console/quarantine/release", url.Values{"id": {it.ID}})
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "was already released at 20") || !strings.Contains(page, "by admin token") ||
		strings.Contains(page, "no such file") || strings.Contains(page, f.cfg.QuarantineDir) {
		t.Errorf("second release: %d %.3000s", resp.StatusCode, page)
	}
	// A release that waited for the first one (a double click) finds the
	// item gone rather than failing on its moved file.
	if _, err := f.s.ReleaseQuarantined(context.Background(), it, "tester"); !errors.Is(err, console.ErrItemGone) {
		t.Errorf("release of an item released meanwhile: %v, want ErrItemGone", err)
	}
	if n := f.runsOf(as2ID); n != 2 {
		t.Errorf("handler runs for %s: %d, want 2 (the original and one release)", as2ID, n)
	}
	// The release key's page: no reply to anyone for it; what the partner
	// got was the negative MDN of its delivery.
	code, page := get(t, f.admin+"/console/message?key="+releaseKey, consoleToken)
	if code != 200 || !strings.Contains(page, `id="release-note"`) || !strings.Contains(page, "no reply was sent to anyone for it") {
		t.Errorf("release key page: %d %.4000s", code, page)
	}
	m := regexp.MustCompile(`id="partner-reply">([^<]*)<`).FindStringSubmatch(page)
	if m == nil || !strings.Contains(partnerGot, strings.TrimPrefix(m[1], "automatic-action/MDN-sent-automatically; ")) || strings.Contains(m[1], "released") {
		t.Errorf("partner's reply shown %v, the partner got %q", m, partnerGot)
	}
	if strings.Contains(page, "Reply we sent") || regexp.MustCompile(`Sent when the message was accepted[^<]*HTTP 200, released`).MatchString(page) {
		t.Errorf("the release's own record shown as a reply sent: %.4000s", page)
	}

	// Discard the AS4 one, twice.
	it = byID[as4ID]
	resp, _ = postConsole(t, f, "/console/quarantine/discard", url.Values{"id": {it.ID}, "reason": {"resent by mistake"}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("discard: %d", resp.StatusCode)
	}
	resp, page = postConsole(t, f, "/console/quarantine/discard", url.Values{"id": {it.ID}, "reason": {"again"}})
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "was already discarded at 20") {
		t.Errorf("second discard: %d %.2000s", resp.StatusCode, page)
	}
	resp, page = postConsole(t, f, "/console/quarantine/release", url.Values{"id": {it.ID}})
	if resp.StatusCode != http.StatusConflict || !strings.Contains(page, "cannot be released now") {
		t.Errorf("release of a discarded item: %d %.2000s", resp.StatusCode, page)
	}

	// Neither needs attention any more; search still shows how each ended.
	list, n = attentionOf(t, f)
	if strings.Contains(list, as2ID) || strings.Contains(list, as4ID) || n != "0" {
		t.Errorf("attention after release and discard: %s %s", n, list)
	}
	_, page = get(t, f.admin+"/console/messages?decision=quarantined", consoleToken)
	if !strings.Contains(page, `<span class="resolved">released `) || !strings.Contains(page, `<span class="resolved">discarded `) {
		t.Errorf("search of quarantined messages does not say how they ended: %.3000s", page)
	}
}

// TestConsoleRetryNowWakesOutbox: "Retry now" on a pending async MDN makes
// the dispatcher send it at once, not at its next poll (every
// outbox.DefaultPollInterval).
func TestConsoleRetryNowWakesOutbox(t *testing.T) {
	var mu sync.Mutex
	var attempts []time.Time
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		attempts = append(attempts, time.Now())
		first := len(attempts) == 1
		mu.Unlock()
		if first {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
		}
	}))
	defer target.Close()
	f := newConsoleFixtureYAML(t, func(y []byte) []byte {
		return bytes.Replace(y, []byte(`async_mdn_urls: ["http://127.0.0.1:8078/mdn"]`), []byte(`async_mdn_urls: ["`+target.URL+`/mdn"]`), 1)
	})
	ob := f.s.Backend.Outbox()
	ctx := context.Background()
	if err := ob.Enqueue(ctx, outbox.Delivery{ID: "d-retry", Partner: "demo", MessageID: "<m-retry@demo>", URL: target.URL + "/mdn",
		Header: http.Header{"Content-Type": {"multipart/report"}}, Body: []byte("mdn")}); err != nil {
		t.Fatal(err)
	}
	f.s.notify()
	// The first attempt fails and is scheduled for later.
	deadline := time.Now().Add(20 * time.Second)
	for {
		d, _, err := ob.Get(ctx, "d-retry")
		if err != nil {
			t.Fatal(err)
		}
		if d.Attempts == 1 && d.NextAttempt.After(time.Now()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("first attempt not recorded: %+v", d)
		}
		time.Sleep(10 * time.Millisecond)
	}
	clicked := time.Now()
	resp, _ := postConsole(t, f, "/console/outbox/retry", url.Values{"id": {"d-retry"}})
	if resp.StatusCode != http.StatusSeeOther || !strings.Contains(resp.Header.Get("Location"), "flash=retry-now") {
		t.Fatalf("retry now: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	for {
		_, st, err := ob.Get(ctx, "d-retry")
		if err != nil {
			t.Fatal(err)
		}
		if st == outbox.Delivered {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not delivered after retry now: %s", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	second := attempts[len(attempts)-1]
	mu.Unlock()
	// Woken, the dispatcher sends at once; left to its poll it would wait
	// up to DefaultPollInterval after its last round.
	if wait := second.Sub(clicked); wait >= outbox.DefaultPollInterval*3/5 {
		t.Errorf("the second attempt came %s after Retry now; the dispatcher was not woken (it polls every %s)", wait, outbox.DefaultPollInterval)
	}
}
