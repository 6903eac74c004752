// Package outboundcheck holds the tests the SQL stores' outbound queues
// share beyond the conformance kit (outbound/outboundtest): idempotent
// submission under concurrency, a large payload streamed in bounded memory,
// the fencing of leases, and the cost of a lease with a long queue waiting.
package outboundcheck

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edigateway/gateway/outbound"
)

// Hooks reach into the store under test.
type Hooks struct {
	// Chunks counts the payload chunk rows stored (orphans included).
	Chunks func(t testing.TB) int
}

// Message returns a message to submit to partner.
func Message(partner, key string) outbound.Message {
	id := outbound.NewID(time.Now())
	return outbound.Message{ID: id, Partner: partner, Protocol: outbound.AS2, MessageID: "<" + id + "@gw.test>",
		IdempotencyKey: key, Source: "api", ContentType: "application/edi-x12", Filename: "po.x12"}
}

// IdempotentSubmit submits one key from 20 goroutines at once: one message
// is created, every submission returns it, and no payload chunk is left
// behind by the others.
func IdempotentSubmit(t *testing.T, s outbound.Store, h Hooks) {
	ctx := context.Background()
	const n = 20
	var (
		wg      sync.WaitGroup
		created atomic.Int32
		ids     = make([]string, n)
		errs    = make([]error, n)
		start   = make(chan struct{})
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			m := Message("acme", "order-42")
			got, c, err := s.Submit(ctx, m, bytes.NewReader(bytes.Repeat([]byte{'x'}, 300<<10)))
			if c {
				created.Add(1)
			}
			ids[i], errs[i] = got.ID, err
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Submit %d: %v", i, err)
		}
	}
	if c := created.Load(); c != 1 {
		t.Fatalf("%d submissions created a message, want 1", c)
	}
	for i := range ids {
		if ids[i] != ids[0] {
			t.Fatalf("submission %d returned %s, submission 0 %s", i, ids[i], ids[0])
		}
	}
	ms, err := s.List(ctx, outbound.Filter{Partner: "acme"})
	if err != nil || len(ms) != 1 {
		t.Fatalf("List = %d messages, %v; want 1", len(ms), err)
	}
	// Another partner's key is another message.
	if _, c, err := s.Submit(ctx, Message("other", "order-42"), bytes.NewReader(nil)); err != nil || !c {
		t.Fatalf("Submit of the key for another partner: created %v, %v", c, err)
	}
	if h.Chunks != nil {
		if got := h.Chunks(t); got != 2 { // 300 KiB: two chunks of one message
			t.Fatalf("%d chunk rows stored, want the 2 of the one message", got)
		}
	}
}

// genReader yields size pseudo-random bytes without holding them.
type genReader struct {
	r    *rand.ChaCha8
	left int64
}

func (g *genReader) Read(p []byte) (int, error) {
	if g.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > g.left {
		p = p[:g.left]
	}
	n, _ := g.r.Read(p)
	g.left -= int64(n)
	return n, nil
}

func payload(size int64) io.Reader {
	return &genReader{r: rand.NewChaCha8([32]byte{1, 2, 3}), left: size}
}

// peakHeap runs fn while sampling the heap and returns the highest heap
// growth seen over the heap before fn.
func peakHeap(fn func()) uint64 {
	old := debug.SetGCPercent(10)
	defer debug.SetGCPercent(old)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var peak atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > base && ms.HeapAlloc-base > peak.Load() {
				peak.Store(ms.HeapAlloc - base)
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	fn()
	close(stop)
	<-done
	return peak.Load()
}

// LargePayload submits 20 MiB and reads it back: the bytes and digest
// match, and neither way holds the payload in memory (the heap grows by
// well under its size).
func LargePayload(t *testing.T, s outbound.Store) {
	ctx := context.Background()
	const size = 20 << 20
	const bound = 10 << 20
	want := sha256.New()
	if _, err := io.Copy(want, payload(size)); err != nil {
		t.Fatal(err)
	}
	wantSum := hex.EncodeToString(want.Sum(nil))

	var m outbound.Message
	grew := peakHeap(func() {
		var err error
		m, _, err = s.Submit(ctx, Message("acme", ""), payload(size))
		if err != nil {
			t.Errorf("Submit: %v", err)
		}
	})
	t.Logf("Submit of %d MiB: heap grew by at most %.1f MiB", size>>20, float64(grew)/(1<<20))
	if t.Failed() {
		t.FailNow()
	}
	if m.Size != size || m.SHA256 != wantSum {
		t.Fatalf("stored size %d sha256 %s, want %d %s", m.Size, m.SHA256, size, wantSum)
	}
	if grew > bound {
		t.Errorf("Submit grew the heap by %d bytes for a %d-byte payload: not streamed", grew, size)
	}

	var n int64
	h := sha256.New()
	grew = peakHeap(func() {
		rc, err := s.OpenPayload(ctx, m.ID)
		if err != nil {
			t.Errorf("OpenPayload: %v", err)
			return
		}
		defer rc.Close()
		n, err = io.CopyBuffer(h, rc, make([]byte, 32<<10))
		if err != nil {
			t.Errorf("reading the payload: %v", err)
		}
	})
	t.Logf("OpenPayload of %d MiB: heap grew by at most %.1f MiB", size>>20, float64(grew)/(1<<20))
	if got := hex.EncodeToString(h.Sum(nil)); n != size || got != wantSum {
		t.Fatalf("read back %d bytes sha256 %s, want %d %s", n, got, size, wantSum)
	}
	if grew > bound {
		t.Errorf("reading grew the heap by %d bytes for a %d-byte payload: not streamed", grew, size)
	}
	if _, err := s.OpenPayload(ctx, "no-such-id"); !errors.Is(err, outbound.ErrNotFound) {
		t.Errorf("OpenPayload of an unknown id: %v, want ErrNotFound", err)
	}
}

// failingReader fails after some bytes, as a client that goes away.
type failingReader struct{ left int }

func (f *failingReader) Read(p []byte) (int, error) {
	if f.left <= 0 {
		return 0, errors.New("client went away")
	}
	n := min(len(p), f.left)
	clear(p[:n])
	f.left -= n
	return n, nil
}

// FailedSubmit: a payload that cannot be read to its end stores nothing.
func FailedSubmit(t *testing.T, s outbound.Store, h Hooks) {
	ctx := context.Background()
	m := Message("acme", "k1")
	if _, _, err := s.Submit(ctx, m, &failingReader{left: 700 << 10}); err == nil {
		t.Fatal("Submit of a payload that fails: no error")
	}
	if _, err := s.Get(ctx, m.ID); !errors.Is(err, outbound.ErrNotFound) {
		t.Fatalf("Get after a failed Submit: %v, want ErrNotFound", err)
	}
	if h.Chunks != nil {
		if n := h.Chunks(t); n != 0 {
			t.Fatalf("%d chunk rows left by a failed Submit", n)
		}
	}
	// The key is free: the next submission creates the message.
	if _, c, err := s.Submit(ctx, m, bytes.NewReader([]byte("ok"))); err != nil || !c {
		t.Fatalf("Submit after the failed one: created %v, %v", c, err)
	}
}

// LeaseFencing: a lease that ran out and was taken over refuses its old
// holder's outcome; a held message is not handed out twice.
func LeaseFencing(t *testing.T, s outbound.Store) {
	ctx := context.Background()
	m, _, err := s.Submit(ctx, Message("acme", ""), bytes.NewReader([]byte("hello")))
	if err != nil {
		t.Fatal(err)
	}
	a := lease1(t, s, 150*time.Millisecond)
	if a.ID != m.ID || a.LeaseToken == "" || a.State != outbound.Queued {
		t.Fatalf("leased %+v", a)
	}
	if got, err := s.Lease(ctx, 10, time.Minute); err != nil || len(got) != 0 {
		t.Fatalf("Lease while held: %d messages, %v; want none", len(got), err)
	}
	if err := s.Renew(ctx, m.ID, a.LeaseToken, 150*time.Millisecond); err != nil {
		t.Fatalf("Renew by the holder: %v", err)
	}
	time.Sleep(250 * time.Millisecond)
	b := lease1(t, s, time.Minute)
	if b.ID != m.ID || b.LeaseToken == a.LeaseToken {
		t.Fatalf("re-lease after the lease ran out: %+v", b)
	}
	for name, err := range map[string]error{
		"Renew":    s.Renew(ctx, m.ID, a.LeaseToken, time.Minute),
		"Release":  s.Release(ctx, m.ID, a.LeaseToken),
		"Posting":  s.Posting(ctx, m.ID, a.LeaseToken, "d1"),
		"Retry":    s.Retry(ctx, m.ID, a.LeaseToken, time.Now(), "x"),
		"Awaiting": s.Awaiting(ctx, m.ID, a.LeaseToken, time.Now()),
		"Failed":   s.Failed(ctx, m.ID, a.LeaseToken, "x", nil),
		"Empty":    s.Delivered(ctx, m.ID, "", nil),
	} {
		if !errors.Is(err, outbound.ErrLeaseLost) {
			t.Errorf("%s with the old token: %v, want ErrLeaseLost", name, err)
		}
	}
	if err := s.Retry(ctx, "no-such-id", b.LeaseToken, time.Now(), "x"); !errors.Is(err, outbound.ErrNotFound) {
		t.Errorf("Retry of an unknown message: %v, want ErrNotFound", err)
	}
	for _, d := range []string{"d1", "d2", "d1"} {
		if err := s.Posting(ctx, m.ID, b.LeaseToken, d); err != nil {
			t.Fatalf("Posting by the holder: %v", err)
		}
	}
	// Retry due in the past: leased again at once, in due order.
	if err := s.Retry(ctx, m.ID, b.LeaseToken, time.Now().Add(-time.Second), "503"); err != nil {
		t.Fatal(err)
	}
	c := lease1(t, s, time.Minute)
	if c.Attempts != 3 || fmt.Sprint(c.Sent) != "[d1 d2]" || c.LastError != "503" {
		t.Fatalf("after three postings and a retry: attempts %d sent %v last error %q", c.Attempts, c.Sent, c.LastError)
	}
	if err := s.Cancel(ctx, m.ID, "operator"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delivered(ctx, m.ID, c.LeaseToken, nil); !errors.Is(err, outbound.ErrLeaseLost) {
		t.Fatalf("Delivered after Cancel: %v, want ErrLeaseLost", err)
	}
	if err := s.Cancel(ctx, m.ID, "again"); !errors.Is(err, outbound.ErrFinal) {
		t.Fatalf("second Cancel: %v, want ErrFinal", err)
	}
}

func lease1(t *testing.T, s outbound.Store, d time.Duration) outbound.Message {
	t.Helper()
	ms, err := s.Lease(context.Background(), 1, d)
	if err != nil || len(ms) != 1 {
		t.Fatalf("Lease: %d messages, %v; want 1", len(ms), err)
	}
	return ms[0]
}

// Backlog is a store under test for BacklogLease.
type Backlog struct {
	Store outbound.Store
	// Wait inserts n messages of partner "bulk" due in a day, directly in
	// SQL (one statement), and refreshes the planner's statistics.
	Wait func(t testing.TB, n int)
	// Plan returns the query plan of the lease query; PlanOK reports
	// whether it walks the due index instead of scanning the table.
	Plan   func(t testing.TB) string
	PlanOK func(plan string) bool
	// Due runs the lease's query for the next due message read-only (no
	// lock, no write, no commit to wait for): the walk of the index alone.
	Due func(t testing.TB)
}

// BacklogLease measures rounds of 50 Lease calls with 100 and with 100,000
// messages waiting (not due) besides the due ones, the rounds of the two
// stores alternating so that the machine's load falls on both alike. It
// asserts behaviour only: each call leases one due message, none of the
// waiting, and (with the large backlog) the plan walks the due index; the
// timings (best and median round) are logged.
func BacklogLease(t *testing.T, open func(t testing.TB) Backlog) {
	ctx := context.Background()
	const rounds, calls = 5, 50
	sizes := []int{100, 100_000}
	stores := make([]Backlog, len(sizes))
	took := make([][]time.Duration, len(sizes))
	for i, waiting := range sizes {
		b := open(t)
		start := time.Now()
		b.Wait(t, waiting)
		fill := time.Since(start)
		for range rounds*calls + 10 {
			if _, _, err := b.Store.Submit(ctx, Message("acme", ""), bytes.NewReader([]byte("x"))); err != nil {
				t.Fatal(err)
			}
		}
		plan := b.Plan(t)
		t.Logf("%d waiting inserted in %v; lease plan:\n%s", waiting, fill.Round(time.Millisecond), plan)
		if waiting >= 100_000 && !b.PlanOK(plan) {
			t.Errorf("with %d waiting the lease query does not walk the due index:\n%s", waiting, plan)
		}
		stores[i] = b
	}
	for range rounds {
		for i, b := range stores {
			start := time.Now()
			for range calls {
				ms, err := b.Store.Lease(ctx, 1, time.Hour)
				if err != nil || len(ms) != 1 {
					t.Fatalf("Lease with %d waiting: %d messages, %v", sizes[i], len(ms), err)
				}
				if ms[0].Partner != "acme" {
					t.Fatalf("Lease handed out a waiting message: %+v", ms[0])
				}
			}
			took[i] = append(took[i], time.Since(start))
		}
	}
	// The walk alone, without the write and the commit of a lease (whose
	// fsync dominates the figures above on a busy machine).
	const probes = 200
	walk := make([][]time.Duration, len(sizes))
	for range rounds {
		for i, b := range stores {
			start := time.Now()
			for range probes {
				b.Due(t)
			}
			walk[i] = append(walk[i], time.Since(start))
		}
	}
	for i := range stores {
		slices.Sort(walk[i])
		t.Logf("%7d waiting: %d runs of the due query alone took %v best, %v median (%v per run, median)", sizes[i],
			probes, walk[i][0].Round(time.Microsecond), walk[i][rounds/2].Round(time.Microsecond),
			(walk[i][rounds/2] / probes).Round(time.Microsecond))
	}
	for i, b := range stores {
		slices.Sort(took[i])
		t.Logf("%7d waiting: %d Lease calls took %v best, %v median (%v per call, median)", sizes[i], calls,
			took[i][0].Round(time.Microsecond), took[i][rounds/2].Round(time.Microsecond),
			(took[i][rounds/2] / calls).Round(time.Microsecond))
		st, err := b.Store.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range st {
			if s.Partner == "bulk" && s.Queued != sizes[i] {
				t.Errorf("Stats: %d bulk messages queued, want %d", s.Queued, sizes[i])
			}
		}
	}
	t.Logf("100,000 waiting vs 100: %.2fx the median time of %d leases, %.2fx that of the due query alone",
		float64(took[1][rounds/2])/float64(took[0][rounds/2]), calls,
		float64(walk[1][rounds/2])/float64(walk[0][rounds/2]))
}

// purgingReader calls purge once after the first chunk was read.
type purgingReader struct {
	left  int
	purge func()
	read  int
}

func (p *purgingReader) Read(b []byte) (int, error) {
	if p.left <= 0 {
		return 0, io.EOF
	}
	if p.read >= 300<<10 && p.purge != nil {
		time.Sleep(5 * time.Millisecond) // the purge's age is counted in milliseconds
		p.purge()
		p.purge = nil
	}
	n := min(len(b), p.left)
	clear(b[:n])
	p.left -= n
	p.read += n
	return n, nil
}

// PurgeMidway: a purge that takes a submission still being written for an
// orphan (here: an age of 0) makes that submission fail; it never leaves a
// message with part of its payload.
func PurgeMidway(t *testing.T, s outbound.Store, purge func(ctx context.Context, olderThan time.Duration) (int, error), h Hooks) {
	ctx := context.Background()
	m := Message("acme", "")
	var purged int
	r := &purgingReader{left: 1 << 20, purge: func() {
		var err error
		if purged, err = purge(ctx, 0); err != nil {
			t.Errorf("purge: %v", err)
		}
	}}
	if _, _, err := s.Submit(ctx, m, r); err == nil {
		t.Fatal("Submit whose upload was purged midway: no error")
	}
	if purged != 1 {
		t.Fatalf("the purge removed %d uploads, want the one being written", purged)
	}
	if _, err := s.Get(ctx, m.ID); !errors.Is(err, outbound.ErrNotFound) {
		t.Fatalf("Get after the purged Submit: %v, want ErrNotFound", err)
	}
	if h.Chunks != nil {
		if n := h.Chunks(t); n != 0 {
			t.Fatalf("%d chunk rows left", n)
		}
	}
}
