package exchange

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
)

// countingAtomic is the pipeline's store with its top-level transactions
// (dedup.Atomic) counted.
type countingAtomic struct {
	txStore
	a   dedup.Atomic
	txs atomic.Int64
}

func (c *countingAtomic) Atomically(ctx context.Context, fn func(ctx context.Context) error) error {
	c.txs.Add(1)
	return c.a.Atomically(ctx, fn)
}

// batchRecorder is an audit sink that makes batches durable in one step
// (audit.BatchWriter) and remembers the steps of every batch.
type batchRecorder struct {
	audit.Sink
	mu      sync.Mutex
	batches []string
}

func (b *batchRecorder) WriteBatch(ctx context.Context, rs []audit.Record) error {
	b.mu.Lock()
	b.batches = append(b.batches, stepList(rs))
	b.mu.Unlock()
	for _, r := range rs {
		if err := b.Sink.Write(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

func (b *batchRecorder) list() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.batches...)
}

// ledgerAtomicFixture is an atomicFixture whose store counts its
// transactions, whose other sinks record their batches, and whose handler
// remembers the payloads it was given.
type ledgerAtomicFixture struct {
	*txFixture
	store     *countingAtomic
	storeSink *stepFailingSink
	batches   *batchRecorder
	other     *audit.Memory

	mu      sync.Mutex
	handled []string // the payloads of each handler call
}

func newLedgerAtomicFixture(t *testing.T, open func(t *testing.T) *txFixture) *ledgerAtomicFixture {
	f, storeSink, otherSink, other := atomicFixture(t, open)
	a, ok := f.st.(dedup.Atomic)
	if !ok {
		t.Fatalf("%T is not a dedup.Atomic", f.st)
	}
	lf := &ledgerAtomicFixture{txFixture: f, store: &countingAtomic{txStore: f.st, a: a}, storeSink: storeSink, other: other}
	lf.batches = &batchRecorder{Sink: otherSink}
	f.p.Store = lf.store
	f.p.AuditParts.Other = lf.batches
	f.p.Audit = audit.Multi{storeSink, lf.batches}
	f.p.Handler = HandlerFunc(func(_ context.Context, m *Message) error {
		f.calls.Add(1)
		var got []string
		for _, pl := range m.Payloads {
			rc, err := pl.Open()
			if err != nil {
				return err
			}
			b, err := io.ReadAll(rc)
			rc.Close()
			if err != nil {
				return err
			}
			got = append(got, string(b))
		}
		lf.mu.Lock()
		lf.handled = append(lf.handled, strings.Join(got, "|"))
		lf.mu.Unlock()
		return nil
	})
	return lf
}

// sendPayloads processes a message of the given payloads (dupReplies:
// a message of interchanges accepted before gets their retries quoted).
func (f *ledgerAtomicFixture) sendPayloads(id string, payloads ...string) (Reply, *Message) {
	in := f.proto.inbound("acme", id, payloads[0])
	for _, extra := range payloads[1:] {
		in.Message.Payloads = append(in.Message.Payloads, NewPayload(Payload{SHA256: sha(extra), Size: int64(len(extra))}, MemoryBody(extra)))
	}
	in.Replies = dupReplies{in.Replies.(testReplies)}
	in.Window = 24 * time.Hour
	return f.p.Process(context.Background(), in), in.Message
}

func (f *ledgerAtomicFixture) claimState(key dedup.Key) string {
	f.t.Helper()
	r, err := f.st.(dedup.ClaimReader).ClaimRecord(context.Background(), key)
	if errors.Is(err, dedup.ErrNotFound) {
		return "none"
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return r.State
}

func (f *ledgerAtomicFixture) interchange(key dedup.Key) dedup.InterchangeRecord {
	f.t.Helper()
	r, err := f.st.Interchange(context.Background(), key)
	if err != nil {
		f.t.Fatalf("interchange %s: %v", key, err)
	}
	return r
}

// TestAtomicClaimTakesTheInterchange: on both SQL stores, a new message of
// one interchange costs two transactions of the store, the claim (with the
// interchange's claim) and the accept, and its other sinks get the
// received record and both decisions in one batch (one sync of a JSON-lines
// file). The trail is the same as when each was a step of its own.
func TestAtomicClaimTakesTheInterchange(t *testing.T) {
	for name, open := range txBackends(t) {
		t.Run(name, func(t *testing.T) {
			f := newLedgerAtomicFixture(t, open)
			r, m := f.sendPayloads("m1", invoic("ONETX1", "A"))
			if r.Status != 200 || r.Disposition != "processed" {
				t.Fatalf("delivery: %d %s %s", r.Status, r.Disposition, r.Body)
			}
			if n := f.store.txs.Load(); n != 2 {
				t.Errorf("%d transactions of the store for one new message, want 2 (claim, accept)", n)
			}
			const trail = "received,decision:new,decision:new-interchange,handler:ok,reply:accepted"
			if got := f.steps(m.TransportKey); got != trail {
				t.Errorf("store's audit %s", got)
			}
			if got := memorySteps(f.other, m.TransportKey); got != trail {
				t.Errorf("other sinks' audit %s", got)
			}
			if got := f.batches.list(); len(got) == 0 || got[0] != "received,decision:new,decision:new-interchange" {
				t.Errorf("other sinks' batches %q, want the interchange's decision in the claim's", got)
			}
			if ic := f.interchange(m.Interchanges[0].Key); ic.State != "accepted" || ic.Retries != 0 {
				t.Errorf("interchange %+v", ic)
			}
			if st := f.claimState(m.TransportKey); st != "accepted" {
				t.Errorf("transport key %s", st)
			}
		})
	}
}

// TestAtomicInterchangeClaimFailureHoldsNothing: when the store cannot
// write the interchange's decision record, the transaction that claimed the
// transport key fails with it: 503, neither key was ever claimed (no row to
// abandon, no received or decision record in the store), and the
// retransmission is processed once.
func TestAtomicInterchangeClaimFailureHoldsNothing(t *testing.T) {
	for name, open := range txBackends(t) {
		t.Run(name, func(t *testing.T) {
			f := newLedgerAtomicFixture(t, open)
			f.storeSink.step, f.storeSink.decision = audit.StepDecision, "new-interchange"
			f.storeSink.fail.Store(true)
			r, m := f.sendPayloads("m1", invoic("ONETX2", "A"))
			f.storeSink.fail.Store(false)
			if r.Status != 503 || f.calls.Load() != 0 || f.storeSink.fails.Load() != 1 {
				t.Fatalf("with the interchange's record failing: %d %s, handler calls %d, failed writes %d",
					r.Status, r.Body, f.calls.Load(), f.storeSink.fails.Load())
			}
			if st := f.claimState(m.TransportKey); st != "none" {
				t.Errorf("transport key %s after the failed transaction, want none (rolled back, not abandoned)", st)
			}
			if got := f.steps(m.TransportKey); got != "reply:unavailable" {
				t.Errorf("store's audit %s", got)
			}
			if _, err := f.st.Interchange(context.Background(), m.Interchanges[0].Key); !errors.Is(err, dedup.ErrNotFound) {
				t.Errorf("interchange after the failed transaction: %v, want not found", err)
			}
			r2, _ := f.sendPayloads("m1", invoic("ONETX2", "A"))
			if r2.Status != 200 || r2.Disposition != "processed" || f.calls.Load() != 1 {
				t.Fatalf("retransmission: %d %s, handler calls %d", r2.Status, r2.Body, f.calls.Load())
			}
		})
	}
}

// TestAtomicInterchangeOutcomes: every answer of the interchange claim taken
// with the transport claim is acted on as before, and counted once in the
// ledger: a duplicate under a new transport id (positive reply, no handler
// run, one retry), drift (refused, the transport claim released), in flight
// elsewhere (503, released, processed once the other delivery gave up), and
// messages of several interchanges, where only the first is claimed with the
// transport key (a repeated interchange, a duplicate after a new one, one in
// flight after a new one, which is released again).
func TestAtomicInterchangeOutcomes(t *testing.T) {
	for name, open := range txBackends(t) {
		t.Run(name, func(t *testing.T) {
			f := newLedgerAtomicFixture(t, open)
			ctx := context.Background()
			first := invoic("OUT1", "A")
			r, m1 := f.sendPayloads("m1", first)
			if r.Status != 200 || r.Disposition != "processed" {
				t.Fatalf("first delivery: %d %s", r.Status, r.Body)
			}
			icKey := m1.Interchanges[0].Key

			// The same interchange under another transport id.
			r, m2 := f.sendPayloads("m2", first)
			if r.Status != 200 || string(r.Body) != "duplicate interchange OUT1 retries=1" || f.calls.Load() != 1 {
				t.Fatalf("resend under a new id: %d %q, handler calls %d", r.Status, r.Body, f.calls.Load())
			}
			if ic := f.interchange(icKey); ic.Retries != 1 || strings.Join(ic.MessageIDs, ",") != "m1,m2" {
				t.Errorf("interchange after the resend: retries %d, ids %v", ic.Retries, ic.MessageIDs)
			}
			if st := f.claimState(m2.TransportKey); st != "accepted" {
				t.Errorf("resend's transport key %s", st)
			}

			// The same reference with another content: drift.
			r, m3 := f.sendPayloads("m3", invoic("OUT1", "CHANGED"))
			if r.Status != 200 || !strings.Contains(string(r.Body), fmt.Sprintf("kind=%d", Drift)) || f.calls.Load() != 1 {
				t.Fatalf("drifted resend: %d %q, handler calls %d", r.Status, r.Body, f.calls.Load())
			}
			if ic := f.interchange(icKey); ic.Retries != 2 || ic.State != "accepted" {
				t.Errorf("interchange after the drift: %+v", ic)
			}
			if st := f.claimState(m3.TransportKey); st != "abandoned" {
				t.Errorf("drifted message's transport key %s, want abandoned", st)
			}

			// An interchange another delivery holds.
			busy := invoic("OUT2", "B")
			hold := f.proto.inbound("acme", "holder", busy)
			ics, err := f.p.extractInterchanges(hold.Message)
			if err != nil || len(ics) != 1 {
				t.Fatalf("extract: %v %d", err, len(ics))
			}
			held, err := f.st.ClaimInterchange(ctx, dedup.InterchangeClaim{Interchange: ics[0].ic, PayloadSHA256: ics[0].hash,
				TransportKey: hold.Message.TransportKey, MessageID: "holder"})
			if err != nil || held.Outcome != dedup.Claimed {
				t.Fatalf("hold: %+v %v", held, err)
			}
			r, m4 := f.sendPayloads("m4", busy)
			if r.Status != 503 || f.calls.Load() != 1 {
				t.Fatalf("interchange in flight: %d %q, handler calls %d", r.Status, r.Body, f.calls.Load())
			}
			if st := f.claimState(m4.TransportKey); st != "abandoned" {
				t.Errorf("transport key of the message in flight %s, want abandoned", st)
			}
			if err := f.st.AbandonInterchange(ctx, ics[0].ic.Key, held.Token); err != nil {
				t.Fatal(err)
			}
			if r, _ = f.sendPayloads("m4", busy); r.Status != 200 || r.Disposition != "processed" || f.calls.Load() != 2 {
				t.Fatalf("retransmission once released: %d %q, handler calls %d", r.Status, r.Body, f.calls.Load())
			}

			// Several interchanges: a repeated one, then a new one.
			p1, p2 := invoic("OUT3", "C"), invoic("OUT4", "D")
			r, m5 := f.sendPayloads("m5", p1, p1, p2)
			if r.Status != 200 || r.Disposition != "processed" || f.calls.Load() != 3 {
				t.Fatalf("message of three payloads: %d %q, handler calls %d", r.Status, r.Body, f.calls.Load())
			}
			for _, ic := range m5.Interchanges {
				if got := f.interchange(ic.Key); got.State != "accepted" || got.Retries != 0 {
					t.Errorf("interchange %s after m5: %+v", ic.Reference, got)
				}
			}
			if len(m5.DuplicatePayloads) != 1 {
				t.Errorf("m5: %d duplicate payloads, want the repeated one", len(m5.DuplicatePayloads))
			}

			// A new interchange, then one accepted before: the handler gets
			// the new one only, the old one counts one retry.
			p6 := invoic("OUT5", "E")
			if r, _ = f.sendPayloads("m6", p6, first); r.Status != 200 || r.Disposition != "processed" || f.calls.Load() != 4 {
				t.Fatalf("new + duplicate: %d %q, handler calls %d", r.Status, r.Body, f.calls.Load())
			}
			f.mu.Lock()
			last := f.handled[len(f.handled)-1]
			f.mu.Unlock()
			if last != p6 {
				t.Errorf("handler got %q, want the new payload only", last)
			}
			if ic := f.interchange(icKey); ic.Retries != 3 {
				t.Errorf("interchange after m6: retries %d, want 3", ic.Retries)
			}

			// A new interchange, then one in flight elsewhere: 503 and both
			// claims released.
			p7, busy2 := invoic("OUT6", "F"), invoic("OUT7", "G")
			hold2 := f.proto.inbound("acme", "holder2", busy2)
			ics2, err := f.p.extractInterchanges(hold2.Message)
			if err != nil || len(ics2) != 1 {
				t.Fatalf("extract: %v %d", err, len(ics2))
			}
			if d, err := f.st.ClaimInterchange(ctx, dedup.InterchangeClaim{Interchange: ics2[0].ic, PayloadSHA256: ics2[0].hash,
				TransportKey: hold2.Message.TransportKey, MessageID: "holder2"}); err != nil || d.Outcome != dedup.Claimed {
				t.Fatalf("hold: %+v %v", d, err)
			}
			r, m7 := f.sendPayloads("m7", p7, busy2)
			if r.Status != 503 || f.calls.Load() != 4 {
				t.Fatalf("new + in flight: %d %q, handler calls %d", r.Status, r.Body, f.calls.Load())
			}
			if got := f.interchange(m7.Interchanges[0].Key); got.State != "abandoned" {
				t.Errorf("the new interchange of m7 is %s, want abandoned", got.State)
			}
			if st := f.claimState(m7.TransportKey); st != "abandoned" {
				t.Errorf("m7's transport key %s, want abandoned", st)
			}
		})
	}
}

// TestAtomicConcurrentInterchangeResends: deliveries of one interchange
// under different transport ids, at the same time and retried while
// answered 503, are processed once: one handler run, every other delivery
// answered as a duplicate interchange, retries counted once per duplicate
// answer, and no transaction fails (PostgreSQL: no deadlock between the
// transport claims and the interchange's).
func TestAtomicConcurrentInterchangeResends(t *testing.T) {
	for name, open := range txBackends(t) {
		t.Run(name, func(t *testing.T) {
			f := newLedgerAtomicFixture(t, open)
			payload := invoic("CONC1", "A")
			const n = 8
			var wg sync.WaitGroup
			var dups atomic.Int64
			errs := make([]error, n)
			var icKey dedup.Key
			var keyOnce sync.Once
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for try := 0; ; try++ {
						r, m := f.sendPayloads(fmt.Sprintf("c%d", i), payload)
						keyOnce.Do(func() { icKey = m.Interchanges[0].Key })
						switch {
						case r.Status == 503 && try < 200:
							time.Sleep(5 * time.Millisecond)
							continue
						case r.Status != 200:
							errs[i] = fmt.Errorf("delivery %d: %d %s", i, r.Status, r.Body)
						case strings.HasPrefix(string(r.Body), "duplicate interchange"):
							dups.Add(1)
						case r.Disposition != "processed":
							errs[i] = fmt.Errorf("delivery %d: %s %s", i, r.Disposition, r.Body)
						}
						return
					}
				}()
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			if f.calls.Load() != 1 || dups.Load() != n-1 {
				t.Fatalf("handler calls %d, duplicate answers %d; want 1 and %d", f.calls.Load(), dups.Load(), n-1)
			}
			if ic := f.interchange(icKey); ic.State != "accepted" || ic.Retries != n-1 {
				t.Errorf("interchange %s with %d retries, want accepted with %d", ic.State, ic.Retries, n-1)
			}
			recs, err := f.other.Query(context.Background(), audit.Query{})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				if r.Step == audit.StepReply && r.Decision == "unavailable" {
					t.Errorf("a delivery was answered unavailable (a failed transaction): %+v", r)
				}
			}
		})
	}
}
