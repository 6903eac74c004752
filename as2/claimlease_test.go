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
	"github.com/edigateway/gateway/mdn"
)

// TestHandlerLongerThanLeaseKeepsItsClaim: with a 1s lease, a handler that
// runs 3s (three leases) keeps its claims, renewed by the heartbeat: a
// retransmission of the same Message-ID and the same interchange resent
// under a new Message-ID are answered 503 (in flight) throughout, with a
// Retry-After never beyond the lease; the handler runs once, the first
// delivery gets its MDN and the retransmission afterwards the duplicate.
func TestHandlerLongerThanLeaseKeepsItsClaim(t *testing.T) {
	t.Parallel()
	const lease, run = time.Second, 3 * time.Second
	e := newEnv(t, envOptions{ledger: true, lease: lease})
	started := make(chan struct{})
	var once sync.Once
	e.handler.setFail(func(*exchange.Message) error {
		once.Do(func() { close(started) })
		time.Sleep(run)
		return nil
	})
	edi := "UNA:+.? 'UNB+UNOA:2+ACME:14+GATEWAY:14+261204:1200+LEASE1'UNH+1+INVOIC:D:96A:UN'BGM+380+INV-L+9'UNT+3+1'UNZ+1+LEASE1'"
	c := e.client()
	m := prepare(t, c, edi)
	resent := prepare(t, c, edi) // the EDI system resends under a new Message-ID
	done := make(chan *as2client.Result, 1)
	go func() {
		r, _ := c.Send(context.Background(), m)
		done <- r
	}()
	<-started
	t0 := time.Now()
	copies := 0
	for time.Since(t0) < run-300*time.Millisecond {
		for _, cp := range []*as2client.Message{m, resent} {
			resp, body := e.post(t, cp.Header, cp.Body)
			if resp.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("copy %d at %v of the handler's run (lease %v): HTTP %d %q, want 503 in flight", copies,
					time.Since(t0).Round(time.Millisecond), lease, resp.StatusCode, body)
			}
			if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 || time.Duration(ra)*time.Second > lease {
				t.Errorf("Retry-After %q, want 1…%v (never beyond the lease left)", resp.Header.Get("Retry-After"), lease)
			}
			copies++
		}
		time.Sleep(150 * time.Millisecond)
	}
	if r := <-done; r == nil || !r.OK() {
		t.Fatalf("first delivery: %+v", r)
	}
	if n := e.handler.count(m.ID); n != 1 {
		t.Errorf("handler ran %d times for %s, want 1", n, m.ID)
	}
	if n := e.handler.count(resent.ID); n != 0 {
		t.Errorf("handler ran %d times for the resent interchange, want 0", n)
	}
	resp, body := e.post(t, m.Header, m.Body)
	expectMDN(t, resp, body, mdn.DispDuplicateDocument)
	if n := e.handler.count(m.ID); n != 1 {
		t.Errorf("handler ran %d times after the retransmission, want 1", n)
	}
	t.Logf("%d copies answered 503 during a %v handler run under a %v lease", copies, run, lease)
}
