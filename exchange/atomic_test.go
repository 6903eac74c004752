package exchange

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
)

// stepFailingSink fails the writes of one step (when fail is set; of that
// step's records with one decision when decision is set) and passes the
// others to Sink with their ctx (so that they join a transaction).
type stepFailingSink struct {
	audit.Sink
	step     audit.Step
	decision string
	fail     atomic.Bool
	fails    atomic.Int64
}

func (s *stepFailingSink) Write(ctx context.Context, r audit.Record) error {
	if r.Step == s.step && (s.decision == "" || r.Decision == s.decision) && s.fail.Load() {
		s.fails.Add(1)
		return errors.New("audit disk full")
	}
	return s.Sink.Write(ctx, r)
}

// atomicFixture is a txFixture turned into a plain-handler pipeline that
// records atomically: the store's audit sink (wrapped by storeSink) in its
// transactions, other (an audit.Memory behind otherSink) beside them.
func atomicFixture(t *testing.T, open func(t *testing.T) *txFixture) (*txFixture, *stepFailingSink, *stepFailingSink, *audit.Memory) {
	f := open(t)
	other := &audit.Memory{}
	storeSink := &stepFailingSink{Sink: f.p.Audit, step: audit.StepReply}
	otherSink := &stepFailingSink{Sink: other, step: audit.StepHandler}
	f.p.TxHandler = nil
	f.p.Handler = HandlerFunc(func(context.Context, *Message) error { f.calls.Add(1); return nil })
	f.p.Audit = audit.Multi{storeSink, otherSink}
	f.p.AuditParts = &AuditParts{Store: storeSink, Other: otherSink}
	return f, storeSink, otherSink, other
}

func memorySteps(m *audit.Memory, key dedup.Key) string {
	recs, _ := m.Query(context.Background(), audit.Query{Key: string(key)})
	return stepList(recs)
}

// TestAtomicRecordsCommitWithClaimAndAccept: on both SQL stores, with
// AuditParts the store and the other sinks hold the same trail of a new
// message, every record once, the key and the interchange are accepted and
// a retransmission is answered from the stored reply without a second run.
func TestAtomicRecordsCommitWithClaimAndAccept(t *testing.T) {
	for name, open := range txBackends(t) {
		t.Run(name, func(t *testing.T) {
			f, _, _, other := atomicFixture(t, open)
			ctx := context.Background()
			r1, m := f.send("m1", invoic("ATREF1", "A"), nil)
			if r1.Status != 200 || r1.Disposition != "processed" {
				t.Fatalf("first delivery: %d %s %s", r1.Status, r1.Disposition, r1.Body)
			}
			const want = "received,decision:new,decision:new-interchange,handler:ok,reply:accepted"
			if got := f.steps(m.TransportKey); got != want {
				t.Errorf("store's audit %s", got)
			}
			if got := memorySteps(other, m.TransportKey); got != want {
				t.Errorf("other sink's audit %s", got)
			}
			ic, err := f.st.Interchange(ctx, m.Interchanges[0].Key)
			if err != nil || ic.State != "accepted" {
				t.Fatalf("interchange %+v %v", ic, err)
			}
			r2, _ := f.send("m1", invoic("ATREF1", "A"), nil)
			if r2.Status != 200 || string(r2.Body) != string(r1.Body) || f.calls.Load() != 1 {
				t.Fatalf("duplicate: %d %q, handler calls %d", r2.Status, r2.Body, f.calls.Load())
			}
		})
	}
}

// TestAtomicAcceptIsAllOrNothing: the reply record failing inside the
// accept transaction rolls back the handler's record, the interchange's and
// the key's accept with it (the store holds the handler's record once, from
// the step-by-step retry, never twice); the message is accepted by that
// retry. A failing handler record of the other sinks stops the accept: no
// positive reply, the claim is abandoned and the retransmission processed.
func TestAtomicAcceptIsAllOrNothing(t *testing.T) {
	for name, open := range txBackends(t) {
		t.Run(name, func(t *testing.T) {
			f, storeSink, otherSink, _ := atomicFixture(t, open)
			ctx := context.Background()
			storeSink.fail.Store(true)
			r1, m := f.send("m1", invoic("ATREF2", "A"), nil)
			storeSink.fail.Store(false)
			if storeSink.fails.Load() < 1 {
				t.Fatal("the reply record was never written inside the accept transaction")
			}
			if r1.Status != 200 || r1.Disposition != "processed" {
				t.Fatalf("delivery: %d %s %s", r1.Status, r1.Disposition, r1.Body)
			}
			// The step-by-step retry's reply record is best effort (after
			// the accept), as without AuditParts: it failed too.
			if got := f.steps(m.TransportKey); got != "received,decision:new,decision:new-interchange,handler:ok" {
				t.Errorf("store's audit after a rolled back accept %s", got)
			}
			if d, err := f.st.Claim(ctx, dedup.ClaimRequest{Key: m.TransportKey}); err != nil || d.Outcome != dedup.Duplicate {
				t.Fatalf("key after the retry: %+v %v", d, err)
			}

			otherSink.fail.Store(true)
			r2, m2 := f.send("m2", invoic("ATREF3", "B"), nil)
			otherSink.fail.Store(false)
			if r2.Status != 503 {
				t.Fatalf("with the other sink failing the handler record: %d %s", r2.Status, r2.Body)
			}
			if got := f.steps(m2.TransportKey); strings.Contains(got, "handler:ok") || strings.Contains(got, "reply:accepted") {
				t.Errorf("store's audit after a refused accept %s", got)
			}
			calls := f.calls.Load()
			r3, _ := f.send("m2", invoic("ATREF3", "B"), nil)
			if r3.Status != 200 || r3.Disposition != "processed" || f.calls.Load() != calls+1 {
				t.Fatalf("retransmission: %d %s, handler calls %d → %d", r3.Status, r3.Body, calls, f.calls.Load())
			}
		})
	}
}

// TestAtomicClaimLeavesNothingOnFailure: a received record the store
// cannot write fails the claim's transaction: 503, and no claim is held
// (the retransmission is claimed and processed at once).
func TestAtomicClaimLeavesNothingOnFailure(t *testing.T) {
	for name, open := range txBackends(t) {
		t.Run(name, func(t *testing.T) {
			f, storeSink, _, other := atomicFixture(t, open)
			storeSink.step = audit.StepReceived
			storeSink.fail.Store(true)
			r1, m := f.send("m1", invoic("ATREF4", "A"), nil)
			storeSink.fail.Store(false)
			if r1.Status != 503 || f.calls.Load() != 0 {
				t.Fatalf("with the store's received record failing: %d %s, handler calls %d", r1.Status, r1.Body, f.calls.Load())
			}
			if got := f.steps(m.TransportKey); strings.Contains(got, "decision") {
				t.Errorf("store's audit after a failed claim %s", got)
			}
			if got := memorySteps(other, m.TransportKey); !strings.HasPrefix(got, "received,reply:unavailable") {
				t.Errorf("other sink's audit %s", got)
			}
			r2, _ := f.send("m1", invoic("ATREF4", "A"), nil)
			if r2.Status != 200 || f.calls.Load() != 1 {
				t.Fatalf("retransmission: %d %s, handler calls %d", r2.Status, r2.Body, f.calls.Load())
			}
		})
	}
}

// appendingSink is an audit.Appender over a Memory: AppendBatch keeps the
// records at once and its wait fails when lose is set (a sync that rolled
// them back).
type appendingSink struct {
	*audit.Memory
	lose           atomic.Bool
	appends, waits atomic.Int64
}

func (s *appendingSink) AppendBatch(ctx context.Context, rs []audit.Record) (func(context.Context) error, error) {
	s.appends.Add(1)
	for _, r := range rs {
		if err := s.Memory.Write(ctx, r); err != nil {
			return nil, err
		}
	}
	lose := s.lose.Load()
	return func(context.Context) error {
		s.waits.Add(1)
		if lose {
			return errors.New("audit sync failed")
		}
		return nil
	}, nil
}

// TestAtomicAppendedClaimRecordsGateTheAccept: with an audit.Appender as
// the other sinks (the JSON-lines file) the claim's records are appended
// without a sync of their own, and the accept waits until they are
// durable: when they were lost, no positive reply, the claim is abandoned
// and the retransmission processed.
func TestAtomicAppendedClaimRecordsGateTheAccept(t *testing.T) {
	for name, open := range txBackends(t) {
		t.Run(name, func(t *testing.T) {
			f, _, _, _ := atomicFixture(t, open)
			other := &appendingSink{Memory: &audit.Memory{}}
			f.p.Audit = audit.Multi{f.p.AuditParts.Store, other}
			f.p.AuditParts.Other = other
			r1, m := f.send("m1", invoic("APREF1", "A"), nil)
			if r1.Status != 200 || other.appends.Load() != 1 || other.waits.Load() != 1 {
				t.Fatalf("delivery: %d %s; %d appends, %d waits", r1.Status, r1.Body, other.appends.Load(), other.waits.Load())
			}
			const want = "received,decision:new,decision:new-interchange,handler:ok,reply:accepted"
			if got := memorySteps(other.Memory, m.TransportKey); got != want {
				t.Errorf("other sink's audit %s", got)
			}
			other.lose.Store(true)
			r2, m2 := f.send("m2", invoic("APREF2", "B"), nil)
			other.lose.Store(false)
			if r2.Status != 503 {
				t.Fatalf("with the appended claim records lost: %d %s", r2.Status, r2.Body)
			}
			if got := f.steps(m2.TransportKey); strings.Contains(got, "reply:accepted") {
				t.Errorf("store's audit after a refused accept %s", got)
			}
			calls := f.calls.Load()
			r3, _ := f.send("m2", invoic("APREF2", "B"), nil)
			if r3.Status != 200 || f.calls.Load() != calls+1 {
				t.Fatalf("retransmission: %d %s, handler calls %d → %d", r3.Status, r3.Body, calls, f.calls.Load())
			}
		})
	}
}
