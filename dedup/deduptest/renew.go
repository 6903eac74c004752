package deduptest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/edigateway/gateway/dedup"
)

// ExerciseRenew checks dedup.Renewer against a store implementation
// (newStore must return a store that is a dedup.Renewer and a dedup.Ledger,
// as the gateway's backends are), under ShortLease:
//
//	extends-lease           a transport key and an interchange renewed together after 2/3 of the lease
//	                        are still in flight past the claim's first lease, and accept afterwards
//	after-takeover-fails    renewing claims taken over after their lease fails with ErrStaleClaim
//	                        and leaves the new holder's claims (and their accept) as they were
//	partly-held             one claim taken over among held ones: ErrStaleClaim, the held one is renewed
//	after-accept-or-abandon renewing an accepted or abandoned claim, or with a wrong token, fails
//	late-without-takeover   a holder whose lease ran out may renew as long as nobody took the key over
//
// The subtests run in parallel and sleep about twice the lease in all.
func ExerciseRenew(t *testing.T, newStore NewStore) {
	open := func(t *testing.T) (dedup.Store, dedup.Ledger, dedup.Renewer) {
		s := newStore(t, dedup.Options{Lease: ShortLease})
		t.Cleanup(func() { s.Close() })
		r, ok := s.(dedup.Renewer)
		if !ok {
			t.Fatalf("%T is not a dedup.Renewer", s)
		}
		l, ok := s.(dedup.Ledger)
		if !ok {
			t.Fatalf("%T is not a dedup.Ledger", s)
		}
		return s, l, r
	}
	claimIC := func(t *testing.T, ctx context.Context, l dedup.Ledger, ic dedup.Interchange) dedup.Decision {
		t.Helper()
		d, err := l.ClaimInterchange(ctx, dedup.InterchangeClaim{Interchange: ic, PayloadSHA256: PayloadHash("p"),
			TransportKey: NewKey(t), MessageID: NewMessageID(t), Window: time.Hour})
		if err != nil {
			t.Fatalf("ClaimInterchange: %v", err)
		}
		return d
	}
	// both claims a transport key and an interchange.
	both := func(t *testing.T, ctx context.Context, s dedup.Store, l dedup.Ledger) (dedup.Key, dedup.Interchange, []dedup.HeldClaim) {
		t.Helper()
		key, ic := NewKey(t), NewInterchange(t)
		d := mustClaim(t, ctx, s, key)
		di := claimIC(t, ctx, l, ic)
		if di.Outcome != dedup.Claimed {
			t.Fatalf("claim interchange: %+v", di)
		}
		return key, ic, []dedup.HeldClaim{{Key: key, Token: d.Token}, {Interchange: true, Key: ic.Key, Token: di.Token}}
	}
	inFlight := func(t *testing.T, ctx context.Context, s dedup.Store, l dedup.Ledger, key dedup.Key, ic dedup.Interchange, what string) {
		t.Helper()
		d, err := s.Claim(ctx, dedup.ClaimRequest{Key: key})
		if err != nil || d.Outcome != dedup.InFlight {
			t.Fatalf("%s: transport claim %+v %v, want in flight", what, d, err)
		}
		if d.RetryAfter > ShortLease+time.Second {
			t.Errorf("%s: RetryAfter %v beyond the lease %v", what, d.RetryAfter, ShortLease)
		}
		if di := claimIC(t, ctx, l, ic); di.Outcome != dedup.InFlight {
			t.Fatalf("%s: interchange claim %+v, want in flight", what, di)
		}
	}
	stale := func(t *testing.T, err error, what string) {
		t.Helper()
		if !errors.Is(err, dedup.ErrStaleClaim) {
			t.Fatalf("%s: %v, want an error wrapping dedup.ErrStaleClaim", what, err)
		}
	}
	t.Run("extends-lease", func(t *testing.T) {
		t.Parallel()
		s, l, r := open(t)
		ctx := callContext(t)
		key, ic, held := both(t, ctx, s, l)
		time.Sleep(ShortLease * 2 / 3)
		if err := r.RenewClaims(ctx, held); err != nil {
			t.Fatalf("RenewClaims: %v", err)
		}
		time.Sleep(ShortLease * 2 / 3) // past the first lease, within the renewed one
		inFlight(t, ctx, s, l, key, ic, "after the first lease, renewed")
		if err := l.AcceptInterchange(ctx, ic.Key, held[1].Token); err != nil {
			t.Fatalf("AcceptInterchange after renewal: %v", err)
		}
		if err := s.Accept(ctx, key, held[0].Token, []byte("reply")); err != nil {
			t.Fatalf("Accept after renewal: %v", err)
		}
	})
	t.Run("after-takeover-fails", func(t *testing.T) {
		t.Parallel()
		s, l, r := open(t)
		ctx := callContext(t)
		key, ic, held := both(t, ctx, s, l)
		time.Sleep(ShortLease + 300*time.Millisecond)
		d2 := mustClaim(t, ctx, s, key)
		di2 := claimIC(t, ctx, l, ic)
		if di2.Outcome != dedup.Claimed {
			t.Fatalf("interchange takeover: %+v", di2)
		}
		stale(t, r.RenewClaims(ctx, held), "renewal by the holder taken over")
		stale(t, r.RenewClaims(ctx, held[:1]), "renewal of the transport key taken over")
		stale(t, r.RenewClaims(ctx, held[1:]), "renewal of the interchange taken over")
		inFlight(t, ctx, s, l, key, ic, "after the old holder's renewal")
		if err := s.Accept(ctx, key, held[0].Token, []byte("old")); !errors.Is(err, dedup.ErrStaleClaim) {
			t.Fatalf("old holder's accept after its renewal failed: %v", err)
		}
		if err := l.AcceptInterchange(ctx, ic.Key, di2.Token); err != nil {
			t.Fatalf("new holder's AcceptInterchange: %v", err)
		}
		if err := s.Accept(ctx, key, d2.Token, []byte("new")); err != nil {
			t.Fatalf("new holder's Accept: %v", err)
		}
	})
	t.Run("partly-held", func(t *testing.T) {
		t.Parallel()
		s, l, r := open(t)
		ctx := callContext(t)
		_, ic, held := both(t, ctx, s, l)
		key2 := NewKey(t)
		time.Sleep(ShortLease * 2 / 3)
		d2 := mustClaim(t, ctx, s, key2) // claimed now: its lease outlives the others'
		if err := r.RenewClaims(ctx, held[:1]); err != nil {
			t.Fatalf("RenewClaims: %v", err)
		}
		time.Sleep(ShortLease/3 + 300*time.Millisecond) // the interchange's lease ran out
		if di := claimIC(t, ctx, l, ic); di.Outcome != dedup.Claimed {
			t.Fatalf("interchange takeover: %+v", di)
		}
		stale(t, r.RenewClaims(ctx, []dedup.HeldClaim{held[0], held[1], {Key: key2, Token: d2.Token}}),
			"renewal with one claim taken over")
		time.Sleep(ShortLease * 2 / 3) // past key2's first lease: the renewal above kept it
		if d, err := s.Claim(ctx, dedup.ClaimRequest{Key: key2}); err != nil || d.Outcome != dedup.InFlight {
			t.Fatalf("claim still held, renewed beside a lost one: %+v %v, want in flight", d, err)
		}
	})
	t.Run("after-accept-or-abandon", func(t *testing.T) {
		t.Parallel()
		s, l, r := open(t)
		ctx := callContext(t)
		key, ic, held := both(t, ctx, s, l)
		stale(t, r.RenewClaims(ctx, []dedup.HeldClaim{{Key: key, Token: "00000000000000000000000000000000"}}), "wrong token")
		stale(t, r.RenewClaims(ctx, []dedup.HeldClaim{{Key: NewKey(t), Token: held[0].Token}}), "unknown key")
		if err := s.Accept(ctx, key, held[0].Token, []byte("r")); err != nil {
			t.Fatalf("Accept: %v", err)
		}
		if err := l.AbandonInterchange(ctx, ic.Key, held[1].Token); err != nil {
			t.Fatalf("AbandonInterchange: %v", err)
		}
		stale(t, r.RenewClaims(ctx, held[:1]), "renewal after accept")
		stale(t, r.RenewClaims(ctx, held[1:]), "renewal after abandon")
		if d, err := s.Claim(ctx, dedup.ClaimRequest{Key: key}); err != nil || d.Outcome != dedup.Duplicate {
			t.Fatalf("claim after accept and renewal: %+v %v", d, err)
		}
	})
	t.Run("late-without-takeover", func(t *testing.T) {
		t.Parallel()
		s, l, r := open(t)
		ctx := callContext(t)
		key, ic, held := both(t, ctx, s, l)
		time.Sleep(ShortLease + 300*time.Millisecond)
		if err := r.RenewClaims(ctx, held); err != nil {
			t.Fatalf("RenewClaims after the lease, nobody took over: %v", err)
		}
		inFlight(t, ctx, s, l, key, ic, "after a late renewal")
	})
}
