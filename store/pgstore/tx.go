package pgstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/edigateway/gateway/dedup"
)

// openTx is the transaction of AcceptTx (tx) or Atomically (lazy) as
// carried by the callback's ctx. audits are the audit rows written inside
// it, sent together right before the commit (with the COMMIT itself in
// Atomically): nothing inside the transaction reads them, and a failing
// insert still fails the whole transaction.
type openTx struct {
	pool   *pgxpool.Pool
	tx     pgx.Tx
	lazy   *lazyTx
	audits []queuedQuery
}

// queuedQuery is a statement kept for a later round trip.
type queuedQuery struct {
	sql  string
	args []any
}

// queueAudit adds an audit row's insert to the transaction.
func (t *openTx) queueAudit(query string, args ...any) {
	t.audits = append(t.audits, queuedQuery{query, args})
}

// commit inserts the queued audit rows and commits: in Atomically in one
// round trip, in AcceptTx (a pgx.Tx) the rows in one and the commit in
// another.
func (t *openTx) commit(ctx context.Context, op string) error {
	if t.lazy != nil {
		if err := t.lazy.commit(ctx, t.audits); err != nil {
			return wrap(op+": commit", err)
		}
		return nil
	}
	if n := len(t.audits); n > 0 {
		var b pgx.Batch
		for _, q := range t.audits {
			b.Queue(q.sql, q.args...)
		}
		if err := execBatch(t.tx.SendBatch(ctx, &b), n, nil); err != nil {
			return fmt.Errorf("pgstore: %s: %w", op, wrap("audit", err))
		}
	}
	if err := t.tx.Commit(ctx); err != nil {
		return wrap(op+": commit", err)
	}
	return nil
}

func (t *openTx) SQLTx() *sql.Tx { return nil }
func (t *openTx) PgxTx() pgx.Tx  { return t.tx }

type txCtxKey struct{}

// execer is what the store's writes need of a pool or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// execerFor returns the transaction of AcceptTx carried by ctx when it
// belongs to pool, else pool itself, so that writes made from inside the
// callback join its transaction.
func execerFor(ctx context.Context, pool *pgxpool.Pool) execer {
	if t, ok := ctx.Value(txCtxKey{}).(*openTx); ok && t.pool == pool {
		if t.lazy != nil {
			return t.lazy
		}
		return t.tx
	}
	return pool
}

// AcceptTx implements dedup.TxAcceptor: the accept's compare-and-set, fn
// and the commit in one transaction. The accept's UPDATE locks the claim's
// row until the commit, so a retransmission claiming the key meanwhile (even
// after the lease ran out) waits and then finds it accepted, or, after a
// rollback, still claimed.
func (s *Store) AcceptTx(ctx context.Context, key dedup.Key, token dedup.Token, reply []byte,
	fn func(ctx context.Context, tx dedup.Tx) error) error {
	if reply == nil {
		reply = []byte{} // NULL is "no reply stored"
	}
	if _, ok := ctx.Value(txCtxKey{}).(*openTx); ok {
		return errors.New("pgstore: accept tx: already inside a transaction")
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return wrap("accept tx", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx) // no-op after a commit
	}()
	tag, err := tx.Exec(ctx, s.q.accept, string(key), string(token), reply)
	if err != nil {
		return wrap("accept tx", err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("pgstore: accept tx: %w", dedup.ErrStaleClaim)
	}
	t := &openTx{pool: s.pool, tx: tx}
	if err := fn(context.WithValue(ctx, txCtxKey{}, t), t); err != nil {
		return err
	}
	return t.commit(ctx, "accept tx")
}

var _ dedup.TxAcceptor = (*Store)(nil)

// Atomically implements dedup.Atomic: fn runs inside one transaction of a
// pooled connection; the writes of concurrent exchanges still commit on
// their own connections and share PostgreSQL's WAL flushes. The BEGIN goes
// out with fn's first statement and the COMMIT with the audit rows fn wrote
// (lazyTx): two round trips fewer than a pgx.Tx.
func (s *Store) Atomically(ctx context.Context, fn func(ctx context.Context) error) error {
	if t, ok := ctx.Value(txCtxKey{}).(*openTx); ok && t.pool == s.pool {
		return fn(ctx)
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return wrap("atomic", err)
	}
	l := &lazyTx{conn: conn}
	defer l.end(ctx)
	t := &openTx{pool: s.pool, lazy: l}
	if err := fn(context.WithValue(ctx, txCtxKey{}, t)); err != nil {
		return err
	}
	return t.commit(ctx, "atomic")
}

var _ dedup.Atomic = (*Store)(nil)
