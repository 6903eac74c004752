package pgstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/edigateway/gateway/audit"
)

// Query implements audit.Reader: the records selected by q in the order
// written.
func (a *AuditSink) Query(ctx context.Context, q audit.Query) ([]audit.Record, error) {
	query, args := a.querySQL(q)
	return a.query(ctx, query, args...)
}

// querySQL is the statement of Query and its arguments.
func (a *AuditSink) querySQL(q audit.Query) (string, []any) {
	var where []string
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if q.Partner != "" {
		add("partner = $%d", q.Partner)
	}
	if q.MessageID != "" {
		add("message_id = $%d", q.MessageID)
	}
	if q.Key != "" {
		add("dedup_key = $%d", q.Key)
	}
	if q.Reference != "" {
		add("reference = $%d", q.Reference)
	}
	if q.Incident != "" {
		// The index on incident is partial (WHERE incident <> '', migration
		// 0003): a generic plan (which PostgreSQL may keep for a prepared
		// statement) uses it only when the query repeats its condition.
		add("incident = $%d AND incident <> ''", q.Incident)
	}
	if !q.From.IsZero() {
		add("recorded_at >= $%d", q.From)
	}
	if !q.To.IsZero() {
		add("recorded_at < $%d", q.To)
	}
	limit := q.Limit
	if limit <= 0 {
		limit = audit.DefaultQueryLimit
	}
	sql := `SELECT ` + auditColumns + ` FROM ` + a.table
	if len(where) > 0 {
		sql += ` WHERE ` + strings.Join(where, " AND ")
	}
	args = append(args, limit)
	order := "id"
	if q.Newest {
		order = "id DESC"
	}
	return sql + fmt.Sprintf(` ORDER BY %s LIMIT $%d`, order, len(args)), args
}

var _ audit.Reader = (*AuditSink)(nil)
