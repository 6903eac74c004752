package pgstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edigateway/gateway/dedup"
)

//go:embed migrations/ledger/*.sql
var ledgerMigrations embed.FS

// LedgerComponent is the name under which the ledger's migrations are
// recorded.
const LedgerComponent = "ledger"

const ledgerColumns = `key, partner, standard, sender, recipient, reference, date, type, state, payload_sha256,
	first_seen, last_seen, retries, message_ids, window_us`

type ledgerQueries struct {
	table, history, claim, duplicate, read, accept, abandon, get, expired, delete string
}

func buildLedgerQueries(schema string) ledgerQueries {
	t := pgx.Identifier{schema, "ledger_interchanges"}.Sanitize()
	return ledgerQueries{
		table:   t,
		history: pgx.Identifier{schema, "ledger_history"}.Sanitize(),
		// Takes the interchange when it is new, abandoned, its lease ran out
		// or its window passed (the longer of the recorded and the requested
		// one, forever when either is 0), or when $14 supersedes an accepted
		// row, resetting the evidence.
		claim: `INSERT INTO ` + t + ` AS c (key, partner, standard, sender, recipient, reference, date, type,
	state, token, payload_sha256, first_seen, last_seen, lease_until, window_us, retries, message_ids)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'claimed', $9, $10, now(), now(),
	now() + $11::bigint * interval '1 microsecond', $12::bigint, 0, $13::text[])
ON CONFLICT (key) DO UPDATE SET
	partner = excluded.partner, standard = excluded.standard, sender = excluded.sender,
	recipient = excluded.recipient, reference = excluded.reference, date = excluded.date, type = excluded.type,
	state = 'claimed', token = excluded.token, payload_sha256 = excluded.payload_sha256,
	first_seen = excluded.first_seen, last_seen = excluded.last_seen, lease_until = excluded.lease_until,
	window_us = excluded.window_us, retries = 0, message_ids = excluded.message_ids,
	accepted_at = NULL, abandoned_at = NULL, claims = c.claims + 1, taken_from = c.state
WHERE c.state = 'abandoned'
	OR (c.state = 'claimed' AND c.lease_until <= excluded.first_seen)
	OR (c.state = 'accepted' AND ($14::boolean OR ($12::bigint > 0 AND c.window_us > 0
		AND c.first_seen < excluded.first_seen - GREATEST($12::bigint, c.window_us) * interval '1 microsecond')))
RETURNING c.token, c.taken_from, c.first_seen`,
		// Records a delivery of an accepted interchange inside the window,
		// keeping the longer of the recorded and the requested window.
		duplicate: `UPDATE ` + t + ` SET
	last_seen = now(),
	window_us = CASE WHEN $3::bigint <= 0 OR window_us <= 0 THEN 0 ELSE GREATEST(window_us, $3::bigint) END,
	retries = retries + 1,
	message_ids = CASE
		WHEN $2::text = '' OR cardinality(message_ids) >= $4::int OR $2::text = ANY (message_ids)
		THEN message_ids
		ELSE array_append(message_ids, $2::text) END
WHERE key = $1 AND state = 'accepted' AND NOT $5::boolean
	AND ($3::bigint <= 0 OR window_us <= 0 OR first_seen >= now() - GREATEST($3::bigint, window_us) * interval '1 microsecond')
RETURNING first_seen, payload_sha256, retries`,
		read: `SELECT state, first_seen, lease_until, now() FROM ` + t + ` WHERE key = $1`,
		accept: `UPDATE ` + t + ` SET state = 'accepted', accepted_at = now()
WHERE key = $1 AND token = $2 AND state = 'claimed'`,
		abandon: `UPDATE ` + t + ` SET state = 'abandoned', abandoned_at = now()
WHERE key = $1 AND token = $2 AND state = 'claimed'`,
		get: `SELECT ` + ledgerColumns + ` FROM ` + t + ` WHERE key = $1`,
		expired: `SELECT ` + ledgerColumns + ` FROM ` + t + `
WHERE state <> 'claimed' AND window_us > 0 AND last_seen < $1
	AND first_seen + window_us * interval '1 microsecond' < now()
ORDER BY last_seen, key LIMIT $2`,
		delete: `DELETE FROM ` + t + ` AS l USING unnest($1::text[], $2::timestamptz[]) AS d(key, first_seen)
WHERE l.key = d.key AND l.first_seen = d.first_seen AND l.state <> 'claimed'`,
	}
}

// ClaimInterchange implements dedup.Ledger. The claim is one INSERT … ON
// CONFLICT DO UPDATE … WHERE … RETURNING, so two gateways never both take an
// interchange; when it takes nothing over, one UPDATE … RETURNING records a
// duplicate delivery of an accepted interchange inside the window (last
// seen, retries + 1, the message id) atomically, and otherwise the row is
// read to answer InFlight. Should the row change between the statements, the
// claim is tried again, at most claimAttempts times, then answered InFlight.
func (s *Store) ClaimInterchange(ctx context.Context, c dedup.InterchangeClaim) (dedup.Decision, error) {
	leaseUS, windowUS := ceilUS(s.lease), ceilUS(c.Window)
	ids := dedup.FirstMessageIDs(c.MessageID)
	db := execerFor(ctx, s.pool) // inside Atomically: its transaction
	for range claimAttempts {
		token, err := dedup.NewToken()
		if err != nil {
			return dedup.Decision{}, fmt.Errorf("pgstore: claim interchange: %w", err)
		}
		var (
			got       string
			takenFrom *string
			firstSeen time.Time
		)
		err = db.QueryRow(ctx, s.lq.claim, string(c.Key), c.Partner, c.Standard, c.Sender, c.Recipient,
			c.Reference, c.Date, c.Type, string(token), c.PayloadSHA256, leaseUS, windowUS, ids, c.Supersede).
			Scan(&got, &takenFrom, &firstSeen)
		if err == nil {
			return dedup.Decision{
				Outcome:   dedup.Claimed,
				Token:     dedup.Token(got),
				Reused:    takenFrom != nil && *takenFrom == "accepted",
				FirstSeen: firstSeen.UTC(),
			}, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return dedup.Decision{}, wrap("claim interchange", err)
		}
		var (
			hash    string
			retries int
		)
		err = db.QueryRow(ctx, s.lq.duplicate, string(c.Key), c.MessageID, windowUS, dedup.MaxLedgerMessageIDs, c.Supersede).
			Scan(&firstSeen, &hash, &retries)
		if err == nil {
			return dedup.Decision{Outcome: dedup.Duplicate, FirstSeen: firstSeen.UTC(), PayloadSHA256: hash, Retries: retries}, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return dedup.Decision{}, wrap("claim interchange", err)
		}
		var (
			state             string
			leaseUntil, dbNow time.Time
		)
		err = db.QueryRow(ctx, s.lq.read, string(c.Key)).Scan(&state, &firstSeen, &leaseUntil, &dbNow)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // deleted in between: claim again
		}
		if err != nil {
			return dedup.Decision{}, wrap("claim interchange", err)
		}
		if state == "claimed" && leaseUntil.After(dbNow) {
			return dedup.Decision{
				Outcome:    dedup.InFlight,
				FirstSeen:  firstSeen.UTC(),
				RetryAfter: dedup.RetryAfter(leaseUntil.Sub(dbNow)),
			}, nil
		}
		// The row became claimable between the statements: try again.
	}
	return dedup.Decision{Outcome: dedup.InFlight, RetryAfter: time.Second}, nil
}

// AcceptInterchange implements dedup.Ledger: one UPDATE compare-and-setting
// the token of a row still claimed.
func (s *Store) AcceptInterchange(ctx context.Context, key dedup.Key, token dedup.Token) error {
	return s.transition(ctx, "accept interchange", s.lq.accept, string(key), string(token))
}

// AbandonInterchange implements dedup.Ledger.
func (s *Store) AbandonInterchange(ctx context.Context, key dedup.Key, token dedup.Token) error {
	return s.transition(ctx, "abandon interchange", s.lq.abandon, string(key), string(token))
}

// Interchange implements dedup.Ledger.
func (s *Store) Interchange(ctx context.Context, key dedup.Key) (dedup.InterchangeRecord, error) {
	recs, err := s.queryInterchanges(ctx, "interchange", s.lq.get, string(key))
	if err != nil {
		return dedup.InterchangeRecord{}, err
	}
	if len(recs) == 0 {
		return dedup.InterchangeRecord{}, fmt.Errorf("pgstore: interchange %.16s…: %w", key, dedup.ErrNotFound)
	}
	return recs[0], nil
}

// FindInterchanges implements dedup.Ledger. From is inclusive, To exclusive
// (on LastSeen); rows come ordered by FirstSeen, then key, at most q.Limit
// (dedup.DefaultFindLimit when zero). The message id filter uses the GIN
// index on the id array.
func (s *Store) FindInterchanges(ctx context.Context, q dedup.InterchangeQuery) ([]dedup.InterchangeRecord, error) {
	where, args := interchangeFilter(q)
	query := `SELECT ` + ledgerColumns + ` FROM ` + s.lq.table
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, " AND ")
	}
	limit := q.Limit
	if limit <= 0 {
		limit = dedup.DefaultFindLimit
	}
	args = append(args, limit)
	query += ` ORDER BY first_seen, key LIMIT $` + strconv.Itoa(len(args))
	return s.queryInterchanges(ctx, "find interchanges", query, args...)
}

// ReplacedInterchanges implements dedup.Ledger: the rows the trigger of
// migration ledger/0002 kept in ledger_history when a claim replaced an
// accepted row, ordered by replaced_at, then key.
func (s *Store) ReplacedInterchanges(ctx context.Context, q dedup.InterchangeQuery) ([]dedup.InterchangeRecord, error) {
	where, args := interchangeFilter(q)
	query := `SELECT ` + ledgerColumns + `, replaced_at FROM ` + s.lq.history
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, " AND ")
	}
	limit := q.Limit
	if limit <= 0 {
		limit = dedup.DefaultFindLimit
	}
	args = append(args, limit)
	query += ` ORDER BY replaced_at, key, id LIMIT $` + strconv.Itoa(len(args))
	return s.queryInterchanges(ctx, "replaced interchanges", query, args...)
}

// DeleteReplaced implements dedup.Ledger in one statement.
func (s *Store) DeleteReplaced(ctx context.Context, recs []dedup.InterchangeRecord) (int64, error) {
	if len(recs) == 0 {
		return 0, nil
	}
	keys := make([]string, len(recs))
	firsts := make([]time.Time, len(recs))
	replaced := make([]time.Time, len(recs))
	for i, r := range recs {
		keys[i], firsts[i], replaced[i] = string(r.Key), r.FirstSeen, r.Replaced
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM `+s.lq.history+` AS h
USING unnest($1::text[], $2::timestamptz[], $3::timestamptz[]) AS d(key, first_seen, replaced_at)
WHERE h.key = d.key AND h.first_seen = d.first_seen AND h.replaced_at = d.replaced_at`, keys, firsts, replaced)
	if err != nil {
		return 0, wrap("delete replaced", err)
	}
	return tag.RowsAffected(), nil
}

// interchangeFilter is the WHERE of an InterchangeQuery on the ledger or its
// history, with its arguments numbered from $1.
func interchangeFilter(q dedup.InterchangeQuery) (where []string, args []any) {
	add := func(cond string, arg any) {
		args = append(args, arg)
		where = append(where, strings.ReplaceAll(cond, "$?", "$"+strconv.Itoa(len(args))))
	}
	if q.Partner != "" {
		add("partner = $?", q.Partner)
	}
	if q.Reference != "" {
		add("reference = $?", q.Reference)
	}
	if q.MessageID != "" {
		add("message_ids @> ARRAY[$?::text]", q.MessageID)
	}
	if !q.From.IsZero() {
		add("last_seen >= $?", ceilMicro(q.From))
	}
	if !q.To.IsZero() {
		add("last_seen < $?", ceilMicro(q.To))
	}
	return where, args
}

// ExpiredInterchanges implements dedup.Ledger: accepted and abandoned rows
// with a positive window that passed (by the database clock), last seen
// before before, oldest last seen first, at most limit
// (dedup.DefaultFindLimit when zero or negative).
func (s *Store) ExpiredInterchanges(ctx context.Context, before time.Time, limit int) ([]dedup.InterchangeRecord, error) {
	if limit <= 0 {
		limit = dedup.DefaultFindLimit
	}
	return s.queryInterchanges(ctx, "expired interchanges", s.lq.expired, ceilMicro(before), limit)
}

// DeleteInterchanges implements dedup.Ledger in one statement: each row goes
// only if it is not a claim and its first seen still equals the record's.
func (s *Store) DeleteInterchanges(ctx context.Context, recs []dedup.InterchangeRecord) (int64, error) {
	if len(recs) == 0 {
		return 0, nil
	}
	keys := make([]string, len(recs))
	firsts := make([]time.Time, len(recs))
	for i, r := range recs {
		keys[i], firsts[i] = string(r.Key), r.FirstSeen
	}
	tag, err := s.pool.Exec(ctx, s.lq.delete, keys, firsts)
	if err != nil {
		return 0, wrap("delete interchanges", err)
	}
	return tag.RowsAffected(), nil
}

func (s *Store) queryInterchanges(ctx context.Context, op, query string, args ...any) ([]dedup.InterchangeRecord, error) {
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, wrap(op, err)
	}
	defer rows.Close()
	var out []dedup.InterchangeRecord
	for rows.Next() {
		var (
			r        dedup.InterchangeRecord
			key      string
			windowUS int64
			replaced *time.Time
		)
		dest := []any{&key, &r.Partner, &r.Standard, &r.Sender, &r.Recipient, &r.Reference, &r.Date, &r.Type,
			&r.State, &r.PayloadSHA256, &r.FirstSeen, &r.LastSeen, &r.Retries, &r.MessageIDs, &windowUS}
		if len(rows.FieldDescriptions()) > len(dest) {
			dest = append(dest, &replaced)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, wrap(op, err)
		}
		if replaced != nil {
			r.Replaced = replaced.UTC()
		}
		if r.MessageIDs == nil {
			r.MessageIDs = []string{}
		}
		r.Key, r.FirstSeen, r.LastSeen = dedup.Key(key), r.FirstSeen.UTC(), r.LastSeen.UTC()
		r.Window = time.Duration(windowUS) * time.Microsecond
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(op, err)
	}
	return out, nil
}

// ceilMicro rounds t up to PostgreSQL's microsecond, so that comparing a
// stored time with it gives the same answer as comparing with t.
func ceilMicro(t time.Time) time.Time {
	if r := t.Truncate(time.Microsecond); r.Before(t) {
		return r.Add(time.Microsecond)
	}
	return t
}

var _ dedup.Ledger = (*Store)(nil)
