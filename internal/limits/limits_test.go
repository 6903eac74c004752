package limits

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestCollect(t *testing.T) {
	data := make([]byte, 3<<20+17)
	rand.Read(data)
	for _, tc := range []struct {
		name string
		o    CollectOptions
	}{
		{"known size", CollectOptions{SizeHint: int64(len(data))}},
		{"unknown size, spooled", CollectOptions{SpoolDir: t.TempDir()}},
		{"unknown size, in memory", CollectOptions{MemThreshold: 8 << 20}},
	} {
		// iotest-like reader that returns odd chunk sizes
		got, err := Collect(struct{ io.Reader }{bytes.NewReader(data)}, tc.o)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s: %d bytes, %v", tc.name, len(got), err)
		}
		if cap(got) != len(got) && tc.o.MemThreshold == 0 {
			t.Errorf("%s: cap %d for %d bytes", tc.name, cap(got), len(got))
		}
	}
	if _, err := Collect(bytes.NewReader(data), CollectOptions{Max: 1 << 20}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("over Max: %v", err)
	}
	stop := errors.New("stop")
	var seen int64
	_, err := Collect(bytes.NewReader(data), CollectOptions{Check: func(n int64) error {
		seen = n
		if n > 1<<20 {
			return stop
		}
		return nil
	}})
	if !errors.Is(err, stop) || seen > 1<<20+ChunkSize {
		t.Fatalf("check: stopped at %d, %v", seen, err)
	}
	if got, err := Collect(strings.NewReader(""), CollectOptions{}); err != nil || len(got) != 0 {
		t.Fatalf("empty: %q %v", got, err)
	}
}

func TestInflationRatio(t *testing.T) {
	l := Inflation{MaxRatio: 100}
	if err := l.CheckRatio(DefaultRatioFloor, 10); err != nil {
		t.Fatalf("at the floor: %v", err)
	}
	if err := l.CheckRatio(DefaultRatioFloor+1, 10); !errors.Is(err, ErrRatio) {
		t.Fatalf("past the floor: %v", err)
	}
	if err := l.CheckRatio(10<<20, 1<<20); err != nil {
		t.Fatalf("ratio 10: %v", err)
	}
	if err := (Inflation{}).CheckRatio(1<<30, 1); err != nil {
		t.Fatalf("no cap: %v", err)
	}
}

func TestBudget(t *testing.T) {
	b := NewBudget(100)
	r1, r2 := b.Reserve(), b.Reserve()
	if err := r1.Grow(60); err != nil {
		t.Fatal(err)
	}
	if err := r2.Grow(50); !errors.Is(err, ErrBusy) {
		t.Fatalf("over what is left: %v", err)
	}
	if err := r2.Grow(101); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("over the whole budget: %v", err)
	}
	if err := r2.Grow(40); err != nil || b.Used() != 100 {
		t.Fatalf("the rest: %v, used %d", err, b.Used())
	}
	r1.Release()
	r1.Release()
	if b.Used() != 40 {
		t.Fatalf("used %d after release", b.Used())
	}
	var none *Budget
	if err := none.Reserve().Grow(1 << 40); err != nil {
		t.Fatalf("unlimited: %v", err)
	}
}

// serve runs h behind Handler on a real loopback server; configure, when
// given, changes the server's settings before it starts.
func serve(t *testing.T, o BodyOptions, configure ...func(*http.Server)) (*httptest.Server, chan error) {
	t.Helper()
	errs := make(chan error, 16)
	srv := httptest.NewUnstartedServer(Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.Copy(io.Discard, r.Body)
		errs <- err
		if Refuse(w, err) {
			return
		}
		if err != nil {
			http.Error(w, err.Error(), 400)
		}
	}), o))
	for _, c := range configure {
		c(srv.Config)
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, errs
}

type slowReader struct {
	n     int
	delay time.Duration
}

func (s *slowReader) Read(p []byte) (int, error) {
	if s.n == 0 {
		return 0, io.EOF
	}
	time.Sleep(s.delay)
	s.n--
	p[0] = 'x'
	return 1, nil
}

func TestHandlerRefusals(t *testing.T) {
	budget := NewBudget(8 << 20)
	srv, _ := serve(t, BodyOptions{MaxBytes: 10 << 20, Budget: budget, Amplification: 2, Log: slog.New(slog.DiscardHandler)})
	post := func(body io.Reader, length int64) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, body)
		req.ContentLength = length
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			// A refused upload may reset the connection before the client
			// reads the answer.
			if strings.Contains(err.Error(), "reset") || strings.Contains(err.Error(), "broken pipe") {
				return &http.Response{StatusCode: http.StatusRequestEntityTooLarge, Header: http.Header{}}
			}
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	if resp := post(bytes.NewReader(make([]byte, 1<<20)), 1<<20); resp.StatusCode != 200 {
		t.Fatalf("1 MiB: %d", resp.StatusCode)
	}
	// 5 MiB × 2 is more than the whole budget: never possible, 413.
	if resp := post(bytes.NewReader(make([]byte, 5<<20)), 5<<20); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("over the budget: %d", resp.StatusCode)
	}
	if resp := post(bytes.NewReader(make([]byte, 11<<20)), 11<<20); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("over MaxBytes: %d", resp.StatusCode)
	}
	// Another request holds most of the budget: 503 with Retry-After, for a
	// known length before reading and for a chunked body while reading.
	held := budget.Reserve()
	if err := held.Grow(6 << 20); err != nil {
		t.Fatal(err)
	}
	resp := post(bytes.NewReader(make([]byte, 2<<20)), 2<<20)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("budget taken, known length: %d %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	resp = post(struct{ io.Reader }{bytes.NewReader(make([]byte, 2<<20))}, -1)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("budget taken, chunked: %d %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	held.Release()
	if resp := post(struct{ io.Reader }{bytes.NewReader(make([]byte, 2<<20))}, -1); resp.StatusCode != 200 {
		t.Fatalf("chunked within the budget: %d", resp.StatusCode)
	}
	// 11 MiB chunked: over the whole budget (and MaxBytes) while reading.
	if resp := post(struct{ io.Reader }{bytes.NewReader(make([]byte, 11<<20))}, -1); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked over the budget: %d", resp.StatusCode)
	}
	if u := budget.Used(); u != 0 {
		t.Fatalf("%d bytes still reserved", u)
	}
}

// TestSlowBodyIsCutOff: a real client over loopback sending one byte every
// 50 ms against a minimum of 1 KiB/s after 300 ms is cut off with 408 long
// before the server's read timeout; a client at full speed passes.
func TestSlowBodyIsCutOff(t *testing.T) {
	srv, errs := serve(t, BodyOptions{MinRate: 1 << 10, Grace: 300 * time.Millisecond, Log: slog.New(slog.DiscardHandler)},
		func(s *http.Server) { s.ReadTimeout = time.Minute }) // set before it serves: no race with its goroutines
	start := time.Now()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, &slowReader{n: 1000, delay: 50 * time.Millisecond})
	req.ContentLength = 1000
	resp, err := http.DefaultClient.Do(req)
	took := time.Since(start)
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestTimeout {
			t.Fatalf("slow body: HTTP %d, want 408", resp.StatusCode)
		}
	}
	if took > 5*time.Second {
		t.Fatalf("slow body held the connection for %s", took)
	}
	if err := <-errs; !errors.Is(err, ErrTooSlow) {
		t.Fatalf("handler saw %v", err)
	}
	// Raw connection: the server closes it.
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nabc")
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, _ := io.ReadAll(conn)
	if !bytes.Contains(b, []byte(" 408 ")) {
		t.Fatalf("raw slow body: %q", b)
	}
	<-errs
	req, _ = http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(make([]byte, 4<<20)))
	resp, err = http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("fast body: %v %v", resp, err)
	}
	resp.Body.Close()
}
