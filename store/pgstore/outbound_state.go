package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edigateway/gateway/outbound"
)

type outboundQueries struct {
	byID, byKey, byMessageID                               string
	upload, chunk, uploadDone, dropChunks, readChunk       string
	payload, insert, orphans                               string
	due, lease, renew, release, posting, retry, awaiting   string
	delivered, failed, settle, cancel, resend, list, stats string
	listPartner, listState                                 string
	purge                                                  string
}

func buildOutboundQueries(schema string) outboundQueries {
	t := pgx.Identifier{schema, "outbound_messages"}.Sanitize()
	chunks := pgx.Identifier{schema, "outbound_chunks"}.Sanitize()
	uploads := pgx.Identifier{schema, "outbound_uploads"}.Sanitize()
	const released = `lease_token = '', leased_until = NULL, updated = now()`
	// The message $1 while the worker's token $2 is its lease.
	const fenced = ` WHERE id = $1 AND state = 'queued' AND $2 <> '' AND lease_token = $2`
	q := outboundQueries{
		byID:        `SELECT ` + outboundColumns + ` FROM ` + t + ` WHERE id = $1`,
		byKey:       `SELECT ` + outboundColumns + ` FROM ` + t + ` WHERE partner = $1 AND idempotency_key = $2 AND idempotency_key <> ''`,
		byMessageID: `SELECT ` + outboundColumns + ` FROM ` + t + ` WHERE partner = $1 AND message_id = $2`,

		upload: `INSERT INTO ` + uploads + ` (payload, started) VALUES ($1, now())`,
		// A chunk is written only while its upload is still registered.
		chunk: `INSERT INTO ` + chunks + ` (payload, seq, data, written)
SELECT $1, $2, $3, now() WHERE EXISTS (SELECT 1 FROM ` + uploads + ` WHERE payload = $1)`,
		uploadDone: `DELETE FROM ` + uploads + ` WHERE payload = $1`,
		dropChunks: `DELETE FROM ` + chunks + ` WHERE payload = $1 AND NOT EXISTS (SELECT 1 FROM ` + t + ` WHERE payload = $1)`,
		readChunk:  `SELECT data FROM ` + chunks + ` WHERE payload = $1 AND seq = $2`,
		payload:    `SELECT payload, size FROM ` + t + ` WHERE id = $1`,
		// ON CONFLICT DO NOTHING covers every unique index: of concurrent
		// submissions of one idempotency key one inserts, the others wait
		// for its commit and find its message.
		insert: `INSERT INTO ` + t + ` (id, partner, protocol, message_id, idempotency_key, source, content_type,
	filename, subject, service, action, conversation_id, payload, size, sha256, state, attempts, next_attempt,
	created, updated, properties)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, 'queued', 0, now(),
	now(), now(), $16)
ON CONFLICT DO NOTHING`,
		orphans: `SELECT payload FROM ` + uploads + ` u
WHERE started < now() - $1::bigint * interval '1 microsecond'
	AND NOT EXISTS (SELECT 1 FROM ` + chunks + ` c
		WHERE c.payload = u.payload AND c.written >= now() - $1::bigint * interval '1 microsecond')
LIMIT 100`,

		// The due messages are walked through outbound_messages_due and
		// locked with SKIP LOCKED; a MATERIALIZED CTE is evaluated once
		// (see the outbox's lease). A due message awaiting its MDN is
		// leased to be sent again: it becomes queued. Each message gets
		// its own random fencing token.
		due: `SELECT id FROM ` + t + `
	WHERE state IN ('queued', 'awaiting-mdn') AND next_attempt <= now() AND (leased_until IS NULL OR leased_until <= now())
	ORDER BY next_attempt, id LIMIT $1
	FOR UPDATE SKIP LOCKED`,
		renew:   `UPDATE ` + t + ` SET leased_until = now() + $3::bigint * interval '1 microsecond', updated = now()` + fenced,
		release: `UPDATE ` + t + ` SET next_attempt = least(next_attempt, now()), ` + released + fenced,
		posting: `UPDATE ` + t + ` SET attempts = attempts + 1,
	sent = CASE WHEN $3 = '' OR sent @> jsonb_build_array($3::text) THEN sent ELSE sent || jsonb_build_array($3::text) END,
	updated = now()` + fenced,
		retry:     `UPDATE ` + t + ` SET state = 'queued', next_attempt = $3, last_error = $4, ` + released + fenced,
		awaiting:  `UPDATE ` + t + ` SET state = 'awaiting-mdn', next_attempt = $3, ` + released + fenced,
		delivered: `UPDATE ` + t + ` SET state = 'delivered', evidence = $3::jsonb, ` + released + fenced,
		failed:    `UPDATE ` + t + ` SET state = 'failed', reason = $3, evidence = $4::jsonb, ` + released + fenced,
		settle: `UPDATE ` + t + ` SET state = CASE WHEN $3::boolean THEN 'delivered' ELSE 'failed' END, reason = $4,
	evidence = $5::jsonb, ` + released + `
WHERE partner = $1 AND message_id = $2 AND state IN ('queued', 'awaiting-mdn')
RETURNING ` + outboundColumns,
		cancel: `UPDATE ` + t + ` SET state = 'cancelled', reason = $2, ` + released + `
WHERE id = $1 AND state IN ('queued', 'awaiting-mdn')`,
		resend: `UPDATE ` + t + ` SET state = 'queued', next_attempt = now(), created = now(), reason = '', evidence = NULL, ` + released + `
WHERE id = $1 AND state IN ('failed', 'cancelled')`,
		// List walks outbound_messages_created (or, for one partner,
		// outbound_messages_partner_created) down from ($3, $5), a
		// page's keyset bound (the last message's created and id; id ''
		// for a bound by time alone), so a page costs the same however
		// deep it is, and messages sharing the last one's created are
		// not skipped.
		list: `SELECT ` + outboundColumns + ` FROM ` + t + `
WHERE $1 = '' AND (created, id) < (coalesce($3::timestamptz, 'infinity'), $5::text)
	AND (cardinality($2::text[]) = 0 OR state = ANY($2::text[]))
ORDER BY created DESC, id DESC LIMIT $4`,
		listPartner: `SELECT ` + outboundColumns + ` FROM ` + t + `
WHERE partner = $1 AND (created, id) < (coalesce($3::timestamptz, 'infinity'), $5::text)
	AND (cardinality($2::text[]) = 0 OR state = ANY($2::text[]))
ORDER BY created DESC, id DESC LIMIT $4`,
		// one state, all partners: down outbound_messages_state_created
		listState: `SELECT ` + outboundColumns + ` FROM ` + t + `
WHERE $1 = '' AND state = $2 AND (created, id) < (coalesce($3::timestamptz, 'infinity'), $5::text)
ORDER BY created DESC, id DESC LIMIT $4`,
		stats: `SELECT partner, protocol, count(*) FILTER (WHERE state = 'queued'),
	min(created) FILTER (WHERE state = 'queued'), count(*) FILTER (WHERE state = 'awaiting-mdn'),
	count(*) FILTER (WHERE state = 'delivered'), count(*) FILTER (WHERE state = 'failed'),
	count(*) FILTER (WHERE state = 'cancelled')
FROM ` + t + ` GROUP BY partner, protocol ORDER BY partner, protocol`,
	}
	q.lease = `WITH due AS MATERIALIZED (` + q.due + `)
UPDATE ` + t + ` AS o SET state = 'queued', leased_until = now() + $2::bigint * interval '1 microsecond',
	lease_token = replace(gen_random_uuid()::text, '-', ''), updated = now()
FROM due WHERE o.id = due.id
RETURNING ` + prefixed("o.", outboundColumns)
	q.purge = buildPurgeQuery(schema)
	return q
}

// LeaseQueryPlan returns PostgreSQL's plan of the query that picks the due
// messages for Lease (for tests and operators checking the due index).
func (o *Outbound) LeaseQueryPlan(ctx context.Context) (string, error) {
	rows, err := o.pool.Query(ctx, `EXPLAIN `+strings.Replace(o.q.due, "$1", "1", 1))
	if err != nil {
		return "", wrap("outbound plan", err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", wrap("outbound plan", err)
	}
	return strings.Join(lines, "\n"), nil
}

// Lease implements outbound.Store.
func (o *Outbound) Lease(ctx context.Context, limit int, lease time.Duration) ([]outbound.Message, error) {
	if limit <= 0 {
		return nil, nil
	}
	out, err := o.query(ctx, "lease", o.q.lease, limit, ceilUS(lease))
	if err != nil {
		return nil, err
	}
	// RETURNING has no order of its own.
	slices.SortFunc(out, func(a, b outbound.Message) int {
		if c := a.NextAttempt.Compare(b.NextAttempt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// Renew implements outbound.Store: the lease runs on the database clock.
func (o *Outbound) Renew(ctx context.Context, id, token string, lease time.Duration) error {
	return o.fenced(ctx, "renew", id, o.q.renew, id, token, ceilUS(lease))
}

// Release implements outbound.Store.
func (o *Outbound) Release(ctx context.Context, id, token string) error {
	return o.fenced(ctx, "release", id, o.q.release, id, token)
}

// Posting implements outbound.Store.
func (o *Outbound) Posting(ctx context.Context, id, token, digest string) error {
	return o.fenced(ctx, "posting", id, o.q.posting, id, token, digest)
}

// Retry implements outbound.Store.
func (o *Outbound) Retry(ctx context.Context, id, token string, next time.Time, lastErr string) error {
	return o.fenced(ctx, "retry", id, o.q.retry, id, token, next, lastErr)
}

// Awaiting implements outbound.Store.
func (o *Outbound) Awaiting(ctx context.Context, id, token string, deadline time.Time) error {
	return o.fenced(ctx, "awaiting", id, o.q.awaiting, id, token, deadline)
}

// Delivered implements outbound.Store.
func (o *Outbound) Delivered(ctx context.Context, id, token string, ev *outbound.Evidence) error {
	evj, err := evidenceJSON(ev)
	if err != nil {
		return err
	}
	return o.fenced(ctx, "delivered", id, o.q.delivered, id, token, evj)
}

// Failed implements outbound.Store.
func (o *Outbound) Failed(ctx context.Context, id, token, reason string, ev *outbound.Evidence) error {
	evj, err := evidenceJSON(ev)
	if err != nil {
		return err
	}
	return o.fenced(ctx, "failed", id, o.q.failed, id, token, reason, evj)
}

// fenced runs an update of a message leased under the caller's token; when
// it changes nothing, the message is unknown (ErrNotFound) or the token is
// no longer its lease (ErrLeaseLost).
func (o *Outbound) fenced(ctx context.Context, op, id, query string, args ...any) error {
	tag, err := o.pool.Exec(ctx, query, args...)
	if err != nil {
		return wrap("outbound "+op, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	if _, err := o.Get(ctx, id); err != nil {
		return err
	}
	return fmt.Errorf("pgstore: outbound %s %s: %w", op, id, outbound.ErrLeaseLost)
}

// Settle implements outbound.Store.
func (o *Outbound) Settle(ctx context.Context, partner, messageID string, delivered bool, reason string,
	ev *outbound.Evidence) (outbound.Message, bool, error) {
	evj, err := evidenceJSON(ev)
	if err != nil {
		return outbound.Message{}, false, err
	}
	ms, err := o.query(ctx, "settle", o.q.settle, partner, messageID, delivered, reason, evj)
	if err != nil {
		return outbound.Message{}, false, err
	}
	if len(ms) == 1 {
		return ms[0], true, nil
	}
	m, err := o.FindByMessageID(ctx, partner, messageID)
	if err != nil {
		return outbound.Message{}, false, err
	}
	return m, false, nil
}

// Cancel implements outbound.Store.
func (o *Outbound) Cancel(ctx context.Context, id, reason string) error {
	tag, err := o.pool.Exec(ctx, o.q.cancel, id, reason)
	if err != nil {
		return wrap("outbound cancel", err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	if _, err := o.Get(ctx, id); err != nil {
		return err
	}
	return fmt.Errorf("pgstore: outbound cancel %s: %w", id, outbound.ErrFinal)
}

// Resend implements outbound.Store.
func (o *Outbound) Resend(ctx context.Context, id string) error {
	tag, err := o.pool.Exec(ctx, o.q.resend, id)
	if err != nil {
		return wrap("outbound resend", err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	m, err := o.Get(ctx, id)
	if err != nil {
		return err
	}
	if m.State == outbound.Delivered {
		return fmt.Errorf("pgstore: outbound resend %s: delivered: %w", id, outbound.ErrFinal)
	}
	return fmt.Errorf("pgstore: outbound resend %s: %w", id, outbound.ErrNotFinal)
}

// Get implements outbound.Store.
func (o *Outbound) Get(ctx context.Context, id string) (outbound.Message, error) {
	return o.one(ctx, "get", o.q.byID, id)
}

// FindByMessageID implements outbound.Store.
func (o *Outbound) FindByMessageID(ctx context.Context, partner, messageID string) (outbound.Message, error) {
	return o.one(ctx, "find", o.q.byMessageID, partner, messageID)
}

func (o *Outbound) byKey(ctx context.Context, partner, key string) (outbound.Message, error) {
	return o.one(ctx, "submit", o.q.byKey, partner, key)
}

// List implements outbound.Store.
func (o *Outbound) List(ctx context.Context, f outbound.Filter) ([]outbound.Message, error) {
	q, args := o.listQuery(f)
	return o.query(ctx, "list", q, args...)
}

// ListQueryPlan returns PostgreSQL's plan of the query List runs for f
// (for tests and operators checking the list indexes).
func (o *Outbound) ListQueryPlan(ctx context.Context, f outbound.Filter) (string, error) {
	q, args := o.listQuery(f)
	rows, err := o.pool.Query(ctx, `EXPLAIN `+q, args...)
	if err != nil {
		return "", wrap("outbound plan", err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", wrap("outbound plan", err)
	}
	return strings.Join(lines, "\n"), nil
}

// listQuery is List's query for f and its arguments: one state of all
// partners walks outbound_messages_state_created.
func (o *Outbound) listQuery(f outbound.Filter) (string, []any) {
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	states := make([]string, 0, len(f.States))
	for _, s := range f.States {
		states = append(states, string(s))
	}
	// Every id sorts after '': (before, '') bounds by time alone.
	var (
		before   *time.Time
		beforeID string
	)
	if !f.Before.IsZero() {
		before, beforeID = &f.Before, f.BeforeID
	}
	if f.Partner == "" && len(states) == 1 {
		return o.q.listState, []any{"", states[0], before, limit, beforeID}
	}
	q := o.q.list
	if f.Partner != "" {
		q = o.q.listPartner
	}
	return q, []any{f.Partner, states, before, limit, beforeID}
}

// Stats implements outbound.Store.
func (o *Outbound) Stats(ctx context.Context) ([]outbound.Stats, error) {
	rows, err := o.pool.Query(ctx, o.q.stats)
	if err != nil {
		return nil, wrap("outbound stats", err)
	}
	defer rows.Close()
	var out []outbound.Stats
	for rows.Next() {
		var (
			st       outbound.Stats
			protocol string
			oldest   *time.Time
		)
		if err := rows.Scan(&st.Partner, &protocol, &st.Queued, &oldest, &st.Awaiting, &st.Delivered, &st.Failed,
			&st.Cancelled); err != nil {
			return nil, wrap("outbound stats", err)
		}
		st.Protocol = outbound.Protocol(protocol)
		if oldest != nil {
			st.OldestQueued = oldest.UTC()
		}
		out = append(out, st)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("outbound stats", err)
	}
	return out, nil
}

func (o *Outbound) one(ctx context.Context, op, query string, args ...any) (outbound.Message, error) {
	ms, err := o.query(ctx, op, query, args...)
	if err != nil {
		return outbound.Message{}, err
	}
	if len(ms) == 0 {
		return outbound.Message{}, fmt.Errorf("pgstore: outbound %s: %w", op, outbound.ErrNotFound)
	}
	return ms[0], nil
}

func (o *Outbound) query(ctx context.Context, op, query string, args ...any) ([]outbound.Message, error) {
	rows, err := o.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, wrap("outbound "+op, err)
	}
	defer rows.Close()
	var out []outbound.Message
	for rows.Next() {
		m, err := scanOutbound(rows)
		if err != nil {
			return nil, wrap("outbound "+op, err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("outbound "+op, err)
	}
	return out, nil
}

func scanOutbound(rows pgx.Rows) (outbound.Message, error) {
	var (
		m               outbound.Message
		protocol, state string
		props           string
		sent, evidence  []byte
		leasedUntil     *time.Time
	)
	if err := rows.Scan(&m.ID, &m.Partner, &protocol, &m.MessageID, &m.IdempotencyKey, &m.Source, &m.ContentType,
		&m.Filename, &m.Subject, &m.Service, &m.Action, &m.ConversationID, &m.Size, &m.SHA256, &state, &m.Attempts,
		&m.NextAttempt, &m.LastError, &m.Reason, &sent, &evidence, &m.LeaseToken, &leasedUntil, &m.Created,
		&m.Updated, &props); err != nil {
		return outbound.Message{}, err
	}
	m.Protocol, m.State = outbound.Protocol(protocol), outbound.State(state)
	m.NextAttempt, m.Created, m.Updated = m.NextAttempt.UTC(), m.Created.UTC(), m.Updated.UTC()
	if m.LeaseToken != "" && leasedUntil != nil {
		m.LeasedUntil = leasedUntil.UTC()
	}
	if err := json.Unmarshal(sent, &m.Sent); err != nil {
		return outbound.Message{}, fmt.Errorf("sent of %s: %w", m.ID, err)
	}
	if len(m.Sent) == 0 {
		m.Sent = nil
	}
	var err error
	if m.Properties, err = outbound.DecodeProperties(props); err != nil {
		return outbound.Message{}, fmt.Errorf("properties of %s: %w", m.ID, err)
	}
	if evidence != nil {
		m.Evidence = new(outbound.Evidence)
		if err := json.Unmarshal(evidence, m.Evidence); err != nil {
			return outbound.Message{}, fmt.Errorf("evidence of %s: %w", m.ID, err)
		}
	}
	return m, nil
}

// evidenceJSON encodes ev for the evidence column (nil: NULL).
func evidenceJSON(ev *outbound.Evidence) (*string, error) {
	if ev == nil {
		return nil, nil
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("pgstore: outbound evidence: %w", err)
	}
	s := string(b)
	return &s, nil
}

var _ outbound.Store = (*Outbound)(nil)
