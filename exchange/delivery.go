package exchange

// This file is the path of one message through the pipeline, in the order
// it runs; states.go names its states and transitions. Process receives the
// message and run moves it through the steps claimTransport →
// claimInterchanges → runHandler → accept, each of which returns the state
// it reached. The helpers of a step follow it; the answers and audit
// records that every step uses close the file.

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
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/internal/envelope"
)

// Process runs one message and returns the reply to send. It never returns
// a positive reply unless the store recorded the message as accepted.
func (p *Pipeline) Process(ctx context.Context, in Inbound) Reply {
	return p.receive(in).run(ctx)
}

// delivery is one message on its way through the pipeline: what its steps
// learn and the claims they hold, and the reply once its state is final.
type delivery struct {
	p    *Pipeline
	in   Inbound
	m    *Message
	hash string // PayloadSHA256 of the message
	rec  audit.Record
	lg   *slog.Logger

	ics     []payloadInterchange // the payloads' business envelopes (with a Ledger)
	damaged error                // why they could not be read, if so

	token dedup.Token // the transport claim this delivery holds
	// claimDecision is the decision of the transport claim ("new",
	// "reused") still to be recorded in decisionSink (nil: recorded with
	// the claim); empty when a drift accepted as new claimed the key.
	claimDecision string
	decisionSink  audit.Sink
	early         []dedup.Decision // interchange claims taken with the transport claim

	// otherPending waits until the records claimAtomic appended to the
	// other sinks (audit.Appender) are durable; nil when there are none.
	otherPending func(context.Context) error

	held []heldInterchange      // the interchange claims this delivery holds
	dups []InterchangeDuplicate // the interchanges accepted before under another transport id

	path  []state // the states reached, from stateReceived
	reply Reply   // the answer, once the state is final
}

// run moves the delivery from stateReceived to a final state (the table in
// states.go) and returns the answer of that state.
func (d *delivery) run(ctx context.Context) Reply {
	st := d.claimTransport(ctx)
	if st == stateDriftAccepted {
		st = d.claimAgain(ctx)
	}
	if st != stateClaimed {
		return d.reply
	}
	// From here the delivery holds claims: they are renewed while it runs.
	ctx, stop := d.p.keepClaims(ctx, d.m.TransportKey, d.token, d.lg)
	defer stop()
	for !st.final() {
		switch st {
		case stateClaimed:
			st = d.claimInterchanges(ctx)
		case stateInterchangesClaimed:
			st = d.runHandler(ctx)
		case stateHandled:
			st = d.accept(ctx)
		default:
			// Every state above is final or has a step: a state without one
			// is a bug of this file, and is answered as the store's outage.
			d.p.abandon(ctx, d.m, d.token, d.lg)
			st = d.unavailable(ctx, d.rec, fmt.Errorf("exchange: no step from state %v", st))
		}
	}
	return d.reply
}

// final reports whether s ends a delivery: no transition of states.go
// leaves it, and its answer is d.reply.
func (s state) final() bool { return s >= stateAccepted && s < stateEnd }

// to records that the delivery reached st.
func (d *delivery) to(st state) state {
	d.path = append(d.path, st)
	return st
}

// answer records that the delivery reached the final state st with reply.
func (d *delivery) answer(st state, reply Reply) state {
	d.reply = reply
	return d.to(st)
}

// ---- stateReceived: the message as the protocol handed it over ----

// receive starts a delivery: the message's hash, its audit record and log
// fields, and (with a Ledger) the business envelopes of its payloads.
func (p *Pipeline) receive(in Inbound) *delivery {
	m := in.Message
	hash := PayloadSHA256(m)
	d := &delivery{p: p, in: in, m: m, hash: hash, path: []state{stateReceived},
		rec: audit.Record{Partner: m.Partner, Protocol: string(m.Protocol), MessageID: m.MessageID,
			Key: string(m.TransportKey), PayloadSHA256: hash},
		lg: p.log().With("partner", m.Partner, "protocol", string(m.Protocol), "message_id", m.MessageID)}
	if p.Ledger != nil {
		d.ics, d.damaged = p.extractInterchanges(m)
		for _, pic := range d.ics {
			m.Interchanges = append(m.Interchanges, pic.ic)
		}
		if len(d.ics) > 0 {
			d.rec.InterchangeKey, d.rec.Reference = string(d.ics[0].ic.Key), d.ics[0].ic.Reference
		}
	}
	setIdempotencyKeys(m, d.ics)
	return d
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

// extractInterchanges finds the business envelope of each payload, whatever
// its size: the payload is read once more, as a stream from memory or its
// spool file, in memory that does not depend on its size. A damaged
// envelope is a *damagedEnvelope: the message is refused rather than
// processed without its business key. Any other error is ours (a payload
// that cannot be read back).
func (p *Pipeline) extractInterchanges(m *Message) ([]payloadInterchange, error) {
	var out []payloadInterchange
	for i, pl := range m.Payloads {
		env, err := extractPayload(pl)
		if err == envelope.ErrNoEnvelope {
			continue
		}
		if err != nil && !errors.Is(err, envelope.ErrDamaged) {
			return nil, fmt.Errorf("exchange: read payload %d: %w", i+1, err)
		}
		if err != nil {
			return nil, &damagedEnvelope{reason: fmt.Sprintf("payload %d: %s", i+1, envelope.Reason(err)),
				err: fmt.Errorf("payload %d: %w", i+1, err)}
		}
		ic := dedup.Interchange{Key: env.Key(m.Partner), Partner: m.Partner, Standard: env.Standard,
			Sender: joinQualified(env.SenderQualifier, env.Sender), Recipient: joinQualified(env.RecipientQualifier, env.Recipient),
			Reference: env.Reference, Date: env.Date, Type: env.Type}
		out = append(out, payloadInterchange{payload: i, ic: ic, hash: pl.SHA256})
	}
	return out, nil
}

// extractPayload reads the business envelope of a payload from its body.
// An error that is neither envelope.ErrNoEnvelope nor a damaged envelope
// means the payload could not be read.
func extractPayload(pl Payload) (*envelope.Interchange, error) {
	r, err := pl.Open()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return envelope.ExtractTypedReader(pl.ContentType, r)
}

func joinQualified(q, id string) string {
	if q == "" {
		return id
	}
	return q + ":" + id
}

// ---- stateReceived → claimTransport → stateClaimed, or a final state ----

// claimTransport records the message as received and claims its transport
// key: stateClaimed when this delivery holds it, stateDriftAccepted when the
// key was accepted with another payload under on_drift: accept, otherwise a
// final state with its answer (refused, in flight, duplicate, drift,
// quarantined, unavailable, failed).
func (d *delivery) claimTransport(ctx context.Context) state {
	p, m, rec, lg := d.p, d.m, d.rec, d.lg
	req := dedup.ClaimRequest{Key: m.TransportKey, PayloadSHA256: d.hash, Window: d.in.Window}
	d.decisionSink = p.Audit
	var c dedup.Decision
	if a, parts := p.atomicStore(); a != nil && d.damaged == nil {
		var final state
		if c, final = d.claimAtomic(ctx, a, parts, req); final != stateNone {
			return final
		}
		d.decisionSink = nil // claimAtomic wrote it everywhere
	} else {
		if err := p.audit(ctx, rec, audit.StepReceived, "", "", nil); err != nil {
			lg.Error("audit unavailable", "err", err)
			return d.unavailable(ctx, rec, err)
		}
		if d.damaged != nil {
			var de *damagedEnvelope
			if !errors.As(d.damaged, &de) {
				return d.internalError(ctx, rec, d.damaged)
			}
			return d.refuseDamaged(ctx, rec, d.damaged, "")
		}
		p.retryPendingAbandon(ctx, transportClaim, m.TransportKey)
		var err error
		if c, err = p.Store.Claim(ctx, req); err != nil {
			lg.Error("dedup store unavailable", "err", err)
			return d.unavailable(ctx, rec, err)
		}
	}
	switch c.Outcome {
	case dedup.InFlight:
		p.Stats.InFlight.Add(1)
		ra := p.inFlightRetryAfter(c.RetryAfter, p.heldFor(c))
		reply := retryLater(ra, "in-flight")
		p.auditBestEffort(ctx, rec, audit.StepDecision, decisionInFlight, "", nil)
		p.auditBestEffort(ctx, rec, audit.StepReply, "", reply.Disposition, nil)
		lg.Info("message in flight elsewhere", "decision", decisionInFlight, "retry_after", ra, "lease_left", c.RetryAfter)
		return d.answer(stateInFlight, reply)
	case dedup.Duplicate:
		return d.duplicate(ctx, c)
	case dedup.Claimed:
		p.Stats.Claimed.Add(1)
		d.token, d.claimDecision = c.Token, claimDecision(c)
		return d.to(stateClaimed)
	}
	err := fmt.Errorf("exchange: store returned outcome %v", c.Outcome)
	lg.Error("dedup store misbehaved", "err", err)
	return d.unavailable(ctx, rec, err)
}

// atomicStore returns the store as a dedup.Atomic and the audit parts when
// the pipeline records atomically (AuditParts), else nil, nil.
func (p *Pipeline) atomicStore() (dedup.Atomic, *AuditParts) {
	if p.AuditParts == nil || p.AuditParts.Store == nil {
		return nil, nil
	}
	a, ok := p.Store.(dedup.Atomic)
	if !ok {
		return nil, nil
	}
	return a, p.AuditParts
}

func claimDecision(d dedup.Decision) string {
	if d.Reused {
		return decisionReused
	}
	return decisionNew
}

// claimAtomic records the message as received and claims its key in one
// transaction of the store (with the decision record when the key was
// claimed); when the key was claimed, the same transaction claims the
// message's first interchange in the ledger too, with its decision record
// (ledgerClaimsIn). The other sinks then record all of it in one step. A
// final state other than stateNone has its answer: nothing is held then.
// d.early holds the ledger's decisions for ics[:len(early)], for
// claimInterchanges to go on from.
func (d *delivery) claimAtomic(ctx context.Context, a dedup.Atomic, parts *AuditParts, req dedup.ClaimRequest) (c dedup.Decision, final state) {
	p, m, rec, lg, ics := d.p, d.m, d.rec, d.lg, d.ics
	p.retryPendingAbandon(ctx, transportClaim, req.Key)
	if len(ics) > 0 {
		p.retryPendingAbandon(ctx, interchangeClaim, ics[0].ic.Key)
	}
	received := p.record(rec, audit.StepReceived, "", "", nil)
	var early []dedup.Decision
	var decided []audit.Record // the interchange's decision record
	err := a.Atomically(ctx, func(ctx context.Context) error {
		if err := parts.Store.Write(ctx, received); err != nil {
			return fmt.Errorf("exchange: audit %s: %w", audit.StepReceived, err)
		}
		var err error
		if c, err = p.Store.Claim(ctx, req); err != nil || c.Outcome != dedup.Claimed {
			return err
		}
		if err := p.auditTo(ctx, parts.Store, rec, audit.StepDecision, claimDecision(c), "", nil); err != nil {
			return err
		}
		early, decided, err = p.ledgerClaimsIn(ctx, parts.Store, d.in, ics, rec)
		return err
	})
	if err != nil {
		// Nothing of the transaction is on disk: no claim is held.
		lg.Error("dedup store or audit unavailable", "err", err)
		p.auditBestEffortTo(ctx, parts.Other, rec, audit.StepReceived, "", "", nil)
		return dedup.Decision{}, d.unavailable(ctx, rec, err)
	}
	// The other sinks get the received record (and the decisions of a
	// claimed key and its first interchange) now, in one step (one sync of a
	// JSON-lines file).
	recs := []audit.Record{received}
	if c.Outcome == dedup.Claimed {
		recs = append(recs, p.record(rec, audit.StepDecision, claimDecision(c), "", nil))
		recs = append(recs, decided...)
	}
	var oerr error
	if ap, ok := parts.Other.(audit.Appender); ok {
		// Appended now, durable with the next synced write (the handler's
		// record, before the accept): acceptAtomic waits for them.
		d.otherPending, oerr = ap.AppendBatch(ctx, recs)
	} else if parts.Other != nil {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		oerr = audit.WriteBatch(actx, parts.Other, recs)
		cancel()
	}
	if oerr != nil {
		lg.Error("audit unavailable", "err", oerr)
		if c.Outcome == dedup.Claimed {
			for i, ed := range early {
				if ed.Outcome == dedup.Claimed {
					p.abandonInterchange(ctx, ics[i].ic.Key, ed.Token, lg)
				}
			}
			p.abandon(ctx, m, c.Token, lg)
		}
		return dedup.Decision{}, d.unavailable(ctx, rec, oerr)
	}
	d.early = early
	return c, stateNone
}

// ledgerClaimsIn claims the message's first interchange in the ledger
// inside the transport claim's transaction (ctx carries it), writing the
// store's decision record when it was claimed, and returns the ledger's
// decision (for ics[:1]) with the decision record still due in the other
// sinks. claimInterchanges then acts on that decision as if it had taken
// the claim itself, one transaction later, and claims the other
// interchanges as before: the message holds the same claims in the same
// order, and a crash leaves the transport claim and the first interchange's
// claim together or neither.
//
// Only the first: the transaction then takes its row locks in one order,
// the transport key and then one interchange, whatever the message. Two of
// them claiming several interchanges each could lock those in opposite
// orders and deadlock on PostgreSQL (a message carrying one interchange,
// the common case, saves its whole transaction).
func (p *Pipeline) ledgerClaimsIn(ctx context.Context, store audit.Sink, in Inbound, ics []payloadInterchange,
	rec audit.Record) ([]dedup.Decision, []audit.Record, error) {
	if len(ics) == 0 {
		return nil, nil, nil
	}
	pic := ics[0]
	d, err := p.Ledger.ClaimInterchange(ctx, ledgerClaim(in, pic))
	if err != nil {
		return nil, nil, err
	}
	if d.Outcome != dedup.Claimed {
		return []dedup.Decision{d}, nil, nil
	}
	r := p.record(interchangeRecord(rec, pic), audit.StepDecision, interchangeDecision(d), "", nil)
	if err := store.Write(ctx, r); err != nil {
		return nil, nil, fmt.Errorf("exchange: audit %s: %w", audit.StepDecision, err)
	}
	return []dedup.Decision{d}, []audit.Record{r}, nil
}

// duplicate answers a message whose transport key was accepted before: from
// the stored reply when the payload is the same (stateDuplicate), else as
// the drift policy says (stateDrift, stateQuarantined or
// stateDriftAccepted).
func (d *delivery) duplicate(ctx context.Context, c dedup.Decision) state {
	p, m, rec, lg := d.p, d.m, d.rec, d.lg
	if c.PayloadSHA256 != "" && c.PayloadSHA256 != d.hash {
		info := driftInfo{what: "message id " + m.MessageID, stored: c.PayloadSHA256, got: d.hash, firstSeen: c.FirstSeen}
		if d.in.OnDrift == DriftAccept {
			// Processed as new: the partner's policy says a changed payload
			// under a reused id is a new document (claimAgain).
			p.driftAudit(ctx, rec, lg, info, decisionDriftAccepted)
			return d.to(stateDriftAccepted)
		}
		// The message drifted as a whole: all of its payloads are kept.
		return d.driftReply(ctx, rec, info, m.Payloads)
	}
	p.Stats.Duplicates.Add(1)
	if err := p.audit(ctx, rec, audit.StepDecision, decisionDuplicate, "", nil); err != nil {
		return d.unavailable(ctx, rec, err)
	}
	stored, err := DecodeReply(c.Reply)
	if err != nil {
		return d.internalError(ctx, rec, err)
	}
	reply, err := d.in.Replies.Duplicate(ctx, stored, c)
	if err != nil {
		return d.internalError(ctx, rec, err)
	}
	lg.Info("duplicate answered from stored reply", "decision", decisionDuplicate, "first_seen", c.FirstSeen, "disposition", reply.Disposition)
	p.auditBestEffort(ctx, rec, audit.StepReply, "", reply.Disposition, nil)
	return d.answer(stateDuplicate, reply)
}

// driftInfo describes a key seen again with another payload.
type driftInfo struct {
	what        string
	reference   string
	stored, got string
	firstSeen   time.Time
}

// reason is the drift text of both protocols' negative replies: what
// clashed (the message id, or the standard and interchange reference), when
// it was accepted and both hashes.
func (d driftInfo) reason() string {
	return fmt.Sprintf("%s was accepted on %s with payload SHA-256 %s; this delivery has payload SHA-256 %s",
		d.what, d.firstSeen.UTC().Format(time.RFC3339), d.stored, d.got)
}

func (d driftInfo) err() error { return errors.New(d.reason()) }

func (p *Pipeline) driftAudit(ctx context.Context, rec audit.Record, lg *slog.Logger, info driftInfo, decision string) {
	p.Stats.Drift.Add(1)
	lg.Error("payload drift: a key seen before arrived with a different payload", "decision", decision, "incident", rec.Incident,
		"what", info.what, "stored_sha256", info.stored, "payload_sha256", info.got, "first_seen", info.firstSeen)
	p.auditBestEffort(ctx, rec, audit.StepDecision, decision, "", info.err())
}

// driftReply handles drift under the reject and quarantine policies: the
// partner is told the message was not processed; under quarantine the
// payloads are first kept for an operator, as one item (all payloads of a
// message that drifted on its id; the one payload of a drifted interchange;
// quarantine, in business.go).
func (d *delivery) driftReply(ctx context.Context, rec audit.Record, info driftInfo, pls []Payload) state {
	p, lg := d.p, d.lg
	kind, decision, st := Drift, decisionDrift, stateDrift
	reason := info.reason()
	if d.in.OnDrift == DriftQuarantine {
		path, err := p.quarantine(d.m, pls, info)
		if err != nil {
			lg.Error("quarantine failed", "err", err)
			p.driftAudit(ctx, rec, lg, info, decisionDrift)
			return d.unavailable(ctx, rec, err)
		}
		kind, decision, st = Quarantined, decisionQuarantined, stateQuarantined
		reason += "; the payload was quarantined for an operator and not processed"
		lg.Error("drifted payload quarantined", "path", path)
	}
	rec.Incident = NewIncident()
	p.driftAudit(ctx, rec, lg, info, decision)
	return d.fail(ctx, st, rec, &Failure{Kind: kind, Err: errors.New(reason), Reason: reason, StoredSHA256: info.stored,
		PayloadSHA256: info.got, FirstSeen: info.firstSeen, Reference: info.reference, Incident: rec.Incident})
}

// claimAgain claims the key of a message whose drift is accepted as new:
// the stored row is replaced by a fresh claim through the window mechanism.
// The claim's decision is recorded already (drift-accepted).
func (d *delivery) claimAgain(ctx context.Context) state {
	p, m := d.p, d.m
	c, err := p.Store.Claim(ctx, dedup.ClaimRequest{Key: m.TransportKey, PayloadSHA256: d.hash, Window: time.Nanosecond})
	if err != nil {
		return d.unavailable(ctx, d.rec, err)
	}
	if c.Outcome != dedup.Claimed {
		return d.answer(stateInFlight, retryLater(p.inFlightRetryAfter(c.RetryAfter, p.heldFor(c)), "in-flight"))
	}
	d.token, d.claimDecision, d.early = c.Token, "", nil
	return d.to(stateClaimed)
}

// ---- stateClaimed → claimInterchanges → stateInterchangesClaimed ----

// claimInterchanges records the transport claim's decision, then claims the
// business key of every payload (with a Ledger). It reaches
// stateInterchangesClaimed with the claims held (d.held) and the duplicates
// found (d.dups, their payloads moved out of m.Payloads), or a final state
// when the delivery cannot go on (in flight elsewhere, drift, a damaged
// message, store down): every claim is then released.
func (d *delivery) claimInterchanges(ctx context.Context) state {
	p, m, rec, lg := d.p, d.m, d.rec, d.lg
	if d.claimDecision != "" {
		if err := p.auditTo(ctx, d.decisionSink, rec, audit.StepDecision, d.claimDecision, "", nil); err != nil {
			p.abandon(ctx, m, d.token, lg)
			return d.unavailable(ctx, rec, err)
		}
	}
	if len(d.ics) > 0 {
		if final := d.claimEachInterchange(ctx); final != stateNone {
			p.abandon(ctx, m, d.token, lg)
			return final
		}
	}
	return d.to(stateInterchangesClaimed)
}

// heldInterchange is an interchange claim this delivery holds.
type heldInterchange struct {
	key   dedup.Key
	token dedup.Token
}

// claimEachInterchange is claimInterchanges' ledger part: stateNone when it
// may go on, else the final state reached, with its answer, every claim
// taken here released; the caller abandons the transport claim.
//
// d.early holds the ledger's decisions for ics[:len(early)] when the claims
// were taken in the transport claim's transaction (ledgerClaimsIn; the
// decision records of those claimed are written already): they are acted
// on as if claimed here.
func (d *delivery) claimEachInterchange(ctx context.Context) state {
	p, in, m, rec, lg, ics, early := d.p, d.in, d.m, d.rec, d.lg, d.ics, d.early
	var held []heldInterchange
	var dups []InterchangeDuplicate
	release := func() {
		for _, h := range held {
			p.abandonInterchange(ctx, h.key, h.token, lg)
		}
	}
	dupPayload := map[int]bool{}
	seen := map[dedup.Key]string{} // interchange key → payload hash, in this message
	for i, pic := range ics {
		r := interchangeRecord(rec, pic)
		if first, ok := seen[pic.ic.Key]; ok {
			// The message carries this interchange twice. Claiming it again
			// would find this delivery's own claim in flight.
			if first == pic.hash {
				dupPayload[pic.payload] = true
				continue
			}
			release()
			why := fmt.Sprintf("payload %d: %s appears twice in the message with different content",
				pic.payload+1, interchangeName(pic.ic.Standard, pic.ic.Reference))
			return d.refuseDamaged(ctx, r, &damagedEnvelope{reason: why, err: errors.New(why)}, pic.ic.Reference)
		}
		seen[pic.ic.Key] = pic.hash
		claim := ledgerClaim(in, pic)
		var c dedup.Decision
		var decided audit.Sink // where the decision of a claimed interchange is still to be recorded
		if i < len(early) {
			c = early[i]
		} else {
			p.retryPendingAbandon(ctx, interchangeClaim, pic.ic.Key)
			var err error
			if c, decided, err = p.claimInterchange(ctx, claim, r); err != nil {
				release()
				return d.unavailable(ctx, r, err)
			}
		}
		switch c.Outcome {
		case dedup.Claimed:
			decision := interchangeDecision(c)
			if c.Reused {
				lg.Warn("interchange reference reused after its dedup window; processed as new", "reference", pic.ic.Reference, "standard", pic.ic.Standard)
			}
			held = append(held, heldInterchange{pic.ic.Key, c.Token})
			keeperFrom(ctx).hold(pic.ic.Key, c.Token)
			p.auditBestEffortTo(ctx, decided, r, audit.StepDecision, decision, "", nil)
		case dedup.InFlight:
			release()
			p.Stats.InFlight.Add(1)
			p.auditBestEffort(ctx, r, audit.StepDecision, decisionInFlightInterchange, "", nil)
			return d.answer(stateInFlight, retryLater(p.inFlightRetryAfter(c.RetryAfter, p.heldFor(c)), "interchange in flight"))
		case dedup.Duplicate:
			if c.PayloadSHA256 != "" && c.PayloadSHA256 != pic.hash {
				info := driftInfo{what: interchangeName(pic.ic.Standard, pic.ic.Reference),
					stored: c.PayloadSHA256, got: pic.hash, firstSeen: c.FirstSeen, reference: pic.ic.Reference}
				if in.OnDrift == DriftAccept {
					p.driftAudit(ctx, r, lg, info, decisionDriftAccepted)
					claim.Supersede = true
					c2, err := p.Ledger.ClaimInterchange(ctx, claim)
					if err != nil || c2.Outcome != dedup.Claimed {
						release()
						if err != nil {
							return d.unavailable(ctx, r, err)
						}
						return d.answer(stateInFlight, retryLater(p.inFlightRetryAfter(c2.RetryAfter, p.heldFor(c2)), "interchange in flight"))
					}
					held = append(held, heldInterchange{pic.ic.Key, c2.Token})
					keeperFrom(ctx).hold(pic.ic.Key, c2.Token)
					continue
				}
				release()
				return d.driftReply(ctx, r, info, m.Payloads[pic.payload:pic.payload+1])
			}
			p.Stats.Duplicates.Add(1)
			lg.Debug("interchange already accepted under another transport id; not processed again", "decision", decisionDuplicateInterchange,
				"reference", pic.ic.Reference, "standard", pic.ic.Standard, "first_seen", c.FirstSeen, "retries", c.Retries)
			p.auditBestEffort(ctx, r, audit.StepDecision, decisionDuplicateInterchange, "", nil)
			dupPayload[pic.payload] = true
			dups = append(dups, InterchangeDuplicate{Interchange: pic.ic, FirstSeen: c.FirstSeen, Retries: c.Retries})
		default:
			release()
			return d.unavailable(ctx, r, fmt.Errorf("exchange: ledger returned outcome %v", c.Outcome))
		}
	}
	if len(dupPayload) > 0 {
		var keep []Payload
		for i, pl := range m.Payloads {
			if dupPayload[i] {
				m.DuplicatePayloads = append(m.DuplicatePayloads, pl)
			} else {
				keep = append(keep, pl)
			}
		}
		m.Payloads = keep
	}
	d.held, d.dups = held, dups
	return stateNone
}

// ledgerClaim is the ledger claim of one payload's interchange.
func ledgerClaim(in Inbound, pic payloadInterchange) dedup.InterchangeClaim {
	window := in.Window
	if pic.ic.Standard == envelope.StandardPeppolSBDH {
		window = 0 // PEPPOL instance identifiers are unique forever
	}
	return dedup.InterchangeClaim{Interchange: pic.ic, PayloadSHA256: pic.hash, TransportKey: in.Message.TransportKey,
		MessageID: in.Message.MessageID, Window: window}
}

// interchangeRecord is rec for the records of one payload's interchange.
func interchangeRecord(rec audit.Record, pic payloadInterchange) audit.Record {
	rec.InterchangeKey, rec.Reference, rec.PayloadSHA256 = string(pic.ic.Key), pic.ic.Reference, pic.hash
	return rec
}

// claimInterchange claims an interchange in the ledger. With an atomic
// store (AuditParts) the store's decision record of a claimed interchange
// is written in the claim's transaction; sink is then where the decision is
// still to be recorded (the other sinks), else it is the whole Audit.
func (p *Pipeline) claimInterchange(ctx context.Context, claim dedup.InterchangeClaim, r audit.Record) (dedup.Decision, audit.Sink, error) {
	a, parts := p.atomicStore()
	if a == nil {
		d, err := p.Ledger.ClaimInterchange(ctx, claim)
		return d, p.Audit, err
	}
	var d dedup.Decision
	err := a.Atomically(ctx, func(ctx context.Context) error {
		var err error
		if d, err = p.Ledger.ClaimInterchange(ctx, claim); err != nil || d.Outcome != dedup.Claimed {
			return err
		}
		return p.auditTo(ctx, parts.Store, r, audit.StepDecision, interchangeDecision(d), "", nil)
	})
	return d, parts.Other, err
}

func interchangeDecision(d dedup.Decision) string {
	if d.Reused {
		return decisionReusedInterchange
	}
	return decisionNewInterchange
}

// interchangeName names an interchange for partners: "EDIFACT interchange
// reference REF00042".
func interchangeName(standard, reference string) string {
	name := standard
	switch standard {
	case envelope.StandardEDIFACT:
		name = "EDIFACT"
	case envelope.StandardX12:
		name = "X12"
	case envelope.StandardUBL:
		name = "UBL"
	case envelope.StandardPeppolSBDH:
		name = "PEPPOL SBDH"
	}
	return fmt.Sprintf("%s interchange reference %s", name, reference)
}

// releaseInterchanges releases the interchange claims the delivery holds.
func (d *delivery) releaseInterchanges(ctx context.Context) {
	for _, h := range d.held {
		d.p.abandonInterchange(ctx, h.key, h.token, d.lg)
	}
}

// ---- stateInterchangesClaimed → runHandler → stateHandled ----

// runHandler hands the message to the business handler: stateHandled when
// it succeeded, stateAbandoned when it failed (the claims are released so
// that the partner's retransmission is processed), stateClaimLost when
// another delivery took the message over while it ran. A message whose
// every payload is an interchange accepted before skips the handler
// (stateDuplicateInterchange); a TxHandler runs in the accept's transaction
// (runTxHandler in txhandler.go).
func (d *delivery) runHandler(ctx context.Context) state {
	p, m, rec, lg := d.p, d.m, d.rec, d.lg
	if len(d.dups) > 0 && len(m.Payloads) == 0 {
		return d.answerDuplicateInterchanges(ctx)
	}
	if p.TxHandler != nil {
		return d.runTxHandler(ctx)
	}
	started := time.Now()
	herr := p.callHandler(ctx, m)
	p.HandlerTimes.Observe(time.Since(started))
	if herr != nil && errors.Is(context.Cause(ctx), ErrClaimLost) {
		// Another delivery holds the message now: it is processed there.
		lg.Error("handler stopped: the claim was lost while it ran; no reply but 503", "decision", "claim-lost", "err", herr)
		d.releaseInterchanges(ctx)
		p.abandon(ctx, m, d.token, lg)
		return d.unavailableAs(ctx, stateClaimLost, rec, context.Cause(ctx))
	}
	if herr != nil {
		p.Stats.HandlerErrors.Add(1)
		rec.Incident = NewIncident()
		lg.Error("handler failed; claim abandoned so the partner's retransmission is processed", "decision", "abandoned",
			"incident", rec.Incident, "err", herr)
		d.releaseInterchanges(ctx)
		p.abandon(ctx, m, d.token, lg)
		p.auditBestEffort(ctx, rec, audit.StepHandler, decisionError, "", herr)
		return d.fail(ctx, stateAbandoned, rec, &Failure{Kind: HandlerFailed, Err: herr, Incident: rec.Incident})
	}
	return d.to(stateHandled)
}

// answerDuplicateInterchanges answers a message whose every payload is an
// interchange accepted before under another transport id: a positive
// duplicate reply, no handler, and the transport key accepted with it.
func (d *delivery) answerDuplicateInterchanges(ctx context.Context) state {
	var reply Reply
	var err error
	if r, ok := d.in.Replies.(InterchangeDuplicateReplies); ok {
		reply, err = r.DuplicateInterchange(ctx, d.dups)
	} else {
		reply, err = d.in.Replies.Accepted(ctx)
	}
	if err != nil {
		d.p.abandon(ctx, d.m, d.token, d.lg)
		return d.internalError(ctx, d.rec, err)
	}
	return d.acceptAtomic(ctx, nil, reply, stateDuplicateInterchange, false)
}

// callHandler calls the handler and turns a panic into an error. Its ctx
// ends after HandlerTimeout, when the partner hangs up, or when the
// exchange's claims are lost (ErrClaimLost); not at the lease, which the
// heartbeat renews while it runs.
func (p *Pipeline) callHandler(ctx context.Context, m *Message) (err error) {
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

// ---- stateHandled → accept → stateAccepted ----

// accept records the handler's success, builds the positive reply and
// accepts the message with it (acceptAtomic, acceptSteps): stateAccepted,
// or stateUnavailable / stateFailed with the claims released and no
// positive reply.
func (d *delivery) accept(ctx context.Context) state {
	p, m, rec, lg := d.p, d.m, d.rec, d.lg
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
		go func() { other <- p.auditTo(ctx, parts.Other, rec, audit.StepHandler, decisionOK, "", nil) }()
		reply, err := d.in.Replies.Accepted(ctx)
		if oerr := <-other; oerr != nil {
			d.releaseInterchanges(ctx)
			p.abandon(ctx, m, d.token, lg)
			return d.unavailable(ctx, rec, oerr)
		}
		if err != nil {
			d.releaseInterchanges(ctx)
			p.abandon(ctx, m, d.token, lg)
			return d.internalError(ctx, rec, err)
		}
		return d.acceptAtomic(ctx, d.held, reply, stateAccepted, true)
	}
	if err := p.audit(ctx, rec, audit.StepHandler, decisionOK, "", nil); err != nil {
		d.releaseInterchanges(ctx)
		p.abandon(ctx, m, d.token, lg)
		return d.unavailable(ctx, rec, err)
	}
	reply, err := d.in.Replies.Accepted(ctx)
	if err != nil {
		d.releaseInterchanges(ctx)
		p.abandon(ctx, m, d.token, lg)
		return d.internalError(ctx, rec, err)
	}
	return d.acceptSteps(ctx, d.held, reply, stateAccepted)
}

// acceptAtomic is acceptSteps in one transaction of the store (see
// AuditParts); handled says that the handler ran, whose record the store
// gets in the same transaction (the other sinks have it already). Without
// an atomic store it is acceptSteps. st is the state an accept reaches:
// stateAccepted, or stateDuplicateInterchange.
func (d *delivery) acceptAtomic(ctx context.Context, held []heldInterchange, reply Reply, st state, handled bool) state {
	p, m, rec, lg, token := d.p, d.m, d.rec, d.lg, d.token
	a, parts := p.atomicStore()
	if a == nil {
		return d.acceptSteps(ctx, held, reply, st)
	}
	decision := acceptDecision(st)
	keeperFrom(ctx).stop() // the accept decides: no renewal may race it
	if err := d.waitOtherPending(ctx); err != nil {
		for _, h := range held {
			p.abandonInterchange(ctx, h.key, h.token, lg)
		}
		p.abandon(ctx, m, token, lg)
		return d.unavailable(ctx, rec, err)
	}
	stored, err := EncodeReply(reply)
	if err != nil {
		for _, h := range held {
			p.abandonInterchange(ctx, h.key, h.token, lg)
		}
		p.abandon(ctx, m, token, lg)
		return d.internalError(ctx, rec, err)
	}
	err = a.Atomically(ctx, func(ctx context.Context) error {
		if handled {
			if err := p.auditTo(ctx, parts.Store, rec, audit.StepHandler, decisionOK, "", nil); err != nil {
				return err
			}
		}
		for _, h := range held {
			if err := p.Ledger.AcceptInterchange(ctx, h.key, h.token); err != nil {
				return err
			}
		}
		if err := p.Store.Accept(ctx, m.TransportKey, token, stored); err != nil {
			return err
		}
		return p.auditTo(ctx, parts.Store, rec, audit.StepReply, decision, reply.Disposition, nil)
	})
	if err == nil {
		return d.accepted(ctx, parts.Other, reply, st)
	}
	// Nothing of the transaction is on disk. Step by step, as without an
	// atomic store: a transport accept found stale then still leaves the
	// interchanges the handler processed accepted.
	lg.Warn("accept transaction failed; accepting step by step", "err", err)
	if handled {
		if err := p.auditTo(ctx, parts.Store, rec, audit.StepHandler, decisionOK, "", nil); err != nil {
			for _, h := range held {
				p.abandonInterchange(ctx, h.key, h.token, lg)
			}
			p.abandon(ctx, m, token, lg)
			return d.unavailable(ctx, rec, err)
		}
	}
	return d.acceptSteps(ctx, held, reply, st)
}

// waitOtherPending returns once the records claimAtomic appended to the
// other sinks are durable (the handler's record synced them already when
// it was written), or the error that lost them: no accept may commit
// without them.
func (d *delivery) waitOtherPending(ctx context.Context) error {
	if d.otherPending == nil {
		return nil
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := d.otherPending(actx); err != nil {
		return fmt.Errorf("exchange: audit %s: %w", audit.StepReceived, err)
	}
	return nil
}

// acceptSteps records the interchanges, then the transport key with the
// reply, and only then answers with the reply. Interchanges go first: if
// the transport accept then fails, the partner's retransmission finds the
// interchange accepted and gets a duplicate reply instead of a second
// handler run.
func (d *delivery) acceptSteps(ctx context.Context, held []heldInterchange, reply Reply, st state) state {
	p, m, rec, lg, token := d.p, d.m, d.rec, d.lg, d.token
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
		return d.unavailable(ctx, rec, ierr)
	}
	stored, err := EncodeReply(reply)
	if err != nil {
		p.abandon(ctx, m, token, lg)
		return d.internalError(ctx, rec, err)
	}
	if err := p.Store.Accept(ctx, m.TransportKey, token, stored); err != nil {
		lg.Error("accept failed; no positive reply sent", "err", err)
		if !errors.Is(err, dedup.ErrStaleClaim) {
			p.abandon(ctx, m, token, lg)
		}
		return d.unavailable(ctx, rec, err)
	}
	return d.accepted(ctx, p.Audit, reply, st)
}

// acceptDecision is the decision an accept records with its reply.
func acceptDecision(st state) string {
	if st == stateDuplicateInterchange {
		return decisionDuplicateInterchange
	}
	return decisionAccepted
}

// accepted logs an accepted message and records its reply in sink (best
// effort: the accept is on disk).
func (d *delivery) accepted(ctx context.Context, sink audit.Sink, reply Reply, st state) state {
	rec, lg, decision := d.rec, d.lg, acceptDecision(st)
	if rec.Reference != "" {
		lg = lg.With("reference", rec.Reference)
	}
	msg := "message accepted"
	if st == stateDuplicateInterchange {
		msg = "duplicate interchange answered; not processed again"
	}
	lg.Info(msg, "decision", decision, "disposition", reply.Disposition)
	d.p.auditBestEffortTo(ctx, sink, rec, audit.StepReply, decision, reply.Disposition, nil)
	return d.answer(st, reply)
}

// ---- the answers of the final states, and the audit records ----

// unavailable answers 503 with Retry-After (UnavailableRetryAfter): the
// store or the audit could not record the message; nothing is held.
func (d *delivery) unavailable(ctx context.Context, rec audit.Record, err error) state {
	return d.unavailableAs(ctx, stateUnavailable, rec, err)
}

// unavailableAs is unavailable reaching st (stateClaimLost answers alike).
func (d *delivery) unavailableAs(ctx context.Context, st state, rec audit.Record, err error) state {
	p := d.p
	p.Stats.Unavailable.Add(1)
	ra := p.UnavailableRetryAfter
	if ra <= 0 {
		ra = 30 * time.Second
	}
	reply := retryLater(ra, "unavailable")
	p.auditBestEffort(ctx, rec, audit.StepReply, decisionUnavailable, reply.Disposition, err)
	return d.answer(st, reply)
}

// fail builds the negative reply of f and audits it, reaching st (or
// stateFailed when the reply cannot be built); f.Incident is set and
// already logged with the detail.
func (d *delivery) fail(ctx context.Context, st state, rec audit.Record, f *Failure) state {
	rec.Incident = f.Incident
	reply, err := d.in.Replies.Failed(ctx, f)
	if err != nil {
		return d.internalError(ctx, rec, fmt.Errorf("%s reply: %w", f.Kind, err))
	}
	reply.Incident = f.Incident
	d.p.auditBestEffort(ctx, rec, audit.StepReply, "", reply.Disposition, nil)
	return d.answer(st, reply)
}

// refuseDamaged refuses a message whose business envelope is damaged: the
// partner gets the envelope's reason (envelope.Reason, no parser error
// text) and an incident reference, the log and audit the full error.
func (d *delivery) refuseDamaged(ctx context.Context, rec audit.Record, damaged error, reference string) state {
	rec.Incident = NewIncident()
	d.lg.Warn("damaged business envelope; message refused", "decision", decisionRejected, "incident", rec.Incident, "err", damaged)
	d.p.auditBestEffort(ctx, rec, audit.StepDecision, decisionRejected, "", damaged)
	return d.fail(ctx, stateRefused, rec, &Failure{Kind: Damaged, Err: damaged, Reason: damagedReason(damaged),
		Reference: reference, Incident: rec.Incident})
}

// damagedEnvelope is a payload refused for its business envelope: reason is
// for the partner (no parser error text), err for the log and audit.
type damagedEnvelope struct {
	reason string
	err    error
}

func (d *damagedEnvelope) Error() string { return d.err.Error() }
func (d *damagedEnvelope) Unwrap() error { return d.err }

// DamagedText is what both protocols tell the partner of a message refused
// for a damaged business envelope, from the Failure's Reason: AS2 in the
// negative MDN's text, AS4 in eb:Description and eb:ErrorDetail. For
// example `its business envelope is damaged: payload 1: EDIFACT: UNZ 0020
// "124" does not match UNB 0020 "123"`.
func DamagedText(reason string) string { return "its business envelope is damaged: " + reason }

func damagedReason(err error) string {
	var d *damagedEnvelope
	if errors.As(err, &d) {
		return d.reason
	}
	return "the business envelope is damaged"
}

// internalError answers HTTP 500 with an incident reference: a reply could
// not be built or a payload could not be read back (stateFailed).
func (d *delivery) internalError(ctx context.Context, rec audit.Record, err error) state {
	rec.Incident = NewIncident()
	d.lg.Error("building reply failed", "incident", rec.Incident, "err", err)
	reply := Reply{Status: http.StatusInternalServerError, Header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}},
		Body:        []byte("internal error; the message was not processed, please retransmit (incident " + rec.Incident + ")\n"),
		Disposition: "http-500", Incident: rec.Incident}
	d.p.auditBestEffort(ctx, rec, audit.StepReply, decisionError, reply.Disposition, err)
	return d.answer(stateFailed, reply)
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

// abandon releases the transport claim; a failure other than a stale claim
// is kept for retry (abandon.go).
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
