package endpoint_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/edigateway/gateway/as4/client"
)

// TestHandlerLongerThanLeaseKeepsItsClaim: with a 1s lease, a handler that
// runs 3s (three leases) keeps its claims, renewed by the heartbeat: a
// retransmission of the same eb:MessageId and the same UBL invoice resent
// under a new eb:MessageId are answered 503 (in flight) throughout, with a
// Retry-After never beyond the lease; the handler runs once, and the
// retransmission afterwards gets the first receipt byte for byte.
func TestHandlerLongerThanLeaseKeepsItsClaim(t *testing.T) {
	t.Parallel()
	const lease, run = time.Second, 3 * time.Second
	k := getKeys(t)
	h := newHarness(t, harnessOptions{lease: lease, ledger: true})
	c := rsaClient(k)
	ctx := context.Background()
	started := make(chan struct{})
	var once sync.Once
	h.handler.before = func(int) error {
		once.Do(func() { close(started) })
		time.Sleep(run)
		return nil
	}
	out, err := c.Build(testMessage("lease-held@acme.test"))
	if err != nil {
		t.Fatal(err)
	}
	resent, err := c.Build(testMessage("lease-resent@acme.test")) // same invoice, new eb:MessageId
	if err != nil {
		t.Fatal(err)
	}
	var first *client.Response
	var firstErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		first, firstErr = c.Post(ctx, h.url, out)
	}()
	<-started
	t0 := time.Now()
	copies := 0
	for time.Since(t0) < run-300*time.Millisecond {
		for _, cp := range []*client.Outgoing{out, resent} {
			busy, err := c.Post(ctx, h.url, cp)
			if !errors.Is(err, client.ErrNoSignal) || busy == nil || busy.Status != http.StatusServiceUnavailable {
				status := 0
				if busy != nil {
					status = busy.Status
				}
				t.Fatalf("copy %d at %v of the handler's run (lease %v): %v (HTTP %d), want 503 in flight", copies,
					time.Since(t0).Round(time.Millisecond), lease, err, status)
			}
			if ra, err := strconv.Atoi(busy.RetryAfter); err != nil || ra < 1 || time.Duration(ra)*time.Second > lease {
				t.Errorf("Retry-After %q, want 1…%v (never beyond the lease left)", busy.RetryAfter, lease)
			}
			copies++
		}
		time.Sleep(150 * time.Millisecond)
	}
	<-done
	if firstErr != nil {
		t.Fatalf("first delivery: %v", firstErr)
	}
	if n := h.handler.count(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
	again, err := c.Post(ctx, h.url, out)
	if err != nil || !bytes.Equal(again.Body, first.Body) {
		t.Fatalf("retransmission after acceptance: %v (want the first receipt byte for byte)", err)
	}
	if n := h.handler.count(); n != 1 {
		t.Errorf("handler ran %d times after the retransmission, want 1", n)
	}
	t.Logf("%d copies answered 503 during a %v handler run under a %v lease", copies, run, lease)
}
