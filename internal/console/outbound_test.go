package console

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/internal/certs"
	"github.com/edigateway/gateway/outbound"
	"github.com/edigateway/gateway/partners"
)

// fakeOutbound is the part of an outbound.Store the console uses, over a
// map; the sending side's methods are not needed here.
type fakeOutbound struct {
	outbound.Store // nil: the methods not overridden panic
	mu             sync.Mutex
	msgs           map[string]outbound.Message
	payloads       map[string][]byte
	lists          int
}

func newFakeOutbound() *fakeOutbound {
	return &fakeOutbound{msgs: map[string]outbound.Message{}, payloads: map[string][]byte{}}
}

func (f *fakeOutbound) put(m outbound.Message, payload string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.msgs[m.ID] = m
	f.payloads[m.ID] = []byte(payload)
}

func (f *fakeOutbound) Get(ctx context.Context, id string) (outbound.Message, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.msgs[id]
	if !ok {
		return m, outbound.ErrNotFound
	}
	return m, nil
}

func (f *fakeOutbound) OpenPayload(ctx context.Context, id string) (io.ReadCloser, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.payloads[id]
	if !ok {
		return nil, outbound.ErrNotFound
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

func (f *fakeOutbound) List(ctx context.Context, flt outbound.Filter) ([]outbound.Message, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	var out []outbound.Message
	for _, m := range f.msgs {
		// Before, BeforeID: the keyset bound of outbound.Filter.
		after := !flt.Before.IsZero() && !m.Created.Before(flt.Before) &&
			(!m.Created.Equal(flt.Before) || flt.BeforeID == "" || m.ID >= flt.BeforeID)
		if flt.Partner != "" && m.Partner != flt.Partner || after {
			continue
		}
		if len(flt.States) > 0 && !contains(flt.States, m.State) {
			continue
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.After(out[j].Created)
		}
		return out[i].ID > out[j].ID
	})
	limit := flt.Limit
	if limit == 0 {
		limit = 100
	}
	return out[:min(limit, len(out))], nil
}

func contains(states []outbound.State, s outbound.State) bool {
	for _, x := range states {
		if x == s {
			return true
		}
	}
	return false
}

func (f *fakeOutbound) Stats(ctx context.Context) ([]outbound.Stats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	by := map[string]*outbound.Stats{}
	for _, m := range f.msgs {
		k := m.Partner + " " + string(m.Protocol)
		s := by[k]
		if s == nil {
			s = &outbound.Stats{Partner: m.Partner, Protocol: m.Protocol}
			by[k] = s
		}
		switch m.State {
		case outbound.Queued:
			s.Queued++
			if s.OldestQueued.IsZero() || m.Created.Before(s.OldestQueued) {
				s.OldestQueued = m.Created
			}
		case outbound.AwaitingMDN:
			s.Awaiting++
		case outbound.Delivered:
			s.Delivered++
		case outbound.Failed:
			s.Failed++
		case outbound.Cancelled:
			s.Cancelled++
		}
	}
	var out []outbound.Stats
	for _, s := range by {
		out = append(out, *s)
	}
	return out, nil
}

func (f *fakeOutbound) Cancel(ctx context.Context, id, reason string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.msgs[id]
	switch {
	case !ok:
		return outbound.ErrNotFound
	case m.State.Final():
		return outbound.ErrFinal
	}
	m.State, m.Reason, m.LeaseToken, m.LeasedUntil = outbound.Cancelled, reason, "", time.Time{}
	f.msgs[id] = m
	return nil
}

func (f *fakeOutbound) Resend(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.msgs[id]
	switch {
	case !ok:
		return outbound.ErrNotFound
	case m.State == outbound.Delivered:
		return outbound.ErrFinal
	case !m.State.Final():
		return outbound.ErrNotFinal
	}
	m.State, m.Reason, m.NextAttempt = outbound.Queued, "", time.Now()
	f.msgs[id] = m
	return nil
}

type outboundFixture struct {
	srv    *httptest.Server
	store  *fakeOutbound
	audit  *audit.Memory
	woken  int
	base   time.Time
	client *http.Client
}

// newOutboundFixture: partner acme with a message in every state (one
// queued message held by a worker: "sending"), plus 120 delivered ones of
// partner beta for paging; the failed one's reason and the MDN text
// carry markup a partner controls.
func newOutboundFixture(t *testing.T, withStore bool) *outboundFixture {
	t.Helper()
	f := &outboundFixture{store: newFakeOutbound(), audit: &audit.Memory{}, base: time.Now().UTC().Add(-time.Hour)}
	at := func(i int) time.Time { return f.base.Add(time.Duration(i) * time.Second) }
	msg := func(id, partner string, st outbound.State, i int) outbound.Message {
		return outbound.Message{ID: id, Partner: partner, Protocol: outbound.AS2, MessageID: "<" + id + "@gw>", State: st, Created: at(i),
			Updated: at(i), Size: 12, SHA256: strings.Repeat("d", 64), Filename: id + ".edi", ContentType: "application/edifact",
			Source: "api", IdempotencyKey: "key-" + id, NextAttempt: at(i + 600), Attempts: 1}
	}
	q := msg("q1", "acme", outbound.Queued, 1000)
	q.LastError = "connection refused"
	f.store.put(q, "UNB+queued'")
	s := msg("s1", "acme", outbound.Queued, 1001)
	s.LeaseToken, s.LeasedUntil = "tok", time.Now().Add(time.Hour)
	f.store.put(s, "UNB+sending'")
	a := msg("a1", "acme", outbound.AwaitingMDN, 1002)
	a.Sent = []string{"abc=, sha-256"}
	f.store.put(a, "UNB+awaiting'")
	d := msg("d1", "acme", outbound.Delivered, 1003)
	d.Sent = []string{"first-mic=, sha-256", "second-mic=, sha-256"}
	d.Evidence = &outbound.Evidence{Kind: "mdn", ContentType: "message/disposition-notification", Disposition: "automatic-action/MDN-sent-automatically; processed",
		Signer: "CN=acme, serial 1f", Received: at(1004), Body: []byte("Disposition: processed\r\nX-Note: <script>alert(1)</script>\r\n")}
	f.store.put(d, "UNB+delivered'")
	x := msg("f1", "acme", outbound.Failed, 1005)
	x.Reason = `partner said <img src=x>`
	f.store.put(x, "UNB+failed'")
	c := msg("c1", "acme", outbound.Cancelled, 1006)
	c.Reason = "wrong file"
	f.store.put(c, "UNB+cancelled'")
	for i := range 120 {
		f.store.put(msg(fmt.Sprintf("b%03d", i), "beta", outbound.Delivered, i), "UNB+beta'")
	}
	src := Source{Audit: f.audit, Record: f.audit.Write, Notify: func() { f.woken++ },
		Partners: func() (*partners.Directory, []certs.Cert, time.Duration) {
			return &partners.Directory{Partners: []*partners.Partner{{ID: "acme"}, {ID: "beta"}}}, nil, 30 * 24 * time.Hour
		}}
	if withStore {
		src.Outbound = f.store
	}
	con, err := New(src, "", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(con.Handler())
	t.Cleanup(f.srv.Close)
	f.client = (&fixture{}).client(t)
	return f
}

var outboundRowRE = regexp.MustCompile(`/console/outbound/message\?id=([a-z0-9]+)"`)

// ids lists the message ids a list page links to, in order.
func ids(b string) []string {
	var out []string
	for _, m := range outboundRowRE.FindAllStringSubmatch(b, -1) {
		out = append(out, m[1])
	}
	return out
}

func TestOutboundListTabsPartnerAndPaging(t *testing.T) {
	f := newOutboundFixture(t, true)
	u := f.srv.URL
	for state, want := range map[string]string{
		"queued": "s1 q1", "sending": "s1", "awaiting-mdn": "a1", "failed": "f1", "cancelled": "c1",
	} {
		b := get(t, f.client, u+"/console/outbound?partner=acme&state="+state)
		if got := strings.Join(ids(b), " "); got != want {
			t.Errorf("tab %s: %q, want %q", state, got, want)
		}
	}
	b := get(t, f.client, u+"/console/outbound?partner=acme")
	if got := strings.Join(ids(b), " "); got != "c1 f1 d1 a1 s1 q1" {
		t.Errorf("all of acme, newest first: %q", got)
	}
	for _, want := range []string{"connection refused", "wrong file", "q1.edi", `class="badge s-sending"`, "queued (2)", "delivered (1)"} {
		if !strings.Contains(b, want) {
			t.Errorf("list lacks %q", want)
		}
	}
	// Paging: 120 delivered messages of beta, 50 a page, newest first.
	var all []string
	next := u + "/console/outbound?state=delivered&partner=beta"
	for pages := 0; next != ""; pages++ {
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		b := get(t, f.client, next)
		all = append(all, ids(b)...)
		next = ""
		if m := regexp.MustCompile(`href="([^"]+)" id="outbound-older"`).FindStringSubmatch(b); m != nil {
			next = u + strings.ReplaceAll(m[1], "&amp;", "&")
		}
	}
	if len(all) != 120 || all[0] != "b119" || all[119] != "b000" {
		t.Fatalf("paged through %d messages (%v … %v), want b119 … b000", len(all), all[:1], all[len(all)-1:])
	}
	seen := map[string]bool{}
	for _, id := range all {
		if seen[id] {
			t.Fatalf("%s on two pages", id)
		}
		seen[id] = true
	}
	resp, err := f.client.Get(u + "/console/outbound?state=bogus")
	if body(t, resp, err); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("unknown state: %d", resp.StatusCode)
	}
	// The dashboard shows the queue and the nav links to it.
	b = get(t, f.client, u+"/console/")
	if !strings.Contains(b, `id="nav-outbound"`) || !regexp.MustCompile(`id="outbound-queued">2<`).MatchString(b) {
		t.Errorf("dashboard without the outbound card or link: %.3000s", b)
	}
}

// pageIDs follows the list's Older links from u and returns the ids of
// every page, in order.
func pageIDs(t *testing.T, f *outboundFixture, u string) []string {
	t.Helper()
	var all []string
	for pages := 0; u != ""; pages++ {
		if pages > 10 {
			t.Fatal("paging does not end")
		}
		b := get(t, f.client, u)
		all = append(all, ids(b)...)
		u = ""
		if m := regexp.MustCompile(`href="([^"]+)" id="outbound-older"`).FindStringSubmatch(b); m != nil {
			u = f.srv.URL + strings.ReplaceAll(m[1], "&amp;", "&")
		}
	}
	return all
}

// TestOutboundPagingKeepsMessagesCreatedInOneInstant: 120 delivered
// messages created in one instant (a bulk of submissions in one
// millisecond) page by 50 through the Older links, each once, newest first
// (by id within the instant); on the sending tab, 60 held messages behind
// 600 queued ones of the same instant (more than one batch of the scan)
// are all found.
func TestOutboundPagingKeepsMessagesCreatedInOneInstant(t *testing.T) {
	f := newOutboundFixture(t, true)
	at := f.base.Add(2000 * time.Second)
	var want []string
	for i := range 120 {
		id := fmt.Sprintf("g%03d", i)
		f.store.put(outbound.Message{ID: id, Partner: "gamma", Protocol: outbound.AS2, MessageID: "<" + id + "@gw>",
			State: outbound.Delivered, Created: at, Updated: at}, "x")
		want = append([]string{id}, want...)
	}
	got := pageIDs(t, f, f.srv.URL+"/console/outbound?state=delivered&partner=gamma")
	if !slices.Equal(got, want) {
		t.Errorf("paged through %d messages of one instant, want 120 each once, newest first:\n got %v\nwant %v",
			len(got), got, want)
	}
	want = nil
	for i := range 660 {
		id := fmt.Sprintf("h%04d", i)
		m := outbound.Message{ID: id, Partner: "held", Protocol: outbound.AS2, MessageID: "<" + id + "@gw>",
			State: outbound.Queued, Created: at, Updated: at}
		if i < 60 {
			m.LeaseToken, m.LeasedUntil = "tok", time.Now().Add(time.Hour)
			want = append([]string{id}, want...)
		}
		f.store.put(m, "x")
	}
	got = pageIDs(t, f, f.srv.URL+"/console/outbound?state=sending&partner=held")
	if !slices.Equal(got, want) {
		t.Errorf("sending tab listed %d held messages, want 60 each once, newest first:\n got %v\nwant %v",
			len(got), got, want)
	}
}

func TestOutboundDetailEscapesPartnerText(t *testing.T) {
	f := newOutboundFixture(t, true)
	u := f.srv.URL
	b := get(t, f.client, u+"/console/outbound/message?id=d1")
	for _, want := range []string{"&lt;d1@gw&gt;", strings.Repeat("d", 64), "application/edifact", "d1.edi", "key-d1", "first-mic=, sha-256", "second-mic=, sha-256",
		"CN=acme, serial 1f", "MDN-sent-automatically; processed", "&lt;script&gt;alert(1)&lt;/script&gt;"} {
		if !strings.Contains(b, want) {
			t.Errorf("detail lacks %q", want)
		}
	}
	if strings.Contains(b, "<script>alert") {
		t.Error("the MDN text is not escaped")
	}
	if strings.Contains(b, `id="outbound-resend"`) || strings.Contains(b, `id="outbound-cancel"`) {
		t.Error("a delivered message offers resend or cancel")
	}
	b = get(t, f.client, u+"/console/outbound/message?id=f1")
	if strings.Contains(b, "<img") || !strings.Contains(b, "&lt;img src=x") || !strings.Contains(b, `id="outbound-resend"`) {
		t.Errorf("failed message: reason not escaped or no resend: %.3000s", b)
	}
	b = get(t, f.client, u+"/console/outbound?partner=acme")
	if strings.Contains(b, "<img") {
		t.Error("the list does not escape the reason")
	}
	resp, err := f.client.Get(u + "/console/outbound/evidence?id=d1&download=1")
	b = body(t, resp, err)
	if !strings.Contains(resp.Header.Get("Content-Disposition"), `attachment; filename="mdn-d1.txt"`) || !strings.Contains(b, "X-Note: <script>") {
		t.Errorf("evidence download: %v %q", resp.Header, b)
	}
	resp, err = f.client.Get(u + "/console/outbound/evidence?id=d1")
	if body(t, resp, err); !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("evidence view: %v", resp.Header)
	}
	resp, err = f.client.Get(u + "/console/outbound/evidence?id=q1")
	if body(t, resp, err); resp.StatusCode != http.StatusNotFound {
		t.Errorf("evidence of a queued message: %d", resp.StatusCode)
	}
	resp, err = f.client.Get(u + "/console/outbound/payload?id=d1")
	if b := body(t, resp, err); b != "UNB+delivered'" || !strings.Contains(resp.Header.Get("Content-Disposition"), `"d1.edi"`) {
		t.Errorf("payload download: %q %v", b, resp.Header)
	}
	inline := regexp.MustCompile(`(?i)\sstyle=|<script>|<script [^>]*>[^<]|\son[a-z]+=|(src|href)="(https?:)?//`)
	for _, p := range []string{"/console/outbound", "/console/outbound?state=sending", "/console/outbound/message?id=d1", "/console/outbound/message?id=f1", "/console/outbound/message?id=q1"} {
		if m := inline.FindString(get(t, f.client, u+p)); m != "" {
			t.Errorf("%s: %q is blocked by the CSP", p, m)
		}
	}
	resp, err = f.client.Get(u + "/console/outbound/message?id=nope")
	if body(t, resp, err); resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown id: %d", resp.StatusCode)
	}
}

func TestOutboundActionsNeedCSRFAreAuditedAndWakeTheSender(t *testing.T) {
	f := newOutboundFixture(t, true)
	u, ctx := f.srv.URL, context.Background()
	b := get(t, f.client, u+"/console/outbound/message?id=q1")
	m := csrfRE.FindStringSubmatch(b)
	if m == nil || !strings.Contains(b, `id="outbound-cancel"`) || strings.Contains(b, `id="outbound-resend"`) {
		t.Fatalf("queued message: no CSRF token or wrong actions: %.3000s", b)
	}
	csrf := m[1]
	post := func(path string, v url.Values) (int, string) {
		resp, err := f.client.PostForm(u+path, v)
		b := body(t, resp, err)
		return resp.StatusCode, b
	}
	for _, bad := range []string{"", strings.Repeat("0", len(csrf))} {
		if code, _ := post("/console/outbound/cancel", url.Values{"id": {"q1"}, "reason": {"x"}, "csrf": {bad}}); code != http.StatusForbidden {
			t.Fatalf("cancel with CSRF %q: %d, want 403", bad, code)
		}
		if code, _ := post("/console/outbound/resend", url.Values{"id": {"f1"}, "csrf": {bad}}); code != http.StatusForbidden {
			t.Fatalf("resend with CSRF %q: %d, want 403", bad, code)
		}
	}
	if q, _ := f.store.Get(ctx, "q1"); q.State != outbound.Queued || f.woken != 0 {
		t.Fatalf("refused actions changed something: %s, woken %d", q.State, f.woken)
	}
	if code, b := post("/console/outbound/cancel", url.Values{"id": {"q1"}, "csrf": {csrf}}); code != http.StatusBadRequest || !strings.Contains(b, "needs a reason") {
		t.Fatalf("cancel without reason: %d %.300s", code, b)
	}
	code, b := post("/console/outbound/cancel", url.Values{"id": {"q1"}, "csrf": {csrf}, "reason": {"sent by mistake <b>"}})
	if code != 200 || !strings.Contains(b, "Cancelled: no further attempt") || !strings.Contains(b, "sent by mistake &lt;b&gt;") {
		t.Fatalf("cancel: %d %.2000s", code, b)
	}
	if q, _ := f.store.Get(ctx, "q1"); q.State != outbound.Cancelled || q.Reason != "sent by mistake <b>" || f.woken != 1 {
		t.Fatalf("after cancel: %s %q, woken %d", q.State, q.Reason, f.woken)
	}
	// A second cancel (a double click) finds it final: refused, not audited.
	if code, b := post("/console/outbound/cancel", url.Values{"id": {"q1"}, "csrf": {csrf}, "reason": {"again"}}); code != http.StatusConflict || !strings.Contains(b, "cancelled already") {
		t.Fatalf("cancel of a cancelled message: %d %.300s", code, b)
	}
	// Resend of the failed one; a delivered one is refused.
	if code, b := post("/console/outbound/resend", url.Values{"id": {"d1"}, "csrf": {csrf}}); code != http.StatusConflict || !strings.Contains(b, "only a failed or cancelled") {
		t.Fatalf("resend of a delivered message: %d %.300s", code, b)
	}
	if code, b := post("/console/outbound/resend", url.Values{"id": {"f1"}, "csrf": {csrf}}); code != 200 || !strings.Contains(b, "Queued again under the same Message-ID") {
		t.Fatalf("resend: %d %.300s", code, b)
	}
	if x, _ := f.store.Get(ctx, "f1"); x.State != outbound.Queued || f.woken != 2 {
		t.Fatalf("after resend: %s, woken %d", x.State, f.woken)
	}
	recs, _ := f.audit.Query(ctx, audit.Query{Partner: "acme"})
	var got []string
	for _, r := range recs {
		if r.Step != audit.StepOperator || !strings.Contains(r.Actor, "127.0.0.1") || !strings.HasPrefix(r.Disposition, "outbound ") {
			t.Errorf("audit record %+v: not an operator action with its actor", r)
		}
		got = append(got, r.MessageID+" "+r.Decision+" "+r.Error)
	}
	if want := "q1@gw cancelled reason: sent by mistake <b>|f1@gw resent "; strings.Join(got, "|") != want {
		t.Fatalf("audit %q, want %q", strings.Join(got, "|"), want)
	}
	// The detail page shows the operator's actions.
	if b := get(t, f.client, u+"/console/outbound/message?id=q1"); !strings.Contains(b, "reason: sent by mistake &lt;b&gt;") {
		t.Errorf("detail without the cancel in its audit trail")
	}
}

func TestOutboundHiddenWithoutStore(t *testing.T) {
	f := newOutboundFixture(t, false)
	b := get(t, f.client, f.srv.URL+"/console/")
	if strings.Contains(b, "nav-outbound") || strings.Contains(b, "Outbound queued") {
		t.Error("nav or dashboard show the outbound queue without a store")
	}
	for _, p := range []string{"/console/outbound", "/console/outbound/message?id=q1", "/console/outbound/evidence?id=d1", "/console/outbound/payload?id=d1"} {
		resp, err := f.client.Get(f.srv.URL + p)
		if body(t, resp, err); resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s without a store: %d, want 404", p, resp.StatusCode)
		}
	}
	resp, err := f.client.PostForm(f.srv.URL+"/console/outbound/resend", url.Values{"id": {"f1"}})
	if body(t, resp, err); resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusForbidden {
		t.Errorf("resend without a store: %d", resp.StatusCode)
	}
	if f.store.lists != 0 {
		t.Error("the store was read")
	}
}

// TestOutboundPagesOverTheMemoryStore: the pages and actions over the real
// in-memory queue (outbound.Memory), states reached through its own
// operations.
func TestOutboundPagesOverTheMemoryStore(t *testing.T) {
	ctx := context.Background()
	clock := time.Now().Add(-time.Hour)
	mem := outbound.NewMemory(outbound.MemoryClock(func() time.Time { clock = clock.Add(time.Second); return clock }))
	for _, id := range []string{"m1", "m2", "m3"} {
		if _, _, err := mem.Submit(ctx, outbound.Message{ID: id, Partner: "acme", Protocol: outbound.AS4, MessageID: id + "@gw", Filename: id + ".xml"},
			strings.NewReader("<x/>")); err != nil {
			t.Fatal(err)
		}
	}
	first, err := mem.Lease(ctx, 1, time.Hour)
	if err != nil || len(first) != 1 || first[0].ID != "m1" {
		t.Fatalf("lease: %v %v", first, err)
	}
	if err := mem.Failed(ctx, "m1", first[0].LeaseToken, "EBMS:0004 <other>", nil); err != nil {
		t.Fatal(err)
	}
	clock = time.Now() // m2's lease runs from the real now: held while the test runs
	if second, err := mem.Lease(ctx, 1, time.Hour); err != nil || len(second) != 1 || second[0].ID != "m2" {
		t.Fatalf("second lease: %v %v", second, err)
	}
	f := newOutboundFixture(t, false)
	con, err := New(Source{Audit: f.audit, Record: f.audit.Write, Outbound: mem, Notify: func() { f.woken++ },
		Partners: func() (*partners.Directory, []certs.Cert, time.Duration) { return nil, nil, time.Hour }}, "", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(con.Handler())
	defer srv.Close()
	for state, want := range map[string]string{"": "m3 m2 m1", "sending": "m2", "queued": "m3 m2", "failed": "m1"} {
		if got := strings.Join(ids(get(t, f.client, srv.URL+"/console/outbound?state="+state)), " "); got != want {
			t.Errorf("tab %q: %q, want %q", state, got, want)
		}
	}
	b := get(t, f.client, srv.URL+"/console/outbound/message?id=m1")
	csrf := csrfRE.FindStringSubmatch(b)
	if csrf == nil || !strings.Contains(b, "EBMS:0004 &lt;other&gt;") {
		t.Fatalf("detail of m1: %.2000s", b)
	}
	resp, err := f.client.PostForm(srv.URL+"/console/outbound/resend", url.Values{"id": {"m1"}, "csrf": {csrf[1]}})
	body(t, resp, err)
	resp, err = f.client.PostForm(srv.URL+"/console/outbound/cancel", url.Values{"id": {"m2"}, "csrf": {csrf[1]}, "reason": {"stop"}})
	body(t, resp, err)
	m1, _ := mem.Get(ctx, "m1")
	m2, _ := mem.Get(ctx, "m2")
	if m1.State != outbound.Queued || m2.State != outbound.Cancelled || m2.Reason != "stop" || f.woken != 2 {
		t.Fatalf("after resend and cancel: m1 %s, m2 %s %q, woken %d", m1.State, m2.State, m2.Reason, f.woken)
	}
}

// The detail page shows a message's AS4 part properties in their order,
// escaped (a submitter controls them); a message without shows no row.
func TestOutboundDetailShowsPartProperties(t *testing.T) {
	f := newOutboundFixture(t, true)
	m := outbound.Message{ID: "p1", Partner: "acme", Protocol: outbound.AS4, MessageID: "p1@gw", State: outbound.Queued,
		Created: f.base, Updated: f.base, NextAttempt: f.base, Size: 3, SHA256: strings.Repeat("e", 64),
		Properties: []outbound.Property{{Name: "BDEWDocumentType", Value: "UTILMD"}, {Name: "BDEWDocumentNo", Value: "4711"},
			{Name: "app:Note", Value: `<img src=x onerror=alert(1)> & "q"`}}}
	f.store.put(m, "UNB")
	b := get(t, f.client, f.srv.URL+"/console/outbound/message?id=p1")
	i := strings.Index(b, `id="outbound-properties"`)
	if i < 0 {
		t.Fatalf("no part properties on the detail page: %.3000s", b)
	}
	row := b[i:]
	row = row[:strings.Index(row, "</tr>")]
	want := []string{"BDEWDocumentType</span> = UTILMD", "BDEWDocumentNo</span> = 4711", "app:Note</span> = &lt;img src=x onerror=alert(1)&gt; &amp; &#34;q&#34;"}
	last := -1
	for _, w := range want {
		j := strings.Index(row, w)
		if j < 0 || j < last {
			t.Errorf("properties row lacks %q (or out of order): %s", w, row)
		}
		last = j
	}
	if strings.Contains(b, "<img") {
		t.Error("a property value is not escaped")
	}
	if b := get(t, f.client, f.srv.URL+"/console/outbound/message?id=q1"); strings.Contains(b, `id="outbound-properties"`) {
		t.Error("a message without properties shows a properties row")
	}
}
