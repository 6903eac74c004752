package sqlitestore

import (
	"context"
	"database/sql"
	"time"

	"github.com/edigateway/gateway/audit"
)

// AuditSink is a durable audit.Sink writing one row per record to the
// audit_records table of the store's database. Write returns the database's
// error, so a record that cannot be written fails the exchange.
type AuditSink struct {
	db *sql.DB
	w  *batcher
}

const auditInsertSQL = `INSERT INTO audit_records (recorded_at, step, partner, protocol, message_id,
	dedup_key, interchange_key, reference, decision, payload_sha256, disposition, error, incident, actor)
VALUES (coalesce(?1, ` + nowMS + ` * 1000), ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)`

// Write implements audit.Sink. A zero Record.Time is replaced by SQLite's
// clock. Times are kept to the microsecond.
func (a *AuditSink) Write(ctx context.Context, r audit.Record) error {
	var at any // NULL: the database's clock
	if !r.Time.IsZero() {
		at = r.Time.UnixMicro()
	}
	return a.w.write(ctx, "audit", func(ctx context.Context, tx *sql.Tx) error {
		_, err := a.w.exec(ctx, tx, auditInsertSQL,
			at, string(r.Step), r.Partner, r.Protocol, r.MessageID, r.Key, r.InterchangeKey, r.Reference,
			r.Decision, r.PayloadSHA256, r.Disposition, r.Error, r.Incident, r.Actor)
		if err != nil {
			return wrap("audit", err)
		}
		return nil
	})
}

const auditColumns = `recorded_at, step, partner, protocol, message_id, dedup_key, interchange_key, reference,
	decision, payload_sha256, disposition, error, incident, actor`

// byKeySQL selects the records of the transport key ?1 through the index
// on the key's first 12 characters (migration 0005).
const byKeySQL = `substr(dedup_key, 1, 12) = substr(?1, 1, 12) AND dedup_key = ?1`

// ByKey returns the records of a transport key in the order written.
func (a *AuditSink) ByKey(ctx context.Context, key string) ([]audit.Record, error) {
	return a.query(ctx, `SELECT `+auditColumns+` FROM audit_records WHERE `+byKeySQL+` ORDER BY id`, key)
}

// ByMessage returns the records of a partner's message id in the order
// written.
func (a *AuditSink) ByMessage(ctx context.Context, partner, messageID string) ([]audit.Record, error) {
	return a.query(ctx, `SELECT `+auditColumns+` FROM audit_records WHERE partner = ? AND message_id = ? ORDER BY id`,
		partner, messageID)
}

func (a *AuditSink) query(ctx context.Context, q string, args ...any) ([]audit.Record, error) {
	rows, err := a.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, wrap("audit read", err)
	}
	defer rows.Close()
	var out []audit.Record
	for rows.Next() {
		var (
			r    audit.Record
			at   int64
			step string
		)
		if err := rows.Scan(&at, &step, &r.Partner, &r.Protocol, &r.MessageID, &r.Key, &r.InterchangeKey,
			&r.Reference, &r.Decision, &r.PayloadSHA256, &r.Disposition, &r.Error, &r.Incident, &r.Actor); err != nil {
			return nil, wrap("audit read", err)
		}
		r.Time, r.Step = time.UnixMicro(at).UTC(), audit.Step(step)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("audit read", err)
	}
	return out, nil
}

var _ audit.Sink = (*AuditSink)(nil)
