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

// The default lease is short (a dead gateway's deliveries are free within
// it), and the heartbeat renews it every third of it.
func TestDispatcherDefaultLease(t *testing.T) {
	st := &leaseRecorder{Memory: NewMemory()}
	d := &Dispatcher{Store: st, Timeout: 10 * time.Second, Batch: 16, Concurrency: 4}
	if _, err := d.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st.lease != DefaultLease || DefaultLease != 30*time.Second {
		t.Fatalf("lease %s (DefaultLease %s), want 30s", st.lease, DefaultLease)
	}
}
