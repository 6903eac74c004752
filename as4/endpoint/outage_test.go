package endpoint_test

import (
	"context"
	"errors"
	"testing"

	"github.com/edigateway/gateway/dedup/deduptest"
)

// TestRetransmissionAfterStoreOutage: the store goes down while the handler
// runs and the handler fails, so the claim cannot be abandoned. Once the
// store is back, the partner's retransmission gets its receipt at once
// instead of 503 until the lease (a minute here) runs out.
func TestRetransmissionAfterStoreOutage(t *testing.T) {
	t.Parallel()
	k := getKeys(t)
	h := newHarness(t, harnessOptions{})
	fl := deduptest.NewFlaky(h.store)
	h.pipeline.Store = fl
	h.handler.before = func(call int) error {
		if call == 1 {
			fl.Down.Store(true)
			return errors.New("ERP unreachable")
		}
		return nil
	}
	c := rsaClient(k)
	ctx := context.Background()
	out, err := c.Build(testMessage("outage@acme.test"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Post(ctx, h.url, out); err == nil {
		t.Fatalf("first delivery: receipt, want an error signal (the handler failed)")
	}
	fl.Down.Store(false)
	again, err := c.Post(ctx, h.url, out)
	if err != nil {
		t.Fatalf("retransmission after the store came back: %v (HTTP %d, Retry-After %q), want the receipt at once",
			err, again.Status, again.RetryAfter)
	}
	h.handler.mu.Lock()
	n := h.handler.calls
	h.handler.mu.Unlock()
	if n != 2 {
		t.Errorf("handler ran %d times, want 2 (failed, then the retransmission)", n)
	}
}
