package sqlitestore

import (
	"context"
	"strconv"
	"strings"

	"github.com/edigateway/gateway/audit"
)

// Query implements audit.Reader: the records selected by q in the order
// written.
func (a *AuditSink) Query(ctx context.Context, q audit.Query) ([]audit.Record, error) {
	query, args := auditQuerySQL(q)
	return a.query(ctx, query, args...)
}

// auditQuerySQL is the statement of Query and its arguments.
func auditQuerySQL(q audit.Query) (string, []any) {
	var where []string
	var args []any
	// Numbered parameters (?NNN) throughout: the key's condition uses its
	// parameter twice.
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, strings.ReplaceAll(cond, "?", "?"+strconv.Itoa(len(args))))
	}
	if q.Partner != "" {
		add("partner = ?", q.Partner)
	}
	if q.MessageID != "" {
		add("message_id = ?", q.MessageID)
	}
	if q.Key != "" {
		add("substr(dedup_key, 1, 12) = substr(?, 1, 12) AND dedup_key = ?", q.Key)
	}
	if q.Reference != "" {
		add("reference = ?", q.Reference)
	}
	if q.Incident != "" {
		// The index on incident is partial (WHERE incident <> '', migration
		// 0003): SQLite uses it only when the query repeats its condition.
		add("incident = ? AND incident <> ''", q.Incident)
	}
	if !q.From.IsZero() {
		add("recorded_at >= ?", q.From.UnixMicro())
	}
	if !q.To.IsZero() {
		add("recorded_at < ?", q.To.UnixMicro())
	}
	limit := q.Limit
	if limit <= 0 {
		limit = audit.DefaultQueryLimit
	}
	sql := `SELECT ` + auditColumns + ` FROM audit_records`
	if len(where) > 0 {
		sql += ` WHERE ` + strings.Join(where, " AND ")
	}
	args = append(args, limit)
	n := strconv.Itoa(len(args))
	order := ` ORDER BY id LIMIT ?` + n
	if q.Newest {
		order = ` ORDER BY id DESC LIMIT ?` + n
	}
	return sql + order, args
}

var _ audit.Reader = (*AuditSink)(nil)
