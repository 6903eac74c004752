package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// lazyTx is the transaction of Atomically on one pooled connection. Its
// BEGIN is sent with the first statement and its COMMIT after the queued
// audit rows, each group in one round trip (statements pipelined in the
// extended protocol, one Sync): a BEGIN inside such a pipeline opens an
// ordinary transaction block, and after a failing statement the server
// skips the rest of the pipeline (the COMMIT too) and leaves the block
// aborted until the ROLLBACK that end sends.
type lazyTx struct {
	conn  *pgxpool.Conn
	begun bool // BEGIN sent: a ROLLBACK is due unless committed
	done  bool // committed
}

// Exec implements execer.
func (l *lazyTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if l.begun {
		return l.conn.Exec(ctx, sql, args...)
	}
	var b pgx.Batch
	b.Queue("begin")
	b.Queue(sql, args...)
	l.begun = true
	var tag pgconn.CommandTag
	err := execBatch(l.conn.SendBatch(ctx, &b), 2, &tag)
	return tag, err
}

// QueryRow implements execer. The row must be scanned (as every caller
// does at once) before the transaction is used again.
func (l *lazyTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if l.begun {
		return l.conn.QueryRow(ctx, sql, args...)
	}
	var b pgx.Batch
	b.Queue("begin")
	b.Queue(sql, args...)
	l.begun = true
	br := l.conn.SendBatch(ctx, &b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return errRow{err}
	}
	return batchRow{row: br.QueryRow(), br: br}
}

// commit sends the audit rows and the COMMIT (and the BEGIN when no
// statement went before) in one round trip. A COMMIT the server answers
// with ROLLBACK (the transaction had failed) is pgx.ErrTxCommitRollback.
func (l *lazyTx) commit(ctx context.Context, audits []queuedQuery) error {
	if !l.begun && len(audits) == 0 {
		l.done = true // fn wrote nothing
		return nil
	}
	var b pgx.Batch
	if !l.begun {
		b.Queue("begin")
	}
	for _, q := range audits {
		b.Queue(q.sql, q.args...)
	}
	b.Queue("commit")
	l.begun = true
	var tag pgconn.CommandTag
	if err := execBatch(l.conn.SendBatch(ctx, &b), b.Len(), &tag); err != nil {
		return err
	}
	if tag.String() == "ROLLBACK" {
		return pgx.ErrTxCommitRollback
	}
	l.done = true
	return nil
}

// end rolls back what was begun and not committed and gives the connection
// back (the pool closes it instead should it still be inside a
// transaction).
func (l *lazyTx) end(ctx context.Context) {
	if l.begun && !l.done {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_, _ = l.conn.Exec(rctx, "rollback")
		cancel()
	}
	l.conn.Release()
}

// execBatch reads the results of n statements sent as one batch, stopping
// at the first error, and closes br; last, when set, gets the command tag
// of the last statement.
func execBatch(br pgx.BatchResults, n int, last *pgconn.CommandTag) error {
	var err error
	for i := range n {
		var tag pgconn.CommandTag
		if tag, err = br.Exec(); err != nil {
			break
		}
		if last != nil && i == n-1 {
			*last = tag
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// batchRow is the row of a statement sent after a BEGIN in one batch: the
// batch is closed once the row is scanned.
type batchRow struct {
	row pgx.Row
	br  pgx.BatchResults
}

func (r batchRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if cerr := r.br.Close(); err == nil {
		err = cerr
	}
	return err
}

// errRow is a row that failed before it was read.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
