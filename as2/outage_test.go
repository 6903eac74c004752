package as2

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/edigateway/gateway/dedup/deduptest"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/mdn"
)

// TestRetransmissionAfterStoreOutage: the store goes down while the handler
// runs and the handler fails, so the claim cannot be abandoned. Once the
// store is back, the partner's retransmission is processed at once instead
// of getting 503 until the lease (a minute here) runs out.
func TestRetransmissionAfterStoreOutage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	fl := deduptest.NewFlaky(e.store)
	e.ep.cfg.Pipeline.Store = fl
	var calls atomic.Int32
	e.handler.setFail(func(*exchange.Message) error {
		if calls.Add(1) == 1 {
			fl.Down.Store(true)
			return errors.New("ERP unreachable")
		}
		return nil
	})
	c := e.client()
	m := prepare(t, c, "outage")
	if r, err := c.Send(context.Background(), m); err != nil || r.Status != http.StatusServiceUnavailable {
		t.Fatalf("first delivery: %+v %v, want HTTP 503 (the handler failed)", r, err)
	}
	fl.Down.Store(false)
	resp, body := e.post(t, m.Header, m.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("retransmission after the store came back: HTTP %d (Retry-After %q) %q, want the MDN at once",
			resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	expectMDN(t, resp, body, mdn.DispProcessed)
	if n := calls.Load(); n != 2 {
		t.Errorf("handler ran %d times, want 2 (failed, then the retransmission)", n)
	}
}
