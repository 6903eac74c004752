package outbound_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/outbound"
)

// clock is a settable clock shared by a Memory and a Sender.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) Advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// transmitter is a fake Transmitter: it reads the payload, records the
// posting of its SHA-256, then answers what answer says (Deliver when
// nil). It counts the transmissions (postings the store accepted) per
// message id and notes any message transmitted twice at the same time.
type transmitter struct {
	answer func(ctx context.Context, m outbound.Message, n int) outbound.Attempt

	mu      sync.Mutex
	calls   map[string]int
	active  map[string]int
	doubles int
	seen    []outbound.Message
}

func newTransmitter(answer func(ctx context.Context, m outbound.Message, n int) outbound.Attempt) *transmitter {
	return &transmitter{answer: answer, calls: map[string]int{}, active: map[string]int{}}
}

func (f *transmitter) Transmit(ctx context.Context, m outbound.Message, open func() (io.ReadCloser, error), posting func(string) error) outbound.Attempt {
	rc, err := open()
	if err != nil {
		return outbound.Attempt{Outcome: outbound.Retry, Reason: "open: " + err.Error()}
	}
	h := sha256.New()
	_, err = io.Copy(h, rc)
	rc.Close()
	if err != nil {
		return outbound.Attempt{Outcome: outbound.Retry, Reason: "read: " + err.Error()}
	}
	// The store refuses the posting of a message whose lease was taken
	// over: nothing leaves then, and nothing is counted.
	if err := posting("sha-256:" + hex.EncodeToString(h.Sum(nil))); err != nil {
		return outbound.Attempt{Outcome: outbound.Retry, Reason: err.Error()}
	}
	f.mu.Lock()
	f.calls[m.ID]++
	n := f.calls[m.ID]
	f.active[m.ID]++
	if f.active[m.ID] > 1 {
		f.doubles++
	}
	f.seen = append(f.seen, m)
	f.mu.Unlock()
	defer func() { f.mu.Lock(); f.active[m.ID]--; f.mu.Unlock() }()
	if f.answer == nil {
		return outbound.Attempt{Outcome: outbound.Deliver, Evidence: &outbound.Evidence{Kind: "mdn", Disposition: "processed", Body: []byte("mdn of " + m.MessageID)}}
	}
	return f.answer(ctx, m, n)
}

func (f *transmitter) count(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[id]
}

// auditLog is an in-memory audit sink.
type auditLog struct {
	mu   sync.Mutex
	recs []audit.Record
}

func (a *auditLog) Write(_ context.Context, r audit.Record) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.recs = append(a.recs, r)
	return nil
}

func (a *auditLog) step(s audit.Step) []audit.Record {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []audit.Record
	for _, r := range a.recs {
		if r.Step == s {
			out = append(out, r)
		}
	}
	return out
}

// observer records the Sender's observations.
type observer struct {
	mu  sync.Mutex
	got []string
}

func (o *observer) Attempt(partner string, p outbound.Protocol, outcome string, d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, partner+"/"+string(p)+"/"+outcome)
}

func (o *observer) list() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.got...)
}

// syncBuf is a log buffer several goroutines write.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncBuf) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *syncBuf) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

func testLogger(t *testing.T) (*slog.Logger, *syncBuf) {
	buf := &syncBuf{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("sender logs:\n%s", buf.String())
		}
	})
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

// running is a Sender's Run in the background.
type running struct {
	s      *outbound.Sender
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// start runs a Sender on cfg until the test ends.
func start(t *testing.T, cfg outbound.SenderConfig) *running {
	t.Helper()
	if cfg.Log == nil {
		cfg.Log, _ = testLogger(t)
	}
	s := outbound.NewSender(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{s: s, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- s.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop ends Run and waits for it (once; later calls return at once).
func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	r.once.Do(func() {
		select {
		case err := <-r.done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Run returned %v, want context.Canceled", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("Run did not return after its context ended")
		}
	})
}

// waitFor polls cond until it holds (10 s at most).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func get(t *testing.T, st outbound.Store, id string) outbound.Message {
	t.Helper()
	m, err := st.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("Get %s: %v", id, err)
	}
	return m
}

// settled waits until message id is not leased and has made n attempts.
func settled(t *testing.T, st outbound.Store, id string, n int) outbound.Message {
	t.Helper()
	var m outbound.Message
	waitFor(t, fmt.Sprintf("message %s settled after %d attempts", id, n), func() bool {
		m = get(t, st, id)
		return m.LeaseToken == "" && m.Attempts == n
	})
	return m
}

var msgSeq struct {
	mu sync.Mutex
	n  int
}

// submit queues a message for acme over AS2 straight into the store.
func submit(t *testing.T, st outbound.Store, payload string) outbound.Message {
	t.Helper()
	msgSeq.mu.Lock()
	msgSeq.n++
	n := msgSeq.n
	msgSeq.mu.Unlock()
	m := outbound.Message{ID: fmt.Sprintf("m%06d", n), Partner: "acme", Protocol: outbound.AS2,
		MessageID: fmt.Sprintf("<m%06d@test>", n)}
	got, _, err := st.Submit(context.Background(), m, strings.NewReader(payload))
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	return got
}

func policy(p outbound.RetryPolicy) func(string, outbound.Protocol) outbound.RetryPolicy {
	return func(string, outbound.Protocol) outbound.RetryPolicy { return p }
}
