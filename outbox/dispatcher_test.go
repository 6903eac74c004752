package outbox

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// receiver is an async MDN endpoint double: it records requests and answers
// with the statuses queued in fail (then 200).
type receiver struct {
	mu       sync.Mutex
	requests []recorded
	statuses []int
	srv      *httptest.Server
}

type recorded struct {
	header http.Header
	body   []byte
}

func newReceiver(t *testing.T, statuses ...int) *receiver {
	r := &receiver{statuses: statuses}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.requests = append(r.requests, recorded{req.Header.Clone(), b})
		st := 200
		if len(r.statuses) > 0 {
			st, r.statuses = r.statuses[0], r.statuses[1:]
		}
		r.mu.Unlock()
		w.WriteHeader(st)
		_, _ = io.WriteString(w, "answer body")
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) got() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recorded(nil), r.requests...)
}

type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *logBuf) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

func newDispatcher(st Store, clk *fakeClock, logs io.Writer) *Dispatcher {
	return &Dispatcher{Store: st, Now: clk.Now, Jitter: func() float64 { return 0.5 }, MaxAttempts: 3,
		Log: slog.New(slog.NewTextHandler(logs, nil)), Timeout: 5 * time.Second, UserAgent: "gateway-test",
		Authorize: allowLoopback}
}

// allowLoopback permits the test receivers, which listen on loopback.
func allowLoopback(context.Context, Delivery) (Permit, error) {
	return Permit{Private: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}, nil
}

func TestBackoff(t *testing.T) {
	for _, c := range []struct {
		n    int
		want time.Duration
	}{{0, 30 * time.Second}, {1, 30 * time.Second}, {2, time.Minute}, {3, 2 * time.Minute}, {7, 32 * time.Minute}, {8, time.Hour}, {1000, time.Hour}} {
		if got := Backoff(c.n, 30*time.Second, time.Hour); got != c.want {
			t.Errorf("Backoff(%d) = %s, want %s", c.n, got, c.want)
		}
	}
}

func TestDispatcherDeliversWithHeadersAndBody(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := newClock()
	st := NewMemory(MemoryClock(clk.Now))
	rcv := newReceiver(t)
	d := delivery("a")
	d.URL = rcv.srv.URL + "/mdn"
	d.Header.Set("AS2-From", "GATEWAY")
	if err := st.Enqueue(ctx, d); err != nil {
		t.Fatal(err)
	}
	var logs logBuf
	disp := newDispatcher(st, clk, &logs)
	n, err := disp.RunOnce(ctx)
	if err != nil || n != 1 {
		t.Fatalf("RunOnce: %d %v", n, err)
	}
	got := rcv.got()
	if len(got) != 1 || string(got[0].body) != "mdn a" || got[0].header.Get("AS2-From") != "GATEWAY" ||
		got[0].header.Get("Content-Type") != "multipart/report" || got[0].header.Get("User-Agent") != "gateway-test" {
		t.Fatalf("received %+v", got)
	}
	if _, s, _ := st.Get(ctx, "a"); s != Delivered {
		t.Fatalf("state %s", s)
	}
	if n, _ := disp.RunOnce(ctx); n != 0 {
		t.Fatalf("delivered delivery leased again")
	}
	l := logs.String()
	if !strings.Contains(l, "partner=acme") || !strings.Contains(l, "message_id=<m-a@acme>") || !strings.Contains(l, "outbox: delivered") || strings.Contains(l, "mdn a") {
		t.Fatalf("log line: %s", l)
	}
}

func TestDispatcherRetriesWithBackoffThenGivesUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := newClock()
	st := NewMemory(MemoryClock(clk.Now))
	rcv := newReceiver(t, 500, 503, 502, 500)
	d := delivery("a")
	d.URL = strings.Replace(rcv.srv.URL, "http://", "http://user:secret@", 1) + "/mdn?token=abc"
	if err := st.Enqueue(ctx, d); err != nil {
		t.Fatal(err)
	}
	var logs logBuf
	disp := newDispatcher(st, clk, &logs)

	disp.RunOnce(ctx)
	got, s, _ := st.Get(ctx, "a")
	// 30s·2^0 with jitter 0.5 in [15s, 30s] = 22.5s.
	if s != Pending || got.Attempts != 1 || !got.NextAttempt.Equal(clk.Now().Add(22500*time.Millisecond)) || !strings.Contains(got.LastError, "500") {
		t.Fatalf("after first failure: %s %+v", s, got)
	}
	if n, _ := disp.RunOnce(ctx); n != 0 {
		t.Fatal("attempted before its backoff passed")
	}
	clk.Advance(23 * time.Second)
	disp.RunOnce(ctx)
	got, _, _ = st.Get(ctx, "a")
	if got.Attempts != 2 || !got.NextAttempt.Equal(clk.Now().Add(45*time.Second)) || !strings.Contains(got.LastError, "503") {
		t.Fatalf("after second failure: %+v", got)
	}
	clk.Advance(45 * time.Second)
	disp.RunOnce(ctx)
	got, s, _ = st.Get(ctx, "a")
	if s != GaveUp || got.Attempts != 3 || !strings.Contains(got.LastError, "502") {
		t.Fatalf("after third failure (MaxAttempts 3): %s %+v", s, got)
	}
	if len(rcv.got()) != 3 {
		t.Fatalf("%d attempts reached the receiver", len(rcv.got()))
	}
	l := logs.String()
	if strings.Contains(l, "secret") || strings.Contains(l, "token=abc") {
		t.Fatalf("credentials in log: %s", l)
	}
	if strings.Count(l, "will retry") != 2 || strings.Count(l, "gave up") != 1 || strings.Count(l, "partner=acme") != 3 {
		t.Fatalf("one line per attempt expected:\n%s", l)
	}
}

func TestDispatcherGivesUpAfterMaxAge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := newClock()
	st := NewMemory(MemoryClock(clk.Now))
	// Nothing listens on this port: every attempt fails to connect.
	d := delivery("a")
	d.URL = "http://127.0.0.1:1/mdn"
	st.Enqueue(ctx, d)
	disp := newDispatcher(st, clk, io.Discard)
	disp.MaxAttempts = 100
	disp.MaxAge = time.Hour
	disp.RunOnce(ctx)
	if _, s, _ := st.Get(ctx, "a"); s != Pending {
		t.Fatalf("state %s", s)
	}
	clk.Advance(2 * time.Hour)
	disp.RunOnce(ctx)
	got, s, _ := st.Get(ctx, "a")
	if s != GaveUp || got.Attempts != 2 || got.LastError == "" {
		t.Fatalf("after max age: %s %+v", s, got)
	}
}

func TestDispatcherRefusesNonHTTPURL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := newClock()
	st := NewMemory(MemoryClock(clk.Now))
	d := delivery("a")
	d.URL = "file:///etc/passwd"
	st.Enqueue(ctx, d)
	newDispatcher(st, clk, io.Discard).RunOnce(ctx)
	got, _, _ := st.Get(ctx, "a")
	if got.Attempts != 1 || !strings.Contains(got.LastError, "scheme") {
		t.Fatalf("%+v", got)
	}
}

func TestDispatcherRunNotifyAndShutdown(t *testing.T) {
	t.Parallel()
	st := NewMemory()
	var hits atomic.Int64
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hang" {
			<-block
		}
		hits.Add(1)
	}))
	defer srv.Close()
	defer close(block)
	disp := &Dispatcher{Store: st, PollInterval: time.Hour, Log: slog.New(slog.DiscardHandler), Authorize: allowLoopback,
		StopTimeout: 300 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- disp.Run(ctx) }()

	// Run is waiting for an hour; Notify makes it deliver now.
	d := delivery("a")
	d.URL = srv.URL + "/ok"
	st.Enqueue(context.Background(), d)
	disp.Notify()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, s, _ := st.Get(context.Background(), "a"); s == Delivered {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Notify did not wake Run")
		}
		time.Sleep(5 * time.Millisecond)
	}

	// A stop while an attempt waits for its answer longer than
	// StopTimeout: the request was sent, so the attempt counts and the
	// delivery is due again at once, for another gateway.
	h := delivery("h")
	h.URL = srv.URL + "/hang"
	st.Enqueue(context.Background(), h)
	disp.Notify()
	time.Sleep(100 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if err != context.Canceled {
			t.Fatalf("Run returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop")
	}
	got, s, _ := st.Get(context.Background(), "h")
	if s != Pending || got.Attempts != 1 || !strings.Contains(got.LastError, "no answer before the gateway stopped") ||
		got.NextAttempt.After(time.Now()) {
		t.Fatalf("interrupted delivery: %s %+v", s, got)
	}
	if again, _ := st.Lease(context.Background(), 10, time.Minute); len(again) != 1 {
		t.Fatalf("the interrupted delivery is not due at once for another gateway: %v", again)
	}
}
