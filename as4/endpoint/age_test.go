package endpoint_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/as4/client"
)

// TestSignedTimeOutsideTheDedupWindowIsRefused: a message whose signed
// eb:Timestamp (or signed wsu:Timestamp/wsu:Created) is older than acme's
// dedup window (30 days by default) plus its clock skew (5m), or later
// than now plus the skew, is refused with a signed EBMS:0101 (it got a
// receipt and reached the handler); one inside the window is accepted.
func TestSignedTimeOutsideTheDedupWindowIsRefused(t *testing.T) {
	t.Parallel()
	k := getKeys(t)
	h := newHarness(t, harnessOptions{ledger: true})
	day := 24 * time.Hour
	at := func(d time.Duration) func() time.Time { return func() time.Time { return time.Now().Add(d) } }
	cases := []struct {
		name string
		c    func() *client.Client
		want string // "" = accepted
	}{
		{"eb:Timestamp 400 days old", func() *client.Client { c := rsaClient(k); c.Now = at(-400 * day); return c }, "older than"},
		{"eb:Timestamp 31 days old", func() *client.Client { c := rsaClient(k); c.Now = at(-31 * day); return c }, "older than"},
		{"eb:Timestamp an hour ahead", func() *client.Client { c := rsaClient(k); c.Now = at(time.Hour); return c }, "later than our clock"},
		{"signed wsu:Created 400 days old, eb:Timestamp now", func() *client.Client {
			// The client reads its clock for eb:Timestamp first, then for
			// the wsu:Timestamp of the signature.
			c := rsaClient(k)
			c.Encryption = nil
			c.TimestampTTL = 1000 * day // not expired: only its age counts
			var calls atomic.Int64
			c.Now = func() time.Time {
				if calls.Add(1) == 1 {
					return time.Now()
				}
				return time.Now().Add(-400 * day)
			}
			return c
		}, "wsu:Timestamp/wsu:Created"},
		{"eb:Timestamp 29 days old", func() *client.Client { c := rsaClient(k); c.Now = at(-29 * day); return c }, ""},
		{"eb:Timestamp 2 minutes ahead (within the skew)", func() *client.Client { c := rsaClient(k); c.Now = at(2 * time.Minute); return c }, ""},
	}
	accepted := 0
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, resp, err := tc.c().Send(context.Background(), h.url, testMessage(fmt.Sprintf("age-%d@acme.test", i)))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				accepted++
				return
			}
			if resp == nil {
				t.Fatalf("not sent: %v", err)
			}
			refusal(t, h, resp, as4.CodeFailedAuthentication, tc.want)
		})
	}
	if n := h.handler.count(); n != accepted {
		t.Fatalf("handler ran %d times, want %d (the accepted messages only)", n, accepted)
	}
}

// TestReplayAfterTheDedupWindowIsRefused: a message captured when it was
// accepted and replayed after its dedup record is gone (a second gateway
// with an empty store whose clock is 31 days later: the record purged at
// the end of the 30-day window) is refused, not processed again.
func TestReplayAfterTheDedupWindowIsRefused(t *testing.T) {
	t.Parallel()
	k := getKeys(t)
	first := newHarness(t, harnessOptions{ledger: true})
	c := rsaClient(k)
	out, err := c.Build(testMessage("replay-1@acme.test"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Post(context.Background(), first.url, out); err != nil {
		t.Fatalf("first delivery: %v", err)
	}
	later := newHarness(t, harnessOptions{ledger: true, now: func() time.Time { return time.Now().Add(31 * 24 * time.Hour) }})
	resp, err := c.Post(context.Background(), later.url, out)
	if err == nil {
		t.Fatal("the replayed message was accepted")
	}
	refusal(t, later, resp, as4.CodeFailedAuthentication, "older than", "new eb:MessageId")
	if first.handler.count() != 1 || later.handler.count() != 0 {
		t.Fatalf("handler ran %d and %d times, want 1 and 0", first.handler.count(), later.handler.count())
	}
}
