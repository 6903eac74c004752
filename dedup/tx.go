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

// Atomic is the capability of a SQL store to make several of its writes
// one transaction, so that a crash leaves all of them or none: the
// pipeline claims a key together with its audit records, and accepts it
// together with its interchanges and audit records, in one commit (one
// fsync) instead of one each. The memory store does not have it.
type Atomic interface {
	// Atomically runs fn with a ctx in which this store's Claim, Accept,
	// Abandon, ClaimInterchange, AcceptInterchange and AbandonInterchange
	// and its audit sink's Write join one transaction, and commits it once fn returns
	// nil; when fn returns an error (returned as it is) or the commit
	// fails, nothing fn wrote survives. fn must not make other store calls
	// or wait for anything but these writes: on SQLite the transaction is
	// one request of the group commit, run by the database's only writer.
	// Called with a ctx already inside such a transaction (or AcceptTx's)
	// of the same store, fn simply joins it.
	Atomically(ctx context.Context, fn func(ctx context.Context) error) error
}
