package exchange

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
)

// Tx is the store's open transaction given to a TxHandler: SQLTx() on
// SQLite (database/sql), PgxTx() on PostgreSQL (pgx); the other is nil.
type Tx = dedup.Tx

// TxHandler is a business handler whose side effect is writes to the
// gateway's own database, made in the transaction that accepts the message:
// the handler's rows, the accept of the transport key (with the stored
// reply), the accept of the message's interchanges and the audit records of
// the handler and the reply commit together or not at all. A crash at any
// point leaves either all of it (a retransmission gets the duplicate reply
// and no handler run) or none of it (the retransmission runs the handler
// again on an empty slate), so the effect happens exactly once without the
// handler being idempotent.
//
// HandleTx must write through tx only and must not commit or roll it back;
// ctx carries the transaction (store writes made with it join it). An error
// (or panic) rolls everything back, abandons the claim and answers the
// partner negatively, so that its retransmission is processed anew. ctx ends
// a margin before the claim's lease. The transaction is open while HandleTx
// runs: keep it short (on SQLite it holds the database's only writer for its
// whole duration). Everything outside the database is still at least once.
type TxHandler interface {
	HandleTx(ctx context.Context, tx Tx, msg *Message) error
}

// TxHandlerFunc adapts a function to TxHandler.
type TxHandlerFunc func(ctx context.Context, tx Tx, msg *Message) error

func (f TxHandlerFunc) HandleTx(ctx context.Context, tx Tx, msg *Message) error {
	return f(ctx, tx, msg)
}

// ErrNoTxAcceptor is returned by CheckTxHandler for a store that cannot run
// a TxHandler in its accept transaction (the memory store).
var ErrNoTxAcceptor = errors.New("exchange: a transactional handler needs a SQL store (sqlite: or postgres://); this store cannot accept in a transaction")

// CheckTxHandler reports whether the pipeline can run its TxHandler: nil
// when none is set or the store is a dedup.TxAcceptor. Servers call it at
// start, so that a misconfiguration fails there and not on the first
// message.
func (p *Pipeline) CheckTxHandler() error {
	if p.TxHandler == nil {
		return nil
	}
	if _, ok := p.Store.(dedup.TxAcceptor); !ok {
		return fmt.Errorf("%w (store %T)", ErrNoTxAcceptor, p.Store)
	}
	return nil
}

// runTxHandler is runHandler and accept in one step for a TxHandler. The
// reply is built first (it is stored with the accept); then one store
// transaction accepts the transport key (compare-and-set on token), runs the
// handler, writes the handler and reply audit records (the store's own audit
// table joins the transaction; other sinks, such as a JSON file, are written
// at once) and accepts the held interchanges, and commits: stateAccepted,
// or stateAbandoned (the handler failed), stateUnavailable or stateFailed.
func (d *delivery) runTxHandler(ctx context.Context) state {
	p, m, rec, lg, token, held := d.p, d.m, d.rec, d.lg, d.token, d.held
	keeperFrom(ctx).stop() // from here the accept transaction holds the claim
	acc, ok := p.Store.(dedup.TxAcceptor)
	if !ok {
		d.releaseInterchanges(ctx)
		p.abandon(ctx, m, token, lg)
		return d.internalError(ctx, rec, p.CheckTxHandler())
	}
	reply, err := d.in.Replies.Accepted(ctx)
	if err != nil {
		d.releaseInterchanges(ctx)
		p.abandon(ctx, m, token, lg)
		return d.internalError(ctx, rec, err)
	}
	stored, err := EncodeReply(reply)
	if err != nil {
		d.releaseInterchanges(ctx)
		p.abandon(ctx, m, token, lg)
		return d.internalError(ctx, rec, err)
	}
	// The transaction is not bound to the partner's connection (a hang-up
	// after the handler finished still commits); the handler's own ctx is.
	budget := p.txHandlerBudget()
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), budget+30*time.Second)
	defer cancel()
	var herr error
	err = acc.AcceptTx(tctx, m.TransportKey, token, stored, func(txctx context.Context, tx dedup.Tx) error {
		started := time.Now()
		herr = p.callTxHandler(ctx, txctx, budget, tx, m)
		p.HandlerTimes.Observe(time.Since(started))
		if herr != nil {
			return herr
		}
		if err := p.audit(txctx, rec, audit.StepHandler, decisionOK, "", nil); err != nil {
			return err
		}
		// The claim's records in the other sinks (appended, synced with
		// the handler's record just written).
		if err := d.waitOtherPending(txctx); err != nil {
			return err
		}
		for _, h := range held {
			if err := p.Ledger.AcceptInterchange(txctx, h.key, h.token); err != nil {
				return fmt.Errorf("exchange: accept interchange %.16s…: %w", h.key, err)
			}
		}
		return p.audit(txctx, rec, audit.StepReply, decisionAccepted, reply.Disposition, nil)
	})
	switch {
	case err == nil:
		if rec.Reference != "" {
			lg = lg.With("reference", rec.Reference)
		}
		lg.Info("message accepted", "decision", decisionAccepted, "disposition", reply.Disposition, "handler", "transactional")
		return d.answer(stateAccepted, reply)
	case herr != nil:
		p.Stats.HandlerErrors.Add(1)
		rec.Incident = NewIncident()
		lg.Error("transactional handler failed; its writes rolled back, claim abandoned so the partner's retransmission is processed",
			"decision", "abandoned", "incident", rec.Incident, "err", herr)
		d.releaseInterchanges(ctx)
		p.abandon(ctx, m, token, lg)
		p.auditBestEffort(ctx, rec, audit.StepHandler, decisionError, "", herr)
		return d.fail(ctx, stateAbandoned, rec, &Failure{Kind: HandlerFailed, Err: herr, Incident: rec.Incident})
	case errors.Is(err, dedup.ErrStaleClaim):
		// Another delivery took the key over: the handler did not run here.
		lg.Error("accept failed (claim taken over); handler not run, no positive reply sent", "err", err)
		d.releaseInterchanges(ctx)
		return d.unavailable(ctx, rec, err)
	default:
		lg.Error("accept transaction failed; handler's writes rolled back, no positive reply sent", "err", err)
		d.releaseInterchanges(ctx)
		p.abandon(ctx, m, token, lg)
		return d.unavailable(ctx, rec, err)
	}
}

// txHandlerBudget is how long a TxHandler may run: the lease less a margin
// (as for Handler), or 5 minutes without a lease.
func (p *Pipeline) txHandlerBudget() time.Duration {
	if p.Lease <= 0 {
		return dedup.DefaultLease
	}
	margin := min(p.Lease/10, 30*time.Second)
	return p.Lease - margin
}

// callTxHandler calls the TxHandler with a ctx that carries the transaction
// (txctx's values), ends after budget and when the partner's request (reqCtx)
// is cancelled; a panic becomes an error.
func (p *Pipeline) callTxHandler(reqCtx, txctx context.Context, budget time.Duration, tx dedup.Tx, m *Message) (err error) {
	ctx, cancel := context.WithTimeout(txctx, budget)
	defer cancel()
	stop := context.AfterFunc(reqCtx, cancel)
	defer stop()
	defer func() {
		if r := recover(); r != nil {
			p.log().Error("handler panic", "partner", m.Partner, "protocol", string(m.Protocol), "message_id", m.MessageID,
				"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			err = fmt.Errorf("handler panic: %v", r)
		}
	}()
	return p.TxHandler.HandleTx(ctx, tx, m)
}
