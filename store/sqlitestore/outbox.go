package sqlitestore

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"modernc.org/sqlite"

	"github.com/edigateway/gateway/outbox"
)

//go:embed migrations/outbox/*.sql
var outboxMigrations embed.FS

// OutboxComponent is the name under which the outbox's migrations are
// recorded.
const OutboxComponent = "outbox"

const outboxColumns = `id, partner, message_id, url, header, body, attempts, next_attempt, last_error, created, state`

const (
	outboxEnqueueSQL = `INSERT INTO outbox_deliveries (id, partner, message_id, url, header, body, state, attempts,
	next_attempt, created, updated)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'pending', 0, ` + nowMS + `, coalesce(?7, ` + nowMS + `), ` + nowMS + `)`

	// outboxLeaseSQL is one statement: SQLite runs it under its write lock,
	// so two workers (or processes) never lease the same delivery.
	outboxLeaseSQL = `UPDATE outbox_deliveries SET leased_until = ` + nowMS + ` + ?2, lease_token = ?3,
	updated = ` + nowMS + `
WHERE id IN (
	SELECT id FROM outbox_deliveries
	WHERE state = 'pending' AND next_attempt <= ` + nowMS + ` AND leased_until <= ` + nowMS + `
	ORDER BY next_attempt, id LIMIT ?1)
RETURNING ` + outboxColumns

	// The outcomes are fenced: ?2 is the lease token the worker holds
	// (empty: an operator, unchecked).
	outboxDeliveredSQL = `UPDATE outbox_deliveries SET state = 'delivered', attempts = attempts + 1, last_error = '',
	leased_until = 0, lease_token = '', updated = ` + nowMS + `
WHERE id = ?1 AND state = 'pending' AND (?2 = '' OR lease_token = ?2)`

	outboxRetrySQL = `UPDATE outbox_deliveries SET attempts = attempts + 1, next_attempt = ?3, last_error = ?4,
	leased_until = 0, lease_token = '', updated = ` + nowMS + `
WHERE id = ?1 AND state = 'pending' AND (?2 = '' OR lease_token = ?2)`

	outboxGiveUpSQL = `UPDATE outbox_deliveries SET state = 'gave-up', attempts = attempts + 1, last_error = ?3,
	leased_until = 0, lease_token = '', updated = ` + nowMS + `
WHERE id = ?1 AND state = 'pending' AND (?2 = '' OR lease_token = ?2)`

	outboxRenewSQL = `UPDATE outbox_deliveries SET leased_until = ` + nowMS + ` + ?3, updated = ` + nowMS + `
WHERE id = ?1 AND state = 'pending' AND ?2 <> '' AND lease_token = ?2`

	outboxReleaseSQL = `UPDATE outbox_deliveries SET leased_until = 0, lease_token = '', updated = ` + nowMS + `
WHERE id = ?1 AND state = 'pending' AND ?2 <> '' AND lease_token = ?2`
)

// Outbox is the durable outbox.Store in the store's database. Enqueue makes a
// delivery due at once by SQLite's clock, leases run on that clock too, and
// the due time of a Retry is the caller's.
type Outbox struct {
	db *sql.DB
}

// Outbox returns the outbox of this database.
func (s *Store) Outbox() outbox.Store { return s.outbox }

// Enqueue implements outbox.Store. A zero Created is replaced by SQLite's
// clock; Attempts, NextAttempt and LastError of d are ignored.
func (o *Outbox) Enqueue(ctx context.Context, d outbox.Delivery) error {
	if d.ID == "" {
		return errors.New("sqlitestore: outbox enqueue: empty delivery id")
	}
	if d.URL == "" {
		return fmt.Errorf("sqlitestore: outbox enqueue %s: empty URL", d.ID)
	}
	header, err := json.Marshal(headerOrEmpty(d.Header))
	if err != nil {
		return fmt.Errorf("sqlitestore: outbox enqueue %s: header: %w", d.ID, err)
	}
	var created any // NULL: SQLite's clock
	if !d.Created.IsZero() {
		created = d.Created.UnixMilli()
	}
	body := d.Body
	if body == nil {
		body = []byte{}
	}
	_, err = o.db.ExecContext(ctx, outboxEnqueueSQL, d.ID, d.Partner, d.MessageID, d.URL, string(header), body, created)
	if err != nil {
		var se *sqlite.Error
		if errors.As(err, &se) && se.Code()&0xff == sqliteConstraint {
			return fmt.Errorf("sqlitestore: outbox enqueue: delivery %s already exists", d.ID)
		}
		return wrap("outbox enqueue", err)
	}
	return nil
}

// sqliteConstraint is SQLite's primary result code of a constraint violation.
const sqliteConstraint = 19

// Lease implements outbox.Store: up to limit due pending deliveries, oldest
// due first, each held for lease.
func (o *Outbox) Lease(ctx context.Context, limit int, lease time.Duration) ([]outbox.Delivery, error) {
	if limit <= 0 {
		return nil, nil
	}
	token := outbox.NewLeaseToken()
	rows, err := o.db.QueryContext(ctx, outboxLeaseSQL, limit, ceilMS(lease), token)
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

// Renew implements outbox.Store: the lease runs on SQLite's clock.
func (o *Outbox) Renew(ctx context.Context, id, token string, lease time.Duration) error {
	return o.finish(ctx, "renew", id, outboxRenewSQL, id, token, ceilMS(lease))
}

// Release implements outbox.Store.
func (o *Outbox) Release(ctx context.Context, id, token string) error {
	return o.finish(ctx, "release", id, outboxReleaseSQL, id, token)
}

// Delivered implements outbox.Store.
func (o *Outbox) Delivered(ctx context.Context, id, token string) error {
	return o.finish(ctx, "delivered", id, outboxDeliveredSQL, id, token)
}

// Retry implements outbox.Store.
func (o *Outbox) Retry(ctx context.Context, id, token string, next time.Time, lastErr string) error {
	return o.finish(ctx, "retry", id, outboxRetrySQL, id, token, next.UnixMilli(), lastErr)
}

// GiveUp implements outbox.Store.
func (o *Outbox) GiveUp(ctx context.Context, id, token string, lastErr string) error {
	return o.finish(ctx, "give up", id, outboxGiveUpSQL, id, token, lastErr)
}

// finish runs an update of a pending delivery; when it changes nothing, the
// delivery is unknown (ErrNotFound), no longer pending, or leased under
// another token (ErrLeaseLost).
func (o *Outbox) finish(ctx context.Context, op, id, query string, args ...any) error {
	res, err := o.db.ExecContext(ctx, query, args...)
	if err != nil {
		return wrap("outbox "+op, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return wrap("outbox "+op, err)
	}
	if n == 1 {
		return nil
	}
	_, st, err := o.Get(ctx, id)
	if err != nil {
		return err
	}
	if st == outbox.Pending {
		return fmt.Errorf("sqlitestore: outbox %s: delivery %s: %w", op, id, outbox.ErrLeaseLost)
	}
	return fmt.Errorf("sqlitestore: outbox %s: delivery %s is %s, not pending", op, id, st)
}

// Get implements outbox.Store.
func (o *Outbox) Get(ctx context.Context, id string) (outbox.Delivery, outbox.State, error) {
	rows, err := o.db.QueryContext(ctx, `SELECT `+outboxColumns+` FROM outbox_deliveries WHERE id = ?`, id)
	if err != nil {
		return outbox.Delivery{}, "", wrap("outbox get", err)
	}
	ds, states, err := scanDeliveries(rows)
	if err != nil {
		return outbox.Delivery{}, "", wrap("outbox get", err)
	}
	if len(ds) == 0 {
		return outbox.Delivery{}, "", fmt.Errorf("sqlitestore: outbox: delivery %s: %w", id, outbox.ErrNotFound)
	}
	return ds[0], states[0], nil
}

func scanDeliveries(rows *sql.Rows) ([]outbox.Delivery, []outbox.State, error) {
	defer rows.Close()
	var (
		out    []outbox.Delivery
		states []outbox.State
	)
	for rows.Next() {
		var (
			d             outbox.Delivery
			header, state string
			next, created int64
		)
		if err := rows.Scan(&d.ID, &d.Partner, &d.MessageID, &d.URL, &header, &d.Body, &d.Attempts, &next,
			&d.LastError, &created, &state); err != nil {
			return nil, nil, err
		}
		if err := json.Unmarshal([]byte(header), &d.Header); err != nil {
			return nil, nil, fmt.Errorf("header of %s: %w", d.ID, err)
		}
		d.Header = headerOrEmpty(d.Header)
		d.NextAttempt, d.Created = fromMS(next), fromMS(created)
		out = append(out, d)
		states = append(states, outbox.State(state))
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	return out, states, nil
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
	var oldest sql.NullInt64
	err := o.db.QueryRowContext(ctx, `SELECT count(*), min(created) FROM outbox_deliveries WHERE state = 'pending'`).Scan(&n, &oldest)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("sqlitestore: outbox pending: %w", err)
	}
	if !oldest.Valid {
		return n, time.Time{}, nil
	}
	return n, time.UnixMilli(oldest.Int64), nil
}

// ListPending implements outbox.Operator.
func (o *Outbox) ListPending(ctx context.Context, limit int) ([]outbox.Delivery, error) {
	if limit <= 0 {
		limit = 1000
	}
	rows, err := o.db.QueryContext(ctx, `SELECT `+outboxColumns+` FROM outbox_deliveries WHERE state = 'pending'
ORDER BY next_attempt, id LIMIT ?`, limit)
	if err != nil {
		return nil, wrap("outbox list pending", err)
	}
	ds, _, err := scanDeliveries(rows)
	if err != nil {
		return nil, wrap("outbox list pending", err)
	}
	return ds, nil
}

// RetryNow implements outbox.Operator: next_attempt becomes SQLite's now.
func (o *Outbox) RetryNow(ctx context.Context, id string) error {
	return o.finish(ctx, "retry now", id, `UPDATE outbox_deliveries SET next_attempt = min(next_attempt, `+nowMS+`),
	updated = `+nowMS+` WHERE id = ?1 AND state = 'pending'`, id)
}

var _ outbox.Operator = (*Outbox)(nil)
