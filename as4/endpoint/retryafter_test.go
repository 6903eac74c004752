package endpoint_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/edigateway/gateway/as4/client"
)

// TestInFlightRetryAfterEstimate: a retransmission that finds its
// eb:MessageId in flight is told to come back after about as long as recent
// handler runs took (the lease is a minute): 1s after a fast handler, 3s
// after one that took 2.2s, and never more than the holder's lease left,
// however slow the recent runs were.
func TestInFlightRetryAfterEstimate(t *testing.T) {
	t.Parallel()
	k := getKeys(t)
	for _, tc := range []struct {
		name     string
		warm     time.Duration // one earlier delivery's handler time
		seed     time.Duration // or a recorded handler time
		min, max int
	}{
		{"fast-handler", 5 * time.Millisecond, 0, 1, 5},
		{"slow-handler", 2200 * time.Millisecond, 0, 3, 10},
		{"slower-than-lease", 0, 10 * time.Minute, 55, 60},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, harnessOptions{lease: time.Minute})
			c := rsaClient(k)
			ctx := context.Background()
			call := 1
			if tc.warm > 0 {
				call = 2
			}
			entered, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			h.handler.before = func(n int) error {
				if n < call {
					time.Sleep(tc.warm)
					return nil
				}
				once.Do(func() { close(entered) })
				<-release
				return nil
			}
			if tc.warm > 0 {
				warm, err := c.Build(testMessage("warm-" + tc.name + "@acme.test"))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := c.Post(ctx, h.url, warm); err != nil {
					t.Fatalf("warm-up delivery: %v", err)
				}
			}
			if tc.seed > 0 {
				h.pipeline.HandlerTimes.Observe(tc.seed)
			}
			out, err := c.Build(testMessage("held-" + tc.name + "@acme.test"))
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			var firstErr error
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, firstErr = c.Post(ctx, h.url, out)
			}()
			<-entered
			busy, err := c.Post(ctx, h.url, out)
			close(release)
			wg.Wait()
			if firstErr != nil {
				t.Fatalf("first delivery: %v", firstErr)
			}
			if !errors.Is(err, client.ErrNoSignal) || busy.Status != http.StatusServiceUnavailable {
				t.Fatalf("in flight: %v (HTTP %d)", err, busy.Status)
			}
			ra, aerr := strconv.Atoi(busy.RetryAfter)
			if aerr != nil || ra < tc.min || ra > tc.max {
				t.Errorf("Retry-After %q, want %d…%d seconds (lease 1m)", busy.RetryAfter, tc.min, tc.max)
			}
		})
	}
}
