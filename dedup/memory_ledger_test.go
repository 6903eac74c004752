package dedup_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/dedup/deduptest"
)

func TestMemoryLedgerContract(t *testing.T) {
	t.Parallel()
	deduptest.ExerciseLedger(t, func(t testing.TB, opts dedup.Options) dedup.Ledger {
		return dedup.NewMemoryStore(opts)
	})
}

func interchange(ref string) dedup.Interchange {
	return dedup.Interchange{Key: dedup.HashFields("ledger test", ref), Partner: "acme", Standard: "X12",
		Sender: "ZZ:ACME", Recipient: "ZZ:GATEWAY", Reference: ref, Date: "260301", Type: "810"}
}

func TestMemoryLedgerWindowBoundaries(t *testing.T) {
	ctx := context.Background()
	s, clk := newClocked(time.Minute)
	ic, w := interchange("000000001"), 7*24*time.Hour
	d, err := s.ClaimInterchange(ctx, dedup.InterchangeClaim{Interchange: ic, PayloadSHA256: "h1", MessageID: "m1", Window: w})
	if err != nil || d.Outcome != dedup.Claimed || !d.FirstSeen.Equal(t0) {
		t.Fatalf("claim: %+v %v", d, err)
	}
	if err := s.AcceptInterchange(ctx, ic.Key, d.Token); err != nil {
		t.Fatal(err)
	}
	clk.now = t0.Add(w) // exactly Window after: still a duplicate
	d, _ = s.ClaimInterchange(ctx, dedup.InterchangeClaim{Interchange: ic, PayloadSHA256: "h2", MessageID: "m2", Window: w})
	if d.Outcome != dedup.Duplicate || d.Retries != 1 || d.PayloadSHA256 != "h1" || !d.FirstSeen.Equal(t0) {
		t.Fatalf("at exactly the window: %+v", d)
	}
	// Listed once the window passed and it was last seen before "before".
	for _, tc := range []struct {
		now, before time.Time
		listed      bool
	}{
		{t0.Add(w), t0.Add(2 * w), false},                  // first seen + window == now: not passed
		{t0.Add(w + 1), t0.Add(w), false},                  // last seen == before
		{t0.Add(w + 1), t0.Add(w + 1), true},               // passed, last seen before
		{t0.Add(w + 1), t0.Add(w + time.Nanosecond), true}, // last seen 1ns before
		{t0.Add(1000 * w), t0.Add(w - time.Second), false}, // seen after before
	} {
		clk.now = tc.now
		recs, err := s.ExpiredInterchanges(ctx, tc.before, 10)
		if err != nil || (len(recs) == 1) != tc.listed {
			t.Errorf("now +%v, before +%v: %d records, %v; want listed %v", tc.now.Sub(t0), tc.before.Sub(t0), len(recs), err, tc.listed)
		}
	}
	clk.now = t0.Add(w + time.Nanosecond)
	d, _ = s.ClaimInterchange(ctx, dedup.InterchangeClaim{Interchange: ic, PayloadSHA256: "h3", MessageID: "m3", Window: w})
	if d.Outcome != dedup.Claimed || !d.Reused {
		t.Fatalf("past the window: %+v", d)
	}
	r, err := s.Interchange(ctx, ic.Key)
	if err != nil || r.State != "claimed" || r.Retries != 0 || !slices.Equal(r.MessageIDs, []string{"m3"}) ||
		!r.FirstSeen.Equal(clk.now) || !r.LastSeen.Equal(clk.now) || r.PayloadSHA256 != "h3" {
		t.Fatalf("record after reuse: %+v %v", r, err)
	}
}

func TestMemoryLedgerLeaseBoundaries(t *testing.T) {
	ctx := context.Background()
	s, clk := newClocked(10 * time.Second)
	ic := interchange("lease")
	d, _ := s.ClaimInterchange(ctx, dedup.InterchangeClaim{Interchange: ic, MessageID: "m1"})
	clk.now = t0.Add(9999 * time.Millisecond)
	got, _ := s.ClaimInterchange(ctx, dedup.InterchangeClaim{Interchange: ic, MessageID: "m2"})
	if got.Outcome != dedup.InFlight || got.RetryAfter != time.Second || got.Retries != 0 {
		t.Fatalf("1ms before the lease ends: %+v", got)
	}
	if r, _ := s.Interchange(ctx, ic.Key); r.Retries != 0 || !slices.Equal(r.MessageIDs, []string{"m1"}) {
		t.Fatalf("an in-flight answer recorded evidence: %+v", r)
	}
	clk.now = t0.Add(10 * time.Second)
	got, _ = s.ClaimInterchange(ctx, dedup.InterchangeClaim{Interchange: ic, MessageID: "m3"})
	if got.Outcome != dedup.Claimed || got.Reused || got.Token == d.Token {
		t.Fatalf("at the end of the lease: %+v", got)
	}
	if err := s.AcceptInterchange(ctx, ic.Key, d.Token); !errors.Is(err, dedup.ErrStaleClaim) {
		t.Fatalf("old holder's accept: %v", err)
	}
}

func TestMemoryLedgerEmptyMessageID(t *testing.T) {
	ctx := context.Background()
	s, _ := newClocked(time.Minute)
	ic := interchange("no id")
	d, _ := s.ClaimInterchange(ctx, dedup.InterchangeClaim{Interchange: ic})
	_ = s.AcceptInterchange(ctx, ic.Key, d.Token)
	d, _ = s.ClaimInterchange(ctx, dedup.InterchangeClaim{Interchange: ic})
	r, _ := s.Interchange(ctx, ic.Key)
	if d.Retries != 1 || r.Retries != 1 || r.MessageIDs == nil || len(r.MessageIDs) != 0 {
		t.Fatalf("empty message ids: %+v, record %+v", d, r)
	}
}

func TestMemoryLedgerFindDefaultLimit(t *testing.T) {
	ctx := context.Background()
	s, clk := newClocked(time.Minute)
	for i := range dedup.DefaultFindLimit + 5 {
		clk.Add(time.Millisecond)
		if _, err := s.ClaimInterchange(ctx, dedup.InterchangeClaim{Interchange: interchange(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := s.FindInterchanges(ctx, dedup.InterchangeQuery{Partner: "acme"})
	if err != nil || len(recs) != dedup.DefaultFindLimit || recs[0].Reference != "0" {
		t.Fatalf("%d records, %v", len(recs), err)
	}
	if s.LedgerLen() != dedup.DefaultFindLimit+5 || s.Len() != 0 {
		t.Fatalf("LedgerLen %d, Len %d", s.LedgerLen(), s.Len())
	}
}

func TestMemoryLedgerKeptApartFromStore(t *testing.T) {
	ctx := context.Background()
	s, _ := newClocked(time.Minute)
	ic := interchange("shared key")
	if d, _ := s.Claim(ctx, dedup.ClaimRequest{Key: ic.Key}); d.Outcome != dedup.Claimed {
		t.Fatalf("transport claim: %v", d.Outcome)
	}
	if d, _ := s.ClaimInterchange(ctx, dedup.InterchangeClaim{Interchange: ic}); d.Outcome != dedup.Claimed {
		t.Fatalf("ledger claim of the same key: %v", d.Outcome)
	}
}

func TestMemoryLedgerClosedIsUnavailable(t *testing.T) {
	ctx := context.Background()
	s, _ := newClocked(time.Minute)
	ic := interchange("closed")
	d, _ := s.ClaimInterchange(ctx, dedup.InterchangeClaim{Interchange: ic})
	s.Close()
	for name, err := range map[string]error{
		"ClaimInterchange":    func() error { _, err := s.ClaimInterchange(ctx, dedup.InterchangeClaim{Interchange: ic}); return err }(),
		"AcceptInterchange":   s.AcceptInterchange(ctx, ic.Key, d.Token),
		"AbandonInterchange":  s.AbandonInterchange(ctx, ic.Key, d.Token),
		"Interchange":         func() error { _, err := s.Interchange(ctx, ic.Key); return err }(),
		"FindInterchanges":    func() error { _, err := s.FindInterchanges(ctx, dedup.InterchangeQuery{}); return err }(),
		"ExpiredInterchanges": func() error { _, err := s.ExpiredInterchanges(ctx, t0, 1); return err }(),
		"DeleteInterchanges":  func() error { _, err := s.DeleteInterchanges(ctx, nil); return err }(),
	} {
		if !errors.Is(err, dedup.ErrUnavailable) {
			t.Errorf("%s after Close: %v", name, err)
		}
	}
}

func TestAppendMessageID(t *testing.T) {
	ids := dedup.FirstMessageIDs("a")
	ids = dedup.AppendMessageID(ids, "b")
	ids = dedup.AppendMessageID(ids, "a")
	ids = dedup.AppendMessageID(ids, "")
	if !slices.Equal(ids, []string{"a", "b"}) {
		t.Fatalf("%q", ids)
	}
	for i := range 2 * dedup.MaxLedgerMessageIDs {
		ids = dedup.AppendMessageID(ids, fmt.Sprint(i))
	}
	if len(ids) != dedup.MaxLedgerMessageIDs || ids[0] != "a" || ids[len(ids)-1] != fmt.Sprint(dedup.MaxLedgerMessageIDs-3) {
		t.Fatalf("capped ids: %d, first %q, last %q", len(ids), ids[0], ids[len(ids)-1])
	}
	if got := dedup.FirstMessageIDs(""); got == nil || len(got) != 0 {
		t.Fatalf("FirstMessageIDs(\"\") = %#v", got)
	}
}
