package as2

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	as2client "github.com/edigateway/gateway/as2/client"
	"github.com/edigateway/gateway/exchange"
)

// TestInFlightRetryAfterEstimate: a delivery that finds its Message-ID in
// flight is told to come back after about as long as recent handler runs
// took (the lease is a minute): 1s after a fast handler, 3s after one that
// took 2.2s, and never more than the holder's lease left, however slow the
// recent runs were.
func TestInFlightRetryAfterEstimate(t *testing.T) {
	t.Parallel()
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
			e := newEnv(t, envOptions{})
			c := e.client()
			if tc.warm > 0 {
				e.handler.setFail(func(*exchange.Message) error { time.Sleep(tc.warm); return nil })
				if r, err := c.Send(context.Background(), prepare(t, c, "warm-up")); err != nil || !r.OK() {
					t.Fatalf("warm-up delivery: %v %+v", err, r)
				}
			}
			if tc.seed > 0 {
				e.ep.cfg.Pipeline.HandlerTimes.Observe(tc.seed)
			}
			started, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			e.handler.setFail(func(*exchange.Message) error {
				once.Do(func() { close(started) })
				<-release
				return nil
			})
			m := prepare(t, c, "held")
			done := make(chan *as2client.Result)
			go func() {
				r, _ := c.Send(context.Background(), m)
				done <- r
			}()
			<-started
			resp, body := e.post(t, m.Header, m.Body)
			close(release)
			if r := <-done; r == nil || !r.OK() {
				t.Fatalf("first delivery: %+v", r)
			}
			if resp.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("concurrent delivery: HTTP %d %q", resp.StatusCode, body)
			}
			ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
			if err != nil || ra < tc.min || ra > tc.max {
				t.Errorf("Retry-After %q, want %d…%d seconds (lease 1m)", resp.Header.Get("Retry-After"), tc.min, tc.max)
			}
		})
	}
}
