package outboundtest

import (
	"bytes"
	"errors"
	"io"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/edigateway/gateway/outbound"
)

func (k kit) roundTrip(t T) {
	s, c := k.store(t), ctx(t)
	m := NewMessage(t, "partner-ü")
	m.Protocol = outbound.AS4
	m.IdempotencyKey = "order-4711/ü"
	want := m
	// State and outcome fields are the store's: a caller's are ignored.
	old := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	m.State, m.Attempts, m.NextAttempt, m.LastError, m.Reason = outbound.Delivered, 5, old.Add(time.Hour), "forged", "forged"
	m.Created, m.Updated, m.Sent, m.Evidence = old, old, []string{"forged"}, testEvidence("forged")
	m.LeaseToken, m.LeasedUntil, m.Size, m.SHA256 = "forged", time.Now().Add(time.Hour), 1, "forged"
	before := time.Now()
	stored := submit(t, c, s, m, testPayload)
	got := get(t, c, s, m.ID)
	for _, g := range []struct {
		m    outbound.Message
		what string
	}{{stored, "Submit"}, {got, "Get after Submit"}} {
		sameSubmitted(t, g.m, want, g.what)
		if g.m.Size != int64(len(testPayload)) || g.m.SHA256 != sha(testPayload) {
			t.Errorf("%s: size %d, sha256 %s; want %d, %s", g.what, g.m.Size, g.m.SHA256, len(testPayload), sha(testPayload))
		}
		if g.m.State != outbound.Queued || g.m.Attempts != 0 || g.m.LastError != "" || g.m.Reason != "" {
			t.Errorf("%s: state %q, attempts %d, last error %q, reason %q; want queued, 0, none, none",
				g.what, g.m.State, g.m.Attempts, g.m.LastError, g.m.Reason)
		}
		if len(g.m.Sent) != 0 || g.m.Evidence != nil || g.m.LeaseToken != "" || g.m.Sending(time.Now()) {
			t.Errorf("%s: sent %q, evidence %v, lease token %q: want none", g.what, g.m.Sent, g.m.Evidence, g.m.LeaseToken)
		}
		if !near(g.m.Created, before, ClockSkew) || !near(g.m.Updated, g.m.Created, ClockSkew) {
			t.Errorf("%s: created %v, updated %v; want now (%v)", g.what, g.m.Created, g.m.Updated, before)
		}
		if !near(g.m.NextAttempt, before, ClockSkew) {
			t.Errorf("%s: next attempt %v, want now (%v): a new message is due at once", g.what, g.m.NextAttempt, before)
		}
	}
	if !near(stored.Created, got.Created, timeSlack) {
		t.Errorf("Created %v by Submit, %v by Get", stored.Created, got.Created)
	}
	if b := payloadOf(t, c, s, m.ID); !bytes.Equal(b, testPayload) {
		t.Errorf("payload %q, want %q", b, testPayload)
	}
	leaseOnly(t, c, s, m.ID, time.Minute)
}

func (k kit) largePayload(t T) {
	s, c := k.store(t), ctx(t)
	payload := make([]byte, 5<<20)
	_, _ = mrand.NewChaCha8([32]byte{'o', 'b'}).Read(payload)
	m := NewMessage(t, "acme")
	got, created, err := s.Submit(c, m, &chunks{r: bytes.NewReader(payload), n: 3001})
	mustOK(t, err, "Submit of 5 MiB")
	if !created || got.Size != int64(len(payload)) || got.SHA256 != sha(payload) {
		t.Errorf("Submit: created %v, size %d, sha256 %s; want true, %d, %s", created, got.Size, got.SHA256, len(payload), sha(payload))
	}
	back := payloadOf(t, c, s, m.ID)
	if len(back) != len(payload) || !bytes.Equal(back, payload) {
		t.Errorf("payload read back: %d bytes, sha256 %s; want %d, %s", len(back), sha(back), len(payload), sha(payload))
	}
	// The payload can be read again (every attempt reads it).
	if again := payloadOf(t, c, s, m.ID); !bytes.Equal(again, payload) {
		t.Errorf("payload read a second time: %d bytes, want the same %d", len(again), len(payload))
	}
}

func (k kit) emptyPayload(t T) {
	s, c := k.store(t), ctx(t)
	m := NewMessage(t, "acme")
	got := submit(t, c, s, m, nil)
	if got.Size != 0 || got.SHA256 != sha(nil) {
		t.Errorf("empty payload: size %d, sha256 %s; want 0, %s", got.Size, got.SHA256, sha(nil))
	}
	if g := get(t, c, s, m.ID); g.Size != 0 || g.SHA256 != sha(nil) {
		t.Errorf("Get: size %d, sha256 %s; want 0, %s", g.Size, g.SHA256, sha(nil))
	}
	if b := payloadOf(t, c, s, m.ID); len(b) != 0 {
		t.Errorf("empty payload read back as %q", b)
	}
}

func (k kit) invalid(t T) {
	s, c := k.store(t), ctx(t)
	for name, clear := range map[string]func(*outbound.Message){
		"ID":        func(m *outbound.Message) { m.ID = "" },
		"MessageID": func(m *outbound.Message) { m.MessageID = "" },
		"Partner":   func(m *outbound.Message) { m.Partner = "" },
		"Protocol":  func(m *outbound.Message) { m.Protocol = "" },
	} {
		m := NewMessage(t, "acme")
		clear(&m)
		if _, _, err := s.Submit(c, m, bytes.NewReader(testPayload)); err == nil {
			t.Errorf("Submit without %s succeeded", name)
		}
	}
	list, err := s.List(c, outbound.Filter{})
	mustOK(t, err, "List")
	if len(list) != 0 {
		t.Errorf("List after refused Submits returned %v", ids(list))
	}
	leaseNone(t, c, s, "after refused Submits")
}

func (k kit) duplicate(t T) {
	s, c := k.store(t), ctx(t)
	first := queue(t, c, s, "acme")

	sameID := NewMessage(t, "acme")
	sameID.ID = first.ID
	if _, _, err := s.Submit(c, sameID, strings.NewReader("other")); err == nil {
		t.Errorf("a second Submit of id %s succeeded", first.ID)
	}
	sameTransport := NewMessage(t, "acme")
	sameTransport.MessageID = first.MessageID
	if _, _, err := s.Submit(c, sameTransport, strings.NewReader("other")); err == nil {
		t.Errorf("a second Submit of Message-ID %s for the same partner succeeded", first.MessageID)
	}
	_, err := s.Get(c, sameTransport.ID)
	mustNotFound(t, err, "Get of the refused message")
	got := get(t, c, s, first.ID)
	sameSubmitted(t, got, first, "after the refused Submits")
	if b := payloadOf(t, c, s, first.ID); !bytes.Equal(b, testPayload) {
		t.Errorf("payload after the refused Submits: %q", b)
	}

	// Transport ids are the partner's: another partner may have the same.
	other := NewMessage(t, "globex")
	other.MessageID = first.MessageID
	submit(t, c, s, other, []byte("for globex"))
	if f, err := s.FindByMessageID(c, "globex", first.MessageID); err != nil || f.ID != other.ID {
		t.Errorf("FindByMessageID(globex) = %s, %v; want %s", f.ID, err, other.ID)
	}
	if f, err := s.FindByMessageID(c, "acme", first.MessageID); err != nil || f.ID != first.ID {
		t.Errorf("FindByMessageID(acme) = %s, %v; want %s", f.ID, err, first.ID)
	}
}

func (k kit) idempotent(t T) {
	s, c := k.store(t), ctx(t)
	m := NewMessage(t, "acme")
	m.IdempotencyKey = "invoice-2026-0042"
	first := submit(t, c, s, m, testPayload)

	again := NewMessage(t, "acme")
	again.IdempotencyKey = m.IdempotencyKey
	got, created, err := s.Submit(c, again, unread{t, "Submit with a known key"})
	mustOK(t, err, "Submit with a known key")
	if created || got.ID != first.ID || got.MessageID != first.MessageID {
		t.Errorf("Submit with a known key: created %v, message %s (%s); want false and the first, %s (%s)",
			created, got.ID, got.MessageID, first.ID, first.MessageID)
	}
	sameSubmitted(t, got, m, "message returned for a known key")
	if got.SHA256 != sha(testPayload) {
		t.Errorf("message returned for a known key has sha256 %s, want the first payload's", got.SHA256)
	}
	_, err = s.Get(c, again.ID)
	mustNotFound(t, err, "Get of the second submission's id")

	// The same key for another partner is another message.
	otherPartner := NewMessage(t, "globex")
	otherPartner.IdempotencyKey = m.IdempotencyKey
	if got := submit(t, c, s, otherPartner, []byte("globex")); got.ID != otherPartner.ID {
		t.Errorf("Submit of the key for another partner returned %s, want %s", got.ID, otherPartner.ID)
	}
	// Without a key every submission is new.
	a, b := NewMessage(t, "acme"), NewMessage(t, "acme")
	submit(t, c, s, a, testPayload)
	submit(t, c, s, b, testPayload)
	list, err := s.List(c, outbound.Filter{Partner: "acme"})
	mustOK(t, err, "List")
	if len(list) != 3 {
		t.Errorf("acme has %v, want 3 messages", ids(list))
	}
}

func (k kit) idempotentConcurrent(t T) {
	s, c := k.store(t), ctx(t)
	const n = 20
	key := "batch-" + randomHex(t, 4)
	type result struct {
		id      string
		created bool
		err     error
	}
	results := make(chan result, n)
	g := newGate(n, 50*time.Millisecond)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		m := NewMessage(t, "acme")
		m.IdempotencyKey = key
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			got, created, err := s.Submit(c, m, g.reader(strings.Repeat("x", 1000+i)))
			results <- result{got.ID, created, err}
		}()
	}
	close(start)
	wg.Wait()
	close(results)
	created, seen := 0, map[string]int{}
	for r := range results {
		if r.err != nil {
			t.Errorf("concurrent Submit: %v", r.err)
			continue
		}
		seen[r.id]++
		if r.created {
			created++
		}
	}
	if created != 1 || len(seen) != 1 {
		t.Errorf("%d concurrent Submits with one key: %d created, ids %v; want 1 created, one id", n, created, seen)
	}
	list, err := s.List(c, outbound.Filter{})
	mustOK(t, err, "List")
	if len(list) != 1 {
		t.Errorf("List after concurrent Submits with one key: %v, want one message", ids(list))
	}
}

func (k kit) failedPayload(t T) {
	s, c := k.store(t), ctx(t)
	m := NewMessage(t, "acme")
	m.IdempotencyKey = "retry-me"
	broken := &failing{r: bytes.NewReader(bytes.Repeat([]byte("half"), 64<<10)), err: errors.New("disk on fire")}
	if _, _, err := s.Submit(c, m, broken); err == nil {
		t.Fatalf("Submit with a payload failing midway succeeded")
	}
	_, err := s.Get(c, m.ID)
	mustNotFound(t, err, "Get after the failed Submit")
	_, err = s.FindByMessageID(c, m.Partner, m.MessageID)
	mustNotFound(t, err, "FindByMessageID after the failed Submit")
	leaseNone(t, c, s, "after the failed Submit")
	// The id, transport id and key are free for the retry.
	got := submit(t, c, s, m, testPayload)
	if got.ID != m.ID || got.SHA256 != sha(testPayload) {
		t.Errorf("retried Submit returned %s with sha256 %s; want %s, %s", got.ID, got.SHA256, m.ID, sha(testPayload))
	}
	if b := payloadOf(t, c, s, m.ID); !bytes.Equal(b, testPayload) {
		t.Errorf("payload after the retried Submit: %q", b)
	}
}

// gate holds the first read of each of n payloads until all n are being
// read, or for at most wait, so that stores reading payloads concurrently
// do so at the same time and a check-then-insert race shows.
type gate struct {
	n, started int
	wait       time.Duration
	mu         sync.Mutex
	all        chan struct{}
}

func newGate(n int, wait time.Duration) *gate {
	return &gate{n: n, wait: wait, all: make(chan struct{})}
}

func (g *gate) reader(s string) io.Reader { return &gated{g: g, r: strings.NewReader(s)} }

type gated struct {
	g      *gate
	r      io.Reader
	passed bool
}

func (r *gated) Read(p []byte) (int, error) {
	if !r.passed {
		r.passed = true
		g := r.g
		g.mu.Lock()
		g.started++
		if g.started == g.n {
			close(g.all)
		}
		g.mu.Unlock()
		select {
		case <-g.all:
		case <-time.After(g.wait):
		}
	}
	return r.r.Read(p)
}
