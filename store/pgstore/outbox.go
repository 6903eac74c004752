package pgstore

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/edigateway/gateway/outbox"
)

//go:embed migrations/outbox/*.sql
var outboxMigrations embed.FS

// OutboxComponent is the name under which the outbox's migrations are
// recorded.
const OutboxComponent = "outbox"

const outboxColumns = `id, partner, message_id, url, header, body, attempts, next_attempt, last_error, created, state`

type outboxQueries struct {
	enqueue, lease, delivered, retry, giveUp, get, pending string
	listPending, retryNow, renew, release                  string
}

func buildOutboxQueries(schema string) outboxQueries {
	t := pgx.Identifier{schema, "outbox_deliveries"}.Sanitize()
	return outboxQueries{
		enqueue: `INSERT INTO ` + t + ` (id, partner, message_id, url, header, body, state, attempts, next_attempt,
	created, updated)
VALUES ($1, $2, $3, $4, $5::jsonb, $6, 'pending', 0, now(), coalesce($7::timestamptz, now()), now())`,
		// The due deliveries are locked with SKIP LOCKED, so concurrent
		// workers (of one gateway or of a fleet) each get other deliveries.
		// The locking query is a MATERIALIZED CTE, evaluated once: as an
		// IN (subquery) the planner may rescan it and lock more than limit
		// rows.
		lease: `WITH due AS MATERIALIZED (
	SELECT id FROM ` + t + `
	WHERE state = 'pending' AND next_attempt <= now() AND (leased_until IS NULL OR leased_until <= now())
	ORDER BY next_attempt, id LIMIT $1
	FOR UPDATE SKIP LOCKED)
UPDATE ` + t + ` AS o SET leased_until = now() + $2::bigint * interval '1 microsecond', lease_token = $3,
	updated = now()
FROM due WHERE o.id = due.id
RETURNING ` + prefixed("o.", outboxColumns),
		// The outcomes are fenced: $2 is the lease token the worker holds
		// (empty: an operator, unchecked).
		delivered: `UPDATE ` + t + ` SET state = 'delivered', attempts = attempts + 1, last_error = '',
	leased_until = NULL, lease_token = '', updated = now()
WHERE id = $1 AND state = 'pending' AND ($2 = '' OR lease_token = $2)`,
		retry: `UPDATE ` + t + ` SET attempts = attempts + 1, next_attempt = $3, last_error = $4,
	leased_until = NULL, lease_token = '', updated = now()
WHERE id = $1 AND state = 'pending' AND ($2 = '' OR lease_token = $2)`,
		giveUp: `UPDATE ` + t + ` SET state = 'gave-up', attempts = attempts + 1, last_error = $3,
	leased_until = NULL, lease_token = '', updated = now()
WHERE id = $1 AND state = 'pending' AND ($2 = '' OR lease_token = $2)`,
		renew: `UPDATE ` + t + ` SET leased_until = now() + $3::bigint * interval '1 microsecond', updated = now()
WHERE id = $1 AND state = 'pending' AND $2 <> '' AND lease_token = $2`,
		release: `UPDATE ` + t + ` SET leased_until = NULL, lease_token = '', updated = now()
WHERE id = $1 AND state = 'pending' AND $2 <> '' AND lease_token = $2`,
		get:         `SELECT ` + outboxColumns + ` FROM ` + t + ` WHERE id = $1`,
		pending:     `SELECT count(*), min(created) FROM ` + t + ` WHERE state = 'pending'`,
		listPending: `SELECT ` + outboxColumns + ` FROM ` + t + ` WHERE state = 'pending' ORDER BY next_attempt, id LIMIT $1`,
		retryNow: `UPDATE ` + t + ` SET next_attempt = least(next_attempt, now()), updated = now()
WHERE id = $1 AND state = 'pending'`,
	}
}

// Outbox is the durable outbox.Store in the store's schema. Enqueue makes a
// delivery due at once by the database clock, leases run on that clock too,
// and the due time of a Retry is the caller's.
type Outbox struct {
	pool *pgxpool.Pool
	q    outboxQueries
}

// Outbox returns the outbox of this database.
func (s *Store) Outbox() outbox.Store { return s.outbox }

// Enqueue implements outbox.Store. A zero Created is replaced by the
// database clock; Attempts, NextAttempt and LastError of d are ignored.
func (o *Outbox) Enqueue(ctx context.Context, d outbox.Delivery) error {
	if d.ID == "" {
		return errors.New("pgstore: outbox enqueue: empty delivery id")
	}
	if d.URL == "" {
		return fmt.Errorf("pgstore: outbox enqueue %s: empty URL", d.ID)
	}
	header, err := json.Marshal(headerOrEmpty(d.Header))
	if err != nil {
		return fmt.Errorf("pgstore: outbox enqueue %s: header: %w", d.ID, err)
	}
	var created *time.Time // NULL: the database clock
	if !d.Created.IsZero() {
		created = &d.Created
	}
	body := d.Body
	if body == nil {
		body = []byte{}
	}
	if _, err := o.pool.Exec(ctx, o.q.enqueue, d.ID, d.Partner, d.MessageID, d.URL, string(header), body, created); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" {
			return fmt.Errorf("pgstore: outbox enqueue: delivery %s already exists", d.ID)
		}
		return wrap("outbox enqueue", err)
	}
	return nil
}

// Lease implements outbox.Store: up to limit due pending deliveries, oldest
// due first, each held for lease.
func (o *Outbox) Lease(ctx context.Context, limit int, lease time.Duration) ([]outbox.Delivery, error) {
	if limit <= 0 {
		return nil, nil
	}
	token := outbox.NewLeaseToken()
	rows, err := o.pool.Query(ctx, o.q.lease, limit, ceilUS(lease), token)
	if err != nil {
		return nil, wrap("outbox lease", err)
	}
	out, _, err := scanDeliveries(rows)
	if err != nil {
		return nil, wrap("outbox lease", err)
	}
	for i := range out {
		out[i].LeaseToken = token
	}
	// RETURNING has no order of its own.
	outbox.SortDue(out)
	return out, nil
}

// Renew implements outbox.Store: the lease runs on the database clock.
func (o *Outbox) Renew(ctx context.Context, id, token string, lease time.Duration) error {
	return o.finish(ctx, "renew", id, o.q.renew, id, token, ceilUS(lease))
}

// Release implements outbox.Store.
func (o *Outbox) Release(ctx context.Context, id, token string) error {
	return o.finish(ctx, "release", id, o.q.release, id, token)
}

// Delivered implements outbox.Store.
func (o *Outbox) Delivered(ctx context.Context, id, token string) error {
	return o.finish(ctx, "delivered", id, o.q.delivered, id, token)
}

// Retry implements outbox.Store.
func (o *Outbox) Retry(ctx context.Context, id, token string, next time.Time, lastErr string) error {
	return o.finish(ctx, "retry", id, o.q.retry, id, token, next, lastErr)
}

// GiveUp implements outbox.Store.
func (o *Outbox) GiveUp(ctx context.Context, id, token string, lastErr string) error {
	return o.finish(ctx, "give up", id, o.q.giveUp, id, token, lastErr)
}

// finish runs an update of a pending delivery; when it changes nothing, the
// delivery is unknown (ErrNotFound), no longer pending, or leased under
// another token (ErrLeaseLost).
func (o *Outbox) finish(ctx context.Context, op, id, query string, args ...any) error {
	tag, err := o.pool.Exec(ctx, query, args...)
	if err != nil {
		return wrap("outbox "+op, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	_, st, err := o.Get(ctx, id)
	if err != nil {
		return err
	}
	if st == outbox.Pending {
		return fmt.Errorf("pgstore: outbox %s: delivery %s: %w", op, id, outbox.ErrLeaseLost)
	}
	return fmt.Errorf("pgstore: outbox %s: delivery %s is %s, not pending", op, id, st)
}

// Get implements outbox.Store.
func (o *Outbox) Get(ctx context.Context, id string) (outbox.Delivery, outbox.State, error) {
	rows, err := o.pool.Query(ctx, o.q.get, id)
	if err != nil {
		return outbox.Delivery{}, "", wrap("outbox get", err)
	}
	ds, states, err := scanDeliveries(rows)
	if err != nil {
		return outbox.Delivery{}, "", wrap("outbox get", err)
	}
	if len(ds) == 0 {
		return outbox.Delivery{}, "", fmt.Errorf("pgstore: outbox: delivery %s: %w", id, outbox.ErrNotFound)
	}
	return ds[0], states[0], nil
}

func scanDeliveries(rows pgx.Rows) ([]outbox.Delivery, []outbox.State, error) {
	defer rows.Close()
	var (
		out    []outbox.Delivery
		states []outbox.State
	)
	for rows.Next() {
		var (
			d      outbox.Delivery
			header []byte
			state  string
		)
		if err := rows.Scan(&d.ID, &d.Partner, &d.MessageID, &d.URL, &header, &d.Body, &d.Attempts, &d.NextAttempt,
			&d.LastError, &d.Created, &state); err != nil {
			return nil, nil, err
		}
		if err := json.Unmarshal(header, &d.Header); err != nil {
			return nil, nil, fmt.Errorf("header of %s: %w", d.ID, err)
		}
		d.Header = headerOrEmpty(d.Header)
		d.NextAttempt, d.Created = d.NextAttempt.UTC(), d.Created.UTC()
		out = append(out, d)
		states = append(states, outbox.State(state))
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	return out, states, nil
}

// prefixed qualifies each column of a comma-separated list.
func prefixed(prefix, columns string) string {
	cols := strings.Split(columns, ",")
	for i, c := range cols {
		cols[i] = prefix + strings.TrimSpace(c)
	}
	return strings.Join(cols, ", ")
}

// headerOrEmpty returns h, or an empty header for nil (as the memory outbox
// hands out).
func headerOrEmpty(h http.Header) http.Header {
	if h == nil {
		return http.Header{}
	}
	return h
}

var _ outbox.Store = (*Outbox)(nil)

// Pending implements outbox.PendingCounter.
func (o *Outbox) Pending(ctx context.Context) (int, time.Time, error) {
	var n int
	var oldest *time.Time
	if err := o.pool.QueryRow(ctx, o.q.pending).Scan(&n, &oldest); err != nil {
		return 0, time.Time{}, fmt.Errorf("pgstore: outbox pending: %w", err)
	}
	if oldest == nil {
		return n, time.Time{}, nil
	}
	return n, *oldest, nil
}

// ListPending implements outbox.Operator.
func (o *Outbox) ListPending(ctx context.Context, limit int) ([]outbox.Delivery, error) {
	if limit <= 0 {
		limit = 1000
	}
	rows, err := o.pool.Query(ctx, o.q.listPending, limit)
	if err != nil {
		return nil, wrap("outbox list pending", err)
	}
	ds, _, err := scanDeliveries(rows)
	if err != nil {
		return nil, wrap("outbox list pending", err)
	}
	return ds, nil
}

// RetryNow implements outbox.Operator: next_attempt becomes the database's
// now.
func (o *Outbox) RetryNow(ctx context.Context, id string) error {
	return o.finish(ctx, "retry now", id, o.q.retryNow, id)
}

var _ outbox.Operator = (*Outbox)(nil)
