package exchange

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/edigateway/gateway/dedup"
)

// ErrClaimLost is the cause of an exchange's context ending because its
// claims could not be kept: a renewal found one taken over by another
// delivery (its lease had run out), or the store could not be reached to
// renew them before their lease ran out. The handler is stopped; the accept
// that follows fails as stale, so the partner gets 503, never a second
// positive reply.
var ErrClaimLost = errors.New("exchange: claim lost")

// renewTimeout bounds one renewal statement.
const renewTimeout = 10 * time.Second

// claimKeeper renews the claims one exchange holds (its transport key, then
// its interchanges as they are claimed) every heartbeat while the exchange
// runs, all in one Renewer call, so that a short lease frees a dead holder's
// claims soon while a live one keeps them however long its handler takes.
// It uses a timer, not a goroutine of its own: the renewal runs on the
// timer's goroutine, which ends with it. stop ends it for good.
type claimKeeper struct {
	renewer dedup.Renewer
	every   time.Duration
	lease   time.Duration
	cancel  context.CancelCauseFunc
	log     *slog.Logger

	mu      sync.Mutex
	claims  []dedup.HeldClaim
	timer   *time.Timer
	stopped bool
	running chan struct{} // closed when the renewal in progress returns
	// secured is when the lease of the last successful renewal (or of the
	// claim) runs out, on this process's clock: a renewal that fails for
	// want of the store is retried until then.
	secured time.Time
}

type keeperKey struct{}

// keeperFrom returns the keeper that ctx's exchange holds its claims with,
// or nil.
func keeperFrom(ctx context.Context) *claimKeeper {
	k, _ := ctx.Value(keeperKey{}).(*claimKeeper)
	return k
}

// leaseHeartbeat is how often claims are renewed: LeaseHeartbeat, or a
// third of the lease.
func (p *Pipeline) leaseHeartbeat() (every, lease time.Duration) {
	lease = p.Lease
	if lease <= 0 {
		lease = dedup.DefaultLease
	}
	every = p.LeaseHeartbeat
	if every <= 0 || every >= lease {
		every = lease / 3
	}
	return every, lease
}

// keepClaims starts renewing the transport claim token holds on key; the
// interchanges claimed later join it (hold). The returned ctx ends with
// cause ErrClaimLost when the claims cannot be kept; stop must be called
// when the exchange ends. Without a Renewer store, claims are not renewed
// and ctx is the exchange's own.
func (p *Pipeline) keepClaims(ctx context.Context, key dedup.Key, token dedup.Token, lg *slog.Logger) (context.Context, func()) {
	r, ok := p.Store.(dedup.Renewer)
	if !ok {
		return ctx, func() {}
	}
	if prev := keeperFrom(ctx); prev != nil {
		prev.stop() // a drift accepted as new claims again; the old exchange is over
	}
	every, lease := p.leaseHeartbeat()
	ctx, cancel := context.WithCancelCause(ctx)
	k := &claimKeeper{renewer: r, every: every, lease: lease, cancel: cancel, log: lg,
		claims: []dedup.HeldClaim{{Key: key, Token: token}}, secured: time.Now().Add(lease)}
	k.timer = time.AfterFunc(every, k.renew)
	return context.WithValue(ctx, keeperKey{}, k), func() {
		k.stop()
		cancel(nil)
	}
}

// hold adds an interchange claim to the exchange's renewals.
func (k *claimKeeper) hold(key dedup.Key, token dedup.Token) {
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.claims = append(k.claims, dedup.HeldClaim{Interchange: true, Key: key, Token: token})
}

// stop ends the renewals and waits for one in progress, so that the
// exchange's accept or abandon never races a renewal (a renewal that found
// the claim accepted would take it for lost). Safe on nil and more than
// once.
func (k *claimKeeper) stop() {
	if k == nil {
		return
	}
	k.mu.Lock()
	k.stopped = true
	k.timer.Stop()
	running := k.running
	k.mu.Unlock()
	if running != nil {
		<-running
	}
}

// renew is one heartbeat: every claim held, one call.
func (k *claimKeeper) renew() {
	k.mu.Lock()
	if k.stopped {
		k.mu.Unlock()
		return
	}
	claims := append([]dedup.HeldClaim(nil), k.claims...)
	done := make(chan struct{})
	k.running = done
	k.mu.Unlock()

	started := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), min(renewTimeout, k.every))
	err := k.renewer.RenewClaims(ctx, claims)
	cancel()

	k.mu.Lock()
	defer func() {
		k.running = nil
		close(done)
		k.mu.Unlock()
	}()
	if k.stopped {
		return // the exchange decided meanwhile; the result no longer matters
	}
	switch {
	case err == nil:
		k.secured = started.Add(k.lease)
		k.timer.Reset(k.every)
	case errors.Is(err, errors.ErrUnsupported):
		k.stopped = true // a store that cannot renew: the claims last their lease
	case errors.Is(err, dedup.ErrStaleClaim):
		k.stopped = true
		k.log.Error("claim lost: another delivery took the message over after its lease ran out; handler stopped",
			"decision", "claim-lost", "claims", len(claims), "err", err)
		k.cancel(fmt.Errorf("%w: %w", ErrClaimLost, err))
	case !time.Now().Before(k.secured):
		k.stopped = true
		k.log.Error("claim lease could not be renewed before it ran out; handler stopped", "decision", "claim-lost",
			"lease", k.lease, "err", err)
		k.cancel(fmt.Errorf("%w: lease not renewed in time: %w", ErrClaimLost, err))
	default:
		retry := min(time.Second, k.every, time.Until(k.secured))
		k.log.Warn("claim lease renewal failed; retrying", "retry_in", retry, "lease_left", time.Until(k.secured), "err", err)
		k.timer.Reset(max(retry, time.Millisecond))
	}
}
