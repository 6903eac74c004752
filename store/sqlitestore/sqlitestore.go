// Package sqlitestore is the embedded durable dedup store: a SQLite database
// file through the pure-Go modernc.org/sqlite driver (no cgo).
//
// The database runs in WAL mode with synchronous=FULL, so an accepted claim
// survives a power loss once Accept returned. All statements of one Store go
// through a single connection, which serialises them inside the process; a
// busy timeout (default 5s) covers other processes opening the same file.
// The writes of concurrent exchanges share transactions and fsyncs (group
// commit, see batch.go); each returns after the commit covering it.
// Time is read from SQLite's own clock in the SQL (unixepoch('subsec'),
// millisecond precision), never from the Go side. The schema is created by
// embedded, versioned migrations recorded in the gateway_migrations table.
//
// The same database holds the business interchange ledger (Store implements
// dedup.Ledger, see ClaimInterchange), the outbox of replies to post (Outbox),
// the queue of messages to send (Outbound) and the audit records
// (AuditSink), each with its own migrations component.
package sqlitestore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"modernc.org/sqlite"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/store/internal/migrate"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Component is the name under which the store's migrations are recorded.
const Component = "dedup"

// DefaultBusyTimeout is how long a statement waits for another process's
// write lock before failing with an ErrUnavailable error.
const DefaultBusyTimeout = 5 * time.Second

// nowMS is SQLite's clock in Unix milliseconds. 'now' is fixed for the
// duration of one statement, so every use in a statement agrees.
const nowMS = `CAST(round(unixepoch('subsec') * 1000) AS INTEGER)`

const (
	claimSQL = `INSERT INTO dedup_claims AS c (key, state, token, payload_sha256, first_seen, lease_until)
VALUES (?1, 'claimed', ?2, ?3, ` + nowMS + `, ` + nowMS + ` + ?4)
ON CONFLICT (key) DO UPDATE SET
	state = 'claimed', token = excluded.token, payload_sha256 = excluded.payload_sha256,
	first_seen = excluded.first_seen, lease_until = excluded.lease_until,
	accepted_at = NULL, abandoned_at = NULL, reply = NULL,
	claims = c.claims + 1, taken_from = c.state
WHERE c.state = 'abandoned'
	OR (c.state = 'claimed' AND c.lease_until <= excluded.first_seen)
	OR (c.state = 'accepted' AND ?5 > 0 AND c.first_seen < excluded.first_seen - ?5)
RETURNING token, taken_from, first_seen`

	readSQL = `SELECT state, payload_sha256, first_seen, lease_until, reply, ` + nowMS + `
FROM dedup_claims WHERE key = ?1`

	acceptSQL = `UPDATE dedup_claims SET state = 'accepted', reply = ?3, accepted_at = ` + nowMS + `
WHERE key = ?1 AND token = ?2 AND state = 'claimed'`

	abandonSQL = `UPDATE dedup_claims SET state = 'abandoned', abandoned_at = ` + nowMS + `
WHERE key = ?1 AND token = ?2 AND state = 'claimed'`

	expireSQL = `DELETE FROM dedup_claims WHERE rowid IN (
	SELECT rowid FROM dedup_claims WHERE state <> 'claimed' AND first_seen < ?1 LIMIT ?2)`
)

// expireBatch bounds one DELETE of Expire so claims are not held up behind
// a long purge.
const expireBatch = 1000

// claimAttempts bounds the claim loop: a claim statement that takes nothing
// over is followed by a read of the row, and if the row changed in between
// (accepted, abandoned, expired), the claim is tried again.
const claimAttempts = 4

// Store is a dedup.Store in a SQLite database file.
type Store struct {
	db     *sql.DB
	w      *batcher
	lease  time.Duration
	audit  *AuditSink
	outbox *Outbox
	// outbound is the queue of messages to send (outbound.go)
	outbound *Outbound

	closeOnce sync.Once
	closeErr  error
}

type config struct {
	busyTimeout time.Duration
}

// Option configures Open.
type Option func(*config)

// WithBusyTimeout sets how long a statement waits for another process's lock
// on the database file (default DefaultBusyTimeout).
func WithBusyTimeout(d time.Duration) Option { return func(c *config) { c.busyTimeout = d } }

// Open opens (creating if needed, with its directory) the SQLite database at
// path and migrates it. The path is a plain file path; ":memory:", "file:"
// URIs and paths containing '?' are refused (use dedup.NewMemoryStore for a
// store that need not survive the process).
func Open(ctx context.Context, path string, opts dedup.Options, options ...Option) (*Store, error) {
	cfg := config{busyTimeout: DefaultBusyTimeout}
	for _, o := range options {
		o(&cfg)
	}
	if path == "" || path == ":memory:" || strings.HasPrefix(path, "file:") || strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("sqlitestore: open: %q is not a plain database file path", path)
	}
	if dir := filepath.Dir(path); dir != "." {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("sqlitestore: open: %w", err)
		}
	}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", cfg.busyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_txlock", "immediate")
	db, err := sql.Open("sqlite", path+"?"+q.Encode())
	if err != nil {
		return nil, wrap("open", err)
	}
	// One connection: the store's statements are serialised in-process and
	// never race each other for SQLite's write lock.
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	s := &Store{db: db, lease: opts.WithDefaults().Lease}
	s.outbox = &Outbox{db: db}
	s.outbound = &Outbound{db: db}
	if err := s.init(ctx); err != nil {
		db.Close()
		return nil, err
	}
	s.w = newBatcher(db)
	s.audit = &AuditSink{db: db, w: s.w}
	if err := s.w.prepare(ctx, savepointSQL, rollbackToSQL, releaseSQL, claimSQL, readSQL, acceptSQL, abandonSQL, auditInsertSQL,
		ledgerClaimSQL, ledgerDuplicateSQL, ledgerReadSQL, ledgerAcceptSQL, ledgerAbandonSQL); err != nil {
		s.w.close()
		db.Close()
		return nil, err
	}
	return s, nil
}

func (s *Store) init(ctx context.Context) error {
	var mode string
	if err := s.db.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil {
		return wrap("open", err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("sqlitestore: open: journal mode is %q, want wal", mode)
	}
	for _, m := range []struct {
		component string
		fsys      fs.FS
		dir       string
	}{
		{Component, migrations, "migrations"},
		{LedgerComponent, ledgerMigrations, "migrations/ledger"},
		{OutboxComponent, outboxMigrations, "migrations/outbox"},
		{OutboundComponent, outboundMigrations, "migrations/outbound"},
	} {
		sub, err := fs.Sub(m.fsys, m.dir)
		if err != nil {
			return fmt.Errorf("sqlitestore: migrations: %w", err)
		}
		if err := Migrate(ctx, s.db, m.component, sub); err != nil {
			return err
		}
	}
	return nil
}

// Migrate applies the NNNN_description.sql files at the root of fsys that
// the database has not recorded yet for component, each in its own
// IMMEDIATE transaction, and records them in gateway_migrations. It refuses a
// database that has applied a version this binary does not know. Other
// components sharing the database (such as a ledger) can use it with their
// own component name.
func Migrate(ctx context.Context, db *sql.DB, component string, fsys fs.FS) error {
	ms, err := migrate.Load(fsys, ".")
	if err != nil {
		return fmt.Errorf("sqlitestore: %w", err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS gateway_migrations (
	component  TEXT    NOT NULL,
	version    INTEGER NOT NULL,
	name       TEXT    NOT NULL,
	applied_at INTEGER NOT NULL,
	PRIMARY KEY (component, version))`); err != nil {
		return wrap("migrate", err)
	}
	for _, m := range ms {
		if err := applyOne(ctx, db, component, m); err != nil {
			return err
		}
	}
	var newest int
	if err := db.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM gateway_migrations WHERE component = ?`,
		component).Scan(&newest); err != nil {
		return wrap("migrate", err)
	}
	if newest > len(ms) {
		return fmt.Errorf("sqlitestore: migrate: %s schema version %d is newer than this gateway's %d", component, newest, len(ms))
	}
	return nil
}

func applyOne(ctx context.Context, db *sql.DB, component string, m migrate.Migration) error {
	tx, err := db.BeginTx(ctx, nil) // BEGIN IMMEDIATE (_txlock)
	if err != nil {
		return wrap("migrate", err)
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM gateway_migrations WHERE component = ? AND version = ?`,
		component, m.Version).Scan(&n); err != nil {
		return wrap("migrate", err)
	}
	if n > 0 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
		return wrap("migrate "+m.Name, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO gateway_migrations (component, version, name, applied_at)
VALUES (?, ?, ?, `+nowMS+`)`, component, m.Version, m.Name); err != nil {
		return wrap("migrate "+m.Name, err)
	}
	if err := tx.Commit(); err != nil {
		return wrap("migrate "+m.Name, err)
	}
	return nil
}

// DB returns the database handle, for components that keep their tables in
// the same file. Do not close it; close the Store.
func (s *Store) DB() *sql.DB { return s.db }

// AuditSink returns the durable audit sink writing to this database.
func (s *Store) AuditSink() audit.Sink { return s.audit }

// Audit returns the audit sink with its read methods.
func (s *Store) Audit() *AuditSink { return s.audit }

// Claim implements dedup.Store with one INSERT … ON CONFLICT DO UPDATE …
// WHERE … RETURNING statement; when it takes nothing over, the row is read
// to answer Duplicate or InFlight.
func (s *Store) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Decision, error) {
	leaseMS, windowMS := ceilMS(s.lease), ceilMS(req.Window)
	var d dedup.Decision
	err := s.w.write(ctx, "claim", func(ctx context.Context, tx *sql.Tx) error {
		var err error
		d, err = s.claim(ctx, tx, req, leaseMS, windowMS)
		return err
	})
	if err != nil {
		return dedup.Decision{}, err
	}
	return d, nil
}

// claim runs Claim's statements in tx.
func (s *Store) claim(ctx context.Context, tx *sql.Tx, req dedup.ClaimRequest, leaseMS, windowMS int64) (dedup.Decision, error) {
	for range claimAttempts {
		token, err := dedup.NewToken()
		if err != nil {
			return dedup.Decision{}, fmt.Errorf("sqlitestore: claim: %w", err)
		}
		var (
			got       string
			takenFrom sql.NullString
			firstSeen int64
		)
		err = s.w.queryRow(ctx, tx, claimSQL, string(req.Key), string(token), req.PayloadSHA256, leaseMS, windowMS).
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
			return dedup.Decision{}, wrap("claim", err)
		}
		var (
			state, hash                string
			first, leaseUntil, dbNowMS int64
			reply                      []byte
		)
		err = s.w.queryRow(ctx, tx, readSQL, string(req.Key)).Scan(&state, &hash, &first, &leaseUntil, &reply, &dbNowMS)
		if errors.Is(err, sql.ErrNoRows) {
			continue // expired in between: claim again
		}
		if err != nil {
			return dedup.Decision{}, wrap("claim", err)
		}
		switch {
		case state == "claimed" && leaseUntil > dbNowMS:
			return dedup.Decision{
				Outcome:    dedup.InFlight,
				FirstSeen:  fromMS(first),
				RetryAfter: dedup.RetryAfter(time.Duration(leaseUntil-dbNowMS) * time.Millisecond),
			}, nil
		case state == "accepted" && !(windowMS > 0 && first < dbNowMS-windowMS):
			if reply == nil {
				reply = []byte{}
			}
			return dedup.Decision{Outcome: dedup.Duplicate, FirstSeen: fromMS(first), PayloadSHA256: hash, Reply: reply}, nil
		}
		// The row became claimable between the two statements: try again.
	}
	// Other deliveries keep taking the key over: let the partner come back.
	return dedup.Decision{Outcome: dedup.InFlight, RetryAfter: time.Second}, nil
}

// Accept implements dedup.Store: a compare-and-set on the token of a row
// still claimed. The holder may accept after its lease ran out as long as
// nobody took the key over.
func (s *Store) Accept(ctx context.Context, key dedup.Key, token dedup.Token, reply []byte) error {
	if reply == nil {
		reply = []byte{}
	}
	return s.transition(ctx, "accept", acceptSQL, string(key), string(token), reply)
}

// Abandon implements dedup.Store.
func (s *Store) Abandon(ctx context.Context, key dedup.Key, token dedup.Token) error {
	return s.transition(ctx, "abandon", abandonSQL, string(key), string(token))
}

func (s *Store) transition(ctx context.Context, op, query string, args ...any) error {
	return s.w.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		res, err := s.w.exec(ctx, tx, query, args...)
		if err != nil {
			return wrap(op, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return wrap(op, err)
		}
		if n != 1 {
			return fmt.Errorf("sqlitestore: %s: %w", op, dedup.ErrStaleClaim)
		}
		return nil
	})
}

// Expire implements dedup.Store. It deletes in batches of expireBatch rows.
func (s *Store) Expire(ctx context.Context, before time.Time) (int64, error) {
	var total int64
	for {
		res, err := s.db.ExecContext(ctx, expireSQL, before.UnixMilli(), expireBatch)
		if err != nil {
			return total, wrap("expire", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, wrap("expire", err)
		}
		total += n
		if n < expireBatch {
			return total, nil
		}
	}
}

// Close closes the database. Later calls fail with ErrUnavailable.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.w.close()
		s.closeErr = s.db.Close()
	})
	return s.closeErr
}

func ceilMS(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

func fromMS(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// SQLite primary result codes that mean the database cannot serve now.
const (
	sqliteBusy      = 5
	sqliteLocked    = 6
	sqliteNoMem     = 7
	sqliteReadOnly  = 8
	sqliteInterrupt = 9
	sqliteIOErr     = 10
	sqliteCorrupt   = 11
	sqliteFull      = 13
	sqliteCantOpen  = 14
	sqliteProtocol  = 15
	sqliteNotADB    = 26
)

// wrap adds context to err and marks failures of the database itself (busy,
// I/O, disk full, closed, cancelled) with dedup.ErrUnavailable.
func wrap(op string, err error) error {
	if unavailable(err) {
		return fmt.Errorf("sqlitestore: %s: %w: %w", op, dedup.ErrUnavailable, err)
	}
	return fmt.Errorf("sqlitestore: %s: %w", op, err)
}

func unavailable(err error) bool {
	if errors.Is(err, sql.ErrConnDone) || errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		err.Error() == "sql: database is closed" {
		return true
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqliteBusy, sqliteLocked, sqliteNoMem, sqliteReadOnly, sqliteInterrupt, sqliteIOErr,
			sqliteCorrupt, sqliteFull, sqliteCantOpen, sqliteProtocol, sqliteNotADB:
			return true
		}
	}
	return false
}

var _ dedup.Store = (*Store)(nil)

// ClaimRecord implements dedup.ClaimReader.
func (s *Store) ClaimRecord(ctx context.Context, key dedup.Key) (dedup.ClaimRecord, error) {
	rec := dedup.ClaimRecord{Key: key}
	var first int64
	err := s.db.QueryRowContext(ctx, `SELECT state, payload_sha256, first_seen, reply FROM dedup_claims WHERE key = ?`,
		string(key)).Scan(&rec.State, &rec.PayloadSHA256, &first, &rec.Reply)
	if errors.Is(err, sql.ErrNoRows) {
		return dedup.ClaimRecord{}, dedup.ErrNotFound
	}
	if err != nil {
		return dedup.ClaimRecord{}, wrap("claim record", err)
	}
	rec.FirstSeen = fromMS(first)
	return rec, nil
}

var _ dedup.ClaimReader = (*Store)(nil)
