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
	"net/netip"
	"net/url"
	"sync"
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
	// Lease holds leased deliveries from other dispatchers; default
	// Timeout·⌈Batch/Concurrency⌉ + 30s so that a lease outlives the
	// attempts of its whole batch.
	Lease time.Duration
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

// Run delivers until ctx is cancelled and then returns ctx's error. A
// failing store is logged and tried again after PollInterval.
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

// RunOnce leases one batch of due deliveries and attempts each. It returns
// how many it attempted.
func (d *Dispatcher) RunOnce(ctx context.Context) (int, error) {
	d.init()
	timeout := orDefault(d.Timeout, DefaultTimeout)
	size, conc := orDefault(d.Batch, DefaultBatch), orDefault(d.Concurrency, DefaultConcurrency)
	// The batch is posted conc at a time: its last delivery may start only
	// after (rounds-1) timeouts, and its lease must still hold then.
	rounds := (size + conc - 1) / conc
	lease := orDefault(d.Lease, time.Duration(rounds)*timeout+30*time.Second)
	batch, err := d.Store.Lease(ctx, size, lease)
	if err != nil {
		return 0, fmt.Errorf("outbox: lease: %w", err)
	}
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	for _, del := range batch {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			d.attempt(ctx, del)
		}()
	}
	wg.Wait()
	return len(batch), nil
}

// attempt posts one delivery and records the outcome.
func (d *Dispatcher) attempt(ctx context.Context, del Delivery) {
	attempt := del.Attempts + 1
	lg := d.log().With("partner", del.Partner, "message_id", del.MessageID, "delivery", del.ID,
		"attempt", attempt, "url", redactURL(del.URL))
	start := d.now()
	var permit Permit
	var status int
	var perr error
	if d.Authorize != nil {
		if permit, perr = d.Authorize(ctx, del); perr != nil {
			perr = &RefusedError{Reason: perr.Error()}
		}
	}
	if perr == nil {
		status, perr = d.post(withPermit(ctx, permit), del)
	}
	if ctx.Err() != nil && perr != nil {
		// Shutting down: the attempt did not really happen; the lease runs
		// out and the delivery is picked up after the restart.
		lg.Info("outbox: attempt interrupted by shutdown", "err", perr)
		return
	}
	// The outcome must be recorded even when ctx ends now.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var refused *RefusedError
	if errors.As(perr, &refused) {
		d.refuse(rctx, lg, del, refused)
		return
	}
	elapsed := d.now().Sub(start)
	if perr == nil {
		if err := d.Store.Delivered(rctx, del.ID); err != nil {
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
		if err := d.Store.GiveUp(rctx, del.ID, msg); err != nil {
			lg.Error("outbox: give-up not recorded", "err", err)
			return
		}
		lg.Error("outbox: gave up; an operator must resend", "status", status, "err", msg, "age", age.Round(time.Second))
		return
	}
	delay := d.backoff(attempt)
	next := d.now().Add(delay)
	if err := d.Store.Retry(rctx, del.ID, next, msg); err != nil {
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
	if err := d.Store.GiveUp(ctx, del.ID, msg); err != nil {
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
