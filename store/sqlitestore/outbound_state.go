package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/edigateway/gateway/outbound"
)

// leaseReleased is the SET clause that ends a lease.
const leaseReleased = `lease_token = '', leased_until = 0, updated = ` + nowMS

// obFenced selects the message ?1 while the worker's token ?2 is its lease.
const obFenced = ` WHERE id = ?1 AND state = 'queued' AND ?2 <> '' AND lease_token = ?2`

const (
	// obLeaseSQL is one statement: SQLite runs it under its write lock, so
	// two workers (or processes) never lease the same message. Each message
	// gets its own random fencing token. The
	// subquery walks outbound_messages_due from its start and stops after
	// limit due messages, or at the first one not due yet. A due message
	// awaiting its MDN is leased to be sent again: it becomes queued.
	obLeaseSQL = `UPDATE outbound_messages SET state = 'queued', leased_until = ` + nowMS + ` + ?2,
	lease_token = lower(hex(randomblob(12))), updated = ` + nowMS + `
WHERE id IN (` + obDueSQL + `)
RETURNING ` + outboundColumns
	obDueSQL = `SELECT id FROM outbound_messages
	WHERE state IN ('queued', 'awaiting-mdn') AND next_attempt <= ` + nowMS + ` AND leased_until <= ` + nowMS + `
	ORDER BY next_attempt, id LIMIT ?1`

	obRenewSQL   = `UPDATE outbound_messages SET leased_until = ` + nowMS + ` + ?3, updated = ` + nowMS + obFenced
	obReleaseSQL = `UPDATE outbound_messages SET next_attempt = min(next_attempt, ` + nowMS + `), ` + leaseReleased + obFenced
	obPostingSQL = `UPDATE outbound_messages SET attempts = attempts + 1,
	sent = CASE WHEN ?3 = '' OR EXISTS (SELECT 1 FROM json_each(sent) WHERE value = ?3) THEN sent
		ELSE json_insert(sent, '$[#]', ?3) END,
	updated = ` + nowMS + obFenced
	obRetrySQL = `UPDATE outbound_messages SET state = 'queued', next_attempt = ?3, last_error = ?4, ` +
		leaseReleased + obFenced
	obAwaitingSQL  = `UPDATE outbound_messages SET state = 'awaiting-mdn', next_attempt = ?3, ` + leaseReleased + obFenced
	obDeliveredSQL = `UPDATE outbound_messages SET state = 'delivered', evidence = ?3, ` + leaseReleased + obFenced
	obFailedSQL    = `UPDATE outbound_messages SET state = 'failed', reason = ?3, evidence = ?4, ` + leaseReleased + obFenced

	obSettleSQL = `UPDATE outbound_messages SET state = CASE WHEN ?3 THEN 'delivered' ELSE 'failed' END, reason = ?4,
	evidence = ?5, ` + leaseReleased + `
WHERE partner = ?1 AND message_id = ?2 AND state IN ('queued', 'awaiting-mdn')
RETURNING ` + outboundColumns
	obCancelSQL = `UPDATE outbound_messages SET state = 'cancelled', reason = ?2, ` + leaseReleased + `
WHERE id = ?1 AND state IN ('queued', 'awaiting-mdn')`
	obResendSQL = `UPDATE outbound_messages SET state = 'queued', next_attempt = ` + nowMS + `, created = ` + nowMS + `, reason = '',
	evidence = NULL, ` + leaseReleased + `
WHERE id = ?1 AND state IN ('failed', 'cancelled')`

	// List walks outbound_messages_created (or, for one partner,
	// outbound_messages_partner_created) down from (?3, ?5), a page's
	// keyset bound (the last message's created and id; id '' for a bound
	// by time alone), so a page costs the same however deep it is, and
	// messages sharing the last one's created are not skipped. ?2: a JSON
	// array of states (empty: all).
	obListSQL = `SELECT ` + outboundColumns + ` FROM outbound_messages
WHERE ?1 = '' AND (created, id) < (?3, ?5) AND (?2 = '[]' OR state IN (SELECT value FROM json_each(?2)))
ORDER BY created DESC, id DESC LIMIT ?4`
	obListPartnerSQL = `SELECT ` + outboundColumns + ` FROM outbound_messages
WHERE partner = ?1 AND (created, id) < (?3, ?5) AND (?2 = '[]' OR state IN (SELECT value FROM json_each(?2)))
ORDER BY created DESC, id DESC LIMIT ?4`
	// obListStateSQL lists the messages of one state ?2 (all partners)
	// down outbound_messages_state_created.
	obListStateSQL = `SELECT ` + outboundColumns + ` FROM outbound_messages
WHERE ?1 = '' AND state = ?2 AND (created, id) < (?3, ?5)
ORDER BY created DESC, id DESC LIMIT ?4`
	obStatsSQL = `SELECT partner, protocol, count(*) FILTER (WHERE state = 'queued'),
	min(created) FILTER (WHERE state = 'queued'), count(*) FILTER (WHERE state = 'awaiting-mdn'),
	count(*) FILTER (WHERE state = 'delivered'), count(*) FILTER (WHERE state = 'failed'),
	count(*) FILTER (WHERE state = 'cancelled')
FROM outbound_messages GROUP BY partner, protocol ORDER BY partner, protocol`
)

// LeaseQueryPlan returns SQLite's plan (EXPLAIN QUERY PLAN, one detail a
// line) of the statement Lease runs (for tests and operators checking the
// due index).
func (o *Outbound) LeaseQueryPlan(ctx context.Context) (string, error) {
	rows, err := o.db.QueryContext(ctx, `EXPLAIN QUERY PLAN `+obLeaseSQL, 1, 1000)
	if err != nil {
		return "", wrap("outbound plan", err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			return "", wrap("outbound plan", err)
		}
		b.WriteString(detail + "\n")
	}
	if err := rows.Err(); err != nil {
		return "", wrap("outbound plan", err)
	}
	return b.String(), nil
}

// Lease implements outbound.Store.
func (o *Outbound) Lease(ctx context.Context, limit int, lease time.Duration) ([]outbound.Message, error) {
	if limit <= 0 {
		return nil, nil
	}
	out, err := o.query(ctx, "lease", obLeaseSQL, limit, ceilMS(lease))
	if err != nil {
		return nil, err
	}
	sortDue(out)
	return out, nil
}

// Renew implements outbound.Store: the lease runs on SQLite's clock.
func (o *Outbound) Renew(ctx context.Context, id, token string, lease time.Duration) error {
	return o.fenced(ctx, "renew", id, obRenewSQL, id, token, ceilMS(lease))
}

// Release implements outbound.Store.
func (o *Outbound) Release(ctx context.Context, id, token string) error {
	return o.fenced(ctx, "release", id, obReleaseSQL, id, token)
}

// Posting implements outbound.Store.
func (o *Outbound) Posting(ctx context.Context, id, token, digest string) error {
	return o.fenced(ctx, "posting", id, obPostingSQL, id, token, digest)
}

// Retry implements outbound.Store.
func (o *Outbound) Retry(ctx context.Context, id, token string, next time.Time, lastErr string) error {
	return o.fenced(ctx, "retry", id, obRetrySQL, id, token, next.UnixMilli(), lastErr)
}

// Awaiting implements outbound.Store.
func (o *Outbound) Awaiting(ctx context.Context, id, token string, deadline time.Time) error {
	return o.fenced(ctx, "awaiting", id, obAwaitingSQL, id, token, deadline.UnixMilli())
}

// Delivered implements outbound.Store.
func (o *Outbound) Delivered(ctx context.Context, id, token string, ev *outbound.Evidence) error {
	evj, err := evidenceJSON(ev)
	if err != nil {
		return err
	}
	return o.fenced(ctx, "delivered", id, obDeliveredSQL, id, token, evj)
}

// Failed implements outbound.Store.
func (o *Outbound) Failed(ctx context.Context, id, token, reason string, ev *outbound.Evidence) error {
	evj, err := evidenceJSON(ev)
	if err != nil {
		return err
	}
	return o.fenced(ctx, "failed", id, obFailedSQL, id, token, reason, evj)
}

// fenced runs an update of a message leased under the caller's token; when
// it changes nothing, the message is unknown (ErrNotFound) or the token is
// no longer its lease (ErrLeaseLost).
func (o *Outbound) fenced(ctx context.Context, op, id, query string, args ...any) error {
	n, err := o.exec(ctx, op, query, args...)
	if err != nil || n == 1 {
		return err
	}
	if _, err := o.Get(ctx, id); err != nil {
		return err
	}
	return fmt.Errorf("sqlitestore: outbound %s %s: %w", op, id, outbound.ErrLeaseLost)
}

// Settle implements outbound.Store.
func (o *Outbound) Settle(ctx context.Context, partner, messageID string, delivered bool, reason string,
	ev *outbound.Evidence) (outbound.Message, bool, error) {
	evj, err := evidenceJSON(ev)
	if err != nil {
		return outbound.Message{}, false, err
	}
	ms, err := o.query(ctx, "settle", obSettleSQL, partner, messageID, delivered, reason, evj)
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
	n, err := o.exec(ctx, "cancel", obCancelSQL, id, reason)
	if err != nil || n == 1 {
		return err
	}
	if _, err := o.Get(ctx, id); err != nil {
		return err
	}
	return fmt.Errorf("sqlitestore: outbound cancel %s: %w", id, outbound.ErrFinal)
}

// Resend implements outbound.Store.
func (o *Outbound) Resend(ctx context.Context, id string) error {
	n, err := o.exec(ctx, "resend", obResendSQL, id)
	if err != nil || n == 1 {
		return err
	}
	m, err := o.Get(ctx, id)
	if err != nil {
		return err
	}
	if m.State == outbound.Delivered {
		return fmt.Errorf("sqlitestore: outbound resend %s: delivered: %w", id, outbound.ErrFinal)
	}
	return fmt.Errorf("sqlitestore: outbound resend %s: %w", id, outbound.ErrNotFinal)
}

// Get implements outbound.Store.
func (o *Outbound) Get(ctx context.Context, id string) (outbound.Message, error) {
	return o.one(ctx, "get", obByIDSQL, id)
}

// FindByMessageID implements outbound.Store.
func (o *Outbound) FindByMessageID(ctx context.Context, partner, messageID string) (outbound.Message, error) {
	return o.one(ctx, "find", obByMessageIDSQL, partner, messageID)
}

func (o *Outbound) byKey(ctx context.Context, partner, key string) (outbound.Message, error) {
	return o.one(ctx, "submit", obByKeySQL, partner, key)
}

// List implements outbound.Store.
func (o *Outbound) List(ctx context.Context, f outbound.Filter) ([]outbound.Message, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	states := make([]string, 0, len(f.States))
	for _, s := range f.States {
		states = append(states, string(s))
	}
	sj, err := json.Marshal(states)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: outbound list: %w", err)
	}
	// Every id sorts after '': (before, '') bounds by time alone.
	before, beforeID := int64(math.MaxInt64), ""
	if !f.Before.IsZero() {
		before, beforeID = f.Before.UnixMilli(), f.BeforeID
	}
	if f.Partner == "" && len(f.States) == 1 {
		return o.query(ctx, "list", obListStateSQL, "", string(f.States[0]), before, limit, beforeID)
	}
	q := obListSQL
	if f.Partner != "" {
		q = obListPartnerSQL
	}
	return o.query(ctx, "list", q, f.Partner, string(sj), before, limit, beforeID)
}

// Stats implements outbound.Store.
func (o *Outbound) Stats(ctx context.Context) ([]outbound.Stats, error) {
	rows, err := o.db.QueryContext(ctx, obStatsSQL)
	if err != nil {
		return nil, wrap("outbound stats", err)
	}
	defer rows.Close()
	var out []outbound.Stats
	for rows.Next() {
		var (
			st       outbound.Stats
			protocol string
			oldest   sql.NullInt64
		)
		if err := rows.Scan(&st.Partner, &protocol, &st.Queued, &oldest, &st.Awaiting, &st.Delivered, &st.Failed,
			&st.Cancelled); err != nil {
			return nil, wrap("outbound stats", err)
		}
		st.Protocol = outbound.Protocol(protocol)
		if oldest.Valid {
			st.OldestQueued = fromMS(oldest.Int64)
		}
		out = append(out, st)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("outbound stats", err)
	}
	return out, nil
}

func (o *Outbound) exec(ctx context.Context, op, query string, args ...any) (int64, error) {
	res, err := o.db.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, wrap("outbound "+op, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, wrap("outbound "+op, err)
	}
	return n, nil
}

func (o *Outbound) one(ctx context.Context, op, query string, args ...any) (outbound.Message, error) {
	ms, err := o.query(ctx, op, query, args...)
	if err != nil {
		return outbound.Message{}, err
	}
	if len(ms) == 0 {
		return outbound.Message{}, fmt.Errorf("sqlitestore: outbound %s: %w", op, outbound.ErrNotFound)
	}
	return ms[0], nil
}

func (o *Outbound) query(ctx context.Context, op, query string, args ...any) ([]outbound.Message, error) {
	rows, err := o.db.QueryContext(ctx, query, args...)
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

func scanOutbound(rows *sql.Rows) (outbound.Message, error) {
	var (
		m                                   outbound.Message
		protocol, state, sent, props        string
		evidence                            sql.NullString
		next, leasedUntil, created, updated int64
	)
	if err := rows.Scan(&m.ID, &m.Partner, &protocol, &m.MessageID, &m.IdempotencyKey, &m.Source, &m.ContentType,
		&m.Filename, &m.Subject, &m.Service, &m.Action, &m.ConversationID, &m.Size, &m.SHA256, &state, &m.Attempts,
		&next, &m.LastError, &m.Reason, &sent, &evidence, &m.LeaseToken, &leasedUntil, &created, &updated, &props); err != nil {
		return outbound.Message{}, err
	}
	m.Protocol, m.State = outbound.Protocol(protocol), outbound.State(state)
	m.NextAttempt, m.Created, m.Updated = fromMS(next), fromMS(created), fromMS(updated)
	if m.LeaseToken != "" {
		m.LeasedUntil = fromMS(leasedUntil)
	}
	if err := json.Unmarshal([]byte(sent), &m.Sent); err != nil {
		return outbound.Message{}, fmt.Errorf("sent of %s: %w", m.ID, err)
	}
	if len(m.Sent) == 0 {
		m.Sent = nil
	}
	var err error
	if m.Properties, err = outbound.DecodeProperties(props); err != nil {
		return outbound.Message{}, fmt.Errorf("properties of %s: %w", m.ID, err)
	}
	if evidence.Valid {
		m.Evidence = new(outbound.Evidence)
		if err := json.Unmarshal([]byte(evidence.String), m.Evidence); err != nil {
			return outbound.Message{}, fmt.Errorf("evidence of %s: %w", m.ID, err)
		}
	}
	return m, nil
}

// evidenceJSON encodes ev for the evidence column (nil: NULL).
func evidenceJSON(ev *outbound.Evidence) (any, error) {
	if ev == nil {
		return nil, nil
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: outbound evidence: %w", err)
	}
	return string(b), nil
}

// sortDue orders leased messages as Lease hands them out (RETURNING has no
// order of its own).
func sortDue(ms []outbound.Message) {
	slices.SortFunc(ms, func(a, b outbound.Message) int {
		if c := a.NextAttempt.Compare(b.NextAttempt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}

var _ outbound.Store = (*Outbound)(nil)
