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
//     decision record in one transaction of the store, then both records
//     in the other sinks in one step (audit.WriteBatch: one sync of a
//     JSON-lines file);
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
// claimed), while the other sinks record it as received. A non-nil reply
// is final: nothing is held then.
func (p *Pipeline) claimAtomic(ctx context.Context, a dedup.Atomic, parts *AuditParts, m *Message, req dedup.ClaimRequest,
	rec audit.Record, lg *slog.Logger) (dedup.Decision, *Reply) {
	p.retryPendingAbandon(ctx, transportClaim, req.Key)
	received := p.record(rec, audit.StepReceived, "", "", nil)
	var d dedup.Decision
	err := a.Atomically(ctx, func(ctx context.Context) error {
		if err := parts.Store.Write(ctx, received); err != nil {
			return fmt.Errorf("exchange: audit %s: %w", audit.StepReceived, err)
		}
		var err error
		if d, err = p.Store.Claim(ctx, req); err != nil || d.Outcome != dedup.Claimed {
			return err
		}
		return p.auditTo(ctx, parts.Store, rec, audit.StepDecision, claimDecision(d), "", nil)
	})
	if err != nil {
		// Nothing of the transaction is on disk: no claim is held.
		lg.Error("dedup store or audit unavailable", "err", err)
		p.auditBestEffortTo(ctx, parts.Other, rec, audit.StepReceived, "", "", nil)
		reply := p.unavailable(ctx, rec, err)
		return dedup.Decision{}, &reply
	}
	// The other sinks get the received record (and the decision of a
	// claimed key) now, in one step (one sync of a JSON-lines file).
	recs := []audit.Record{received}
	if d.Outcome == dedup.Claimed {
		recs = append(recs, p.record(rec, audit.StepDecision, claimDecision(d), "", nil))
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
			p.abandon(ctx, m, d.Token, lg)
		}
		reply := p.unavailable(ctx, rec, oerr)
		return dedup.Decision{}, &reply
	}
	return d, nil
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
