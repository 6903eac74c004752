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
		add("incident = $%d", q.Incident)
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
	return a.query(ctx, sql+fmt.Sprintf(` ORDER BY %s LIMIT $%d`, order, len(args)), args...)
}

var _ audit.Reader = (*AuditSink)(nil)
