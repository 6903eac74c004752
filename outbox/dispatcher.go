package outbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edigateway/gateway/audit"
)

// Dispatcher defaults.
const (
	DefaultBatch        = 16
	DefaultConcurrency  = 4
	DefaultPollInterval = 5 * time.Second
	DefaultTimeout      = 60 * time.Second
	DefaultMaxAttempts  = 12
	DefaultMaxAge       = 48 * time.Hour
	DefaultBaseBackoff  = 30 * time.Second
	DefaultMaxBackoff   = time.Hour
	// DefaultLease is how long a leased delivery is held from other
	// dispatchers between two heartbeats: a stopped or killed gateway's
	// deliveries are free for the others within it.
	DefaultLease = 30 * time.Second
	// DefaultStopTimeout bounds how long attempts in flight may still run
	// after Run's context ended.
	DefaultStopTimeout = 30 * time.Second
)

// maxErrorBody bounds how much of a refusing server's answer is kept in
// LastError.
const maxErrorBody = 256

// Dispatcher posts queued deliveries: it leases due deliveries, POSTs each
// with its headers and body, marks 2xx answers delivered and schedules
// everything else for another attempt with exponential backoff and jitter,
// giving up after MaxAttempts attempts or when the delivery is older than
// MaxAge. Since the queue is durable, a restarted dispatcher picks up what
// a stopped one left.
type Dispatcher struct {
	Store Store
	// Authorize is asked before every attempt whether the delivery may
	// still be made, against the partner agreement as it is now: an error
	// refuses it (given up at once, logged and audited); the Permit names
	// the non-public networks it may connect to. Nil allows every URL, to
	// public addresses only.
	Authorize func(ctx context.Context, del Delivery) (Permit, error)
	// LookupNetIP resolves a delivery's host at each attempt (nil: the
	// system resolver). Every address is checked against the Permit before
	// and while connecting; connections are not reused, no proxy is used
	// and redirects are not followed.
	LookupNetIP func(ctx context.Context, host string) ([]netip.Addr, error)
	// Audit receives a record for every refused delivery (optional).
	Audit audit.Sink
	Log   *slog.Logger
	// Timeout bounds one attempt (default 60s).
	Timeout time.Duration
	// Batch is how many deliveries one round leases (default 16);
	// Concurrency how many are posted at once (default 4).
	Batch       int
	Concurrency int
	// Lease holds leased deliveries from other dispatchers (default 30s);
	// Heartbeat (default Lease/3) renews the lease of every delivery this
	// dispatcher holds while it holds it, so that a slow attempt keeps its
	// delivery and a dead gateway's deliveries are free within Lease.
	Lease     time.Duration
	Heartbeat time.Duration
	// StopTimeout (default 30s) is how long attempts in flight may still
	// run once Run's context ended: a stop starts no new attempt, lets the
	// ones in flight finish and record their outcome, and hands every
	// other leased delivery back at once. An attempt whose request was
	// sent but not answered within StopTimeout is recorded as failed and
	// due at once, for another gateway to post again (the partner may get
	// it twice); one not yet sent is handed back without counting.
	StopTimeout time.Duration
	// PollInterval is the pause between rounds when the queue had nothing
	// due (default 5s); Notify ends a pause early.
	PollInterval time.Duration
	// MaxAttempts (default 12) and MaxAge (default 48h) bound the retries.
	MaxAttempts int
	MaxAge      time.Duration
	// BaseBackoff (default 30s) doubles after every failed attempt up to
	// MaxBackoff (default 1h); the actual delay is drawn from [d/2, d].
	BaseBackoff time.Duration
	MaxBackoff  time.Duration
	// UserAgent is sent with every attempt.
	UserAgent string
	Now       func() time.Time
	// Jitter returns a number in [0, 1); nil means math/rand.
	Jitter func() float64

	once   sync.Once
	wakeCh chan struct{}
	hc     *http.Client
}

func (d *Dispatcher) init() {
	d.once.Do(func() {
		d.wakeCh = make(chan struct{}, 1)
		d.hc = &http.Client{
			Timeout: orDefault(d.Timeout, DefaultTimeout),
			Transport: &http.Transport{
				// No proxy: the address connected to is the one checked.
				Proxy:       nil,
				DialContext: d.dialContext,
				// A new connection, resolved and checked, for every attempt:
				// a pooled one could carry another partner's permit or an
				// address the name no longer has.
				DisableKeepAlives:      true,
				TLSHandshakeTimeout:    30 * time.Second,
				MaxResponseHeaderBytes: 64 << 10,
			},
			// A redirected POST becomes a GET without the body, whose 2xx would
			// count as delivered: a redirect is a failed attempt instead.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	})
}

// Notify wakes a waiting Run at once (call it after Enqueue). It never blocks.
func (d *Dispatcher) Notify() {
	d.init()
	select {
	case d.wakeCh <- struct{}{}:
	default:
	}
}

func (d *Dispatcher) now() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now()
}

func (d *Dispatcher) log() *slog.Logger {
	if d.Log != nil {
		return d.Log
	}
	return slog.Default()
}

func orDefault[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// Backoff is the delay before attempt n+1 after n failed attempts (n >= 1):
// base·2^(n-1), capped at max.
func Backoff(n int, base, max time.Duration) time.Duration {
	if n < 1 {
		n = 1
	}
	b := base
	for i := 1; i < n; i++ {
		b *= 2
		if b >= max || b <= 0 {
			return max
		}
	}
	return min(b, max)
}

// Run delivers until ctx is cancelled and then returns ctx's error, once
// the attempts in flight finished (within StopTimeout) and every other
// delivery it held was handed back. A failing store is logged and tried
// again after PollInterval.
func (d *Dispatcher) Run(ctx context.Context) error {
	d.init()
	poll := orDefault(d.PollInterval, DefaultPollInterval)
	for {
		n, err := d.RunOnce(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			d.log().Error("outbox: lease failed", "err", err)
		}
		if n > 0 && err == nil {
			continue // there may be more due
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-d.wakeCh:
			t.Stop()
		case <-t.C:
		}
	}
}

// held is a leased delivery of one round: its token, and the cancel of its
// attempt once it started.
type held struct {
	token  string
	lost   bool               // the heartbeat found the lease taken over
	cancel context.CancelFunc // the running attempt's; nil before it starts
}

// round is the deliveries one RunOnce holds, renewed by its heartbeat.
type round struct {
	mu   sync.Mutex
	held map[string]*held
}

func (r *round) get(id string) *held {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.held[id]
}

func (r *round) drop(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.held, id)
}

// RunOnce leases one batch of due deliveries and attempts each. It returns
// how many it leased. When ctx ends, it starts no further attempt, hands
// back the deliveries not yet attempted, and lets the attempts in flight
// run until StopTimeout.
func (d *Dispatcher) RunOnce(ctx context.Context) (int, error) {
	d.init()
	if ctx.Err() != nil {
		return 0, nil
	}
	size, conc := orDefault(d.Batch, DefaultBatch), orDefault(d.Concurrency, DefaultConcurrency)
	lease := orDefault(d.Lease, DefaultLease)
	batch, err := d.Store.Lease(ctx, size, lease)
	if err != nil {
		return 0, fmt.Errorf("outbox: lease: %w", err)
	}
	if len(batch) == 0 {
		return 0, nil
	}
	r := &round{held: make(map[string]*held, len(batch))}
	for _, del := range batch {
		r.held[del.ID] = &held{token: del.LeaseToken}
	}
	// Attempts run in their own context: a stop (ctx) lets them finish
	// for StopTimeout before they are cancelled.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	roundDone := make(chan struct{})
	var bg sync.WaitGroup
	bg.Add(2)
	go func() {
		defer bg.Done()
		select {
		case <-roundDone:
			return
		case <-ctx.Done():
		}
		t := time.NewTimer(orDefault(d.StopTimeout, DefaultStopTimeout))
		defer t.Stop()
		select {
		case <-roundDone:
		case <-t.C:
			d.log().Warn("outbox: stop timeout: cancelling attempts in flight")
			cancelWork()
		}
	}()
	go func() { defer bg.Done(); d.heartbeat(work, roundDone, r, lease) }()

	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	for _, del := range batch {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			// Stopping: no new attempt; the delivery goes back at once.
			d.release(work, del)
			r.drop(del.ID)
			continue
		}
		h := r.get(del.ID)
		if h == nil {
			<-sem
			continue
		}
		actx, cancel := context.WithCancel(work)
		r.mu.Lock()
		lost := h.lost
		h.cancel = cancel
		r.mu.Unlock()
		if lost {
			cancel()
			<-sem
			r.drop(del.ID)
			continue
		}
		wg.Add(1)
		go func() {
			defer func() { cancel(); r.drop(del.ID); <-sem; wg.Done() }()
			d.attempt(actx, ctx, del)
		}()
	}
	wg.Wait()
	close(roundDone)
	bg.Wait()
	return len(batch), nil
}

// heartbeat renews the lease of every delivery of r every Heartbeat until
// done; a delivery whose lease was taken over has its attempt cancelled.
func (d *Dispatcher) heartbeat(ctx context.Context, done <-chan struct{}, r *round, lease time.Duration) {
	every := orDefault(d.Heartbeat, lease/3)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.mu.Lock()
		ids := make(map[string]string, len(r.held))
		for id, h := range r.held {
			if !h.lost {
				ids[id] = h.token
			}
		}
		r.mu.Unlock()
		for id, token := range ids {
			rctx, cancel := context.WithTimeout(ctx, every)
			err := d.Store.Renew(rctx, id, token, lease)
			cancel()
			if err == nil {
				continue
			}
			if errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrNotFound) {
				d.log().Warn("outbox: lease taken over by another worker; abandoning the attempt", "delivery", id, "err", err)
				r.mu.Lock()
				if h := r.held[id]; h != nil {
					h.lost = true
					if h.cancel != nil {
						h.cancel()
					}
				}
				r.mu.Unlock()
				continue
			}
			if ctx.Err() == nil {
				d.log().Error("outbox: lease not renewed; another worker may take the delivery over", "delivery", id, "err", err)
			}
		}
	}
}

// release hands a delivery back without an attempt.
func (d *Dispatcher) release(ctx context.Context, del Delivery) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := d.Store.Release(rctx, del.ID, del.LeaseToken); err != nil {
		d.log().Warn("outbox: lease not handed back; it runs out", "delivery", del.ID, "err", err)
		return
	}
	d.log().Info("outbox: stopping; delivery handed back", "partner", del.Partner, "message_id", del.MessageID, "delivery", del.ID)
}

// attempt posts one delivery and records the outcome. ctx ends the attempt
// (the stop timeout, or the lease taken over); stop is the dispatcher's own
// context, ended when the gateway stops.
func (d *Dispatcher) attempt(ctx, stop context.Context, del Delivery) {
	attempt := del.Attempts + 1
	lg := d.log().With("partner", del.Partner, "message_id", del.MessageID, "delivery", del.ID,
		"attempt", attempt, "url", redactURL(del.URL))
	start := d.now()
	var permit Permit
	var status int
	var perr error
	var sent atomic.Bool
	if d.Authorize != nil {
		if permit, perr = d.Authorize(ctx, del); perr != nil && ctx.Err() == nil {
			perr = &RefusedError{Reason: perr.Error()}
		}
	}
	if perr == nil {
		trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { sent.Store(true) }}
		status, perr = d.post(httptrace.WithClientTrace(withPermit(ctx, permit), trace), del)
	}
	// The outcome must be recorded even when ctx ends now.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if ctx.Err() != nil && perr != nil {
		if stop.Err() == nil {
			// The heartbeat found the lease taken over: the new holder
			// records the delivery.
			lg.Warn("outbox: attempt abandoned; another worker holds the delivery now", "err", perr)
			return
		}
		if !sent.Load() {
			// Stopping before the request went out: the attempt did not
			// happen; the delivery goes back for another gateway.
			lg.Info("outbox: attempt interrupted by shutdown before it was sent", "err", perr)
			d.release(rctx, del)
			return
		}
		// Sent, but no answer before the stop timeout: the partner may
		// have it. The attempt counts and the delivery is due at once
		// for another gateway (which may post it a second time).
		perr = fmt.Errorf("no answer before the gateway stopped (the partner may have received it): %w", perr)
		if err := d.Store.Retry(rctx, del.ID, del.LeaseToken, d.now(), perr.Error()); err != nil {
			lg.Error("outbox: interrupted attempt not recorded", "err", err)
			return
		}
		lg.Warn("outbox: attempt interrupted by shutdown after it was sent; due again at once", "err", perr)
		return
	}
	var refused *RefusedError
	if errors.As(perr, &refused) {
		d.refuse(rctx, lg, del, refused)
		return
	}
	elapsed := d.now().Sub(start)
	if perr == nil {
		if err := d.Store.Delivered(rctx, del.ID, del.LeaseToken); err != nil {
			lg.Error("outbox: delivered but not recorded; it may be sent again", "status", status, "err", err)
			return
		}
		lg.Info("outbox: delivered", "status", status, "elapsed", elapsed)
		return
	}
	msg := perr.Error()
	age := d.now().Sub(del.Created)
	maxAttempts := orDefault(d.MaxAttempts, DefaultMaxAttempts)
	maxAge := orDefault(d.MaxAge, DefaultMaxAge)
	if attempt >= maxAttempts || (!del.Created.IsZero() && age >= maxAge) {
		if err := d.Store.GiveUp(rctx, del.ID, del.LeaseToken, msg); err != nil {
			lg.Error("outbox: give-up not recorded", "err", err)
			return
		}
		lg.Error("outbox: gave up; an operator must resend", "status", status, "err", msg, "age", age.Round(time.Second))
		return
	}
	delay := d.backoff(attempt)
	next := d.now().Add(delay)
	if err := d.Store.Retry(rctx, del.ID, del.LeaseToken, next, msg); err != nil {
		lg.Error("outbox: retry not recorded", "err", err)
		return
	}
	lg.Warn("outbox: attempt failed; will retry", "status", status, "err", msg, "retry_in", delay.Round(time.Millisecond))
}

// refuse gives up a delivery the partner agreement or the address check
// refuses: a refusal is a decision, not a transient failure, and retrying
// it for 48 hours would only repeat it.
func (d *Dispatcher) refuse(ctx context.Context, lg *slog.Logger, del Delivery, r *RefusedError) {
	msg := r.Error()
	if err := d.Store.GiveUp(ctx, del.ID, del.LeaseToken, msg); err != nil {
		lg.Error("outbox: refusal not recorded", "reason", r.Reason, "err", err)
		return
	}
	lg.Error("outbox: delivery refused; not retried", "reason", r.Reason)
	if d.Audit == nil {
		return
	}
	if err := d.Audit.Write(ctx, audit.Record{Time: d.now().UTC(), Step: audit.StepDelivery, Partner: del.Partner,
		Protocol: "as2", MessageID: del.MessageID, Decision: "refused", Error: "async MDN " + redactURL(del.URL) + " " + msg}); err != nil {
		lg.Error("outbox: audit write failed", "err", err)
	}
}

// backoff is Backoff with jitter: uniformly in [d/2, d].
func (d *Dispatcher) backoff(attempt int) time.Duration {
	full := Backoff(attempt, orDefault(d.BaseBackoff, DefaultBaseBackoff), orDefault(d.MaxBackoff, DefaultMaxBackoff))
	j := rand.Float64
	if d.Jitter != nil {
		j = d.Jitter
	}
	f := j()
	if f < 0 || f >= 1 {
		f = 0
	}
	return full/2 + time.Duration(float64(full/2)*f)
}

// post sends one delivery; a nil error means a 2xx answer.
func (d *Dispatcher) post(ctx context.Context, del Delivery) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, del.URL, bytes.NewReader(del.Body))
	if err != nil {
		return 0, fmt.Errorf("build request: %w", err)
	}
	if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
		return 0, fmt.Errorf("unsupported URL scheme %q", req.URL.Scheme)
	}
	for k, v := range del.Header {
		req.Header[k] = append([]string(nil), v...)
	}
	if d.UserAgent != "" {
		req.Header.Set("User-Agent", d.UserAgent)
	}
	d.init()
	resp, err := d.hc.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // the URL may carry credentials; it is logged redacted
		}
		return 0, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp.StatusCode, nil
	}
	return resp.StatusCode, fmt.Errorf("HTTP %s: %q", resp.Status, bytes.TrimSpace(body))
}

// redactURL removes user information from a URL for logs.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User = nil
	u.RawQuery = ""
	u.Fragment = ""
	return u.String()
}
