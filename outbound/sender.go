package outbound

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edigateway/gateway/audit"
)

// Sender defaults.
const (
	// DefaultSenderLease is how long a leased message is held from other
	// workers between two heartbeats: a stopped or killed gateway's
	// messages are free for the others within it.
	DefaultSenderLease   = 30 * time.Second
	DefaultSenderWorkers = 4
	DefaultSenderPoll    = 5 * time.Second
	// DefaultSenderStopTimeout bounds how long attempts in flight may still
	// run after Run's context ended.
	DefaultSenderStopTimeout = 30 * time.Second
	// DefaultAwaitMDN is how long an asynchronous MDN is waited for when
	// the transmitter did not say (Attempt.AwaitFor zero).
	DefaultAwaitMDN = time.Hour
)

const (
	// recordTimeout bounds recording an outcome (and handing a message
	// back): it is recorded even when the attempt's context ended.
	recordTimeout = 10 * time.Second
	// stopGrace is how long Run still waits, once the stop timeout
	// cancelled the attempts in flight, for them to record what they came
	// to; a transmitter that ignores its context is left behind (its lease
	// runs out).
	stopGrace = 5 * time.Second
)

// Outcomes of an attempt, as audited (Decision of StepSend) and observed.
const (
	OutcomeDelivered = "delivered"
	OutcomeRefused   = "refused"
	OutcomeRetry     = "retry"
	OutcomeAwaiting  = "awaiting"
	OutcomeGaveUp    = "gave-up"
	// OutcomeLeaseLost is observed (not audited, nothing recorded) when
	// the message was no longer this Sender's when its attempt ended.
	OutcomeLeaseLost = "lease-lost"
)

// Observer is told of every attempt's outcome (OutcomeDelivered, …,
// OutcomeLeaseLost) and how long its transmission took (0 for a give-up
// decided before any transmission), for metrics.
type Observer interface {
	Attempt(partner string, p Protocol, outcome string, d time.Duration)
}

// SenderConfig configures a Sender; zero fields take the defaults.
type SenderConfig struct {
	Store Store
	// Transmitters per protocol; a message whose protocol has none is
	// retried on its partner's schedule (the reason says so).
	Transmitters map[Protocol]Transmitter
	// Policy returns a partner's retry schedule (nil, or a zero policy:
	// DefaultRetryPolicy).
	Policy func(partner string, p Protocol) RetryPolicy
	// Audit receives one StepSend record per attempt (nil: none).
	Audit audit.Sink
	Log   *slog.Logger
	// Lease (default 30s) holds a leased message from other workers;
	// Heartbeat (default Lease/3) renews it while this Sender holds it.
	Lease     time.Duration
	Heartbeat time.Duration
	// Workers is how many attempts run at once (default 4).
	Workers int
	// Batch is how many messages the Sender holds at most, leased and in
	// flight (default and minimum Workers): more than Workers leases
	// messages ahead of a free worker, in fewer Lease calls, and holds
	// them from other gateways meanwhile.
	Batch int
	// Poll is the pause when nothing was due (default 5s); Notify ends it.
	Poll time.Duration
	// Observer (optional) is told of every attempt.
	Observer Observer
	Now      func() time.Time
	// StopTimeout (default 30s) is how long attempts in flight may still
	// run once Run's context ended: a stop starts no new attempt, hands
	// every leased message not yet attempted back at once, and lets the
	// attempts in flight finish and record their outcome. Then their
	// context is cancelled: an attempt cut short after its transmission
	// started is due again at once (the partner may get it twice, under
	// the same Message-ID); one cut short before is handed back.
	StopTimeout time.Duration
}

// Sender works the queue: it leases due messages, transmits each with its
// protocol's Transmitter while renewing its lease, and records the
// outcome. Several Senders (in one or several gateways) may work one
// store: the leases' fencing tokens keep a message with one at a time.
type Sender struct {
	cfg  SenderConfig
	wake chan struct{}
}

// NewSender returns a Sender with cfg's defaults filled in.
func NewSender(cfg SenderConfig) *Sender {
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultSenderLease
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = cfg.Lease / 3
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultSenderWorkers
	}
	if cfg.Batch < cfg.Workers {
		cfg.Batch = cfg.Workers
	}
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultSenderPoll
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = DefaultSenderStopTimeout
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Heartbeat >= cfg.Lease {
		cfg.Log.Warn("outbound: the heartbeat is not shorter than the lease: a slow attempt loses its message to another worker",
			"heartbeat", cfg.Heartbeat, "lease", cfg.Lease)
	}
	return &Sender{cfg: cfg, wake: make(chan struct{}, 1)}
}

// wakeAt wakes Run when a message it recorded is due again at next, if
// that comes before the next poll would find it: a partner's retry policy
// shorter than Poll (seconds, in tests and for some partners) is kept
// rather than rounded up to the poll.
func (s *Sender) wakeAt(next time.Time) {
	if d := next.Sub(s.now()); d > 0 && d < s.cfg.Poll {
		time.AfterFunc(d, s.Notify)
	}
}

// Notify wakes a waiting Run at once (call it after a Submit, a Resend or
// an operator's retry). It never blocks.
func (s *Sender) Notify() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Sender) now() time.Time {
	if s.cfg.Now != nil {
		return s.cfg.Now()
	}
	return time.Now()
}

// held is a message the Sender holds: its lease token, and its attempt's
// cancel once the attempt started.
type held struct {
	token  string
	lost   bool // the heartbeat found the lease taken over
	ended  bool // the attempt is recording its outcome: no more renewals
	cancel context.CancelFunc
}

// holdings are the messages a Run holds, renewed by its heartbeat.
type holdings struct {
	mu sync.Mutex
	m  map[string]*held
}

func (h *holdings) add(ms []Message) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range ms {
		h.m[m.ID] = &held{token: m.LeaseToken}
	}
}

// begin records the cancel of id's attempt; false when its lease was lost.
func (h *holdings) begin(id string, cancel context.CancelFunc) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	x := h.m[id]
	if x == nil || x.lost {
		return false
	}
	x.cancel = cancel
	return true
}

// end marks id's attempt as ending (its outcome about to be recorded,
// which ends the lease) and reports whether its lease was lost before.
func (h *holdings) end(id string) (lost bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	x := h.m[id]
	if x == nil {
		return true
	}
	x.ended = true
	return x.lost
}

func (h *holdings) drop(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, id)
}

// Run sends until ctx ends, then returns ctx's error once the attempts in
// flight finished (within StopTimeout, plus a few seconds for a cancelled
// attempt to record what it came to) and every other message it held was
// handed back. A failing store is logged and tried again after Poll. One
// Run at a time per Sender.
func (s *Sender) Run(ctx context.Context) error {
	// Attempts run in their own context: a stop (ctx) lets them finish
	// for StopTimeout before they are cancelled.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	h := &holdings{m: map[string]*held{}}
	hbDone := make(chan struct{})
	var hb sync.WaitGroup
	hb.Add(1)
	go func() { defer hb.Done(); s.heartbeat(work, hbDone, h) }()
	var wg sync.WaitGroup
	s.loop(ctx, work, h, &wg)
	s.drain(cancelWork, &wg)
	close(hbDone)
	hb.Wait()
	return ctx.Err()
}

// loop leases due messages while a worker is free and starts their
// attempts, until ctx ends; then it hands back the leased messages not
// started.
func (s *Sender) loop(ctx, work context.Context, h *holdings, wg *sync.WaitGroup) {
	finished := make(chan struct{}, s.cfg.Workers) // never blocks: busy <= Workers
	var pending []Message
	busy := 0
	drained := false // the last Lease found fewer messages than asked
	var timer *time.Timer
	var pollC <-chan time.Time
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		for len(pending) > 0 && busy < s.cfg.Workers && ctx.Err() == nil {
			m := pending[0]
			pending = pending[1:]
			if s.start(work, ctx, h, m, wg, finished) {
				busy++
			}
		}
		if ctx.Err() != nil {
			s.releaseAll(work, h, pending)
			return
		}
		if !drained && len(pending) == 0 && busy < s.cfg.Workers {
			n := s.cfg.Batch - busy
			ms, err := s.cfg.Store.Lease(ctx, n, s.cfg.Lease)
			if err == nil {
				h.add(ms)
				pending = append(pending, ms...)
				drained = len(ms) < n
				continue
			}
			if ctx.Err() == nil {
				s.cfg.Log.Error("outbound: lease failed; trying again after the poll interval", "err", err)
			}
			drained = true
		}
		if drained && pollC == nil {
			timer = time.NewTimer(s.cfg.Poll)
			pollC = timer.C
		}
		select {
		case <-ctx.Done():
		case <-finished:
			busy--
		case <-s.wake:
			drained = false
			if timer != nil {
				timer.Stop()
			}
			pollC = nil
		case <-pollC:
			drained, pollC = false, nil
		}
	}
}

// start runs m's attempt in a goroutine, unless its lease was lost
// meanwhile (then it is dropped: another worker holds it).
func (s *Sender) start(work, stop context.Context, h *holdings, m Message, wg *sync.WaitGroup, finished chan<- struct{}) bool {
	actx, cancel := context.WithCancel(work)
	if !h.begin(m.ID, cancel) {
		cancel()
		h.drop(m.ID)
		return false
	}
	wg.Add(1)
	go func() {
		defer func() {
			cancel()
			h.drop(m.ID)
			finished <- struct{}{}
			wg.Done()
		}()
		s.attempt(actx, stop, h, m)
	}()
	return true
}

// releaseAll hands messages back without an attempt (stopping).
func (s *Sender) releaseAll(ctx context.Context, h *holdings, ms []Message) {
	for _, m := range ms {
		s.release(ctx, m, "outbound: stopping; message handed back")
		h.drop(m.ID)
	}
}

func (s *Sender) release(ctx context.Context, m Message, msg string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	lg := s.cfg.Log.With("partner", m.Partner, "message_id", m.MessageID, "id", m.ID)
	if err := s.cfg.Store.Release(rctx, m.ID, m.LeaseToken); err != nil {
		lg.Warn("outbound: message not handed back; its lease runs out", "err", err)
		return
	}
	lg.Info(msg)
}

// drain waits for the attempts in flight: StopTimeout, then their context
// is cancelled and they get stopGrace to record their outcome.
func (s *Sender) drain(cancelWork context.CancelFunc, wg *sync.WaitGroup) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(s.cfg.StopTimeout)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	s.cfg.Log.Warn("outbound: stop timeout; cancelling the attempts in flight")
	cancelWork()
	g := time.NewTimer(stopGrace)
	defer g.Stop()
	select {
	case <-done:
	case <-g.C:
		s.cfg.Log.Error("outbound: attempts still running after they were cancelled; their leases run out")
	}
}

// heartbeat renews the lease of every message of h every Heartbeat until
// done; a message whose lease was taken over has its attempt cancelled.
func (s *Sender) heartbeat(ctx context.Context, done <-chan struct{}, h *holdings) {
	every := s.cfg.Heartbeat
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
		h.mu.Lock()
		tokens := make(map[string]string, len(h.m))
		for id, x := range h.m {
			if !x.lost && !x.ended {
				tokens[id] = x.token
			}
		}
		h.mu.Unlock()
		for id, token := range tokens {
			rctx, cancel := context.WithTimeout(ctx, every)
			err := s.cfg.Store.Renew(rctx, id, token, s.cfg.Lease)
			cancel()
			if err == nil {
				continue
			}
			if errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrNotFound) {
				// Unless the attempt ended (and released the lease) meanwhile.
				h.mu.Lock()
				x := h.m[id]
				taken := x != nil && x.token == token && !x.ended
				if taken {
					x.lost = true
					if x.cancel != nil {
						x.cancel()
					}
				}
				h.mu.Unlock()
				if taken {
					s.cfg.Log.Info("outbound: lease taken over (another worker, an operator or an MDN); abandoning the attempt",
						"id", id, "err", err)
				}
				continue
			}
			if ctx.Err() == nil {
				s.cfg.Log.Error("outbound: lease not renewed; another worker may take the message over", "id", id, "err", err)
			}
		}
	}
}

func (s *Sender) observe(m Message, outcome string, d time.Duration) {
	if s.cfg.Observer != nil {
		s.cfg.Observer.Attempt(m.Partner, m.Protocol, outcome, d)
	}
}

// policy returns m's partner's retry schedule.
func (s *Sender) policy(m Message) RetryPolicy {
	if s.cfg.Policy == nil {
		return DefaultRetryPolicy
	}
	p := s.cfg.Policy(m.Partner, m.Protocol)
	if p == (RetryPolicy{}) {
		return DefaultRetryPolicy
	}
	return p
}

// attempt makes one attempt at m and records what it came to. ctx ends the
// attempt (the stop timeout, or the lease taken over); stop is Run's own
// context, ended when the gateway stops.
func (s *Sender) attempt(ctx, stop context.Context, h *holdings, m Message) {
	lg := s.cfg.Log.With("partner", m.Partner, "protocol", string(m.Protocol), "message_id", m.MessageID, "id", m.ID)
	pol := s.policy(m)
	// The outcome is recorded even when ctx ends now.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	if now := s.now(); pol.GiveUpAfter > 0 && now.After(m.Created.Add(pol.GiveUpAfter)) {
		last := m.LastError
		if m.State == AwaitingMDN {
			last = "no MDN arrived"
		}
		h.end(m.ID)
		s.record(rctx, lg, m, outcome{decision: OutcomeGaveUp, reason: giveUpReason(m, now, last)}, 0)
		return
	}
	var posted atomic.Bool
	start := time.Now()
	a := s.transmit(ctx, m, &posted)
	elapsed := time.Since(start)
	if h.end(m.ID) {
		lg.Info("outbound: lease lost during the attempt; another worker owns the message now",
			"outcome", int(a.Outcome), "reason", a.Reason)
		s.observe(m, OutcomeLeaseLost, elapsed)
		return
	}
	o := s.decide(m, pol, a, posted.Load())
	if ctx.Err() != nil && stop.Err() != nil && o.decision != OutcomeDelivered && o.decision != OutcomeRefused &&
		o.decision != OutcomeAwaiting {
		// Cut short by the stop timeout.
		if !posted.Load() {
			s.release(rctx, m, "outbound: attempt interrupted by shutdown before it was sent; message handed back")
			return
		}
		o = outcome{decision: OutcomeRetry, next: s.now(), evidence: a.Evidence, status: a.Status,
			reason: "no answer before the gateway stopped (the partner may have received it): " + a.Reason}
	}
	s.record(rctx, lg, m, o, elapsed)
}

// transmit runs m's Transmitter; posting is recorded in the store (and in
// posted) before the message leaves. A missing transmitter or a panic is a
// Retry.
func (s *Sender) transmit(ctx context.Context, m Message, posted *atomic.Bool) (a Attempt) {
	tr := s.cfg.Transmitters[m.Protocol]
	if tr == nil {
		return Attempt{Outcome: Retry, Reason: fmt.Sprintf("no transmitter for protocol %q", m.Protocol)}
	}
	defer func() {
		if r := recover(); r != nil {
			s.cfg.Log.Error("outbound: transmitter panicked", "id", m.ID, "panic", r)
			a = Attempt{Outcome: Retry, Reason: fmt.Sprintf("transmitter failed: %v", r)}
		}
	}()
	open := func() (io.ReadCloser, error) { return s.cfg.Store.OpenPayload(ctx, m.ID) }
	posting := func(digest string) error {
		if err := s.cfg.Store.Posting(ctx, m.ID, m.LeaseToken, digest); err != nil {
			return fmt.Errorf("outbound: record transmission of %s: %w", m.ID, err)
		}
		posted.Store(true)
		return nil
	}
	return tr.Transmit(ctx, m, open, posting)
}

// outcome is what the Sender records of an attempt.
type outcome struct {
	decision string
	reason   string
	evidence *Evidence
	status   int
	next     time.Time // Retry: due; Awaiting: the MDN's deadline
}

// decide turns an attempt into the outcome to record.
func (s *Sender) decide(m Message, pol RetryPolicy, a Attempt, posted bool) outcome {
	now := s.now()
	o := outcome{reason: a.Reason, evidence: a.Evidence, status: a.Status}
	switch a.Outcome {
	case Deliver:
		o.decision, o.reason = OutcomeDelivered, ""
		return o
	case Refuse:
		o.decision = OutcomeRefused
		if o.reason == "" {
			o.reason = "refused by the partner"
		}
		return o
	case Await:
		d := a.AwaitFor
		if d <= 0 {
			d = DefaultAwaitMDN
		}
		o.decision, o.next, o.reason = OutcomeAwaiting, now.Add(d), ""
		return o
	case Retry:
	default:
		o.reason = fmt.Sprintf("transmitter returned no outcome (%d): %s", a.Outcome, a.Reason)
	}
	if o.reason == "" {
		o.reason = "attempt failed"
		if a.Status != 0 {
			o.reason = "HTTP " + strconv.Itoa(a.Status)
		}
	}
	attempts := m.Attempts
	if posted {
		attempts++
	}
	if next, ok := pol.Next(now, m.Created, attempts, a.RetryAfter); ok {
		o.decision, o.next = OutcomeRetry, next
		return o
	}
	// Given up: what the last attempt received (if anything) is no
	// partner's final word; the reason says what happened.
	m.Attempts = attempts
	o.decision, o.reason, o.evidence = OutcomeGaveUp, giveUpReason(m, now, o.reason), nil
	return o
}

func giveUpReason(m Message, now time.Time, last string) string {
	if last == "" {
		last = "no attempt succeeded"
	}
	return fmt.Sprintf("gave up after %d attempts over %s: %s", m.Attempts, now.Sub(m.Created).Round(time.Second), last)
}

// record stores o, then logs, audits and observes it. A lease lost
// meanwhile (another worker, an operator or an asynchronous MDN settled the
// message) leaves everything to its new owner.
func (s *Sender) record(ctx context.Context, lg *slog.Logger, m Message, o outcome, elapsed time.Duration) {
	st := s.cfg.Store
	var err error
	switch o.decision {
	case OutcomeDelivered:
		err = st.Delivered(ctx, m.ID, m.LeaseToken, o.evidence)
	case OutcomeRefused, OutcomeGaveUp:
		err = st.Failed(ctx, m.ID, m.LeaseToken, o.reason, o.evidence)
	case OutcomeAwaiting:
		err = st.Awaiting(ctx, m.ID, m.LeaseToken, o.next)
	default:
		err = st.Retry(ctx, m.ID, m.LeaseToken, o.next, o.reason)
	}
	if errors.Is(err, ErrLeaseLost) {
		lg.Info("outbound: outcome not recorded: the message is no longer ours (settled by an MDN, cancelled, or taken over)",
			"outcome", o.decision, "reason", o.reason)
		s.observe(m, OutcomeLeaseLost, elapsed)
		return
	}
	if err != nil {
		lg.Error("outbound: outcome not recorded; the message is attempted again when its lease runs out",
			"outcome", o.decision, "reason", o.reason, "err", err)
		return
	}
	if o.decision == OutcomeRetry || o.decision == OutcomeAwaiting {
		s.wakeAt(o.next)
	}
	disp := ""
	if o.evidence != nil {
		disp = o.evidence.Disposition
	} else if o.status != 0 {
		disp = strconv.Itoa(o.status)
	}
	switch o.decision {
	case OutcomeDelivered:
		lg.Info("outbound: delivered", "disposition", disp, "elapsed", elapsed)
	case OutcomeAwaiting:
		lg.Info("outbound: sent; awaiting the asynchronous MDN", "until", o.next, "elapsed", elapsed)
	case OutcomeRetry:
		lg.Warn("outbound: attempt failed; will retry", "reason", o.reason, "status", o.status, "next_attempt", o.next)
	case OutcomeRefused:
		lg.Error("outbound: refused by the partner; not retried", "reason", o.reason, "disposition", disp)
	case OutcomeGaveUp:
		lg.Error("outbound: gave up; an operator may resend", "reason", o.reason)
	}
	s.observe(m, o.decision, elapsed)
	if s.cfg.Audit == nil {
		return
	}
	rec := audit.Record{Time: s.now().UTC(), Step: audit.StepSend, Partner: m.Partner, Protocol: string(m.Protocol),
		MessageID: m.MessageID, Decision: o.decision, PayloadSHA256: m.SHA256, Disposition: disp, Error: o.reason}
	if err := s.cfg.Audit.Write(ctx, rec); err != nil {
		lg.Error("outbound: audit of the attempt failed", "err", err)
	}
}
