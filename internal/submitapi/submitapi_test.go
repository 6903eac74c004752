package submitapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/internal/heaptest"
	"github.com/edigateway/gateway/outbound"
)

var (
	errUnknownPartner = errors.New("unknown partner")
	errNoSending      = errors.New("partner does not send with that protocol")
)

// submitter is the Queue's stand-in: partners "acme" (as2) and "both"
// (as2 and as4) send, "receiver" only receives, others are unknown.
type submitter struct {
	store outbound.Store
	fail  error
}

func (s *submitter) Submit(ctx context.Context, sub outbound.Submission) (outbound.Message, bool, error) {
	if s.fail != nil {
		return outbound.Message{}, false, s.fail
	}
	switch sub.Partner {
	case "acme", "both":
	case "receiver":
		return outbound.Message{}, false, fmt.Errorf("queue: %s: %w", sub.Partner, errNoSending)
	default:
		return outbound.Message{}, false, fmt.Errorf("queue: %s: %w", sub.Partner, errUnknownPartner)
	}
	if sub.Protocol == "" {
		sub.Protocol = outbound.AS2
	}
	if sub.Partner == "acme" && sub.Protocol != outbound.AS2 {
		return outbound.Message{}, false, fmt.Errorf("queue: %s %s: %w", sub.Partner, sub.Protocol, errNoSending)
	}
	id := outbound.NewID(time.Now())
	m := outbound.Message{ID: id, MessageID: "<" + id + "@test>", Partner: sub.Partner, Protocol: sub.Protocol,
		IdempotencyKey: sub.IdempotencyKey, Source: sub.Source, ContentType: sub.ContentType, Filename: sub.Filename,
		Subject: sub.Subject, Service: sub.Service, Action: sub.Action, ConversationID: sub.ConversationID}
	return s.store.Submit(ctx, m, sub.Payload)
}

func newAPI(t *testing.T) (*httptest.Server, *outbound.Memory, *submitter) {
	t.Helper()
	st := outbound.NewMemory()
	sub := &submitter{store: st}
	srv := httptest.NewServer(New(Config{Submitter: sub, Store: st, MaxPayload: 1 << 20,
		Errors: []ErrorStatus{{errUnknownPartner, http.StatusNotFound}, {errNoSending, http.StatusUnprocessableEntity}}}))
	t.Cleanup(srv.Close)
	return srv, st, sub
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func do(t *testing.T, method, url string, hdr map[string]string, body io.Reader) reply {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header, b}
}

func decode[T any](t *testing.T, r reply) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("%d %s: %v", r.status, r.body, err)
	}
	return v
}

func wantError(t *testing.T, r reply, status int, contains string) Error {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	e := decode[Error](t, r)
	if !strings.HasPrefix(e.Incident, "GW-") || !strings.Contains(e.Error, contains) {
		t.Fatalf("error %+v, want an incident and %q", e, contains)
	}
	return e
}

func TestSubmitQueuesOnceAndReplaysTheKey(t *testing.T) {
	srv, st, _ := newAPI(t)
	url := srv.URL + Prefix + "/messages?partner=acme&filename=inv.edi&subject=Invoice"
	hdr := map[string]string{"Idempotency-Key": "k-1", "Content-Type": "application/edi-x12"}
	r := do(t, "POST", url, hdr, strings.NewReader("ISA*00*payload"))
	if r.status != http.StatusAccepted {
		t.Fatalf("POST: %d %s", r.status, r.body)
	}
	s := decode[Submitted](t, r)
	if s.ID == "" || s.MessageID != "<"+s.ID+"@test>" || s.Partner != "acme" || s.Protocol != "as2" || s.State != "queued" ||
		s.StatusURL != Prefix+"/messages/"+s.ID || r.header.Get("Location") != s.StatusURL {
		t.Fatalf("submitted %+v, Location %q", s, r.header.Get("Location"))
	}
	m, err := st.Get(context.Background(), s.ID)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("ISA*00*payload"))
	if m.SHA256 != hex.EncodeToString(sum[:]) || m.Source != "http" || m.ContentType != "application/edi-x12" ||
		m.Filename != "inv.edi" || m.Subject != "Invoice" || m.IdempotencyKey != "k-1" {
		t.Fatalf("stored %+v", m)
	}

	// The same key and payload: the same message, 200, replayed.
	r = do(t, "POST", url, hdr, strings.NewReader("ISA*00*payload"))
	if r.status != http.StatusOK || r.header.Get("Idempotent-Replayed") != "true" || decode[Submitted](t, r).ID != s.ID {
		t.Fatalf("replay: %d %v %s", r.status, r.header, r.body)
	}
	// The same key with another payload: 409 naming the message.
	r = do(t, "POST", url, hdr, strings.NewReader("ISA*00*other"))
	if e := wantError(t, r, http.StatusConflict, "another payload"); e.ID != s.ID {
		t.Fatalf("409 names %q, want %s", e.ID, s.ID)
	}
	// The same key and payload with another protocol: 409.
	both := srv.URL + Prefix + "/messages?partner=both"
	if r := do(t, "POST", both, hdr, strings.NewReader("ISA*00*payload")); r.status != http.StatusAccepted {
		t.Fatalf("the key for another partner: %d %s", r.status, r.body)
	}
	wantError(t, do(t, "POST", both+"&protocol=as4", hdr, strings.NewReader("ISA*00*payload")), http.StatusConflict, "sent with as2")
	// Without a key every POST is a new message.
	a := decode[Submitted](t, do(t, "POST", url, nil, strings.NewReader("x")))
	b := decode[Submitted](t, do(t, "POST", url, nil, strings.NewReader("x")))
	if a.ID == "" || a.ID == b.ID || a.ID == s.ID {
		t.Fatalf("keyless POSTs: %s %s (first %s)", a.ID, b.ID, s.ID)
	}
	if ms, _ := st.List(context.Background(), outbound.Filter{}); len(ms) != 4 {
		t.Fatalf("%d messages queued, want 4", len(ms))
	}
}

func TestSubmitRefusals(t *testing.T) {
	srv, st, sub := newAPI(t)
	base := srv.URL + Prefix + "/messages"
	payload := func() io.Reader { return strings.NewReader("payload") }
	wantError(t, do(t, "POST", base+"?partner=nobody", nil, payload()), http.StatusNotFound, "unknown partner")
	wantError(t, do(t, "POST", base+"?partner=receiver", nil, payload()), http.StatusUnprocessableEntity, "does not send")
	wantError(t, do(t, "POST", base+"?partner=acme&protocol=as4", nil, payload()), http.StatusUnprocessableEntity, "does not send")
	wantError(t, do(t, "POST", base+"?partner=acme&protocol=ftp", nil, payload()), http.StatusBadRequest, "not as2 or as4")
	wantError(t, do(t, "POST", base, nil, payload()), http.StatusBadRequest, "partner is required")
	wantError(t, do(t, "POST", base+"?partner=acme&colour=red", nil, payload()), http.StatusBadRequest, "unknown parameter")
	wantError(t, do(t, "POST", base+"?partner=acme&filename=../x", nil, payload()), http.StatusBadRequest, "path")
	wantError(t, do(t, "POST", base+"?partner=acme", map[string]string{"Idempotency-Key": strings.Repeat("k", 300)}, payload()),
		http.StatusBadRequest, "Idempotency-Key")
	// Too large: announced by Content-Length, or streamed without one.
	wantError(t, do(t, "POST", base+"?partner=acme", nil, strings.NewReader(strings.Repeat("x", 1<<20+1))),
		http.StatusRequestEntityTooLarge, "max_payload_bytes")
	wantError(t, do(t, "POST", base+"?partner=acme", nil, io.MultiReader(strings.NewReader(strings.Repeat("x", 1<<20)), strings.NewReader("y"))),
		http.StatusRequestEntityTooLarge, "nothing queued")
	// Exactly the limit is taken.
	if r := do(t, "POST", base+"?partner=acme", nil, io.MultiReader(strings.NewReader(strings.Repeat("x", 1<<20)))); r.status != http.StatusAccepted {
		t.Fatalf("payload of exactly the limit: %d %s", r.status, r.body)
	}
	if ms, _ := st.List(context.Background(), outbound.Filter{}); len(ms) != 1 {
		t.Fatalf("%d messages queued, want only the one within the limit", len(ms))
	}
	// An error nobody mapped: 500 without the detail.
	sub.fail = errors.New("disk on fire")
	if e := wantError(t, do(t, "POST", base+"?partner=acme", nil, payload()), http.StatusInternalServerError, "internal error"); strings.Contains(e.Error, "fire") {
		t.Fatalf("500 shows the detail: %+v", e)
	}
	wantError(t, do(t, "GET", srv.URL+Prefix+"/nothing", nil, nil), http.StatusNotFound, "no such resource")
}

func TestStatusEvidenceListCancelResend(t *testing.T) {
	srv, st, _ := newAPI(t)
	ctx := context.Background()
	base := srv.URL + Prefix + "/messages"
	post := func(partner string) Submitted {
		r := do(t, "POST", base+"?partner="+partner, nil, strings.NewReader("p-"+partner))
		if r.status != http.StatusAccepted {
			t.Fatalf("POST: %d %s", r.status, r.body)
		}
		return decode[Submitted](t, r)
	}
	get := func(id string) Status {
		r := do(t, "GET", base+"/"+id, nil, nil)
		if r.status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", id, r.status, r.body)
		}
		return decode[Status](t, r)
	}
	a := post("acme")
	s := get(a.ID)
	if s.State != "queued" || s.Size != 6 || s.SHA256 == "" || s.Attempts != 0 || s.NextAttempt == nil || s.Final || s.Evidence != nil {
		t.Fatalf("status %+v", s)
	}
	wantError(t, do(t, "GET", base+"/"+a.ID+"/evidence", nil, nil), http.StatusNotFound, "no MDN")
	wantError(t, do(t, "GET", base+"/nosuch", nil, nil), http.StatusNotFound, "no such message")
	wantError(t, do(t, "GET", base+"/nosuch/evidence", nil, nil), http.StatusNotFound, "no such message")

	// Leased: "sending"; then delivered with an MDN.
	leased, err := st.Lease(ctx, 1, time.Minute)
	if err != nil || len(leased) != 1 {
		t.Fatal(leased, err)
	}
	if s := get(a.ID); s.State != "sending" {
		t.Fatalf("leased message shows %q, want sending", s.State)
	}
	if sending := decode[List](t, do(t, "GET", base+"?state=sending", nil, nil)); len(sending.Messages) != 1 {
		t.Fatalf("state=sending lists %d", len(sending.Messages))
	}
	tok := leased[0].LeaseToken
	if err := st.Posting(ctx, a.ID, tok, "mic"); err != nil {
		t.Fatal(err)
	}
	ev := &outbound.Evidence{Kind: "mdn", ContentType: "multipart/signed; boundary=x", Body: []byte("the MDN"),
		Disposition: "automatic-action/MDN-sent-automatically; processed", Signer: "CN=acme", Received: time.Now()}
	if err := st.Delivered(ctx, a.ID, tok, ev); err != nil {
		t.Fatal(err)
	}
	s = get(a.ID)
	if s.State != "delivered" || !s.Final || s.Attempts != 1 || s.NextAttempt != nil || s.Evidence == nil ||
		s.Evidence.Kind != "mdn" || s.Evidence.Signer != "CN=acme" || s.Evidence.Size != 7 || s.Evidence.URL != StatusURL(a.ID)+"/evidence" {
		t.Fatalf("delivered status %+v %+v", s, s.Evidence)
	}
	r := do(t, "GET", base+"/"+a.ID+"/evidence", nil, nil)
	if r.status != 200 || string(r.body) != "the MDN" || r.header.Get("Content-Type") != ev.ContentType || r.header.Get("X-Evidence-Kind") != "mdn" {
		t.Fatalf("evidence: %d %v %q", r.status, r.header, r.body)
	}
	// A delivered message is neither cancelled nor resent.
	wantError(t, do(t, "POST", base+"/"+a.ID+"/cancel", nil, strings.NewReader(`{"reason":"x"}`)), http.StatusConflict, "final")
	wantError(t, do(t, "POST", base+"/"+a.ID+"/resend", nil, nil), http.StatusConflict, "final")

	b := post("both")
	wantError(t, do(t, "POST", base+"/"+b.ID+"/resend", nil, nil), http.StatusConflict, "not in a final state")
	wantError(t, do(t, "POST", base+"/"+b.ID+"/cancel", nil, strings.NewReader(`{"reasn":"x"}`)), http.StatusBadRequest, "reason")
	r = do(t, "POST", base+"/"+b.ID+"/cancel", nil, strings.NewReader(`{"reason":"wrong file"}`))
	if c := decode[Status](t, r); r.status != 200 || c.State != "cancelled" || c.Reason != "wrong file" {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	wantError(t, do(t, "POST", base+"/nosuch/cancel", nil, nil), http.StatusNotFound, "no such message")
	r = do(t, "POST", base+"/"+b.ID+"/resend", nil, nil)
	if c := decode[Status](t, r); r.status != 200 || c.State != "queued" || c.MessageID != b.MessageID {
		t.Fatalf("resend: %d %s", r.status, r.body)
	}

	// Lists: newest first, filtered, paged.
	c := post("acme")
	l := decode[List](t, do(t, "GET", base, nil, nil))
	if len(l.Messages) != 3 || l.Messages[0].ID != c.ID || l.NextBefore != nil {
		t.Fatalf("list: %+v", l)
	}
	if l := decode[List](t, do(t, "GET", base+"?partner=acme&state=queued", nil, nil)); len(l.Messages) != 1 || l.Messages[0].ID != c.ID {
		t.Fatalf("acme queued: %+v", l)
	}
	if l := decode[List](t, do(t, "GET", base+"?state=delivered,cancelled", nil, nil)); len(l.Messages) != 1 || l.Messages[0].ID != a.ID {
		t.Fatalf("delivered or cancelled: %+v", l)
	}
	p1 := decode[List](t, do(t, "GET", base+"?limit=2", nil, nil))
	if len(p1.Messages) != 2 || p1.NextBefore == nil {
		t.Fatalf("page 1: %+v", p1)
	}
	wantError(t, do(t, "GET", base+"?state=lost", nil, nil), http.StatusBadRequest, "state")
	wantError(t, do(t, "GET", base+"?limit=0", nil, nil), http.StatusBadRequest, "limit")
	wantError(t, do(t, "GET", base+"?before=yesterday", nil, nil), http.StatusBadRequest, "before")
}

// TestListPagesThroughMessagesCreatedInOneInstant: 7 messages share one
// Created (a bulk in one millisecond); pages of 3 following next_before and
// next_before_id list each once, newest first (by id within the instant).
// A client sending before= alone gets what it got before: the messages
// created strictly before it.
func TestListPagesThroughMessagesCreatedInOneInstant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	created := time.Date(2026, 12, 5, 1, 0, 0, 123_000_000, time.UTC)
	st := outbound.NewMemory(outbound.MemoryClock(func() time.Time { return created }))
	srv := httptest.NewServer(New(Config{Submitter: &submitter{store: st}, Store: st, MaxPayload: 1 << 20}))
	t.Cleanup(srv.Close)
	base := srv.URL + "/api/v1/outbound/messages"
	var want []string
	for i := range 7 {
		id := fmt.Sprintf("m%02d", i)
		if _, _, err := st.Submit(ctx, outbound.Message{ID: id, MessageID: "<" + id + "@test>", Partner: "acme",
			Protocol: outbound.AS2}, strings.NewReader("x")); err != nil {
			t.Fatal(err)
		}
		want = append([]string{id}, want...)
	}
	var got []string
	u := base + "?limit=3"
	for range 5 {
		l := decode[List](t, do(t, "GET", u, nil, nil))
		for _, m := range l.Messages {
			got = append(got, m.ID)
		}
		if l.NextBefore == nil {
			break
		}
		if !l.NextBefore.Equal(created) || l.NextBeforeID != l.Messages[len(l.Messages)-1].ID {
			t.Fatalf("cursor %v %q, want the last message's Created %v and id", l.NextBefore, l.NextBeforeID, created)
		}
		u = base + "?limit=3&before=" + url.QueryEscape(l.NextBefore.Format(time.RFC3339Nano)) +
			"&before_id=" + url.QueryEscape(l.NextBeforeID)
	}
	if !slices.Equal(got, want) {
		t.Errorf("paging by 3 listed %v, want %v", got, want)
	}
	older := base + "?before=" + url.QueryEscape(created.Format(time.RFC3339Nano))
	if l := decode[List](t, do(t, "GET", older, nil, nil)); len(l.Messages) != 0 {
		t.Errorf("before= alone listed %d messages created at it, want none", len(l.Messages))
	}
	if l := decode[List](t, do(t, "GET", older+"&before_id=m03", nil, nil)); len(l.Messages) != 3 {
		t.Errorf("before_id=m03 listed %+v, want m02, m01, m00", l.Messages)
	}
	wantError(t, do(t, "GET", base+"?before_id=m03", nil, nil), http.StatusBadRequest, "before_id needs before")
}

// discardSubmitter streams a payload to nowhere, counting and hashing it.
type discardSubmitter struct{ n int64 }

func (d *discardSubmitter) Submit(ctx context.Context, s outbound.Submission) (outbound.Message, bool, error) {
	h := sha256.New()
	n, err := io.Copy(h, s.Payload)
	if err != nil {
		return outbound.Message{}, false, err
	}
	d.n = n
	return outbound.Message{ID: "big", MessageID: "<big@test>", Partner: s.Partner, Protocol: outbound.AS2,
		Size: n, SHA256: hex.EncodeToString(h.Sum(nil)), State: outbound.Queued}, true, nil
}

// pattern yields n bytes without holding them.
type pattern struct{ left int64 }

func (p *pattern) Read(b []byte) (int, error) {
	if p.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(b)) > p.left {
		b = b[:p.left]
	}
	for i := range b {
		b[i] = byte(i)
	}
	p.left -= int64(len(b))
	return len(b), nil
}

func TestSubmitStreams200MiBWithBoundedHeap(t *testing.T) {
	const size = 200 << 20
	d := &discardSubmitter{}
	srv := httptest.NewServer(New(Config{Submitter: d, Store: outbound.NewMemory(), MaxPayload: 1 << 30}))
	defer srv.Close()
	var r reply
	alloc := heaptest.Allocated(func() {
		req, err := http.NewRequest("POST", srv.URL+Prefix+"/messages?partner=acme", &pattern{left: size})
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = size
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		r = reply{status: resp.StatusCode, body: b}
	})
	if r.status != http.StatusAccepted || d.n != size {
		t.Fatalf("%d %s, %d bytes submitted", r.status, r.body, d.n)
	}
	t.Logf("200 MiB POST allocated %d KiB in all (client and server)", alloc>>10)
	if alloc > 32<<20 {
		t.Fatalf("a 200 MiB POST allocated %d MiB: the payload is not streamed", alloc>>20)
	}
}

// slow yields its bytes over more than the server's WriteTimeout.
type slow struct {
	chunks int
	pause  time.Duration
}

func (s *slow) Read(b []byte) (int, error) {
	if s.chunks == 0 {
		return 0, io.EOF
	}
	time.Sleep(s.pause)
	s.chunks--
	return copy(b, "0123456789"), nil
}

func TestSubmitSlowerThanTheServersWriteTimeoutIsAnswered(t *testing.T) {
	st := outbound.NewMemory()
	srv := httptest.NewUnstartedServer(New(Config{Submitter: &submitter{store: st}, Store: st}))
	srv.Config.WriteTimeout = 200 * time.Millisecond
	srv.Start()
	defer srv.Close()
	req, err := http.NewRequest("POST", srv.URL+Prefix+"/messages?partner=acme", &slow{chunks: 6, pause: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("a submission that took longer than WriteTimeout got no answer: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("status %d", resp.StatusCode)
	}
}
