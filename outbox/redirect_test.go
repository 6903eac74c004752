package outbox

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// An MDN URL answering with a redirect must not count as delivered: Go's
// client turns a redirected POST into a GET without the MDN, and the 200 of
// that GET marked the delivery done although the partner never got the MDN.
func TestDispatcherRedirectIsNotDelivered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := newClock()
	st := NewMemory(MemoryClock(clk.Now))
	var gets atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/mdn" {
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
			return
		}
		if r.Method == http.MethodGet {
			gets.Add(1)
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	d := delivery("a")
	d.URL = srv.URL + "/mdn"
	if err := st.Enqueue(ctx, d); err != nil {
		t.Fatal(err)
	}
	var logs logBuf
	if _, err := newDispatcher(st, clk, &logs).RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	got, s, _ := st.Get(ctx, "a")
	if s != Pending || got.Attempts != 1 || gets.Load() != 0 {
		t.Fatalf("state %s, attempts %d, GETs followed %d; want pending, 1, 0 (last error %q)", s, got.Attempts, gets.Load(), got.LastError)
	}
}

type leaseRecorder struct {
	*Memory
	lease time.Duration
}

func (l *leaseRecorder) Lease(ctx context.Context, limit int, lease time.Duration) ([]Delivery, error) {
	l.lease = lease
	return l.Memory.Lease(ctx, limit, lease)
}

// A leased batch is posted Concurrency at a time, so its last delivery may
// start only after (Batch/Concurrency - 1) timeouts; the default lease must
// cover that, or another gateway sharing the queue leases it again and the
// MDN is posted twice.
func TestDispatcherDefaultLeaseCoversTheWholeBatch(t *testing.T) {
	st := &leaseRecorder{Memory: NewMemory()}
	d := &Dispatcher{Store: st, Timeout: 10 * time.Second, Batch: 16, Concurrency: 4}
	if _, err := d.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := 4*10*time.Second + 30*time.Second; st.lease != want {
		t.Fatalf("lease %s, want %s", st.lease, want)
	}
}
