package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/edigateway/gateway/dedup"
)

// openTx is the transaction of AcceptTx as carried by the callback's ctx.
type openTx struct {
	db *sql.DB
	tx *sql.Tx
}

func (t *openTx) SQLTx() *sql.Tx { return t.tx }
func (t *openTx) PgxTx() pgx.Tx  { return nil }

type txCtxKey struct{}

// AcceptTx implements dedup.TxAcceptor in one IMMEDIATE transaction (the
// database's write lock is held from its start): the accept's
// compare-and-set, then fn, then the commit. While fn runs every other
// writer of the database waits, in this process for the single connection,
// in others for the lock (up to the busy timeout).
func (s *Store) AcceptTx(ctx context.Context, key dedup.Key, token dedup.Token, reply []byte,
	fn func(ctx context.Context, tx dedup.Tx) error) error {
	if reply == nil {
		reply = []byte{}
	}
	if _, ok := ctx.Value(txCtxKey{}).(*openTx); ok {
		return errors.New("sqlitestore: accept tx: already inside a transaction")
	}
	tx, err := s.db.BeginTx(ctx, nil) // BEGIN IMMEDIATE (_txlock)
	if err != nil {
		return wrap("accept tx", err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, acceptSQL, string(key), string(token), reply)
	if err != nil {
		return wrap("accept tx", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return wrap("accept tx", err)
	}
	if n != 1 {
		return fmt.Errorf("sqlitestore: accept tx: %w", dedup.ErrStaleClaim)
	}
	t := &openTx{db: s.db, tx: tx}
	if err := fn(context.WithValue(ctx, txCtxKey{}, t), t); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return wrap("accept tx: commit", err)
	}
	return nil
}

var _ dedup.TxAcceptor = (*Store)(nil)

// Atomically implements dedup.Atomic as one request of the group commit
// (batch.go): fn's writes run in its savepoint of the batch transaction,
// are rolled back together when fn fails, and become durable with the
// batch's commit, sharing its fsync with concurrent requests.
func (s *Store) Atomically(ctx context.Context, fn func(ctx context.Context) error) error {
	if t, ok := ctx.Value(txCtxKey{}).(*openTx); ok && t.db == s.db {
		return fn(ctx)
	}
	return s.w.do(ctx, "atomic", func(ctx context.Context, tx *sql.Tx) error {
		return fn(context.WithValue(ctx, txCtxKey{}, &openTx{db: s.db, tx: tx}))
	})
}

var _ dedup.Atomic = (*Store)(nil)
