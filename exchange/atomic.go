package exchange

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
)

// AuditParts names the two parts of a Pipeline's Audit: the store's own
// durable table, and everything else (a JSON-lines file, metrics; nil when
// there is nothing else). Set it only when Audit writes to both and fails
// when either fails (not BestEffort).
//
// With a store that is a dedup.Atomic, the pipeline then records a message
// in fewer commits, every one of them all or nothing:
//
//   - the claim: the received record, the claim and (when claimed) the
//     decision record, the claim of the message's first interchange in the
//     ledger and its decision record in one transaction of the store, then
//     these records in the other sinks in one step (audit.WriteBatch: one
//     sync of a JSON-lines file); further interchanges of the message are
//     claimed one transaction each;
//   - the accept: the handler's record, the accept of every interchange,
//     the accept of the transport key with the stored reply and the reply
//     record in one transaction; the other sinks' handler record is durable
//     before it starts (written while the reply is signed), their reply
//     record is written once it committed.
//
// So the store never holds a claim without its received and decision
// records, nor an accept without the handler's and the reply's, and a
// positive reply still goes out only once both parts hold every record.
// A failed accept transaction leaves nothing of it and is retried step by
// step (as without AuditParts), so a transport accept found stale still
// leaves the interchanges accepted.
type AuditParts struct {
	Store audit.Sink
	Other audit.Sink
}

// atomicStore returns the store as a dedup.Atomic and the audit parts when
// the pipeline records atomically, else nil, nil.
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
		return "reused"
	}
	return "new"
}

// claimAtomic records the message as received and claims its key in one
// transaction of the store (with the decision record when the key was
// claimed); when the key was claimed, the same transaction claims the
// message's first interchange in the ledger too, with its decision record
// (ledgerClaimsIn). The other sinks then record all of it in one step. A
// non-nil reply is final: nothing is held then. early holds the ledger's
// decisions for ics[:len(early)], for claimInterchanges to go on from.
func (p *Pipeline) claimAtomic(ctx context.Context, a dedup.Atomic, parts *AuditParts, in Inbound, ics []payloadInterchange,
	req dedup.ClaimRequest, rec audit.Record, lg *slog.Logger) (d dedup.Decision, early []dedup.Decision, final *Reply) {
	m := in.Message
	p.retryPendingAbandon(ctx, transportClaim, req.Key)
	if len(ics) > 0 {
		p.retryPendingAbandon(ctx, interchangeClaim, ics[0].ic.Key)
	}
	received := p.record(rec, audit.StepReceived, "", "", nil)
	var decided []audit.Record // the interchange's decision record
	err := a.Atomically(ctx, func(ctx context.Context) error {
		if err := parts.Store.Write(ctx, received); err != nil {
			return fmt.Errorf("exchange: audit %s: %w", audit.StepReceived, err)
		}
		var err error
		if d, err = p.Store.Claim(ctx, req); err != nil || d.Outcome != dedup.Claimed {
			return err
		}
		if err := p.auditTo(ctx, parts.Store, rec, audit.StepDecision, claimDecision(d), "", nil); err != nil {
			return err
		}
		early, decided, err = p.ledgerClaimsIn(ctx, parts.Store, in, ics, rec)
		return err
	})
	if err != nil {
		// Nothing of the transaction is on disk: no claim is held.
		lg.Error("dedup store or audit unavailable", "err", err)
		p.auditBestEffortTo(ctx, parts.Other, rec, audit.StepReceived, "", "", nil)
		reply := p.unavailable(ctx, rec, err)
		return dedup.Decision{}, nil, &reply
	}
	// The other sinks get the received record (and the decisions of a
	// claimed key and its first interchange) now, in one step (one sync of a
	// JSON-lines file).
	recs := []audit.Record{received}
	if d.Outcome == dedup.Claimed {
		recs = append(recs, p.record(rec, audit.StepDecision, claimDecision(d), "", nil))
		recs = append(recs, decided...)
	}
	var oerr error
	if parts.Other != nil {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		oerr = audit.WriteBatch(actx, parts.Other, recs)
		cancel()
	}
	if oerr != nil {
		lg.Error("audit unavailable", "err", oerr)
		if d.Outcome == dedup.Claimed {
			for i, ed := range early {
				if ed.Outcome == dedup.Claimed {
					p.abandonInterchange(ctx, ics[i].ic.Key, ed.Token, lg)
				}
			}
			p.abandon(ctx, m, d.Token, lg)
		}
		reply := p.unavailable(ctx, rec, oerr)
		return dedup.Decision{}, nil, &reply
	}
	return d, early, nil
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

// acceptAtomic is accept in one transaction of the store (see AuditParts);
// handled says that the handler ran, whose record the store gets in the
// same transaction (the other sinks have it already). Without an atomic
// store it is accept.
func (p *Pipeline) acceptAtomic(ctx context.Context, m *Message, token dedup.Token, held []heldInterchange, reply Reply,
	rec audit.Record, lg *slog.Logger, decision string, handled bool) Reply {
	a, parts := p.atomicStore()
	if a == nil {
		return p.accept(ctx, m, token, held, reply, rec, lg, decision)
	}
	keeperFrom(ctx).stop() // the accept decides: no renewal may race it
	stored, err := EncodeReply(reply)
	if err != nil {
		for _, h := range held {
			p.abandonInterchange(ctx, h.key, h.token, lg)
		}
		p.abandon(ctx, m, token, lg)
		return p.internalError(ctx, rec, lg, err)
	}
	err = a.Atomically(ctx, func(ctx context.Context) error {
		if handled {
			if err := p.auditTo(ctx, parts.Store, rec, audit.StepHandler, "ok", "", nil); err != nil {
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
		return p.accepted(ctx, parts.Other, reply, rec, lg, decision)
	}
	// Nothing of the transaction is on disk. Step by step, as without an
	// atomic store: a transport accept found stale then still leaves the
	// interchanges the handler processed accepted.
	lg.Warn("accept transaction failed; accepting step by step", "err", err)
	if handled {
		if err := p.auditTo(ctx, parts.Store, rec, audit.StepHandler, "ok", "", nil); err != nil {
			for _, h := range held {
				p.abandonInterchange(ctx, h.key, h.token, lg)
			}
			p.abandon(ctx, m, token, lg)
			return p.unavailable(ctx, rec, err)
		}
	}
	return p.accept(ctx, m, token, held, reply, rec, lg, decision)
}
