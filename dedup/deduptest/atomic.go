package deduptest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
)

// AtomicStore is what ExerciseAtomic needs: a store with dedup.Atomic, its
// business ledger, and its own audit sink, readable back.
type AtomicStore interface {
	dedup.Store
	dedup.Ledger
	dedup.Atomic
	AuditSink() audit.Sink
}

// ExerciseAtomic checks dedup.Atomic against a store implementation:
// a claim (or an interchange claim, or both: the transport key and the
// interchange it carries) and audit records written in one Atomically
// commit together, also when several such transactions claim one
// interchange at once; a
// failing callback (or a failing write in it) leaves none of them (the key
// is claimable again, no record); an accept, the accept of an interchange
// and audit records commit together or not at all (a stale token fails
// the whole transaction, which leaves the interchange held by its claim);
// and concurrent transactions each get their own outcome.
func ExerciseAtomic(t *testing.T, newStore NewStore) {
	k := atomicKit{newStore: newStore}
	t.Run("claim and records commit together", k.claimAndRecordsCommitTogether)
	t.Run("callback error leaves nothing", k.callbackErrorLeavesNothing)
	t.Run("interchange claim and record commit together", k.interchangeClaimAndRecordCommitTogether)
	t.Run("claim, interchange claim and records commit together", k.claimBothAndRecordsCommitTogether)
	t.Run("concurrent claims of one interchange under several keys", k.concurrentInterchangeClaims)
	t.Run("accept, interchange and records commit together", k.acceptAndRecordsCommitTogether)
	t.Run("concurrent transactions", k.concurrentTransactions)
}

// atomicKit runs the checks of ExerciseAtomic, each on a store of its own.
type atomicKit struct{ newStore NewStore }

// open returns a new store and its audit sink read back.
func (k atomicKit) open(t *testing.T) (AtomicStore, audit.Reader) {
	s := k.newStore(t, dedup.Options{Lease: time.Minute})
	t.Cleanup(func() { s.Close() })
	as, ok := s.(AtomicStore)
	if !ok {
		t.Fatalf("%T lacks dedup.Atomic, dedup.Ledger or AuditSink", s)
	}
	r, ok := as.AuditSink().(audit.Reader)
	if !ok {
		t.Fatalf("%T's audit sink cannot be read back", s)
	}
	return as, r
}

// atomicRecord is an audit record of key written inside a transaction.
func atomicRecord(key dedup.Key, step audit.Step, decision string) audit.Record {
	return audit.Record{Time: time.Now().UTC(), Step: step, Partner: "kit", Protocol: "as2", MessageID: string(key) + "@kit",
		Key: string(key), Decision: decision}
}

// auditRecords are the audit records of key.
func auditRecords(t *testing.T, r audit.Reader, key dedup.Key) []audit.Record {
	t.Helper()
	got, err := r.Query(callContext(t), audit.Query{Key: string(key)})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// errCallback is the error of a transaction's failing callback.
var errCallback = errors.New("boom")

// claimAndRecordsCommitTogether: claim and records commit together.
func (k atomicKit) claimAndRecordsCommitTogether(t *testing.T) {
	s, r := k.open(t)
	ctx, key := callContext(t), NewKey(t)
	var d dedup.Decision
	err := s.Atomically(ctx, func(ctx context.Context) error {
		if err := s.AuditSink().Write(ctx, atomicRecord(key, audit.StepReceived, "")); err != nil {
			return err
		}
		var err error
		if d, err = s.Claim(ctx, dedup.ClaimRequest{Key: key, PayloadSHA256: "h"}); err != nil {
			return err
		}
		return s.AuditSink().Write(ctx, atomicRecord(key, audit.StepDecision, "new"))
	})
	if err != nil || d.Outcome != dedup.Claimed {
		t.Fatalf("Atomically: %v, %+v", err, d)
	}
	if got := auditRecords(t, r, key); len(got) != 2 || got[0].Step != audit.StepReceived || got[1].Decision != "new" {
		t.Fatalf("records after the commit: %+v", got)
	}
	if d2, err := s.Claim(ctx, dedup.ClaimRequest{Key: key}); err != nil || d2.Outcome != dedup.InFlight {
		t.Fatalf("claim after the commit: %+v %v, want in-flight", d2, err)
	}
	if err := s.Accept(ctx, key, d.Token, []byte("r")); err != nil {
		t.Fatalf("the holder accepts: %v", err)
	}
}

// callbackErrorLeavesNothing: callback error leaves nothing.
func (k atomicKit) callbackErrorLeavesNothing(t *testing.T) {
	s, r := k.open(t)
	ctx, key := callContext(t), NewKey(t)
	err := s.Atomically(ctx, func(ctx context.Context) error {
		if err := s.AuditSink().Write(ctx, atomicRecord(key, audit.StepReceived, "")); err != nil {
			return err
		}
		if _, err := s.Claim(ctx, dedup.ClaimRequest{Key: key}); err != nil {
			return err
		}
		return errCallback
	})
	if err != errCallback {
		t.Fatalf("Atomically returned %v, want the callback's error as it is", err)
	}
	if got := auditRecords(t, r, key); len(got) != 0 {
		t.Fatalf("records survived the rollback: %+v", got)
	}
	mustClaim(t, ctx, s, key) // the claim was rolled back too
}

// interchangeClaimAndRecordCommitTogether: interchange claim and record commit together.
func (k atomicKit) interchangeClaimAndRecordCommitTogether(t *testing.T) {
	s, r := k.open(t)
	ctx, key := callContext(t), NewKey(t)
	ic := NewInterchange(t)
	claim := dedup.InterchangeClaim{Interchange: ic, PayloadSHA256: "h", TransportKey: key, MessageID: "m"}
	err := s.Atomically(ctx, func(ctx context.Context) error {
		if _, err := s.ClaimInterchange(ctx, claim); err != nil {
			return err
		}
		if err := s.AuditSink().Write(ctx, atomicRecord(key, audit.StepDecision, "new-interchange")); err != nil {
			return err
		}
		return errCallback
	})
	if err != errCallback {
		t.Fatalf("Atomically: %v", err)
	}
	if got := auditRecords(t, r, key); len(got) != 0 {
		t.Fatalf("records survived the rollback: %+v", got)
	}
	// The claim was rolled back with it: the interchange is free.
	if d, err := s.ClaimInterchange(ctx, claim); err != nil || d.Outcome != dedup.Claimed {
		t.Fatalf("interchange after the rollback: %+v %v, want claimed", d, err)
	}
}

// claimBothAndRecordsCommitTogether: claim, interchange claim and records commit together.
func (k atomicKit) claimBothAndRecordsCommitTogether(t *testing.T) {
	s, r := k.open(t)
	ctx, key := callContext(t), NewKey(t)
	ic := NewInterchange(t)
	claimBoth := func(fail error) (dedup.Decision, dedup.Decision, error) {
		var d, di dedup.Decision
		err := s.Atomically(ctx, func(ctx context.Context) error {
			if err := s.AuditSink().Write(ctx, atomicRecord(key, audit.StepReceived, "")); err != nil {
				return err
			}
			var err error
			if d, err = s.Claim(ctx, dedup.ClaimRequest{Key: key, PayloadSHA256: "h"}); err != nil {
				return err
			}
			if di, err = s.ClaimInterchange(ctx, dedup.InterchangeClaim{Interchange: ic, PayloadSHA256: "h", TransportKey: key, MessageID: "m"}); err != nil {
				return err
			}
			if err := s.AuditSink().Write(ctx, atomicRecord(key, audit.StepDecision, "new-interchange")); err != nil {
				return err
			}
			return fail
		})
		return d, di, err
	}
	if _, _, err := claimBoth(errCallback); err != errCallback {
		t.Fatalf("failing transaction: %v", err)
	}
	if got := auditRecords(t, r, key); len(got) != 0 {
		t.Fatalf("records survived the rollback: %+v", got)
	}
	d, di, err := claimBoth(nil)
	if err != nil || d.Outcome != dedup.Claimed || di.Outcome != dedup.Claimed {
		t.Fatalf("after a rolled back transaction both keys are claimed anew: %+v %+v %v", d, di, err)
	}
	if got := auditRecords(t, r, key); len(got) != 2 {
		t.Fatalf("records after the commit: %+v", got)
	}
	// Both held by this transaction's claims: in flight for another
	// delivery, accepted by their holders.
	if d2, err := s.Claim(ctx, dedup.ClaimRequest{Key: key}); err != nil || d2.Outcome != dedup.InFlight {
		t.Fatalf("claim after the commit: %+v %v, want in-flight", d2, err)
	}
	if d2, err := s.ClaimInterchange(ctx, dedup.InterchangeClaim{Interchange: ic, PayloadSHA256: "h", TransportKey: NewKey(t)}); err != nil || d2.Outcome != dedup.InFlight {
		t.Fatalf("interchange after the commit: %+v %v, want in-flight", d2, err)
	}
	if err := s.AcceptInterchange(ctx, ic.Key, di.Token); err != nil {
		t.Fatalf("the holder accepts the interchange: %v", err)
	}
	if err := s.Accept(ctx, key, d.Token, []byte("r")); err != nil {
		t.Fatalf("the holder accepts the key: %v", err)
	}
}

// concurrentInterchangeClaims: concurrent claims of one interchange under several keys.
func (k atomicKit) concurrentInterchangeClaims(t *testing.T) {
	// Transactions each claiming their own transport key and then the
	// same interchange: one holds the interchange, the others find it
	// in flight; none fails, none waits forever.
	s, _ := k.open(t)
	ctx := callContext(t)
	ic := NewInterchange(t)
	const n = 16
	outcomes := make([]dedup.Outcome, n)
	tokens := make([]dedup.Token, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := NewKey(t)
			errs[i] = s.Atomically(ctx, func(ctx context.Context) error {
				d, err := s.Claim(ctx, dedup.ClaimRequest{Key: key})
				if err != nil {
					return err
				}
				if d.Outcome != dedup.Claimed {
					return fmt.Errorf("new key %v", d.Outcome)
				}
				di, err := s.ClaimInterchange(ctx, dedup.InterchangeClaim{Interchange: ic, PayloadSHA256: "h", TransportKey: key,
					MessageID: fmt.Sprintf("m%d", i)})
				if err != nil {
					return err
				}
				outcomes[i], tokens[i] = di.Outcome, di.Token
				return nil
			})
		}()
	}
	wg.Wait()
	claimed := 0
	for i := range n {
		if errs[i] != nil {
			t.Errorf("transaction %d: %v", i, errs[i])
		}
		switch outcomes[i] {
		case dedup.Claimed:
			claimed++
			if err := s.AcceptInterchange(ctx, ic.Key, tokens[i]); err != nil {
				t.Errorf("accept by the holder: %v", err)
			}
		case dedup.InFlight:
		default:
			t.Errorf("transaction %d: interchange %v, want claimed or in flight", i, outcomes[i])
		}
	}
	if claimed != 1 {
		t.Fatalf("%d transactions claimed the interchange, want 1", claimed)
	}
}

// acceptAndRecordsCommitTogether: accept, interchange and records commit together.
func (k atomicKit) acceptAndRecordsCommitTogether(t *testing.T) {
	s, r := k.open(t)
	ctx, key := callContext(t), NewKey(t)
	d := mustClaim(t, ctx, s, key)
	ic := NewInterchange(t)
	di, err := s.ClaimInterchange(ctx, dedup.InterchangeClaim{Interchange: ic, PayloadSHA256: "h", TransportKey: key, MessageID: "m"})
	if err != nil || di.Outcome != dedup.Claimed {
		t.Fatalf("claim interchange: %+v %v", di, err)
	}
	accept := func(ctx context.Context, token dedup.Token, fail error) error {
		return s.Atomically(ctx, func(ctx context.Context) error {
			if err := s.AuditSink().Write(ctx, atomicRecord(key, audit.StepHandler, "ok")); err != nil {
				return err
			}
			if err := s.AcceptInterchange(ctx, ic.Key, di.Token); err != nil {
				return err
			}
			if err := s.Accept(ctx, key, token, []byte("reply")); err != nil {
				return err
			}
			if err := s.AuditSink().Write(ctx, atomicRecord(key, audit.StepReply, "accepted")); err != nil {
				return err
			}
			return fail
		})
	}
	if err := accept(ctx, d.Token, errCallback); err != errCallback {
		t.Fatalf("failing accept: %v", err)
	}
	if err := accept(ctx, dedup.Token("stale"), nil); !errors.Is(err, dedup.ErrStaleClaim) {
		t.Fatalf("accept with a stale token: %v, want ErrStaleClaim", err)
	}
	if got := auditRecords(t, r, key); len(got) != 0 {
		t.Fatalf("records of rolled back accepts: %+v", got)
	}
	// Both rolled back: the interchange is still held by its claim.
	if d2, err := s.ClaimInterchange(ctx, dedup.InterchangeClaim{Interchange: ic, PayloadSHA256: "h", TransportKey: NewKey(t)}); err != nil || d2.Outcome != dedup.InFlight {
		t.Fatalf("interchange after the rollbacks: %+v %v, want in-flight", d2, err)
	}
	if err := accept(ctx, d.Token, nil); err != nil {
		t.Fatalf("accept: %v", err)
	}
	if got := auditRecords(t, r, key); len(got) != 2 || got[1].Decision != "accepted" {
		t.Fatalf("records after the accept: %+v", got)
	}
	if d2, err := s.Claim(ctx, dedup.ClaimRequest{Key: key}); err != nil || d2.Outcome != dedup.Duplicate || string(d2.Reply) != "reply" {
		t.Fatalf("claim after the accept: %+v %v", d2, err)
	}
	if d2, err := s.ClaimInterchange(ctx, dedup.InterchangeClaim{Interchange: ic, PayloadSHA256: "h", TransportKey: NewKey(t)}); err != nil || d2.Outcome != dedup.Duplicate {
		t.Fatalf("interchange after the accept: %+v %v, want duplicate", d2, err)
	}
}

// concurrentTransactions: concurrent transactions.
func (k atomicKit) concurrentTransactions(t *testing.T) {
	s, r := k.open(t)
	ctx := callContext(t)
	const n = 24
	keys := make([]dedup.Key, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		keys[i] = NewKey(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Atomically(ctx, func(ctx context.Context) error {
				if _, err := s.Claim(ctx, dedup.ClaimRequest{Key: keys[i]}); err != nil {
					return err
				}
				if err := s.AuditSink().Write(ctx, atomicRecord(keys[i], audit.StepDecision, "new")); err != nil {
					return err
				}
				if i%3 == 0 {
					return fmt.Errorf("fail %d", i)
				}
				return nil
			})
		}()
	}
	wg.Wait()
	for i, key := range keys {
		failed := i%3 == 0
		if (errs[i] != nil) != failed {
			t.Errorf("transaction %d: %v", i, errs[i])
		}
		want := dedup.InFlight
		if failed {
			want = dedup.Claimed
		}
		if d, err := s.Claim(ctx, dedup.ClaimRequest{Key: key}); err != nil || d.Outcome != want {
			t.Errorf("key %d after its transaction: %+v %v, want %v", i, d, err, want)
		}
		if got := auditRecords(t, r, key); len(got) != map[bool]int{true: 0, false: 1}[failed] {
			t.Errorf("key %d: %d records", i, len(got))
		}
	}
}
