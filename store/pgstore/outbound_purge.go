package pgstore

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// purgeBatch bounds the messages one purge statement deletes.
const purgeBatch = 100

// buildPurgeQuery deletes up to $2 of the oldest final messages updated
// before $1 (from outbound_messages_final_updated; rows another
// transaction holds are skipped) and returns their payloads, registered as
// uploads started at the epoch in the same statement: should the process
// die before their chunks are gone, PurgeOrphanPayloads removes them.
func buildPurgeQuery(schema string) string {
	t := pgx.Identifier{schema, "outbound_messages"}.Sanitize()
	uploads := pgx.Identifier{schema, "outbound_uploads"}.Sanitize()
	return `WITH gone AS (
	DELETE FROM ` + t + ` WHERE id IN (
		SELECT id FROM ` + t + `
		WHERE state IN ('delivered', 'failed', 'cancelled') AND updated < $1
		ORDER BY updated, id LIMIT $2 FOR UPDATE SKIP LOCKED)
	RETURNING payload
), tomb AS (
	INSERT INTO ` + uploads + ` (payload, started) SELECT payload, 'epoch' FROM gone ON CONFLICT DO NOTHING
)
SELECT payload FROM gone`
}

// Purge implements outbound.Store: up to limit final messages last updated
// before before are deleted, at most purgeBatch per statement, then each
// one's payload chunks in a transaction of their own.
func (o *Outbound) Purge(ctx context.Context, before time.Time, limit int) (int, error) {
	total := 0
	for total < limit {
		n := min(limit-total, purgeBatch)
		rows, err := o.pool.Query(ctx, o.q.purge, before, n)
		if err != nil {
			return total, wrap("outbound purge", err)
		}
		pids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return total, wrap("outbound purge", err)
		}
		total += len(pids)
		for _, pid := range pids {
			if _, err := o.dropUpload(ctx, pid, false); err != nil {
				return total, err
			}
		}
		if len(pids) < n {
			break
		}
	}
	return total, nil
}

// PurgeQueryPlan returns PostgreSQL's plan of Purge's statement for the
// bound before (for tests and operators checking its index); it is not
// run.
func (o *Outbound) PurgeQueryPlan(ctx context.Context, before time.Time) (string, error) {
	rows, err := o.pool.Query(ctx, `EXPLAIN `+o.q.purge, before, purgeBatch)
	if err != nil {
		return "", wrap("outbound plan", err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", wrap("outbound plan", err)
	}
	return strings.Join(lines, "\n"), nil
}
