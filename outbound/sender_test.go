package outbound_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/outbound"
)

// TestSenderDelivers: a message is transmitted once, with the posting of
// its digest recorded, and ends Delivered with the evidence; the attempt
// is audited and observed.
func TestSenderDelivers(t *testing.T) {
	st := outbound.NewMemory()
	tr := newTransmitter(nil)
	aud, obs := &auditLog{}, &observer{}
	start(t, outbound.SenderConfig{Store: st, Transmitters: map[outbound.Protocol]outbound.Transmitter{outbound.AS2: tr},
		Audit: aud, Observer: obs, Poll: 10 * time.Millisecond})
	m := submit(t, st, "UNA:+.? 'UNB+UNOC:3'")
	waitFor(t, "delivered", func() bool { return get(t, st, m.ID).State == outbound.Delivered })
	got := settled(t, st, m.ID, 1)
	if got.Evidence == nil || got.Evidence.Disposition != "processed" || string(got.Evidence.Body) != "mdn of "+m.MessageID {
		t.Fatalf("evidence %+v", got.Evidence)
	}
	if len(got.Sent) != 1 || !strings.HasPrefix(got.Sent[0], "sha-256:"+got.SHA256) {
		t.Fatalf("Sent %q, want the transmission's digest (payload SHA-256 %s)", got.Sent, got.SHA256)
	}
	time.Sleep(50 * time.Millisecond) // a few more polls
	if n := tr.count(m.ID); n != 1 {
		t.Fatalf("transmitted %d times, want once", n)
	}
	recs := aud.step(audit.StepSend)
	if len(recs) != 1 || recs[0].Decision != "delivered" || recs[0].Disposition != "processed" ||
		recs[0].MessageID != m.MessageID || recs[0].Partner != "acme" || recs[0].Protocol != "as2" || recs[0].PayloadSHA256 != m.SHA256 {
		t.Fatalf("audit %+v", recs)
	}
	if o := obs.list(); !slices.Equal(o, []string{"acme/as2/delivered"}) {
		t.Fatalf("observed %q", o)
	}
}

// TestSenderRefuseNeverRetried: a refusal ends the message Failed with the
// partner's reason and evidence, and it is never attempted again.
func TestSenderRefuseNeverRetried(t *testing.T) {
	clk := newClock()
	st := outbound.NewMemory(outbound.MemoryClock(clk.Now))
	tr := newTransmitter(func(context.Context, outbound.Message, int) outbound.Attempt {
		return outbound.Attempt{Outcome: outbound.Refuse, Reason: "authentication-failed", Status: 200,
			Evidence: &outbound.Evidence{Kind: "mdn", Disposition: "processed/error: authentication-failed"}}
	})
	aud := &auditLog{}
	r := start(t, outbound.SenderConfig{Store: st, Transmitters: map[outbound.Protocol]outbound.Transmitter{outbound.AS2: tr},
		Audit: aud, Now: clk.Now, Poll: 5 * time.Millisecond})
	m := submit(t, st, "x")
	got := settled(t, st, m.ID, 1)
	waitFor(t, "failed", func() bool { got = get(t, st, m.ID); return got.State == outbound.Failed })
	if got.Reason != "authentication-failed" || got.Evidence == nil || got.Evidence.Disposition != "processed/error: authentication-failed" {
		t.Fatalf("failed message %+v", got)
	}
	for range 3 {
		clk.Advance(24 * time.Hour)
		r.s.Notify()
		time.Sleep(20 * time.Millisecond)
	}
	if n := tr.count(m.ID); n != 1 {
		t.Fatalf("refused message transmitted %d times, want once", n)
	}
	recs := aud.step(audit.StepSend)
	if len(recs) != 1 || recs[0].Decision != "refused" || recs[0].Error != "authentication-failed" {
		t.Fatalf("audit %+v", recs)
	}
}

// TestSenderRetrySchedule: failed attempts are due again on the partner's
// policy: First, then ×Factor, capped at Max, a longer Retry-After honoured.
func TestSenderRetrySchedule(t *testing.T) {
	clk := newClock()
	st := outbound.NewMemory(outbound.MemoryClock(clk.Now))
	tr := newTransmitter(func(_ context.Context, _ outbound.Message, n int) outbound.Attempt {
		a := outbound.Attempt{Outcome: outbound.Retry, Reason: fmt.Sprintf("HTTP 503 #%d", n), Status: 503}
		if n == 3 {
			a.RetryAfter = 10 * time.Minute
		}
		return a
	})
	aud := &auditLog{}
	pol := outbound.RetryPolicy{First: time.Minute, Factor: 2, Max: 5 * time.Minute, GiveUpAfter: 24 * time.Hour}
	r := start(t, outbound.SenderConfig{Store: st, Transmitters: map[outbound.Protocol]outbound.Transmitter{outbound.AS2: tr},
		Policy: policy(pol), Audit: aud, Now: clk.Now, Poll: time.Hour})
	m := submit(t, st, "x")
	r.s.Notify()
	// 1m, 2m, then Retry-After 10m over 4m, 8m capped at 5m, 5m.
	want := []time.Duration{time.Minute, 2 * time.Minute, 10 * time.Minute, 5 * time.Minute, 5 * time.Minute}
	for i, d := range want {
		got := settled(t, st, m.ID, i+1)
		if got.State != outbound.Queued || got.LastError != fmt.Sprintf("HTTP 503 #%d", i+1) {
			t.Fatalf("after attempt %d: %+v", i+1, got)
		}
		if wait := got.NextAttempt.Sub(clk.Now()); wait != d {
			t.Fatalf("after attempt %d: next attempt in %v, want %v", i+1, wait, d)
		}
		// Not due a moment before.
		clk.Advance(d - time.Second)
		r.s.Notify()
		time.Sleep(20 * time.Millisecond)
		if n := tr.count(m.ID); n != i+1 {
			t.Fatalf("attempt %d made %v early", n, time.Second)
		}
		clk.Advance(time.Second)
		r.s.Notify()
	}
	settled(t, st, m.ID, len(want)+1)
	recs := aud.step(audit.StepSend)
	if len(recs) != len(want)+1 || recs[0].Decision != "retry" || recs[0].Error != "HTTP 503 #1" || recs[0].Disposition != "503" {
		t.Fatalf("audit %+v", recs)
	}
}

// TestSenderGivesUp: once the next retry would fall past the give-up age,
// the message fails with the last error.
func TestSenderGivesUp(t *testing.T) {
	clk := newClock()
	st := outbound.NewMemory(outbound.MemoryClock(clk.Now))
	tr := newTransmitter(func(_ context.Context, _ outbound.Message, n int) outbound.Attempt {
		return outbound.Attempt{Outcome: outbound.Retry, Reason: fmt.Sprintf("connection refused #%d", n),
			Evidence: &outbound.Evidence{Kind: "mdn", Disposition: "unverifiable"}}
	})
	aud, obs := &auditLog{}, &observer{}
	pol := outbound.RetryPolicy{First: 10 * time.Minute, Factor: 1, Max: time.Hour, GiveUpAfter: 25 * time.Minute}
	r := start(t, outbound.SenderConfig{Store: st, Transmitters: map[outbound.Protocol]outbound.Transmitter{outbound.AS2: tr},
		Policy: policy(pol), Audit: aud, Observer: obs, Now: clk.Now, Poll: time.Hour})
	m := submit(t, st, "x")
	r.s.Notify()
	for i := 1; i <= 2; i++ {
		settled(t, st, m.ID, i)
		clk.Advance(10 * time.Minute)
		r.s.Notify()
	}
	got := settled(t, st, m.ID, 3)
	waitFor(t, "failed", func() bool { got = get(t, st, m.ID); return got.State == outbound.Failed })
	if want := "gave up after 3 attempts over 20m0s: connection refused #3"; got.Reason != want {
		t.Fatalf("reason %q, want %q", got.Reason, want)
	}
	if got.Evidence != nil {
		t.Fatalf("a give-up kept the last retried attempt's answer as the final evidence: %+v", got.Evidence)
	}
	clk.Advance(time.Hour)
	r.s.Notify()
	time.Sleep(20 * time.Millisecond)
	if n := tr.count(m.ID); n != 3 {
		t.Fatalf("%d attempts, want 3", n)
	}
	recs := aud.step(audit.StepSend)
	if len(recs) != 3 || recs[2].Decision != "gave-up" || recs[2].Error != got.Reason {
		t.Fatalf("audit %+v", recs)
	}
	if o := obs.list(); !slices.Equal(o, []string{"acme/as2/retry", "acme/as2/retry", "acme/as2/gave-up"}) {
		t.Fatalf("observed %q", o)
	}
}

// TestSenderGivesUpBeforeAttempt: a message leased past its give-up age
// (here: its asynchronous MDN never came) fails without another
// transmission.
func TestSenderGivesUpBeforeAttempt(t *testing.T) {
	clk := newClock()
	st := outbound.NewMemory(outbound.MemoryClock(clk.Now))
	tr := newTransmitter(func(context.Context, outbound.Message, int) outbound.Attempt {
		return outbound.Attempt{Outcome: outbound.Await, AwaitFor: 2 * time.Hour, Status: 202}
	})
	pol := outbound.RetryPolicy{First: time.Minute, Factor: 2, Max: time.Hour, GiveUpAfter: time.Hour}
	r := start(t, outbound.SenderConfig{Store: st, Transmitters: map[outbound.Protocol]outbound.Transmitter{outbound.AS2: tr},
		Policy: policy(pol), Now: clk.Now, Poll: time.Hour})
	m := submit(t, st, "x")
	r.s.Notify()
	got := settled(t, st, m.ID, 1)
	if got.State != outbound.AwaitingMDN || !got.NextAttempt.Equal(clk.Now().Add(2*time.Hour)) {
		t.Fatalf("after the attempt: %+v", got)
	}
	clk.Advance(2 * time.Hour)
	r.s.Notify()
	waitFor(t, "failed", func() bool { got = get(t, st, m.ID); return got.State == outbound.Failed })
	if want := "gave up after 1 attempts over 2h0m0s: no MDN arrived"; got.Reason != want {
		t.Fatalf("reason %q, want %q", got.Reason, want)
	}
	if n := tr.count(m.ID); n != 1 {
		t.Fatalf("%d transmissions, want 1", n)
	}
}

// TestSenderAwaitThenSettle: a message awaiting its asynchronous MDN that
// the MDN settles is not attempted again.
func TestSenderAwaitThenSettle(t *testing.T) {
	clk := newClock()
	st := outbound.NewMemory(outbound.MemoryClock(clk.Now))
	tr := newTransmitter(func(context.Context, outbound.Message, int) outbound.Attempt {
		return outbound.Attempt{Outcome: outbound.Await, AwaitFor: 10 * time.Minute, Status: 200}
	})
	aud := &auditLog{}
	r := start(t, outbound.SenderConfig{Store: st, Transmitters: map[outbound.Protocol]outbound.Transmitter{outbound.AS2: tr},
		Audit: aud, Now: clk.Now, Poll: time.Hour})
	m := submit(t, st, "x")
	r.s.Notify()
	got := settled(t, st, m.ID, 1)
	if got.State != outbound.AwaitingMDN || !got.NextAttempt.Equal(clk.Now().Add(10*time.Minute)) {
		t.Fatalf("after the attempt: %+v", got)
	}
	ev := &outbound.Evidence{Kind: "mdn", Disposition: "processed", Body: []byte("async mdn")}
	if _, changed, err := st.Settle(context.Background(), "acme", m.MessageID, true, "", ev); err != nil || !changed {
		t.Fatalf("Settle: %v %v", changed, err)
	}
	clk.Advance(time.Hour)
	r.s.Notify()
	time.Sleep(30 * time.Millisecond)
	got = get(t, st, m.ID)
	if got.State != outbound.Delivered || tr.count(m.ID) != 1 {
		t.Fatalf("after the MDN: %s, %d transmissions; want delivered, 1", got.State, tr.count(m.ID))
	}
	if recs := aud.step(audit.StepSend); len(recs) != 1 || recs[0].Decision != "awaiting" || recs[0].Disposition != "200" {
		t.Fatalf("audit %+v", recs)
	}
}

// TestSenderAwaitPastDeadlineSendsAgain: when the asynchronous MDN has not
// come by the deadline, the message is transmitted again with the same
// Message-ID.
func TestSenderAwaitPastDeadlineSendsAgain(t *testing.T) {
	clk := newClock()
	st := outbound.NewMemory(outbound.MemoryClock(clk.Now))
	tr := newTransmitter(func(_ context.Context, m outbound.Message, n int) outbound.Attempt {
		if n == 1 {
			return outbound.Attempt{Outcome: outbound.Await, AwaitFor: 10 * time.Minute}
		}
		return outbound.Attempt{Outcome: outbound.Deliver, Evidence: &outbound.Evidence{Kind: "mdn", Disposition: "processed"}}
	})
	aud := &auditLog{}
	r := start(t, outbound.SenderConfig{Store: st, Transmitters: map[outbound.Protocol]outbound.Transmitter{outbound.AS2: tr},
		Audit: aud, Now: clk.Now, Poll: time.Hour})
	m := submit(t, st, "x")
	r.s.Notify()
	settled(t, st, m.ID, 1)
	clk.Advance(10*time.Minute - time.Second)
	r.s.Notify()
	time.Sleep(20 * time.Millisecond)
	if c := tr.count(m.ID); c != 1 {
		t.Fatalf("sent again before the deadline (%d transmissions)", c)
	}
	clk.Advance(time.Second)
	r.s.Notify()
	got := settled(t, st, m.ID, 2)
	waitFor(t, "delivered", func() bool { got = get(t, st, m.ID); return got.State == outbound.Delivered })
	tr.mu.Lock()
	seen := slices.Clone(tr.seen)
	tr.mu.Unlock()
	if len(seen) != 2 || seen[0].MessageID != m.MessageID || seen[1].MessageID != m.MessageID || len(got.Sent) != 1 {
		t.Fatalf("transmissions %+v, Sent %q: want two with Message-ID %s and one digest", seen, got.Sent, m.MessageID)
	}
	recs := aud.step(audit.StepSend)
	if len(recs) != 2 || recs[0].Decision != "awaiting" || recs[1].Decision != "delivered" {
		t.Fatalf("audit %+v", recs)
	}
}

// TestSenderMissingTransmitter: a message whose protocol has no
// transmitter is retried with a reason that says so.
func TestSenderMissingTransmitter(t *testing.T) {
	clk := newClock()
	st := outbound.NewMemory(outbound.MemoryClock(clk.Now))
	start(t, outbound.SenderConfig{Store: st, Transmitters: map[outbound.Protocol]outbound.Transmitter{outbound.AS4: newTransmitter(nil)},
		Now: clk.Now, Poll: 5 * time.Millisecond})
	m := submit(t, st, "x")
	var got outbound.Message
	waitFor(t, "retry", func() bool { got = get(t, st, m.ID); return got.LastError != "" && got.LeaseToken == "" })
	if got.State != outbound.Queued || got.LastError != `no transmitter for protocol "as2"` || !got.NextAttempt.Equal(clk.Now().Add(time.Minute)) {
		t.Fatalf("%+v", got)
	}
}

// TestSenderTwoSendersExactlyOnce: two Senders on one store transmit each
// of 200 messages exactly once, never one message twice at the same time.
func TestSenderTwoSendersExactlyOnce(t *testing.T) {
	st := outbound.NewMemory()
	tr := newTransmitter(func(context.Context, outbound.Message, int) outbound.Attempt {
		time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond)
		return outbound.Attempt{Outcome: outbound.Deliver}
	})
	const total = 200
	ids := make([]string, 0, total)
	for i := range total {
		ids = append(ids, submit(t, st, fmt.Sprintf("payload %d", i)).ID)
	}
	// A heartbeat far more frequent than needed: it races every
	// attempt's end, which must not pass for a lease taken over.
	logs, buf := testLogger(t)
	cfg := outbound.SenderConfig{Store: st, Transmitters: map[outbound.Protocol]outbound.Transmitter{outbound.AS2: tr},
		Workers: 4, Batch: 8, Poll: 5 * time.Millisecond, Lease: 5 * time.Second, Heartbeat: 100 * time.Microsecond, Log: logs}
	obsA, obsB := &observer{}, &observer{}
	began := time.Now()
	cfg.Observer = obsA
	a := start(t, cfg)
	cfg.Observer = obsB
	b := start(t, cfg)
	waitFor(t, "every message delivered", func() bool {
		for _, id := range ids {
			if get(t, st, id).State != outbound.Delivered {
				return false
			}
		}
		return true
	})
	elapsed := time.Since(began)
	a.stop(t)
	b.stop(t)
	t.Logf("%d messages delivered in %v by two senders (%d and %d attempts)", total, elapsed.Round(time.Millisecond),
		len(obsA.list()), len(obsB.list()))
	for _, id := range ids {
		if c := tr.count(id); c != 1 {
			t.Errorf("message %s transmitted %d times", id, c)
		}
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.doubles != 0 {
		t.Fatalf("%d concurrent double attempts", tr.doubles)
	}
	if n := strings.Count(buf.String(), "lease taken over"); n != 0 {
		t.Fatalf("%d leases reported taken over; none was (an attempt that ended is not a lost lease)", n)
	}
}

// gatedStore fails Renew with a transient error until opened: a Sender
// whose heartbeat cannot reach the store.
type gatedStore struct {
	outbound.Store
	open atomic.Bool
}

func (g *gatedStore) Renew(ctx context.Context, id, token string, lease time.Duration) error {
	if !g.open.Load() {
		return errors.New("store unreachable")
	}
	return g.Store.Renew(ctx, id, token, lease)
}

// TestSenderLeaseLostMidAttempt: a Sender whose lease ran out while its
// attempt hangs loses the message to a second Sender; its heartbeat
// cancels the hung attempt, and only the second Sender's outcome is
// recorded.
func TestSenderLeaseLostMidAttempt(t *testing.T) {
	clk := newClock()
	st := outbound.NewMemory(outbound.MemoryClock(clk.Now))
	m := submit(t, st, "x")
	aud := &auditLog{}
	started := make(chan struct{})
	cancelled := make(chan error, 1)
	hung := newTransmitter(func(ctx context.Context, _ outbound.Message, _ int) outbound.Attempt {
		close(started)
		<-ctx.Done()
		cancelled <- ctx.Err()
		// A late, wrong outcome: must not be recorded.
		return outbound.Attempt{Outcome: outbound.Refuse, Reason: "late refusal"}
	})
	gated := &gatedStore{Store: st}
	logA, bufA := testLogger(t)
	obsA := &observer{}
	start(t, outbound.SenderConfig{Store: gated, Transmitters: map[outbound.Protocol]outbound.Transmitter{outbound.AS2: hung},
		Audit: aud, Observer: obsA, Now: clk.Now, Lease: 30 * time.Second, Heartbeat: 5 * time.Millisecond, Poll: time.Hour, Log: logA})
	<-started
	clk.Advance(31 * time.Second)
	ok := newTransmitter(nil)
	start(t, outbound.SenderConfig{Store: st, Transmitters: map[outbound.Protocol]outbound.Transmitter{outbound.AS2: ok},
		Audit: aud, Now: clk.Now, Poll: 5 * time.Millisecond})
	waitFor(t, "delivered by the second sender", func() bool { return get(t, st, m.ID).State == outbound.Delivered })
	gated.open.Store(true)
	select {
	case err := <-cancelled:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("hung attempt ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the hung attempt was not cancelled once its lease was found lost")
	}
	time.Sleep(20 * time.Millisecond)
	got := get(t, st, m.ID)
	if got.State != outbound.Delivered || got.Reason != "" || got.Attempts != 2 {
		t.Fatalf("message %+v", got)
	}
	if recs := aud.step(audit.StepSend); len(recs) != 1 || recs[0].Decision != "delivered" {
		t.Fatalf("audit %+v, want the second sender's delivery only", recs)
	}
	if !strings.Contains(bufA.String(), "lease taken over") {
		t.Fatalf("first sender's logs do not say it lost the lease:\n%s", bufA.String())
	}
	waitFor(t, "the lost lease observed", func() bool { return slices.Equal(obsA.list(), []string{"acme/as2/lease-lost"}) })
}

// TestSenderLateOutcomeAfterLeaseLost: without a heartbeat noticing, the
// outcome of an attempt whose message another Sender took over is refused
// by the store's fencing and is not recorded nor audited.
func TestSenderLateOutcomeAfterLeaseLost(t *testing.T) {
	clk := newClock()
	st := outbound.NewMemory(outbound.MemoryClock(clk.Now))
	m := submit(t, st, "x")
	aud := &auditLog{}
	started, proceed := make(chan struct{}), make(chan struct{})
	hung := newTransmitter(func(ctx context.Context, _ outbound.Message, _ int) outbound.Attempt {
		close(started)
		<-proceed
		return outbound.Attempt{Outcome: outbound.Refuse, Reason: "late refusal"}
	})
	logA, bufA := testLogger(t)
	obsA := &observer{}
	start(t, outbound.SenderConfig{Store: st, Transmitters: map[outbound.Protocol]outbound.Transmitter{outbound.AS2: hung},
		Audit: aud, Observer: obsA, Now: clk.Now, Lease: 30 * time.Second, Heartbeat: time.Hour, Poll: time.Hour, Log: logA})
	<-started
	clk.Advance(31 * time.Second)
	start(t, outbound.SenderConfig{Store: st, Transmitters: map[outbound.Protocol]outbound.Transmitter{outbound.AS2: newTransmitter(nil)},
		Audit: aud, Now: clk.Now, Poll: 5 * time.Millisecond})
	waitFor(t, "delivered by the second sender", func() bool { return get(t, st, m.ID).State == outbound.Delivered })
	close(proceed)
	waitFor(t, "the first sender's outcome refused", func() bool { return strings.Contains(bufA.String(), "no longer ours") })
	if got := get(t, st, m.ID); got.State != outbound.Delivered || got.Reason != "" {
		t.Fatalf("message %+v", got)
	}
	if recs := aud.step(audit.StepSend); len(recs) != 1 || recs[0].Decision != "delivered" {
		t.Fatalf("audit %+v", recs)
	}
	if o := obsA.list(); !slices.Equal(o, []string{"acme/as2/lease-lost"}) {
		t.Fatalf("first sender observed %q", o)
	}
}

// TestSenderHeartbeatKeepsLease: an attempt longer than the lease keeps
// its message (the heartbeat renews it): a second Sender does not take it.
func TestSenderHeartbeatKeepsLease(t *testing.T) {
	st := outbound.NewMemory()
	m := submit(t, st, "x")
	started := make(chan struct{})
	var once sync.Once
	tr := newTransmitter(func(context.Context, outbound.Message, int) outbound.Attempt {
		once.Do(func() { close(started) })
		time.Sleep(600 * time.Millisecond)
		return outbound.Attempt{Outcome: outbound.Deliver}
	})
	cfg := outbound.SenderConfig{Store: st, Transmitters: map[outbound.Protocol]outbound.Transmitter{outbound.AS2: tr},
		Lease: 150 * time.Millisecond, Heartbeat: 30 * time.Millisecond, Poll: 10 * time.Millisecond}
	start(t, cfg)
	<-started
	start(t, cfg)
	waitFor(t, "delivered", func() bool { return get(t, st, m.ID).State == outbound.Delivered })
	if c := tr.count(m.ID); c != 1 {
		t.Fatalf("transmitted %d times, want once", c)
	}
}

// TestSenderStop: a stop starts no new attempt, hands the leased messages
// not started back at once, and lets the attempt in flight finish and
// record its outcome.
func TestSenderStop(t *testing.T) {
	st := outbound.NewMemory()
	started, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var cutShort atomic.Bool
	tr := newTransmitter(func(ctx context.Context, _ outbound.Message, _ int) outbound.Attempt {
		once.Do(func() { close(started) })
		<-proceed
		cutShort.Store(ctx.Err() != nil)
		return outbound.Attempt{Outcome: outbound.Deliver}
	})
	ms := []outbound.Message{submit(t, st, "a"), submit(t, st, "b"), submit(t, st, "c")}
	r := start(t, outbound.SenderConfig{Store: st, Transmitters: map[outbound.Protocol]outbound.Transmitter{outbound.AS2: tr},
		Workers: 1, Batch: 3, Poll: time.Hour, StopTimeout: time.Minute})
	<-started
	for _, m := range ms {
		if get(t, st, m.ID).LeaseToken == "" {
			t.Fatalf("message %s not leased: the batch should hold all three", m.ID)
		}
	}
	r.cancel()
	waitFor(t, "the two messages not started handed back", func() bool {
		return get(t, st, ms[1].ID).LeaseToken == "" && get(t, st, ms[2].ID).LeaseToken == ""
	})
	select {
	case <-r.done:
		t.Fatal("Run returned while an attempt was in flight")
	case <-time.After(50 * time.Millisecond):
	}
	close(proceed)
	r.stop(t)
	if cutShort.Load() {
		t.Fatal("the attempt in flight had its context cancelled before the stop timeout")
	}
	if got := get(t, st, ms[0].ID); got.State != outbound.Delivered {
		t.Fatalf("the attempt in flight did not record its outcome: %+v", got)
	}
	for _, m := range ms[1:] {
		got := get(t, st, m.ID)
		if got.State != outbound.Queued || got.Attempts != 0 || tr.count(m.ID) != 0 {
			t.Fatalf("message not started: %+v, %d transmissions", got, tr.count(m.ID))
		}
	}
	// Handed back due at once: another worker leases them now.
	if again, err := st.Lease(context.Background(), 10, time.Minute); err != nil || len(again) != 2 {
		t.Fatalf("Lease after the stop: %d messages, %v", len(again), err)
	}
}

// TestSenderStopTimeout: an attempt still running at the stop timeout has
// its context cancelled; sent already, it counts and is due again at once;
// not sent yet, it is handed back uncounted.
func TestSenderStopTimeout(t *testing.T) {
	for _, posted := range []bool{true, false} {
		t.Run(fmt.Sprintf("posted=%v", posted), func(t *testing.T) {
			clk := newClock()
			st := outbound.NewMemory(outbound.MemoryClock(clk.Now))
			started := make(chan struct{})
			tr := transmitterFunc(func(ctx context.Context, m outbound.Message, posting func(string) error) outbound.Attempt {
				if posted {
					if err := posting("mic"); err != nil {
						return outbound.Attempt{Outcome: outbound.Retry, Reason: err.Error()}
					}
				}
				close(started)
				<-ctx.Done()
				return outbound.Attempt{Outcome: outbound.Retry, Reason: ctx.Err().Error()}
			})
			m := submit(t, st, "x")
			r := start(t, outbound.SenderConfig{Store: st, Transmitters: map[outbound.Protocol]outbound.Transmitter{outbound.AS2: tr},
				Now: clk.Now, Poll: time.Hour, StopTimeout: 50 * time.Millisecond})
			<-started
			r.stop(t)
			got := get(t, st, m.ID)
			if got.LeaseToken != "" || got.State != outbound.Queued || !got.NextAttempt.Equal(clk.Now()) {
				t.Fatalf("after the stop: %+v", got)
			}
			if posted && (got.Attempts != 1 || !strings.HasPrefix(got.LastError, "no answer before the gateway stopped")) {
				t.Fatalf("interrupted transmission: attempts %d, last error %q", got.Attempts, got.LastError)
			}
			if !posted && (got.Attempts != 0 || got.LastError != "") {
				t.Fatalf("interrupted before sending: attempts %d, last error %q", got.Attempts, got.LastError)
			}
		})
	}
}

// transmitterFunc is a Transmitter of one function.
type transmitterFunc func(ctx context.Context, m outbound.Message, posting func(string) error) outbound.Attempt

func (f transmitterFunc) Transmit(ctx context.Context, m outbound.Message, _ func() (io.ReadCloser, error), posting func(string) error) outbound.Attempt {
	return f(ctx, m, posting)
}

// countingStore counts Lease calls.
type countingStore struct {
	outbound.Store
	leases atomic.Int32
}

func (c *countingStore) Lease(ctx context.Context, limit int, lease time.Duration) ([]outbound.Message, error) {
	defer c.leases.Add(1)
	return c.Store.Lease(ctx, limit, lease)
}

// TestSenderNotifyWakes: a Sender waiting for its (long) poll interval
// leases at once when notified.
func TestSenderNotifyWakes(t *testing.T) {
	st := &countingStore{Store: outbound.NewMemory()}
	tr := newTransmitter(nil)
	r := start(t, outbound.SenderConfig{Store: st, Transmitters: map[outbound.Protocol]outbound.Transmitter{outbound.AS2: tr},
		Poll: time.Hour})
	waitFor(t, "the first lease", func() bool { return st.leases.Load() >= 1 })
	m := submit(t, st, "x")
	time.Sleep(100 * time.Millisecond)
	if c := tr.count(m.ID); c != 0 {
		t.Fatalf("sent without a Notify (the poll is an hour)")
	}
	r.s.Notify()
	waitFor(t, "delivered after Notify", func() bool { return get(t, st, m.ID).State == outbound.Delivered })
}

// TestSenderRetryShorterThanPollKeepsItsTime: a retry due before the next
// poll is attempted at its time, not at the poll (here an hour away): the
// Sender wakes itself when the message is due again.
func TestSenderRetryShorterThanPollKeepsItsTime(t *testing.T) {
	st := outbound.NewMemory()
	var times []time.Time
	var mu sync.Mutex
	tr := newTransmitter(func(_ context.Context, m outbound.Message, n int) outbound.Attempt {
		mu.Lock()
		times = append(times, time.Now())
		mu.Unlock()
		if n == 1 {
			return outbound.Attempt{Outcome: outbound.Retry, Reason: "HTTP 503", Status: 503}
		}
		return outbound.Attempt{Outcome: outbound.Deliver, Evidence: &outbound.Evidence{Kind: "mdn", Disposition: "processed"}}
	})
	pol := outbound.RetryPolicy{First: 300 * time.Millisecond, Factor: 2, Max: time.Second, GiveUpAfter: time.Hour}
	start(t, outbound.SenderConfig{Store: st, Transmitters: map[outbound.Protocol]outbound.Transmitter{outbound.AS2: tr},
		Policy: policy(pol), Poll: time.Hour})
	m := submit(t, st, "UNA:+.? 'UNB+UNOC:3'")
	waitFor(t, "delivered on the second attempt", func() bool { return get(t, st, m.ID).State == outbound.Delivered })
	mu.Lock()
	defer mu.Unlock()
	if len(times) != 2 || times[1].Sub(times[0]) < pol.First {
		t.Fatalf("attempts at %v: want two, at least %s apart", times, pol.First)
	}
}
