package exchange

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/edigateway/gateway/dedup"
)

// DefaultMaxPendingAbandons bounds the failed abandons a pipeline keeps for
// retry when Pipeline.MaxPendingAbandons is zero.
const DefaultMaxPendingAbandons = 4096

// Backoff of a failed abandon's retries: 1s, 2s, 4s, … at most 30s.
const (
	abandonRetryFirst = time.Second
	abandonRetryMax   = 30 * time.Second
)

// claimKind says which table a pending abandon releases.
type claimKind int

const (
	transportClaim claimKind = iota + 1
	interchangeClaim
)

func (k claimKind) String() string {
	if k == interchangeClaim {
		return "interchange"
	}
	return "transport"
}

type pendingKey struct {
	kind claimKind
	key  dedup.Key
}

// pendingAbandon is a claim whose abandon failed (the store was down): until
// it is released, every retransmission of its message is answered in flight.
type pendingAbandon struct {
	token    dedup.Token
	until    time.Time // the lease has surely run out by then
	next     time.Time
	attempts int
}

// pendingAbandons is the pipeline's bounded retry list.
type pendingAbandons struct {
	mu sync.Mutex
	m  map[pendingKey]*pendingAbandon
}

// keepAbandon records a failed abandon for retry. A full list drops the
// entry whose lease ends first: the store releases it soonest anyway.
func (p *Pipeline) keepAbandon(kind claimKind, key dedup.Key, token dedup.Token, lg *slog.Logger) {
	lease := p.Lease
	if lease <= 0 {
		lease = dedup.DefaultLease
	}
	limit := p.MaxPendingAbandons
	if limit <= 0 {
		limit = DefaultMaxPendingAbandons
	}
	now := p.now()
	pa := &p.pendingAbandons
	pa.mu.Lock()
	defer pa.mu.Unlock()
	if pa.m == nil {
		pa.m = make(map[pendingKey]*pendingAbandon)
	}
	k := pendingKey{kind, key}
	if _, ok := pa.m[k]; !ok && len(pa.m) >= limit {
		var oldest pendingKey
		var first time.Time
		for pk, e := range pa.m {
			if first.IsZero() || e.until.Before(first) {
				oldest, first = pk, e.until
			}
		}
		delete(pa.m, oldest)
		lg.Warn("too many failed abandons to retry; the oldest is left to its lease", "max_pending_abandons", limit,
			"dropped_key", string(oldest.key), "kind", oldest.kind.String())
	}
	pa.m[k] = &pendingAbandon{token: token, until: now.Add(lease), next: now.Add(abandonRetryFirst)}
}

// PendingAbandons is how many failed abandons wait for a retry.
func (p *Pipeline) PendingAbandons() int {
	p.pendingAbandons.mu.Lock()
	defer p.pendingAbandons.mu.Unlock()
	return len(p.pendingAbandons.m)
}

// tryAbandon makes one attempt for a pending entry and reports whether it is
// settled: released, stale (another delivery took the claim, or it was
// accepted or abandoned), or past its lease.
func (p *Pipeline) tryAbandon(ctx context.Context, k pendingKey, e *pendingAbandon) (settled bool, err error) {
	if !p.now().Before(e.until) {
		return true, nil
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if k.kind == interchangeClaim {
		if p.Ledger == nil {
			return true, nil
		}
		err = p.Ledger.AbandonInterchange(actx, k.key, e.token)
	} else {
		err = p.Store.Abandon(actx, k.key, e.token)
	}
	return err == nil || errors.Is(err, dedup.ErrStaleClaim), err
}

// retryPendingAbandon retries at once the failed abandon of key, if there is
// one, before a new claim on it: a retransmission that arrives after the
// store came back then finds its message released instead of in flight.
func (p *Pipeline) retryPendingAbandon(ctx context.Context, kind claimKind, key dedup.Key) {
	k := pendingKey{kind, key}
	pa := &p.pendingAbandons
	pa.mu.Lock()
	e, ok := pa.m[k]
	pa.mu.Unlock()
	if !ok {
		return
	}
	p.settle(ctx, k, e)
}

// settle tries e once and drops it when settled, else schedules the next try.
func (p *Pipeline) settle(ctx context.Context, k pendingKey, e *pendingAbandon) {
	settled, err := p.tryAbandon(ctx, k, e)
	pa := &p.pendingAbandons
	pa.mu.Lock()
	defer pa.mu.Unlock()
	if pa.m[k] != e {
		return // replaced or settled meanwhile
	}
	if settled {
		delete(pa.m, k)
		if err == nil {
			p.log().Info("failed abandon retried: claim released", "kind", k.kind.String(), "key", string(k.key), "attempts", e.attempts+1)
		}
		return
	}
	e.attempts++
	back := abandonRetryFirst << min(e.attempts, 5)
	e.next = p.now().Add(min(back, abandonRetryMax))
	p.log().Debug("abandon retry failed", "kind", k.kind.String(), "key", string(k.key), "attempts", e.attempts, "err", err)
}

// retryDueAbandons tries every pending abandon whose next attempt is due.
func (p *Pipeline) retryDueAbandons(ctx context.Context) {
	now := p.now()
	type due struct {
		k pendingKey
		e *pendingAbandon
	}
	var list []due
	pa := &p.pendingAbandons
	pa.mu.Lock()
	for k, e := range pa.m {
		if !now.Before(e.next) || !now.Before(e.until) {
			list = append(list, due{k, e})
		}
	}
	pa.mu.Unlock()
	for _, d := range list {
		if ctx.Err() != nil {
			return
		}
		p.settle(ctx, d.k, d.e)
	}
}

// RetryAbandons retries failed abandons with backoff until ctx ends; the
// server runs it in the background. A claim whose abandon failed while the
// store was down is so released soon after the store is back, not when its
// lease runs out.
func (p *Pipeline) RetryAbandons(ctx context.Context) error {
	t := time.NewTicker(abandonRetryFirst / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			p.retryDueAbandons(ctx)
		}
	}
}

// abandonInterchange releases an interchange claim; a failure other than a
// stale claim is kept for retry.
func (p *Pipeline) abandonInterchange(ctx context.Context, key dedup.Key, token dedup.Token, lg *slog.Logger) {
	keeperFrom(ctx).stop()
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := p.Ledger.AbandonInterchange(actx, key, token); err != nil {
		if errors.Is(err, dedup.ErrStaleClaim) {
			lg.Warn("abandon interchange: claim no longer held", "interchange_key", string(key), "err", err)
			return
		}
		lg.Error("abandon interchange failed; retried in the background until its lease runs out", "interchange_key", string(key), "err", err)
		p.keepAbandon(interchangeClaim, key, token, lg)
	}
}
