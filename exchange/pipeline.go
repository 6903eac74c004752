package exchange

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
)

// Replies builds one protocol's replies for one inbound message. The
// pipeline decides which reply is due; the protocol knows how it looks (an
// MDN, an ebMS receipt or error).
type Replies interface {
	// Accepted is the positive reply for a message the handler took. It is
	// stored, so that a retransmission can be answered from it.
	Accepted(ctx context.Context) (Reply, error)
	// Duplicate is the positive reply to a retransmission of an accepted
	// message; stored is the reply sent the first time.
	Duplicate(ctx context.Context, stored Reply, d dedup.Decision) (Reply, error)
	// Failed is the negative reply: the message was not processed.
	Failed(ctx context.Context, f *Failure) (Reply, error)
}

// FailureKind says why a message was not processed.
type FailureKind int

const (
	// HandlerFailed: the business handler returned an error or panicked; the
	// partner should retransmit.
	HandlerFailed FailureKind = iota + 1
	// Drift: the key was accepted before with a different payload.
	Drift
	// Quarantined: drift under the quarantine policy; the payload was kept
	// for an operator.
	Quarantined
	// Damaged: a payload's business envelope (EDIFACT, X12, UBL, SBDH) is
	// incomplete or inconsistent, a payload that is XML does not parse, or
	// the message carries one interchange twice with different bytes.
	Damaged

	// failureKindEnd follows the last kind: new kinds go above it, so that
	// FailureKinds (and the tests of every protocol's mapping) include them.
	failureKindEnd
)

// FailureKinds lists every FailureKind, for tests that check that each
// protocol answers every kind.
func FailureKinds() []FailureKind {
	var out []FailureKind
	for k := HandlerFailed; k < failureKindEnd; k++ {
		out = append(out, k)
	}
	return out
}

func (k FailureKind) String() string {
	switch k {
	case HandlerFailed:
		return "handler-failed"
	case Drift:
		return "drift"
	case Quarantined:
		return "quarantined"
	case Damaged:
		return "damaged"
	}
	return fmt.Sprintf("FailureKind(%d)", int(k))
}

// Failure describes a negative outcome for Replies.Failed.
type Failure struct {
	Kind FailureKind
	// Err is the detail for the log and audit; it is never sent to the
	// partner (it may hold a parser's or the handler's error chain).
	Err error
	// Reason is what the partner is told, a sentence without Go error
	// text: the damaged envelope (standard and problem) or the drift
	// (standard, reference, both hashes; DriftReason). Empty for
	// HandlerFailed, whose cause stays inside.
	Reason string
	// Incident is the reference of this refusal (NewIncident) that the
	// reply quotes and the log and audit records carry.
	Incident string
	// For Drift: the hash stored with the first delivery and this one's.
	StoredSHA256, PayloadSHA256 string
	FirstSeen                   time.Time
	// Reference is the interchange reference for business-level drift.
	Reference string
}

func (f *Failure) Error() string { return f.Err.Error() }

// DriftPolicy says what happens when a duplicate key carries a different
// payload.
type DriftPolicy string

const (
	// DriftReject answers negatively, naming both hashes (default).
	DriftReject DriftPolicy = "reject"
	// DriftAccept processes the message as new.
	DriftAccept DriftPolicy = "accept"
	// DriftQuarantine keeps the payload in the quarantine directory for an
	// operator and answers negatively.
	DriftQuarantine DriftPolicy = "quarantine"
)

// DriftPolicyOf maps a partner file's on_drift value to its policy; an
// empty or unknown value (the partner loader refuses unknown ones) is
// DriftReject. Both protocols use it, so that they behave alike.
func DriftPolicyOf(onDrift string) DriftPolicy {
	switch p := DriftPolicy(onDrift); p {
	case DriftAccept, DriftQuarantine:
		return p
	}
	return DriftReject
}

// Inbound is one verified message handed to the pipeline by a protocol.
type Inbound struct {
	Message *Message
	Replies Replies
	// Window limits how long an accepted transport key or interchange counts
	// as a duplicate (0: as long as the store keeps it). PEPPOL instance
	// identifiers are unique forever whatever the window.
	Window  time.Duration
	OnDrift DriftPolicy
}

// Stats counts pipeline events; safe for concurrent use.
type Stats struct {
	Claimed, Duplicates, InFlight, HandlerErrors, Drift, Unavailable atomic.Int64
}

// Pipeline runs every inbound message through the claim → handler → audit →
// accept → reply sequence. It is the only place that talks to the store.
type Pipeline struct {
	Store dedup.Store
	// Ledger, when set, adds business-level dedup on the payloads' EDI
	// envelopes (package envelope).
	Ledger dedup.Ledger
	// Quarantine is the directory for payloads under on_drift: quarantine.
	Quarantine string
	Audit      audit.Sink
	Handler    Handler
	Log        *slog.Logger
	// Lease is the store's lease (dedup.DefaultLease when zero). While an
	// exchange runs, its claims are renewed every LeaseHeartbeat (a third of
	// the lease when zero) if the store is a dedup.Renewer, so the handler
	// may run longer than the lease; when a renewal finds a claim taken over,
	// the exchange's context ends (ErrClaimLost).
	Lease          time.Duration
	LeaseHeartbeat time.Duration
	// HandlerTimeout, when positive, bounds a Handler's run (a route's own
	// timeout may end it sooner).
	HandlerTimeout time.Duration
	// UnavailableRetryAfter is sent with 503 when the store cannot be reached.
	UnavailableRetryAfter time.Duration
	Now                   func() time.Time
	Stats                 Stats

	// InFlightRetryAfter, when positive, is the Retry-After sent to a
	// delivery whose message another delivery is processing; zero (auto)
	// estimates it from HandlerTimes. Never more than the holder's lease left.
	InFlightRetryAfter time.Duration
	// HandlerTimes are the recent handler durations behind the estimate.
	HandlerTimes HandlerTimes
	// MaxPendingAbandons bounds the failed abandons kept for retry
	// (DefaultMaxPendingAbandons when zero); see RetryAbandons.
	MaxPendingAbandons int
	pendingAbandons    pendingAbandons

	// TxHandler, when set, is run instead of Handler, inside the store's
	// accept transaction (see TxHandler); the store must be a
	// dedup.TxAcceptor (CheckTxHandler).
	TxHandler TxHandler

	// AuditParts, when set, splits Audit into the store's own table and
	// the rest; with a store that is a dedup.Atomic, the store's records
	// are then written inside the claim's and the accept's transactions
	// (see atomic.go).
	AuditParts *AuditParts
}

// PayloadSHA256 is the hash of a message's payloads used for drift
// detection: the payload's own SHA-256 when there is one payload, otherwise
// the SHA-256 over the payloads' hashes in order.
func PayloadSHA256(m *Message) string {
	switch len(m.Payloads) {
	case 0:
		return hex.EncodeToString(sha256.New().Sum(nil))
	case 1:
		return m.Payloads[0].SHA256
	}
	h := sha256.New()
	for _, p := range m.Payloads {
		h.Write([]byte(p.SHA256))
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (p *Pipeline) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

func (p *Pipeline) log() *slog.Logger {
	if p.Log != nil {
		return p.Log
	}
	return slog.Default()
}

// Process runs one message and returns the reply to send. It never returns
// a positive reply unless the store recorded the message as accepted.
func (p *Pipeline) Process(ctx context.Context, in Inbound) Reply {
	m := in.Message
	hash := PayloadSHA256(m)
	rec := audit.Record{Partner: m.Partner, Protocol: string(m.Protocol), MessageID: m.MessageID,
		Key: string(m.TransportKey), PayloadSHA256: hash}
	lg := p.log().With("partner", m.Partner, "protocol", string(m.Protocol), "message_id", m.MessageID)

	var ics []payloadInterchange
	var damaged error
	if p.Ledger != nil {
		ics, damaged = p.extractInterchanges(m)
		for _, pic := range ics {
			m.Interchanges = append(m.Interchanges, pic.ic)
		}
		if len(ics) > 0 {
			rec.InterchangeKey, rec.Reference = string(ics[0].ic.Key), ics[0].ic.Reference
		}
	}
	setIdempotencyKeys(m, ics)
	req := dedup.ClaimRequest{Key: m.TransportKey, PayloadSHA256: hash, Window: in.Window}
	// decisionSink is where the decision of a claim is still to be
	// recorded: the atomic claim wrote it to the store's table already.
	decisionSink := p.Audit
	var d dedup.Decision
	var early []dedup.Decision // interchange claims taken with the transport claim
	if a, parts := p.atomicStore(); a != nil && damaged == nil {
		var final *Reply
		if d, early, final = p.claimAtomic(ctx, a, parts, in, ics, req, rec, lg); final != nil {
			return *final
		}
		decisionSink = nil // claimAtomic wrote it everywhere
	} else {
		if err := p.audit(ctx, rec, audit.StepReceived, "", "", nil); err != nil {
			lg.Error("audit unavailable", "err", err)
			return p.unavailable(ctx, rec, err)
		}
		if damaged != nil {
			var d *damagedEnvelope
			if !errors.As(damaged, &d) {
				return p.internalError(ctx, rec, lg, damaged)
			}
			return p.refuseDamaged(ctx, in, rec, lg, damaged, "")
		}
		p.retryPendingAbandon(ctx, transportClaim, m.TransportKey)
		var err error
		if d, err = p.Store.Claim(ctx, req); err != nil {
			lg.Error("dedup store unavailable", "err", err)
			return p.unavailable(ctx, rec, err)
		}
	}
	switch d.Outcome {
	case dedup.InFlight:
		p.Stats.InFlight.Add(1)
		ra := p.inFlightRetryAfter(d.RetryAfter, p.heldFor(d))
		reply := retryLater(ra, "in-flight")
		p.auditBestEffort(ctx, rec, audit.StepDecision, "in-flight", "", nil)
		p.auditBestEffort(ctx, rec, audit.StepReply, "", reply.Disposition, nil)
		lg.Info("message in flight elsewhere", "decision", "in-flight", "retry_after", ra, "lease_left", d.RetryAfter)
		return reply
	case dedup.Duplicate:
		return p.duplicate(ctx, in, ics, d, hash, rec, lg)
	case dedup.Claimed:
		p.Stats.Claimed.Add(1)
		var stop func()
		ctx, stop = p.keepClaims(ctx, m.TransportKey, d.Token, lg)
		defer stop()
		if err := p.auditTo(ctx, decisionSink, rec, audit.StepDecision, claimDecision(d), "", nil); err != nil {
			p.abandon(ctx, m, d.Token, lg)
			return p.unavailable(ctx, rec, err)
		}
		return p.claimed(ctx, in, ics, early, d.Token, rec, lg)
	}
	err := fmt.Errorf("exchange: store returned outcome %v", d.Outcome)
	lg.Error("dedup store misbehaved", "err", err)
	return p.unavailable(ctx, rec, err)
}

func (p *Pipeline) duplicate(ctx context.Context, in Inbound, ics []payloadInterchange, d dedup.Decision, hash string, rec audit.Record, lg *slog.Logger) Reply {
	m := in.Message
	if d.PayloadSHA256 != "" && d.PayloadSHA256 != hash {
		info := driftInfo{what: "message id " + m.MessageID, stored: d.PayloadSHA256, got: hash, firstSeen: d.FirstSeen}
		if in.OnDrift == DriftAccept {
			// Processed as new: the partner's policy says a changed payload
			// under a reused id is a new document. The stored row is replaced
			// by a fresh claim through the window mechanism.
			p.driftAudit(ctx, rec, lg, info, "drift-accepted")
			d2, err := p.Store.Claim(ctx, dedup.ClaimRequest{Key: m.TransportKey, PayloadSHA256: hash, Window: time.Nanosecond})
			if err != nil {
				return p.unavailable(ctx, rec, err)
			}
			if d2.Outcome != dedup.Claimed {
				return retryLater(p.inFlightRetryAfter(d2.RetryAfter, p.heldFor(d2)), "in-flight")
			}
			ctx, stop := p.keepClaims(ctx, m.TransportKey, d2.Token, lg)
			defer stop()
			return p.claimed(ctx, in, ics, nil, d2.Token, rec, lg)
		}
		// The message drifted as a whole: all of its payloads are kept.
		return p.driftReply(ctx, in, rec, lg, info, m.Payloads)
	}
	p.Stats.Duplicates.Add(1)
	if err := p.audit(ctx, rec, audit.StepDecision, "duplicate", "", nil); err != nil {
		return p.unavailable(ctx, rec, err)
	}
	stored, err := DecodeReply(d.Reply)
	if err != nil {
		return p.internalError(ctx, rec, lg, err)
	}
	reply, err := in.Replies.Duplicate(ctx, stored, d)
	if err != nil {
		return p.internalError(ctx, rec, lg, err)
	}
	lg.Info("duplicate answered from stored reply", "decision", "duplicate", "first_seen", d.FirstSeen, "disposition", reply.Disposition)
	p.auditBestEffort(ctx, rec, audit.StepReply, "", reply.Disposition, nil)
	return reply
}

// claimed runs a message whose transport key this delivery holds with
// token; early are the interchange claims taken with it (claimInterchanges).
func (p *Pipeline) claimed(ctx context.Context, in Inbound, ics []payloadInterchange, early []dedup.Decision, token dedup.Token,
	rec audit.Record, lg *slog.Logger) Reply {
	m := in.Message
	var held []heldInterchange
	var dups []InterchangeDuplicate
	if len(ics) > 0 {
		var final *Reply
		held, dups, final = p.claimInterchanges(ctx, in, ics, early, rec, lg)
		if final != nil {
			p.abandon(ctx, m, token, lg)
			return *final
		}
	}
	releaseInterchanges := func() {
		for _, h := range held {
			p.abandonInterchange(ctx, h.key, h.token, lg)
		}
	}
	if len(dups) > 0 && len(m.Payloads) == 0 {
		// Every payload is an interchange accepted before under another
		// transport id: a positive duplicate reply, no handler.
		var reply Reply
		var err error
		if r, ok := in.Replies.(InterchangeDuplicateReplies); ok {
			reply, err = r.DuplicateInterchange(ctx, dups)
		} else {
			reply, err = in.Replies.Accepted(ctx)
		}
		if err != nil {
			p.abandon(ctx, m, token, lg)
			return p.internalError(ctx, rec, lg, err)
		}
		return p.acceptAtomic(ctx, m, token, nil, reply, rec, lg, "duplicate-interchange", false)
	}
	if p.TxHandler != nil {
		return p.claimedTx(ctx, in, token, held, releaseInterchanges, rec, lg)
	}
	started := time.Now()
	herr := p.runHandler(ctx, m)
	p.HandlerTimes.Observe(time.Since(started))
	if herr != nil && errors.Is(context.Cause(ctx), ErrClaimLost) {
		// Another delivery holds the message now: it is processed there.
		lg.Error("handler stopped: the claim was lost while it ran; no reply but 503", "decision", "claim-lost", "err", herr)
		releaseInterchanges()
		p.abandon(ctx, m, token, lg)
		return p.unavailable(ctx, rec, context.Cause(ctx))
	}
	if herr != nil {
		p.Stats.HandlerErrors.Add(1)
		rec.Incident = NewIncident()
		lg.Error("handler failed; claim abandoned so the partner's retransmission is processed", "decision", "abandoned",
			"incident", rec.Incident, "err", herr)
		releaseInterchanges()
		p.abandon(ctx, m, token, lg)
		p.auditBestEffort(ctx, rec, audit.StepHandler, "error", "", herr)
		return p.failed(ctx, in, rec, lg, &Failure{Kind: HandlerFailed, Err: herr, Incident: rec.Incident})
	}
	// The handler's side effect is done: from here on the outcome must be
	// recorded even if the partner hung up (which cancels ctx), or its
	// retransmission would run the handler a second time.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if _, parts := p.atomicStore(); parts != nil {
		// The store's record of the handler goes into the accept's
		// transaction; the other sinks' is written while the reply is
		// built (a signature), and must be durable before the accept.
		other := make(chan error, 1)
		go func() { other <- p.auditTo(ctx, parts.Other, rec, audit.StepHandler, "ok", "", nil) }()
		reply, err := in.Replies.Accepted(ctx)
		if oerr := <-other; oerr != nil {
			releaseInterchanges()
			p.abandon(ctx, m, token, lg)
			return p.unavailable(ctx, rec, oerr)
		}
		if err != nil {
			releaseInterchanges()
			p.abandon(ctx, m, token, lg)
			return p.internalError(ctx, rec, lg, err)
		}
		return p.acceptAtomic(ctx, m, token, held, reply, rec, lg, "accepted", true)
	}
	if err := p.audit(ctx, rec, audit.StepHandler, "ok", "", nil); err != nil {
		releaseInterchanges()
		p.abandon(ctx, m, token, lg)
		return p.unavailable(ctx, rec, err)
	}
	reply, err := in.Replies.Accepted(ctx)
	if err != nil {
		releaseInterchanges()
		p.abandon(ctx, m, token, lg)
		return p.internalError(ctx, rec, lg, err)
	}
	return p.accept(ctx, m, token, held, reply, rec, lg, "accepted")
}

// accept records the interchanges, then the transport key with the reply,
// and only then returns the reply. Interchanges go first: if the transport
// accept then fails, the partner's retransmission finds the interchange
// accepted and gets a duplicate reply instead of a second handler run.
func (p *Pipeline) accept(ctx context.Context, m *Message, token dedup.Token, held []heldInterchange, reply Reply, rec audit.Record, lg *slog.Logger, decision string) Reply {
	keeperFrom(ctx).stop() // the accept decides: no renewal may race it
	var ierr error
	for _, h := range held {
		// The handler processed every held interchange: each is accepted
		// even when another one's accept failed, so that no claim is left
		// held and the retransmission reprocesses only what failed.
		if err := p.Ledger.AcceptInterchange(ctx, h.key, h.token); err != nil {
			lg.Error("accept interchange failed; no positive reply sent", "interchange_key", string(h.key), "err", err)
			if !errors.Is(err, dedup.ErrStaleClaim) {
				p.abandonInterchange(ctx, h.key, h.token, lg)
			}
			if ierr == nil {
				ierr = err
			}
		}
	}
	if ierr != nil {
		p.abandon(ctx, m, token, lg)
		return p.unavailable(ctx, rec, ierr)
	}
	stored, err := EncodeReply(reply)
	if err != nil {
		p.abandon(ctx, m, token, lg)
		return p.internalError(ctx, rec, lg, err)
	}
	if err := p.Store.Accept(ctx, m.TransportKey, token, stored); err != nil {
		lg.Error("accept failed; no positive reply sent", "err", err)
		if !errors.Is(err, dedup.ErrStaleClaim) {
			p.abandon(ctx, m, token, lg)
		}
		return p.unavailable(ctx, rec, err)
	}
	return p.accepted(ctx, p.Audit, reply, rec, lg, decision)
}

// accepted logs an accepted message and records its reply in sink (best
// effort: the accept is on disk).
func (p *Pipeline) accepted(ctx context.Context, sink audit.Sink, reply Reply, rec audit.Record, lg *slog.Logger, decision string) Reply {
	if rec.Reference != "" {
		lg = lg.With("reference", rec.Reference)
	}
	msg := "message accepted"
	if decision == "duplicate-interchange" {
		msg = "duplicate interchange answered; not processed again"
	}
	lg.Info(msg, "decision", decision, "disposition", reply.Disposition)
	p.auditBestEffortTo(ctx, sink, rec, audit.StepReply, decision, reply.Disposition, nil)
	return reply
}

// runHandler calls the handler and turns a panic into an error. Its ctx
// ends after HandlerTimeout, when the partner hangs up, or when the
// exchange's claims are lost (ErrClaimLost); not at the lease, which the
// heartbeat renews while it runs.
func (p *Pipeline) runHandler(ctx context.Context, m *Message) (err error) {
	if p.HandlerTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.HandlerTimeout)
		defer cancel()
	}
	defer func() {
		if r := recover(); r != nil {
			p.log().Error("handler panic", "partner", m.Partner, "protocol", string(m.Protocol), "message_id", m.MessageID,
				"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			err = fmt.Errorf("handler panic: %v", r)
		}
	}()
	if p.Handler == nil {
		return errors.New("no handler configured")
	}
	return p.Handler.Handle(ctx, m)
}

func (p *Pipeline) abandon(ctx context.Context, m *Message, token dedup.Token, lg *slog.Logger) {
	keeperFrom(ctx).stop()
	// The request may have been cancelled; the release must still happen.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := p.Store.Abandon(actx, m.TransportKey, token); err != nil {
		if errors.Is(err, dedup.ErrStaleClaim) {
			lg.Warn("abandon: claim no longer held", "err", err)
			return
		}
		lg.Error("abandon failed; retried in the background until the lease runs out", "err", err)
		p.keepAbandon(transportClaim, m.TransportKey, token, lg)
	}
}

func (p *Pipeline) audit(ctx context.Context, rec audit.Record, step audit.Step, decision, disposition string, err error) error {
	return p.auditTo(ctx, p.Audit, rec, step, decision, disposition, err)
}

// auditTo writes the record of one step to sink (nil: nowhere).
func (p *Pipeline) auditTo(ctx context.Context, sink audit.Sink, rec audit.Record, step audit.Step, decision, disposition string, err error) error {
	if sink == nil {
		return nil
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if werr := sink.Write(actx, p.record(rec, step, decision, disposition, err)); werr != nil {
		return fmt.Errorf("exchange: audit %s: %w", step, werr)
	}
	return nil
}

// record is rec as the record of one step, stamped now.
func (p *Pipeline) record(rec audit.Record, step audit.Step, decision, disposition string, err error) audit.Record {
	rec.Time = p.now().UTC()
	rec.Step = step
	rec.Decision = decision
	rec.Disposition = disposition
	if err != nil {
		rec.Error = err.Error()
	}
	return rec
}

// auditBestEffort records steps after the decision is final; a failure is
// logged, since the outcome can no longer be changed.
func (p *Pipeline) auditBestEffort(ctx context.Context, rec audit.Record, step audit.Step, decision, disposition string, err error) {
	p.auditBestEffortTo(ctx, p.Audit, rec, step, decision, disposition, err)
}

func (p *Pipeline) auditBestEffortTo(ctx context.Context, sink audit.Sink, rec audit.Record, step audit.Step, decision, disposition string, err error) {
	if aerr := p.auditTo(ctx, sink, rec, step, decision, disposition, err); aerr != nil {
		p.log().Error("audit write failed", "partner", rec.Partner, "protocol", rec.Protocol, "message_id", rec.MessageID, "err", aerr)
	}
}

func (p *Pipeline) unavailable(ctx context.Context, rec audit.Record, err error) Reply {
	p.Stats.Unavailable.Add(1)
	ra := p.UnavailableRetryAfter
	if ra <= 0 {
		ra = 30 * time.Second
	}
	reply := retryLater(ra, "unavailable")
	p.auditBestEffort(ctx, rec, audit.StepReply, "unavailable", reply.Disposition, err)
	return reply
}

// failed builds the negative reply of f and audits it; f.Incident is set
// and already logged with the detail.
func (p *Pipeline) failed(ctx context.Context, in Inbound, rec audit.Record, lg *slog.Logger, f *Failure) Reply {
	rec.Incident = f.Incident
	reply, err := in.Replies.Failed(ctx, f)
	if err != nil {
		return p.internalError(ctx, rec, lg, fmt.Errorf("%s reply: %w", f.Kind, err))
	}
	reply.Incident = f.Incident
	p.auditBestEffort(ctx, rec, audit.StepReply, "", reply.Disposition, nil)
	return reply
}

// refuseDamaged refuses a message whose business envelope is damaged: the
// partner gets the envelope's reason (envelope.Reason, no parser error
// text) and an incident reference, the log and audit the full error.
func (p *Pipeline) refuseDamaged(ctx context.Context, in Inbound, rec audit.Record, lg *slog.Logger, damaged error, reference string) Reply {
	rec.Incident = NewIncident()
	lg.Warn("damaged business envelope; message refused", "decision", "rejected", "incident", rec.Incident, "err", damaged)
	p.auditBestEffort(ctx, rec, audit.StepDecision, "rejected", "", damaged)
	return p.failed(ctx, in, rec, lg, &Failure{Kind: Damaged, Err: damaged, Reason: damagedReason(damaged),
		Reference: reference, Incident: rec.Incident})
}

func (p *Pipeline) internalError(ctx context.Context, rec audit.Record, lg *slog.Logger, err error) Reply {
	rec.Incident = NewIncident()
	lg.Error("building reply failed", "incident", rec.Incident, "err", err)
	reply := Reply{Status: http.StatusInternalServerError, Header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}},
		Body:        []byte("internal error; the message was not processed, please retransmit (incident " + rec.Incident + ")\n"),
		Disposition: "http-500", Incident: rec.Incident}
	p.auditBestEffort(ctx, rec, audit.StepReply, "error", reply.Disposition, err)
	return reply
}

// retryLater is HTTP 503 with Retry-After in whole seconds.
func retryLater(after time.Duration, why string) Reply {
	secs := int64(dedup.RetryAfter(after) / time.Second)
	return Reply{
		Status:      http.StatusServiceUnavailable,
		Header:      http.Header{"Retry-After": {strconv.FormatInt(secs, 10)}, "Content-Type": {"text/plain; charset=utf-8"}},
		Body:        []byte("message not processed (" + why + "); retry later\n"),
		Disposition: "http-503",
	}
}
