package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/edigateway/gateway/audit"
)

// AuditSink is a durable audit.Sink writing one row per record to the
// audit_records table of the store's schema. Write returns the database's
// error, so a record that cannot be written fails the exchange.
type AuditSink struct {
	pool                 *pgxpool.Pool
	insert, byKey, byMsg string
	table                string
}

const auditColumns = `recorded_at, step, partner, protocol, message_id, dedup_key, interchange_key, reference,
	decision, payload_sha256, disposition, error, incident, actor`

func newAuditSink(pool *pgxpool.Pool, schema string) *AuditSink {
	t := pgx.Identifier{schema, "audit_records"}.Sanitize()
	return &AuditSink{
		pool:  pool,
		table: t,
		insert: `INSERT INTO ` + t + ` (` + auditColumns + `)
VALUES (coalesce($1, now()), $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`,
		byKey: `SELECT ` + auditColumns + ` FROM ` + t + ` WHERE dedup_key = $1 ORDER BY id`,
		byMsg: `SELECT ` + auditColumns + ` FROM ` + t + ` WHERE partner = $1 AND message_id = $2 ORDER BY id`,
	}
}

// Write implements audit.Sink. A zero Record.Time is replaced by the
// database's now(). Times are kept to the microsecond. Inside the store's
// Atomically or AcceptTx the row is inserted right before the commit, with
// the transaction's other audit rows in one round trip; an insert failing
// then fails the commit (the error is the transaction's, not Write's).
func (a *AuditSink) Write(ctx context.Context, r audit.Record) error {
	var at *time.Time // NULL: the database's clock
	if !r.Time.IsZero() {
		at = &r.Time
	}
	args := []any{at, string(r.Step), r.Partner, r.Protocol, r.MessageID, r.Key,
		r.InterchangeKey, r.Reference, r.Decision, r.PayloadSHA256, r.Disposition, r.Error, r.Incident, r.Actor}
	if t, ok := ctx.Value(txCtxKey{}).(*openTx); ok && t.pool == a.pool {
		// Inside Atomically or AcceptTx: inserted with the commit.
		t.queueAudit(a.insert, args...)
		return nil
	}
	if _, err := a.pool.Exec(ctx, a.insert, args...); err != nil {
		return wrap("audit", err)
	}
	return nil
}

// ByKey returns the records of a transport key in the order written.
func (a *AuditSink) ByKey(ctx context.Context, key string) ([]audit.Record, error) {
	return a.query(ctx, a.byKey, key)
}

// ByMessage returns the records of a partner's message id in the order
// written.
func (a *AuditSink) ByMessage(ctx context.Context, partner, messageID string) ([]audit.Record, error) {
	return a.query(ctx, a.byMsg, partner, messageID)
}

func (a *AuditSink) query(ctx context.Context, q string, args ...any) ([]audit.Record, error) {
	rows, err := a.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, wrap("audit read", err)
	}
	defer rows.Close()
	var out []audit.Record
	for rows.Next() {
		var (
			r    audit.Record
			step string
		)
		if err := rows.Scan(&r.Time, &step, &r.Partner, &r.Protocol, &r.MessageID, &r.Key, &r.InterchangeKey,
			&r.Reference, &r.Decision, &r.PayloadSHA256, &r.Disposition, &r.Error, &r.Incident, &r.Actor); err != nil {
			return nil, wrap("audit read", err)
		}
		r.Time, r.Step = r.Time.UTC(), audit.Step(step)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("audit read", err)
	}
	return out, nil
}

var _ audit.Sink = (*AuditSink)(nil)
