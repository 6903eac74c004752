package exchange

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
)

// testProtocol is a test double of a protocol: its replies carry the
// decision in the body so that tests can see which branch ran.
type testProtocol struct{ seq atomic.Int64 }

type testReplies struct {
	p *testProtocol
	m *Message
}

func (r testReplies) Accepted(ctx context.Context) (Reply, error) {
	n := r.p.seq.Add(1)
	return Reply{Status: 200, Header: http.Header{"X-Receipt": {fmt.Sprint(n)}},
		Body: []byte(fmt.Sprintf("receipt %d for %s\x00\xff", n, r.m.MessageID)), Disposition: "processed"}, nil
}

func (r testReplies) Duplicate(ctx context.Context, stored Reply, d dedup.Decision) (Reply, error) {
	stored.Disposition = "processed/warning: duplicate-document"
	return stored, nil
}

func (r testReplies) Failed(ctx context.Context, f *Failure) (Reply, error) {
	return Reply{Status: 200, Body: []byte(fmt.Sprintf("failed kind=%d: %v", f.Kind, f.Err)), Disposition: "processed/error: unexpected-processing-error"}, nil
}

func (p *testProtocol) inbound(partner, id, payload string) Inbound {
	body := MemoryBody(payload)
	m := &Message{Partner: partner, Protocol: "test", MessageID: id,
		TransportKey: dedup.TransportKey("test", "t", partner, id),
		Payloads:     []Payload{NewPayload(Payload{SHA256: sha(payload), Size: int64(len(payload))}, body)}}
	return Inbound{Message: m, Replies: testReplies{p, m}}
}

func sha(s string) string {
	var sp Spool
	_, _, h, _ := sp.Bytes([]byte(s))
	return h
}

type countingHandler struct {
	mu    sync.Mutex
	calls int
	fn    func(*Message) error
}

func (h *countingHandler) Handle(ctx context.Context, m *Message) error {
	h.mu.Lock()
	h.calls++
	h.mu.Unlock()
	if h.fn != nil {
		return h.fn(m)
	}
	return nil
}

func (h *countingHandler) n() int { h.mu.Lock(); defer h.mu.Unlock(); return h.calls }

func newPipeline(h Handler) (*Pipeline, *audit.Memory, *dedup.MemoryStore) {
	st := dedup.NewMemoryStore(dedup.Options{Lease: time.Minute})
	a := &audit.Memory{}
	return &Pipeline{Store: st, Audit: a, Handler: h, Lease: time.Minute, Log: slog.New(slog.DiscardHandler)}, a, st
}

func TestNewThenDuplicateRunsHandlerOnceAndReplaysReply(t *testing.T) {
	h := &countingHandler{}
	p, a, _ := newPipeline(h)
	proto := &testProtocol{}
	first := p.Process(context.Background(), proto.inbound("acme", "m1", "INVOIC"))
	second := p.Process(context.Background(), proto.inbound("acme", "<m1>", "INVOIC"))
	if h.n() != 1 {
		t.Fatalf("handler ran %d times", h.n())
	}
	if first.Status != 200 || string(second.Body) != string(first.Body) || second.Header.Get("X-Receipt") != "1" {
		t.Fatalf("duplicate reply %q differs from first %q", second.Body, first.Body)
	}
	if second.Disposition != "processed/warning: duplicate-document" {
		t.Errorf("disposition %q", second.Disposition)
	}
	var steps []string
	for _, r := range a.Records() {
		steps = append(steps, string(r.Step)+":"+r.Decision)
		if r.Partner != "acme" || r.Key == "" || r.PayloadSHA256 != sha("INVOIC") {
			t.Errorf("record lacks evidence: %+v", r)
		}
	}
	want := "received: decision:new handler:ok reply:accepted received: decision:duplicate reply:"
	if strings.Join(steps, " ") != want {
		t.Errorf("audit steps\n got %s\nwant %s", strings.Join(steps, " "), want)
	}
}

func TestSameIDOtherPartnerIsNew(t *testing.T) {
	h := &countingHandler{}
	p, _, _ := newPipeline(h)
	proto := &testProtocol{}
	p.Process(context.Background(), proto.inbound("acme", "m1", "x"))
	p.Process(context.Background(), proto.inbound("beta", "m1", "x"))
	if h.n() != 2 {
		t.Fatalf("handler ran %d times, want 2", h.n())
	}
}

func TestHandlerErrorAndPanicAbandonSoRetransmissionIsProcessed(t *testing.T) {
	for name, fail := range map[string]func(*Message) error{
		"error": func(*Message) error { return errors.New("erp down") },
		"panic": func(*Message) error { panic("nil map") },
	} {
		t.Run(name, func(t *testing.T) {
			failing := true
			h := &countingHandler{fn: func(m *Message) error {
				if failing {
					return fail(m)
				}
				return nil
			}}
			p, a, _ := newPipeline(h)
			proto := &testProtocol{}
			r := p.Process(context.Background(), proto.inbound("acme", "m1", "x"))
			if !strings.HasPrefix(string(r.Body), "failed kind=1") {
				t.Fatalf("reply %q is not the negative one", r.Body)
			}
			failing = false
			r = p.Process(context.Background(), proto.inbound("acme", "m1", "x"))
			if !strings.HasPrefix(string(r.Body), "receipt") || h.n() != 2 {
				t.Fatalf("retransmission not processed: %q, calls %d", r.Body, h.n())
			}
			found := false
			for _, rec := range a.Records() {
				if rec.Step == audit.StepHandler && rec.Decision == "error" && rec.Error != "" {
					found = true
				}
			}
			if !found {
				t.Error("handler failure not audited")
			}
		})
	}
}

func TestInFlightGets503WithRetryAfter(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	h := &countingHandler{fn: func(*Message) error { close(started); <-release; return nil }}
	p, _, _ := newPipeline(h)
	proto := &testProtocol{}
	done := make(chan Reply)
	go func() { done <- p.Process(context.Background(), proto.inbound("acme", "m1", "x")) }()
	<-started
	r := p.Process(context.Background(), proto.inbound("acme", "m1", "x"))
	close(release)
	first := <-done
	if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" || r.Header.Get("Retry-After") == "0" {
		t.Fatalf("in-flight reply: %d %v", r.Status, r.Header)
	}
	if first.Status != 200 || h.n() != 1 {
		t.Fatalf("first: %d, calls %d", first.Status, h.n())
	}
}

// failingStore simulates an unreachable database.
type failingStore struct{ dedup.Store }

func (failingStore) Claim(context.Context, dedup.ClaimRequest) (dedup.Decision, error) {
	return dedup.Decision{}, fmt.Errorf("dial: %w", dedup.ErrUnavailable)
}

type acceptFailsStore struct{ *dedup.MemoryStore }

func (acceptFailsStore) Accept(context.Context, dedup.Key, dedup.Token, []byte) error {
	return fmt.Errorf("connection reset: %w", dedup.ErrUnavailable)
}

func TestStoreUnavailableNeverGivesPositiveReply(t *testing.T) {
	h := &countingHandler{}
	p, _, _ := newPipeline(h)
	p.Store = failingStore{}
	r := p.Process(context.Background(), (&testProtocol{}).inbound("acme", "m1", "x"))
	if r.Status != 503 || r.Header.Get("Retry-After") != "30" || h.n() != 0 {
		t.Fatalf("reply %d %v, handler calls %d", r.Status, r.Header, h.n())
	}

	mem := dedup.NewMemoryStore(dedup.Options{Lease: time.Minute})
	p.Store = acceptFailsStore{mem}
	r = p.Process(context.Background(), (&testProtocol{}).inbound("acme", "m2", "x"))
	if r.Status != 503 {
		t.Fatalf("accept failure answered %d", r.Status)
	}
	// The claim was abandoned: a retransmission is processed.
	p.Store = mem
	r = p.Process(context.Background(), (&testProtocol{}).inbound("acme", "m2", "x"))
	if r.Status != 200 {
		t.Fatalf("retransmission after failed accept: %d %q", r.Status, r.Body)
	}
}

type failingSink struct{ failOn audit.Step }

func (f failingSink) Write(_ context.Context, r audit.Record) error {
	if r.Step == f.failOn {
		return errors.New("disk full")
	}
	return nil
}

func TestDurableAuditFailureAbandonsClaim(t *testing.T) {
	h := &countingHandler{}
	p, _, _ := newPipeline(h)
	p.Audit = failingSink{audit.StepHandler}
	proto := &testProtocol{}
	r := p.Process(context.Background(), proto.inbound("acme", "m1", "x"))
	if r.Status != 503 {
		t.Fatalf("reply %d, want 503 when the audit cannot be written", r.Status)
	}
	p.Audit = &audit.Memory{}
	r = p.Process(context.Background(), proto.inbound("acme", "m1", "x"))
	if r.Status != 200 || !strings.HasPrefix(string(r.Body), "receipt") {
		t.Fatalf("retransmission not processed: %d %q", r.Status, r.Body)
	}

	// A best-effort sink never fails the exchange.
	be := audit.BestEffort(failingSink{audit.StepReceived}, nil)
	p.Audit = be
	if r := p.Process(context.Background(), proto.inbound("acme", "m9", "x")); r.Status != 200 {
		t.Fatalf("best-effort failure changed the outcome: %d", r.Status)
	}
	if be.Failures() != 1 {
		t.Errorf("failures = %d", be.Failures())
	}
}

func TestDriftIsRejectedAndAudited(t *testing.T) {
	h := &countingHandler{}
	p, a, _ := newPipeline(h)
	proto := &testProtocol{}
	p.Process(context.Background(), proto.inbound("acme", "m1", "original"))
	r := p.Process(context.Background(), proto.inbound("acme", "m1", "changed"))
	if !strings.HasPrefix(string(r.Body), "failed kind=2") || !strings.Contains(string(r.Body), sha("original")) || !strings.Contains(string(r.Body), sha("changed")) {
		t.Fatalf("drift reply %q must name both hashes", r.Body)
	}
	if h.n() != 1 || p.Stats.Drift.Load() != 1 {
		t.Fatalf("handler %d, drift %d", h.n(), p.Stats.Drift.Load())
	}
	var drift bool
	for _, rec := range a.Records() {
		drift = drift || rec.Decision == "drift"
	}
	if !drift {
		t.Error("drift not audited")
	}

	in := proto.inbound("acme", "m1", "changed again")
	in.OnDrift = DriftAccept
	if r := p.Process(context.Background(), in); !strings.HasPrefix(string(r.Body), "receipt") || h.n() != 2 {
		t.Fatalf("on_drift accept: %q, calls %d", r.Body, h.n())
	}
}

func TestConcurrentDeliveriesRunHandlerOnce(t *testing.T) {
	h := &countingHandler{fn: func(*Message) error { time.Sleep(20 * time.Millisecond); return nil }}
	p, _, _ := newPipeline(h)
	proto := &testProtocol{}
	var wg sync.WaitGroup
	var ok, busy atomic.Int64
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch p.Process(context.Background(), proto.inbound("acme", "m1", "x")).Status {
			case 200:
				ok.Add(1)
			case 503:
				busy.Add(1)
			}
		}()
	}
	wg.Wait()
	if h.n() != 1 || ok.Load()+busy.Load() != 16 {
		t.Fatalf("handler %d, ok %d, busy %d", h.n(), ok.Load(), busy.Load())
	}
}

func TestReplyEncodingRoundTrip(t *testing.T) {
	in := Reply{Status: 202, Header: http.Header{"Content-Type": {"multipart/signed; boundary=x"}}, Body: []byte{0, 1, 0xff, '\r', '\n'}, Disposition: "processed"}
	b, err := EncodeReply(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeReply(b)
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != 202 || string(out.Body) != string(in.Body) || out.Header.Get("Content-Type") != "multipart/signed; boundary=x" {
		t.Fatalf("round trip: %+v", out)
	}
	if _, err := DecodeReply([]byte("garbage")); err == nil {
		t.Error("garbage decoded")
	}
}

func TestSpoolKeepsSmallInMemoryAndSpillsLarge(t *testing.T) {
	sp := &Spool{Dir: t.TempDir(), Threshold: 8}
	small, n, _, err := sp.Bytes([]byte("tiny"))
	if _, ok := small.(MemoryBody); !ok || n != 4 || err != nil {
		t.Fatalf("small: %T %d %v", small, n, err)
	}
	big, n, h, err := sp.Bytes([]byte("0123456789abcdef"))
	if _, ok := big.(FileBody); !ok || n != 16 || err != nil || h != sha("0123456789abcdef") {
		t.Fatalf("big: %T %d %v", big, n, err)
	}
	r, _ := big.Open()
	b := make([]byte, 32)
	k, _ := r.Read(b)
	r.Close()
	if string(b[:k]) != "0123456789abcdef" {
		t.Fatalf("spooled content %q", b[:k])
	}
	if err := sp.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if _, err := big.Open(); err == nil {
		t.Error("spool file not removed")
	}
}
