package deduptest

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/edigateway/gateway/dedup"
)

// ErrDown is what a Flaky store answers while down.
var ErrDown = fmt.Errorf("deduptest: store down (connection refused): %w", dedup.ErrUnavailable)

// Flaky wraps a store and its ledger (usually one value, as with every real
// store) and fails every claim, accept and abandon, transport and
// interchange, while Down is set: a store behind a dropped connection.
// Reads pass through.
type Flaky struct {
	dedup.Store
	dedup.Ledger
	Down atomic.Bool
}

// NewFlaky wraps a store that is also its ledger.
func NewFlaky(s interface {
	dedup.Store
	dedup.Ledger
}) *Flaky {
	return &Flaky{Store: s, Ledger: s}
}

func (f *Flaky) Claim(ctx context.Context, r dedup.ClaimRequest) (dedup.Decision, error) {
	if f.Down.Load() {
		return dedup.Decision{}, ErrDown
	}
	return f.Store.Claim(ctx, r)
}

func (f *Flaky) Accept(ctx context.Context, k dedup.Key, t dedup.Token, reply []byte) error {
	if f.Down.Load() {
		return ErrDown
	}
	return f.Store.Accept(ctx, k, t, reply)
}

func (f *Flaky) Abandon(ctx context.Context, k dedup.Key, t dedup.Token) error {
	if f.Down.Load() {
		return ErrDown
	}
	return f.Store.Abandon(ctx, k, t)
}

func (f *Flaky) ClaimInterchange(ctx context.Context, c dedup.InterchangeClaim) (dedup.Decision, error) {
	if f.Down.Load() {
		return dedup.Decision{}, ErrDown
	}
	return f.Ledger.ClaimInterchange(ctx, c)
}

func (f *Flaky) AcceptInterchange(ctx context.Context, k dedup.Key, t dedup.Token) error {
	if f.Down.Load() {
		return ErrDown
	}
	return f.Ledger.AcceptInterchange(ctx, k, t)
}

func (f *Flaky) AbandonInterchange(ctx context.Context, k dedup.Key, t dedup.Token) error {
	if f.Down.Load() {
		return ErrDown
	}
	return f.Ledger.AbandonInterchange(ctx, k, t)
}
