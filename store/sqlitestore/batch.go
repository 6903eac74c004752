package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// Group commit. The store's writes outside a transaction of AcceptTx
// (claims, accepts, abandons, ledger claims and transitions, audit records,
// outbox enqueues and transitions) are requests to one writer goroutine. It
// takes every request waiting, up to maxBatch, runs them in one IMMEDIATE
// transaction, each inside its own SAVEPOINT, and commits once: one fsync
// (synchronous=FULL) makes the whole batch durable. Each caller returns
// after the commit that covers its request, with its own result: a request
// whose statements fail is rolled back to its savepoint and fails alone,
// the others commit. While a batch commits, the next one gathers in the
// channel, so concurrent exchanges share fsyncs instead of queueing for
// one each.
//
// A failed COMMIT (or a savepoint that cannot be rolled back) fails every
// request of the batch that had succeeded, with the database's error: none
// of them is on disk.

// The statements around each request of a batch (prepared once, like the
// requests' own).
const (
	savepointSQL  = `SAVEPOINT batch_request`
	rollbackToSQL = `ROLLBACK TO batch_request`
	releaseSQL    = `RELEASE batch_request`
)

// maxBatch bounds the requests of one transaction.
const maxBatch = 128

// writeOp is one request's work inside the batch transaction. It must not
// call the store again (the writer is busy running it).
type writeOp func(ctx context.Context, tx *sql.Tx) error

type writeReq struct {
	ctx  context.Context
	op   string
	fn   writeOp
	done chan error
}

type batcher struct {
	db    *sql.DB
	reqs  chan *writeReq
	stop  chan struct{}
	wg    sync.WaitGroup
	stmts map[string]*sql.Stmt

	mu     sync.RWMutex
	closed bool

	// commits counts the batch transactions committed (tests, figures).
	commits atomic.Int64
}

// errClosed is returned for writes after Close.
var errClosed = errors.New("sql: database is closed")

func newBatcher(db *sql.DB) *batcher {
	b := &batcher{db: db, reqs: make(chan *writeReq, maxBatch), stop: make(chan struct{}), stmts: map[string]*sql.Stmt{}}
	b.wg.Add(1)
	go b.run()
	return b
}

// prepare prepares the statements the writes use on the database, so that
// a batch binds them (Tx.StmtContext) instead of parsing their SQL again.
// It must be called before the first write.
func (b *batcher) prepare(ctx context.Context, queries ...string) error {
	for _, q := range queries {
		if _, ok := b.stmts[q]; ok {
			continue
		}
		st, err := b.db.PrepareContext(ctx, q)
		if err != nil {
			return wrap("prepare", err)
		}
		b.stmts[q] = st
	}
	return nil
}

// stmt is the prepared statement of query bound to tx, or nil when query
// was not prepared.
func (b *batcher) stmt(ctx context.Context, tx *sql.Tx, query string) *sql.Stmt {
	if st, ok := b.stmts[query]; ok {
		return tx.StmtContext(ctx, st)
	}
	return nil
}

// write runs fn in the transaction of AcceptTx that ctx carries for this
// database, else in a batch (do).
func (b *batcher) write(ctx context.Context, op string, fn writeOp) error {
	if t, ok := ctx.Value(txCtxKey{}).(*openTx); ok && t.db == b.db {
		return fn(ctx, t.tx)
	}
	return b.do(ctx, op, fn)
}

// exec runs query in tx, through its prepared statement if there is one.
func (b *batcher) exec(ctx context.Context, tx *sql.Tx, query string, args ...any) (sql.Result, error) {
	if st := b.stmt(ctx, tx, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return tx.ExecContext(ctx, query, args...)
}

// queryRow is exec for a statement returning a row.
func (b *batcher) queryRow(ctx context.Context, tx *sql.Tx, query string, args ...any) *sql.Row {
	if st := b.stmt(ctx, tx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return tx.QueryRowContext(ctx, query, args...)
}

// do runs fn in a batch and returns after the batch committed (or failed).
// The caller's ctx bounds only the wait before the request starts: once its
// statements run they are not interrupted (an interrupt would roll back the
// whole batch), and the caller waits for the commit so that its answer is
// the truth about what is on disk.
func (b *batcher) do(ctx context.Context, op string, fn writeOp) error {
	if err := ctx.Err(); err != nil {
		return wrap(op, err)
	}
	r := &writeReq{ctx: ctx, op: op, fn: fn, done: make(chan error, 1)}
	b.mu.RLock()
	if b.closed {
		b.mu.RUnlock()
		return wrap(op, errClosed)
	}
	select {
	case b.reqs <- r:
		b.mu.RUnlock()
	case <-ctx.Done():
		b.mu.RUnlock()
		return wrap(op, ctx.Err())
	}
	return <-r.done
}

// close stops the writer after the requests already queued ran.
func (b *batcher) close() {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.stop)
	}
	b.mu.Unlock()
	b.wg.Wait()
	for _, st := range b.stmts {
		st.Close()
	}
}

func (b *batcher) run() {
	defer b.wg.Done()
	batch := make([]*writeReq, 0, maxBatch)
	for {
		batch = batch[:0]
		select {
		case r := <-b.reqs:
			batch = append(batch, r)
		case <-b.stop:
			// Closed: no sender can queue any more (closed is set under
			// the lock senders hold); run what is queued, then stop.
			for {
				select {
				case r := <-b.reqs:
					batch = append(batch, r)
					if len(batch) == maxBatch {
						b.commit(batch)
						batch = batch[:0]
					}
				default:
					if len(batch) > 0 {
						b.commit(batch)
					}
					return
				}
			}
		}
	gather:
		for len(batch) < maxBatch {
			select {
			case r := <-b.reqs:
				batch = append(batch, r)
			default:
				break gather
			}
		}
		b.commit(batch)
	}
}

// commit runs one batch and answers every request of it.
func (b *batcher) commit(batch []*writeReq) {
	results := make([]error, len(batch))
	answer := func() {
		for i, r := range batch {
			r.done <- results[i]
		}
	}
	failAll := func(err error) {
		for i, r := range batch {
			if results[i] == nil {
				results[i] = wrap(r.op, err)
			}
		}
		answer()
	}
	tx, err := b.db.BeginTx(context.Background(), nil) // BEGIN IMMEDIATE (_txlock)
	if err != nil {
		failAll(err)
		return
	}
	single := len(batch) == 1
	ran := 0
	for i, r := range batch {
		if err := r.ctx.Err(); err != nil {
			results[i] = wrap(r.op, err)
			continue
		}
		ctx := context.WithoutCancel(r.ctx)
		if single {
			// No other request to protect: a failure rolls back the
			// whole transaction below.
			if results[i] = r.fn(ctx, tx); results[i] == nil {
				ran++
			}
			continue
		}
		if _, err := b.exec(ctx, tx, savepointSQL); err != nil {
			tx.Rollback()
			failAll(fmt.Errorf("savepoint: %w", err))
			return
		}
		if results[i] = r.fn(ctx, tx); results[i] != nil {
			if _, err := b.exec(ctx, tx, rollbackToSQL); err != nil {
				tx.Rollback()
				failAll(fmt.Errorf("rollback to savepoint: %w", err))
				return
			}
		} else {
			ran++
		}
		if _, err := b.exec(ctx, tx, releaseSQL); err != nil {
			tx.Rollback()
			failAll(fmt.Errorf("release savepoint: %w", err))
			return
		}
	}
	if ran == 0 {
		tx.Rollback()
		answer()
		return
	}
	if err := tx.Commit(); err != nil {
		failAll(fmt.Errorf("commit: %w", err))
		return
	}
	b.commits.Add(1)
	answer()
}
