package pgstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/dedup/deduptest"
	"github.com/edigateway/gateway/internal/pgtest"
)

// TestAtomicallyLazyTransaction: Atomically sends its BEGIN with the first
// statement and its COMMIT with the audit rows. A statement failing inside
// it aborts the whole transaction even when the callback goes on and
// returns nil (the COMMIT is then refused, nothing stays); a transaction of
// audit rows only, or of nothing, commits; a first statement finding no row
// leaves the transaction usable; and every connection goes back to the pool
// outside any transaction.
func TestAtomicallyLazyTransaction(t *testing.T) {
	t.Parallel()
	dsn, schema := pgtest.Schema(t)
	s, err := Open(context.Background(), dsn, dedup.Options{Lease: time.Minute}, WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec := func(key dedup.Key, step audit.Step) audit.Record {
		return audit.Record{Step: step, Partner: "p", Protocol: "as4", MessageID: "m", Key: string(key)}
	}
	records := func(key dedup.Key) int {
		t.Helper()
		got, err := s.Audit().ByKey(ctx, string(key))
		if err != nil {
			t.Fatal(err)
		}
		return len(got)
	}

	// A failing first statement, swallowed by the callback.
	key := deduptest.NewKey(t)
	err = s.Atomically(ctx, func(ctx context.Context) error {
		if _, err := execerFor(ctx, s.pool).Exec(ctx, "SELECT 1/0"); err == nil {
			t.Error("division by zero succeeded")
		}
		_, _ = s.Claim(ctx, dedup.ClaimRequest{Key: key})
		return s.Audit().Write(ctx, rec(key, audit.StepReceived))
	})
	if err == nil {
		t.Fatal("Atomically committed a failed transaction")
	}
	if n := records(key); n != 0 {
		t.Fatalf("%d records of the failed transaction", n)
	}
	if d, err := s.Claim(ctx, dedup.ClaimRequest{Key: key}); err != nil || d.Outcome != dedup.Claimed {
		t.Fatalf("claim after the failed transaction: %+v %v", d, err)
	}

	// A failing statement after a good one, swallowed.
	key2 := deduptest.NewKey(t)
	err = s.Atomically(ctx, func(ctx context.Context) error {
		if _, err := s.Claim(ctx, dedup.ClaimRequest{Key: key2}); err != nil {
			return err
		}
		_, _ = execerFor(ctx, s.pool).Exec(ctx, "SELECT 1/0")
		return nil
	})
	if !errors.Is(err, pgx.ErrTxCommitRollback) {
		t.Fatalf("Atomically after a swallowed failure: %v, want the refused commit", err)
	}
	if d, err := s.Claim(ctx, dedup.ClaimRequest{Key: key2}); err != nil || d.Outcome != dedup.Claimed {
		t.Fatalf("claim after the refused commit: %+v %v", d, err)
	}

	// Nothing, then audit rows only.
	if err := s.Atomically(ctx, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("empty transaction: %v", err)
	}
	key3 := deduptest.NewKey(t)
	err = s.Atomically(ctx, func(ctx context.Context) error {
		if err := s.Audit().Write(ctx, rec(key3, audit.StepReceived)); err != nil {
			return err
		}
		return s.Audit().Write(ctx, rec(key3, audit.StepDecision))
	})
	if err != nil || records(key3) != 2 {
		t.Fatalf("audit rows only: %v, %d records", err, records(key3))
	}

	// A first statement that finds no row (the ledger's duplicate path
	// reads rows that may be missing): the transaction goes on.
	key4 := deduptest.NewKey(t)
	err = s.Atomically(ctx, func(ctx context.Context) error {
		var one int
		if err := execerFor(ctx, s.pool).QueryRow(ctx, "SELECT 1 WHERE false").Scan(&one); err == nil {
			return errors.New("a row where there is none")
		}
		d, err := s.Claim(ctx, dedup.ClaimRequest{Key: key4})
		if err != nil || d.Outcome != dedup.Claimed {
			return errors.Join(err, errors.New("not claimed"))
		}
		return s.Audit().Write(ctx, rec(key4, audit.StepReceived))
	})
	if err != nil || records(key4) != 1 {
		t.Fatalf("after a row not found: %v, %d records", err, records(key4))
	}

	// Every connection is back in the pool, idle (not inside a transaction).
	for range int(s.pool.Config().MaxConns) + 2 {
		c, err := s.pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st := c.Conn().PgConn().TxStatus(); st != 'I' {
			t.Errorf("pooled connection in transaction status %q", st)
		}
		c.Release()
	}
}
