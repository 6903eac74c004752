package limits

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// TestBudgetShares (issue 22 item 2): one source address, and the requests
// naming one partner, hold at most their share; a request bigger than its
// share can never be had (413), one past what its source or partner holds
// now waits its turn (503), and other senders keep the rest.
func TestBudgetShares(t *testing.T) {
	b := NewBudget(100)
	b.SetShares(50, 40)
	a1, a2 := b.ReserveFor("10.0.0.1", ""), b.ReserveFor("10.0.0.1", "")
	if err := a1.Grow(40); err != nil {
		t.Fatal(err)
	}
	if err := a2.Grow(20); !errors.Is(err, ErrBusy) {
		t.Fatalf("past the source's share: %v, want ErrBusy", err)
	}
	if err := a2.Grow(51); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("over the source's share: %v, want ErrTooLarge", err)
	}
	other := b.ReserveFor("10.0.0.2", "")
	if err := other.Grow(50); err != nil {
		t.Fatalf("another source: %v", err)
	}
	a1.Release()
	if err := a2.Grow(20); err != nil {
		t.Fatalf("after the source's release: %v", err)
	}
	if s, _ := b.UsedBy("10.0.0.1", ""); s != 20 {
		t.Fatalf("source holds %d, want 20", s)
	}
	a2.Release()
	other.Release()

	p1, p2 := b.ReserveFor("10.0.0.3", "DEMO"), b.ReserveFor("10.0.0.4", "DEMO")
	if err := p1.Grow(30); err != nil {
		t.Fatal(err)
	}
	if err := p2.Grow(20); !errors.Is(err, ErrBusy) {
		t.Fatalf("past the partner's share: %v, want ErrBusy", err)
	}
	if err := b.ReserveFor("10.0.0.4", "OTHER").Grow(20); err != nil {
		t.Fatalf("another partner: %v", err)
	}
	p1.Shrink(20)
	if err := p2.Grow(20); err != nil {
		t.Fatalf("after the partner's reservation shrank: %v", err)
	}
	if _, p := b.UsedBy("", "DEMO"); p != 30 {
		t.Fatalf("partner holds %d, want 30", p)
	}
	p1.Release()
	p2.Release()
	if _, p := b.UsedBy("", "DEMO"); p != 0 || b.Used() != 20 {
		t.Fatalf("partner holds %d, budget %d after release, want 0 and 20", p, b.Used())
	}

	// A partner named after the body began (AS4's eb:From) is charged what
	// the request holds already.
	demo := b.ReserveFor("10.0.0.6", "DEMO")
	if err := demo.Grow(20); err != nil {
		t.Fatal(err)
	}
	early := b.ReserveFor("10.0.0.5", "")
	if err := early.Grow(30); err != nil {
		t.Fatal(err)
	}
	if err := early.Claim("DEMO"); !errors.Is(err, ErrBusy) {
		t.Fatalf("claiming a partner past its share: %v, want ErrBusy", err)
	}
	if err := early.Claim("THIRD"); err != nil {
		t.Fatal(err)
	}
	if _, p := b.UsedBy("", "THIRD"); p != 30 {
		t.Fatalf("claimed partner holds %d, want 30", p)
	}
	demo.Release()
	if err := early.Grow(20); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("past the claimed partner's share: %v, want ErrTooLarge", err)
	}
	early.Release()
	if _, p := b.UsedBy("", "THIRD"); p != 0 {
		t.Fatalf("claimed partner holds %d after release", p)
	}

	// No shares: one source may take it all.
	b = NewBudget(100)
	if err := b.ReserveFor("10.0.0.1", "DEMO").Grow(100); err != nil {
		t.Fatal(err)
	}
}

// TestStreamedBodyReservesWhatArrives (issue 22 item 2): a streamed body
// held a fixed 8 MiB from its first byte, so that 140 bodies trickling in at
// 6 KB/s took the whole budget. Its reservation now starts at StreamBase
// and grows with the bytes that arrive, up to StreamReserve.
func TestStreamedBodyReservesWhatArrives(t *testing.T) {
	budget := NewBudget(64 << 20)
	var mu sync.Mutex
	var seen []int64
	srv := httptest.NewServer(Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res := ReservationFrom(r.Context())
		buf := make([]byte, 64<<10)
		for {
			_, err := io.ReadFull(r.Body, buf)
			mu.Lock()
			seen = append(seen, res.Held())
			mu.Unlock()
			if err != nil {
				if !errors.Is(err, io.ErrUnexpectedEOF) && err != io.EOF {
					Refuse(w, err)
				}
				return
			}
		}
	}), BodyOptions{Budget: budget, StreamAbove: 1 << 20, StreamReserve: 8 << 20}))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, io.LimitReader(zeros{}, 100<<20))
	req.ContentLength = 100 << 20
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTP %d", resp.StatusCode)
	}
	mu.Lock()
	defer mu.Unlock()
	if first := seen[0]; first > DefaultStreamBase+(64<<10)+streamStep {
		t.Fatalf("after the first 64 KiB, %d bytes reserved, want at most %d", first, DefaultStreamBase+(64<<10)+streamStep)
	}
	if last := seen[len(seen)-1]; last != 8<<20 {
		t.Fatalf("at the end %d bytes reserved, want StreamReserve (%d)", last, 8<<20)
	}
	if budget.Used() != 0 {
		t.Fatalf("%d bytes still reserved", budget.Used())
	}
}

// TestBudgetGivesMemoryBack (issue 22 item 1): after large reservations
// are released, the heap's free memory is returned to the operating
// system, at most once per interval and never for small ones.
func TestBudgetGivesMemoryBack(t *testing.T) {
	b := NewBudget(1 << 30)
	var mu sync.Mutex
	calls := 0
	b.giveBack = func() { mu.Lock(); calls++; mu.Unlock() }
	b.SetGiveBack(32<<20, 300*time.Millisecond)
	count := func() int { mu.Lock(); defer mu.Unlock(); return calls }
	small := b.Reserve()
	small.Grow(1 << 20)
	for range 64 {
		small.Release()
		small.Grow(1 << 20)
	}
	// Something else is reserved throughout: only the threshold counts.
	other := b.Reserve()
	other.Grow(1)
	defer other.Release()
	time.Sleep(200 * time.Millisecond)
	if n := count(); n != 0 {
		t.Fatalf("%d returns after small releases, want none", n)
	}
	big := func() {
		r := b.Reserve()
		if err := r.Grow(40 << 20); err != nil {
			t.Fatal(err)
		}
		r.Release()
	}
	big()
	time.Sleep(250 * time.Millisecond)
	if n := count(); n != 1 {
		t.Fatalf("%d returns after a large release, want 1", n)
	}
	big() // within the interval: returned once it has passed
	time.Sleep(100 * time.Millisecond)
	if n := count(); n != 1 {
		t.Fatalf("%d returns within the interval, want 1", n)
	}
	time.Sleep(500 * time.Millisecond)
	if n := count(); n != 2 {
		t.Fatalf("%d returns after the interval, want 2", n)
	}
	// Below the threshold, but the last request is done: returned.
	time.Sleep(300 * time.Millisecond)
	other.Release()
	small.Release()
	r := b.Reserve()
	r.Grow(8 << 20)
	r.Release()
	time.Sleep(250 * time.Millisecond)
	if n := count(); n != 3 {
		t.Fatalf("%d returns after the last request of a burst, want 3", n)
	}
	// Released while a return runs: returned by the next one.
	inside := make(chan struct{})
	b.mu.Lock()
	b.giveBack = func() {
		mu.Lock()
		calls++
		first := calls == 4
		mu.Unlock()
		if first {
			close(inside)
			time.Sleep(100 * time.Millisecond)
		}
	}
	b.mu.Unlock()
	time.Sleep(300 * time.Millisecond)
	big()
	<-inside
	big()
	time.Sleep(600 * time.Millisecond)
	if n := count(); n != 5 {
		t.Fatalf("%d returns, want 5: what was released during a return was not returned", n)
	}
}
