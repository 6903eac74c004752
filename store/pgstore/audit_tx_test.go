package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/dedup/deduptest"
	"github.com/edigateway/gateway/internal/pgtest"
)

// TestAuditRowsInsideTransactions: the audit rows written inside Atomically
// and AcceptTx are inserted together right before the commit. They come
// back in the order written, with a Time left zero set by the database, and
// a row the database refuses (a NUL byte) fails the whole transaction: no
// row, the claim (or the accept) rolled back.
func TestAuditRowsInsideTransactions(t *testing.T) {
	t.Parallel()
	dsn, schema := pgtest.Schema(t)
	s := open(t, dsn, schema, dedup.Options{Lease: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sink := s.Audit()
	rec := func(key dedup.Key, step audit.Step, decision string) audit.Record {
		return audit.Record{Step: step, Partner: "p", Protocol: "as4", MessageID: string(key) + "@p", Key: string(key), Decision: decision}
	}
	steps := func(key dedup.Key) []string {
		t.Helper()
		got, err := sink.ByKey(ctx, string(key))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range got {
			if r.Time.IsZero() {
				t.Errorf("record %+v without a time", r)
			}
			out = append(out, string(r.Step)+":"+r.Decision)
		}
		return out
	}

	key := deduptest.NewKey(t)
	var d dedup.Decision
	err := s.Atomically(ctx, func(ctx context.Context) error {
		if err := sink.Write(ctx, rec(key, audit.StepReceived, "")); err != nil {
			return err
		}
		var err error
		if d, err = s.Claim(ctx, dedup.ClaimRequest{Key: key}); err != nil {
			return err
		}
		return sink.Write(ctx, rec(key, audit.StepDecision, "new"))
	})
	if err != nil || d.Outcome != dedup.Claimed {
		t.Fatalf("Atomically: %v %+v", err, d)
	}
	if got := steps(key); len(got) != 2 || got[0] != "received:" || got[1] != "decision:new" {
		t.Fatalf("records after the claim: %q", got)
	}

	// A refused row in the accept transaction: the accept is rolled back.
	err = s.AcceptTx(ctx, key, d.Token, []byte("reply"), func(ctx context.Context, _ dedup.Tx) error {
		if err := sink.Write(ctx, rec(key, audit.StepHandler, "ok")); err != nil {
			return err
		}
		return sink.Write(ctx, rec(key, audit.StepReply, "bad\x00"))
	})
	if err == nil {
		t.Fatal("an accept transaction with a refused audit row committed")
	}
	if got := steps(key); len(got) != 2 {
		t.Fatalf("records after the failed accept: %q", got)
	}
	err = s.AcceptTx(ctx, key, d.Token, []byte("reply"), func(ctx context.Context, _ dedup.Tx) error {
		if err := sink.Write(ctx, rec(key, audit.StepHandler, "ok")); err != nil {
			return err
		}
		return sink.Write(ctx, rec(key, audit.StepReply, "accepted"))
	})
	if err != nil {
		t.Fatalf("the claim's holder accepts after the failed accept: %v", err)
	}
	if got := steps(key); len(got) != 4 || got[2] != "handler:ok" || got[3] != "reply:accepted" {
		t.Fatalf("records after the accept: %q", got)
	}

	// A refused row in a claim transaction: no claim, no row.
	key2 := deduptest.NewKey(t)
	err = s.Atomically(ctx, func(ctx context.Context) error {
		if err := sink.Write(ctx, rec(key2, audit.StepReceived, "bad\x00")); err != nil {
			return err
		}
		_, err := s.Claim(ctx, dedup.ClaimRequest{Key: key2})
		return err
	})
	if err == nil || errors.Is(err, dedup.ErrUnavailable) {
		t.Fatalf("a claim transaction with a refused audit row: %v, want a plain error", err)
	}
	if got := steps(key2); len(got) != 0 {
		t.Fatalf("records of the failed claim transaction: %q", got)
	}
	if d2, err := s.Claim(ctx, dedup.ClaimRequest{Key: key2}); err != nil || d2.Outcome != dedup.Claimed {
		t.Fatalf("claim after the rolled back claim: %+v %v", d2, err)
	}
}
