package dedup

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"
)

// Tx is an open transaction of a SQL store, handed to the callback of
// TxAcceptor.AcceptTx. Exactly one accessor returns non-nil: SQLTx on a
// store built on database/sql (sqlitestore), PgxTx on PostgreSQL (pgstore).
// The transaction belongs to the store: do not commit or roll it back.
type Tx interface {
	SQLTx() *sql.Tx
	PgxTx() pgx.Tx
}

// TxAcceptor is the capability of a SQL store to accept a claim in the same
// database transaction as other writes, so that a crash leaves both or
// neither. The memory store does not have it.
type TxAcceptor interface {
	// AcceptTx begins a transaction, accepts key with reply in it (the
	// compare-and-set of Store.Accept on token), runs fn and commits. If the
	// accept finds the claim stale, fn is not run and the error wraps
	// ErrStaleClaim; if fn fails, the transaction is rolled back (the claim
	// is still held by token, for the caller to Abandon) and fn's error is
	// returned as it is. Nothing fn wrote survives unless AcceptTx returns nil.
	//
	// The ctx passed to fn carries the transaction: this store's own
	// Accept, Abandon, AcceptInterchange and AbandonInterchange, and its
	// audit sink's Write, called with that ctx (or one derived from it) run
	// inside the transaction. Other store calls must not be made from fn
	// (SQLite has one connection, held by the transaction).
	AcceptTx(ctx context.Context, key Key, token Token, reply []byte, fn func(ctx context.Context, tx Tx) error) error
}
