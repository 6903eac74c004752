package sqlitestore

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/edigateway/gateway/dedup"
)

//go:embed migrations/ledger/*.sql
var ledgerMigrations embed.FS

// LedgerComponent is the name under which the ledger's migrations are
// recorded.
const LedgerComponent = "ledger"

const ledgerColumns = `key, partner, standard, sender, recipient, reference, date, type, state, payload_sha256,
	first_seen, last_seen, retries, message_ids, window_ms`

const (
	// ledgerClaimSQL takes the interchange when it is new, abandoned, its
	// lease ran out or its window passed (the longer of the recorded and the
	// requested one, forever when either is 0), or when ?14 supersedes an
	// accepted row, resetting the evidence.
	ledgerClaimSQL = `INSERT INTO ledger_interchanges AS c (key, partner, standard, sender, recipient, reference, date,
	type, state, token, payload_sha256, first_seen, last_seen, lease_until, window_ms, retries, message_ids)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'claimed', ?9, ?10, ` + nowMS + `, ` + nowMS + `, ` + nowMS + ` + ?11, ?12, 0, ?13)
ON CONFLICT (key) DO UPDATE SET
	partner = excluded.partner, standard = excluded.standard, sender = excluded.sender,
	recipient = excluded.recipient, reference = excluded.reference, date = excluded.date, type = excluded.type,
	state = 'claimed', token = excluded.token, payload_sha256 = excluded.payload_sha256,
	first_seen = excluded.first_seen, last_seen = excluded.last_seen, lease_until = excluded.lease_until,
	window_ms = excluded.window_ms, retries = 0, message_ids = excluded.message_ids,
	accepted_at = NULL, abandoned_at = NULL, claims = c.claims + 1, taken_from = c.state
WHERE c.state = 'abandoned'
	OR (c.state = 'claimed' AND c.lease_until <= excluded.first_seen)
	OR (c.state = 'accepted' AND (?14 <> 0
		OR (?12 > 0 AND c.window_ms > 0 AND c.first_seen < excluded.first_seen - max(?12, c.window_ms))))
RETURNING token, taken_from, first_seen`

	// ledgerDuplicateSQL records a delivery of an accepted interchange
	// inside the window: last seen, one more retry, the message id, and the
	// longer of the recorded and the requested window.
	ledgerDuplicateSQL = `UPDATE ledger_interchanges SET
	last_seen = ` + nowMS + `,
	window_ms = CASE WHEN ?3 <= 0 OR window_ms <= 0 THEN 0 ELSE max(window_ms, ?3) END,
	retries = retries + 1,
	message_ids = CASE
		WHEN ?2 = '' OR json_array_length(message_ids) >= ?4
			OR EXISTS (SELECT 1 FROM json_each(ledger_interchanges.message_ids) AS m WHERE m.value = ?2)
		THEN message_ids
		ELSE json_insert(message_ids, '$[#]', ?2) END
WHERE key = ?1 AND state = 'accepted' AND ?5 = 0
	AND (?3 <= 0 OR window_ms <= 0 OR first_seen >= ` + nowMS + ` - max(?3, window_ms))
RETURNING first_seen, payload_sha256, retries`

	ledgerReadSQL = `SELECT state, first_seen, lease_until, ` + nowMS + ` FROM ledger_interchanges WHERE key = ?1`

	ledgerAcceptSQL = `UPDATE ledger_interchanges SET state = 'accepted', accepted_at = ` + nowMS + `
WHERE key = ?1 AND token = ?2 AND state = 'claimed'`

	ledgerAbandonSQL = `UPDATE ledger_interchanges SET state = 'abandoned', abandoned_at = ` + nowMS + `
WHERE key = ?1 AND token = ?2 AND state = 'claimed'`

	ledgerExpiredSQL = `SELECT ` + ledgerColumns + ` FROM ledger_interchanges
WHERE state <> 'claimed' AND window_ms > 0 AND last_seen < ?1 AND first_seen + window_ms < ` + nowMS + `
ORDER BY last_seen, key LIMIT ?2`

	ledgerDeleteSQL = `DELETE FROM ledger_interchanges WHERE key = ?1 AND first_seen = ?2 AND state <> 'claimed'`
)

// ClaimInterchange implements dedup.Ledger. The claim is one INSERT … ON
// CONFLICT DO UPDATE … WHERE … RETURNING; when it takes nothing over, one
// UPDATE … RETURNING records a duplicate delivery of an accepted
// interchange inside the window, and otherwise the row is read to answer
// InFlight. Should the row change between the statements, the claim is tried
// again, at most claimAttempts times, then answered InFlight.
func (s *Store) ClaimInterchange(ctx context.Context, c dedup.InterchangeClaim) (dedup.Decision, error) {
	leaseMS, windowMS := ceilMS(s.lease), ceilMS(c.Window)
	supersede := 0
	if c.Supersede {
		supersede = 1
	}
	ids, err := json.Marshal(dedup.FirstMessageIDs(c.MessageID))
	if err != nil {
		return dedup.Decision{}, fmt.Errorf("sqlitestore: claim interchange: %w", err)
	}
	var d dedup.Decision
	err = s.w.write(ctx, "claim interchange", func(ctx context.Context, tx *sql.Tx) error {
		var err error
		d, err = s.claimInterchange(ctx, tx, c, leaseMS, windowMS, supersede, ids)
		return err
	})
	if err != nil {
		return dedup.Decision{}, err
	}
	return d, nil
}

// claimInterchange runs ClaimInterchange's statements in tx.
func (s *Store) claimInterchange(ctx context.Context, tx *sql.Tx, c dedup.InterchangeClaim, leaseMS, windowMS int64,
	supersede int, ids []byte) (dedup.Decision, error) {
	for range claimAttempts {
		token, err := dedup.NewToken()
		if err != nil {
			return dedup.Decision{}, fmt.Errorf("sqlitestore: claim interchange: %w", err)
		}
		var (
			got       string
			takenFrom sql.NullString
			firstSeen int64
		)
		err = s.w.queryRow(ctx, tx, ledgerClaimSQL, string(c.Key), c.Partner, c.Standard, c.Sender, c.Recipient,
			c.Reference, c.Date, c.Type, string(token), c.PayloadSHA256, leaseMS, windowMS, string(ids), supersede).
			Scan(&got, &takenFrom, &firstSeen)
		if err == nil {
			return dedup.Decision{
				Outcome:   dedup.Claimed,
				Token:     dedup.Token(got),
				Reused:    takenFrom.String == "accepted",
				FirstSeen: fromMS(firstSeen),
			}, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return dedup.Decision{}, wrap("claim interchange", err)
		}
		var (
			hash    string
			retries int
		)
		err = s.w.queryRow(ctx, tx, ledgerDuplicateSQL, string(c.Key), c.MessageID, windowMS, dedup.MaxLedgerMessageIDs, supersede).
			Scan(&firstSeen, &hash, &retries)
		if err == nil {
			return dedup.Decision{Outcome: dedup.Duplicate, FirstSeen: fromMS(firstSeen), PayloadSHA256: hash, Retries: retries}, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return dedup.Decision{}, wrap("claim interchange", err)
		}
		var (
			state               string
			leaseUntil, dbNowMS int64
		)
		err = s.w.queryRow(ctx, tx, ledgerReadSQL, string(c.Key)).Scan(&state, &firstSeen, &leaseUntil, &dbNowMS)
		if errors.Is(err, sql.ErrNoRows) {
			continue // deleted in between: claim again
		}
		if err != nil {
			return dedup.Decision{}, wrap("claim interchange", err)
		}
		if state == "claimed" && leaseUntil > dbNowMS {
			return dedup.Decision{
				Outcome:    dedup.InFlight,
				FirstSeen:  fromMS(firstSeen),
				RetryAfter: dedup.RetryAfter(time.Duration(leaseUntil-dbNowMS) * time.Millisecond),
			}, nil
		}
		// The row became claimable between the statements: try again.
	}
	return dedup.Decision{Outcome: dedup.InFlight, RetryAfter: time.Second}, nil
}

// AcceptInterchange implements dedup.Ledger: a compare-and-set on the token
// of a row still claimed.
func (s *Store) AcceptInterchange(ctx context.Context, key dedup.Key, token dedup.Token) error {
	return s.transition(ctx, "accept interchange", ledgerAcceptSQL, string(key), string(token))
}

// AbandonInterchange implements dedup.Ledger.
func (s *Store) AbandonInterchange(ctx context.Context, key dedup.Key, token dedup.Token) error {
	return s.transition(ctx, "abandon interchange", ledgerAbandonSQL, string(key), string(token))
}

// Interchange implements dedup.Ledger.
func (s *Store) Interchange(ctx context.Context, key dedup.Key) (dedup.InterchangeRecord, error) {
	recs, err := s.queryInterchanges(ctx, "interchange",
		`SELECT `+ledgerColumns+` FROM ledger_interchanges WHERE key = ?`, string(key))
	if err != nil {
		return dedup.InterchangeRecord{}, err
	}
	if len(recs) == 0 {
		return dedup.InterchangeRecord{}, fmt.Errorf("sqlitestore: interchange %.16s…: %w", key, dedup.ErrNotFound)
	}
	return recs[0], nil
}

// FindInterchanges implements dedup.Ledger. From is inclusive, To exclusive
// (on LastSeen); rows come ordered by FirstSeen, then key, at most q.Limit
// (dedup.DefaultFindLimit when zero). The message id filter looks inside the
// JSON array of each row the other filters leave.
func (s *Store) FindInterchanges(ctx context.Context, q dedup.InterchangeQuery) ([]dedup.InterchangeRecord, error) {
	where, args := interchangeFilter("ledger_interchanges", q)
	query := `SELECT ` + ledgerColumns + ` FROM ledger_interchanges`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, " AND ")
	}
	limit := q.Limit
	if limit <= 0 {
		limit = dedup.DefaultFindLimit
	}
	query += ` ORDER BY first_seen, key LIMIT ?`
	return s.queryInterchanges(ctx, "find interchanges", query, append(args, limit)...)
}

// interchangeFilter is the WHERE of an InterchangeQuery on table (the
// ledger or its history).
func interchangeFilter(table string, q dedup.InterchangeQuery) (where []string, args []any) {
	if q.Partner != "" {
		where, args = append(where, "partner = ?"), append(args, q.Partner)
	}
	if q.Reference != "" {
		where, args = append(where, "reference = ?"), append(args, q.Reference)
	}
	if q.MessageID != "" {
		where = append(where, "EXISTS (SELECT 1 FROM json_each("+table+".message_ids) AS m WHERE m.value = ?)")
		args = append(args, q.MessageID)
	}
	if !q.From.IsZero() {
		where, args = append(where, "last_seen >= ?"), append(args, unixMSCeil(q.From))
	}
	if !q.To.IsZero() {
		where, args = append(where, "last_seen < ?"), append(args, unixMSCeil(q.To))
	}
	return where, args
}

// ReplacedInterchanges implements dedup.Ledger: the rows the trigger of
// migration ledger/0002 kept in ledger_history when a claim replaced an
// accepted row, ordered by replaced_at, then key.
func (s *Store) ReplacedInterchanges(ctx context.Context, q dedup.InterchangeQuery) ([]dedup.InterchangeRecord, error) {
	where, args := interchangeFilter("ledger_history", q)
	query := `SELECT ` + ledgerColumns + `, replaced_at FROM ledger_history`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, " AND ")
	}
	limit := q.Limit
	if limit <= 0 {
		limit = dedup.DefaultFindLimit
	}
	query += ` ORDER BY replaced_at, key, id LIMIT ?`
	return s.queryInterchanges(ctx, "replaced interchanges", query, append(args, limit)...)
}

// DeleteReplaced implements dedup.Ledger in one transaction.
func (s *Store) DeleteReplaced(ctx context.Context, recs []dedup.InterchangeRecord) (int64, error) {
	if len(recs) == 0 {
		return 0, nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, wrap("delete replaced", err)
	}
	defer tx.Rollback()
	var total int64
	for _, r := range recs {
		res, err := tx.ExecContext(ctx, `DELETE FROM ledger_history WHERE key = ?1 AND first_seen = ?2 AND replaced_at = ?3`,
			string(r.Key), r.FirstSeen.UnixMilli(), r.Replaced.UnixMilli())
		if err != nil {
			return 0, wrap("delete replaced", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, wrap("delete replaced", err)
		}
		total += n
	}
	if err := tx.Commit(); err != nil {
		return 0, wrap("delete replaced", err)
	}
	return total, nil
}

// ExpiredInterchanges implements dedup.Ledger: accepted and abandoned rows
// with a positive window that passed (by SQLite's clock), last seen before
// before, oldest last seen first, at most limit (dedup.DefaultFindLimit when
// zero or negative).
func (s *Store) ExpiredInterchanges(ctx context.Context, before time.Time, limit int) ([]dedup.InterchangeRecord, error) {
	if limit <= 0 {
		limit = dedup.DefaultFindLimit
	}
	return s.queryInterchanges(ctx, "expired interchanges", ledgerExpiredSQL, unixMSCeil(before), limit)
}

// DeleteInterchanges implements dedup.Ledger in one transaction: each row
// goes only if it is not a claim and its first seen still equals the
// record's.
func (s *Store) DeleteInterchanges(ctx context.Context, recs []dedup.InterchangeRecord) (int64, error) {
	if len(recs) == 0 {
		return 0, nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, wrap("delete interchanges", err)
	}
	defer tx.Rollback()
	stmt, err := tx.PrepareContext(ctx, ledgerDeleteSQL)
	if err != nil {
		return 0, wrap("delete interchanges", err)
	}
	defer stmt.Close()
	var total int64
	for _, r := range recs {
		res, err := stmt.ExecContext(ctx, string(r.Key), r.FirstSeen.UnixMilli())
		if err != nil {
			return 0, wrap("delete interchanges", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, wrap("delete interchanges", err)
		}
		total += n
	}
	if err := tx.Commit(); err != nil {
		return 0, wrap("delete interchanges", err)
	}
	return total, nil
}

func (s *Store) queryInterchanges(ctx context.Context, op, query string, args ...any) ([]dedup.InterchangeRecord, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, wrap(op, err)
	}
	defer rows.Close()
	var out []dedup.InterchangeRecord
	for rows.Next() {
		var (
			r                     dedup.InterchangeRecord
			key, ids              string
			first, last, windowMS int64
			replaced              sql.NullInt64
		)
		dest := []any{&key, &r.Partner, &r.Standard, &r.Sender, &r.Recipient, &r.Reference, &r.Date, &r.Type,
			&r.State, &r.PayloadSHA256, &first, &last, &r.Retries, &ids, &windowMS}
		if cols, _ := rows.Columns(); len(cols) > len(dest) {
			dest = append(dest, &replaced)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, wrap(op, err)
		}
		if replaced.Valid {
			r.Replaced = fromMS(replaced.Int64)
		}
		if err := json.Unmarshal([]byte(ids), &r.MessageIDs); err != nil {
			return nil, fmt.Errorf("sqlitestore: %s: message ids of %.16s…: %w", op, key, err)
		}
		if r.MessageIDs == nil {
			r.MessageIDs = []string{}
		}
		r.Key, r.FirstSeen, r.LastSeen = dedup.Key(key), fromMS(first), fromMS(last)
		r.Window = time.Duration(windowMS) * time.Millisecond
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(op, err)
	}
	return out, nil
}

// unixMSCeil is t in Unix milliseconds rounded up, so that comparing a
// stored millisecond with it gives the same answer as comparing the times.
func unixMSCeil(t time.Time) int64 {
	ms := t.UnixMilli()
	if t.Sub(time.UnixMilli(ms)) > 0 {
		ms++
	}
	return ms
}

var _ dedup.Ledger = (*Store)(nil)
