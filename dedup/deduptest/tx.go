package deduptest

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/edigateway/gateway/dedup"
)

// ExerciseTx checks dedup.TxAcceptor against a store implementation
// (newStore must return a store that has it): the accept and the callback
// commit together; a failing callback rolls the accept back and leaves the
// claim held; a stale token fails the compare-and-set before the callback
// runs; and a claim of the key made while the transaction is open waits for
// its outcome, even when the lease runs out meanwhile.
func ExerciseTx(t *testing.T, newStore NewStore) {
	open := func(t *testing.T, lease time.Duration) (dedup.Store, dedup.TxAcceptor) {
		s := newStore(t, dedup.Options{Lease: lease})
		t.Cleanup(func() { s.Close() })
		acc, ok := s.(dedup.TxAcceptor)
		if !ok {
			t.Fatalf("%T is not a dedup.TxAcceptor", s)
		}
		return s, acc
	}
	c := callContext
	t.Run("commit", func(t *testing.T) {
		s, acc := open(t, time.Minute)
		ctx, key := c(t), NewKey(t)
		d := mustClaim(t, ctx, s, key)
		ran := false
		if err := acc.AcceptTx(ctx, key, d.Token, []byte("reply"), func(ctx context.Context, tx dedup.Tx) error {
			ran = true
			if (tx.SQLTx() == nil) == (tx.PgxTx() == nil) {
				t.Errorf("exactly one of SQLTx and PgxTx must be set: %v, %v", tx.SQLTx(), tx.PgxTx())
			}
			return nil
		}); err != nil || !ran {
			t.Fatalf("AcceptTx: %v (fn ran: %v)", err, ran)
		}
		d2, err := s.Claim(ctx, dedup.ClaimRequest{Key: key})
		if err != nil || d2.Outcome != dedup.Duplicate || !bytes.Equal(d2.Reply, []byte("reply")) {
			t.Fatalf("claim after AcceptTx: %+v %v", d2, err)
		}
		if err := s.Abandon(ctx, key, d.Token); !errors.Is(err, dedup.ErrStaleClaim) {
			t.Fatalf("abandon after AcceptTx: %v", err)
		}
	})
	t.Run("callback error rolls back", func(t *testing.T) {
		s, acc := open(t, time.Minute)
		ctx, key := c(t), NewKey(t)
		d := mustClaim(t, ctx, s, key)
		boom := errors.New("boom")
		if err := acc.AcceptTx(ctx, key, d.Token, []byte("reply"), func(context.Context, dedup.Tx) error { return boom }); err != boom {
			t.Fatalf("AcceptTx returned %v, want the callback's error as it is", err)
		}
		if d2, err := s.Claim(ctx, dedup.ClaimRequest{Key: key}); err != nil || d2.Outcome != dedup.InFlight {
			t.Fatalf("claim after a rolled back AcceptTx: %+v %v, want in-flight", d2, err)
		}
		if err := s.Abandon(ctx, key, d.Token); err != nil {
			t.Fatalf("the holder abandons after the rollback: %v", err)
		}
	})
	t.Run("stale token", func(t *testing.T) {
		s, acc := open(t, time.Minute)
		ctx, key := c(t), NewKey(t)
		d := mustClaim(t, ctx, s, key)
		if err := s.Abandon(ctx, key, d.Token); err != nil {
			t.Fatal(err)
		}
		d2 := mustClaim(t, ctx, s, key)
		ran := false
		err := acc.AcceptTx(ctx, key, d.Token, nil, func(context.Context, dedup.Tx) error { ran = true; return nil })
		if !errors.Is(err, dedup.ErrStaleClaim) || ran {
			t.Fatalf("AcceptTx with the old token: %v (fn ran: %v)", err, ran)
		}
		if err := s.Accept(ctx, key, d2.Token, nil); err != nil {
			t.Fatalf("the new holder accepts: %v", err)
		}
	})
	t.Run("claim during the transaction waits for it", func(t *testing.T) {
		const lease = 200 * time.Millisecond
		s, acc := open(t, lease)
		ctx, key := c(t), NewKey(t)
		d := mustClaim(t, ctx, s, key)
		inside := make(chan struct{})
		got := make(chan dedup.Decision, 1)
		errc := make(chan error, 1)
		go func() {
			<-inside
			d2, err := s.Claim(ctx, dedup.ClaimRequest{Key: key})
			if err != nil {
				errc <- err
				return
			}
			got <- d2
		}()
		err := acc.AcceptTx(ctx, key, d.Token, []byte("r"), func(context.Context, dedup.Tx) error {
			close(inside)
			time.Sleep(2*lease + 100*time.Millisecond) // the lease runs out while the handler works
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case d2 := <-got:
			if d2.Outcome != dedup.Duplicate {
				t.Fatalf("claim made during the transaction: %v, want duplicate (the transaction accepted the key)", d2.Outcome)
			}
		case err := <-errc:
			t.Fatal(err)
		}
	})
}

// callContext is a context bounded by callTimeout, cancelled when t ends.
func callContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	t.Cleanup(cancel)
	return ctx
}

func mustClaim(t *testing.T, ctx context.Context, s dedup.Store, key dedup.Key) dedup.Decision {
	t.Helper()
	d, err := s.Claim(ctx, dedup.ClaimRequest{Key: key})
	if err != nil || d.Outcome != dedup.Claimed {
		t.Fatalf("claim: %+v %v", d, err)
	}
	return d
}
