// Package pgstore is the PostgreSQL dedup store, for a fleet of gateways
// sharing one database, through pgx/v5 and its connection pool.
//
// Its tables live in one schema (default DefaultSchema, see WithSchema),
// created by embedded, versioned migrations recorded in that schema's
// gateway_migrations table. A claim is one statement,
//
//	INSERT … ON CONFLICT (key) DO UPDATE SET … WHERE <abandoned, lease run
//	out, or accepted and window passed> RETURNING …
//
// so two gateways can never both take a key: there is no check-then-insert
// race and no transaction for a unique violation to abort. When the statement
// takes nothing over, the row is read to answer Duplicate or InFlight. Accept
// and Abandon are single UPDATEs compare-and-setting the token. Every time is
// the database's now(), so the gateways of a fleet agree on leases whatever
// their own clocks say.
//
// The same schema holds the business interchange ledger (Store implements
// dedup.Ledger with the same one-statement claim, see ClaimInterchange), the
// outbox of replies to post (Outbox, leased with FOR UPDATE SKIP LOCKED), the
// queue of messages to send (Outbound, leased the same way) and the audit
// records (AuditSink), each with its own migrations component.
package pgstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/store/internal/migrate"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Component is the name under which the store's migrations are recorded.
const Component = "dedup"

// DefaultSchema holds the tables unless WithSchema names another.
const DefaultSchema = "gateway"

// DefaultMaxConns is the pool's size unless the DSN sets pool_max_conns.
// pgx's own default (4 on a 2-core machine) made concurrent exchanges queue
// for a connection: each exchange makes several short durable round trips
// (claim, audit records, accept) that wait mostly for the server's WAL
// flush, which concurrent commits share.
const DefaultMaxConns = 32

// expireBatch bounds one DELETE of Expire.
const expireBatch = 5000

// claimAttempts bounds the claim loop (see Claim).
const claimAttempts = 4

var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// ValidSchema reports whether name is accepted as a schema name: lowercase
// letters, digits and underscores, not starting with a digit, at most 63
// characters, and not a pg_ system schema.
func ValidSchema(name string) bool {
	return identifier.MatchString(name) && !strings.HasPrefix(name, "pg_")
}

type queries struct {
	claim, read, accept, abandon, expire string
}

func buildQueries(schema string) queries {
	t := pgx.Identifier{schema, "dedup_claims"}.Sanitize()
	return queries{
		claim: `INSERT INTO ` + t + ` AS c (key, state, token, payload_sha256, first_seen, lease_until)
VALUES ($1, 'claimed', $2, $3, now(), now() + $4::bigint * interval '1 microsecond')
ON CONFLICT (key) DO UPDATE SET
	state = 'claimed', token = excluded.token, payload_sha256 = excluded.payload_sha256,
	first_seen = excluded.first_seen, lease_until = excluded.lease_until,
	accepted_at = NULL, abandoned_at = NULL, reply = NULL,
	claims = c.claims + 1, taken_from = c.state
WHERE c.state = 'abandoned'
	OR (c.state = 'claimed' AND c.lease_until <= excluded.first_seen)
	OR (c.state = 'accepted' AND $5::bigint > 0
		AND c.first_seen < excluded.first_seen - $5::bigint * interval '1 microsecond')
RETURNING c.token, c.taken_from, c.first_seen`,
		read: `SELECT state, payload_sha256, first_seen, lease_until, reply, now() FROM ` + t + ` WHERE key = $1`,
		accept: `UPDATE ` + t + ` SET state = 'accepted', reply = $3, accepted_at = now()
WHERE key = $1 AND token = $2 AND state = 'claimed'`,
		abandon: `UPDATE ` + t + ` SET state = 'abandoned', abandoned_at = now()
WHERE key = $1 AND token = $2 AND state = 'claimed'`,
		// The outer conditions are re-checked on a row updated concurrently
		// (a window reuse), so such a row is never deleted.
		expire: `DELETE FROM ` + t + ` WHERE key IN (
	SELECT key FROM ` + t + ` WHERE state <> 'claimed' AND first_seen < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)
	AND state <> 'claimed' AND first_seen < $1`,
	}
}

// Store is a dedup.Store in PostgreSQL.
type Store struct {
	pool   *pgxpool.Pool
	schema string
	lease  time.Duration
	q      queries
	lq     ledgerQueries
	renew  string
	audit  *AuditSink
	outbox *Outbox
	// outbound is the queue of messages to send (outbound.go)
	outbound *Outbound

	closeOnce sync.Once
}

type config struct {
	schema string
}

// Option configures Open.
type Option func(*config)

// WithSchema keeps the store's tables in schema (created if missing)
// instead of DefaultSchema. The name must pass ValidSchema.
func WithSchema(schema string) Option { return func(c *config) { c.schema = schema } }

// Open connects a pool to the database at dsn (a postgres:// URL or a
// key=value string, as pgx accepts), creates the schema if needed and
// migrates it. Errors reaching the server wrap dedup.ErrUnavailable.
func Open(ctx context.Context, dsn string, opts dedup.Options, options ...Option) (*Store, error) {
	cfg := config{schema: DefaultSchema}
	for _, o := range options {
		o(&cfg)
	}
	if !ValidSchema(cfg.schema) {
		return nil, fmt.Errorf("pgstore: schema %q is not a plain lowercase identifier", cfg.schema)
	}
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgx's message may quote the DSN with its password; do not wrap it.
		return nil, errors.New("pgstore: invalid PostgreSQL DSN")
	}
	if !strings.Contains(dsn, "pool_max_conns") {
		pcfg.MaxConns = DefaultMaxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, wrap("open", err)
	}
	s := &Store{pool: pool, schema: cfg.schema, lease: opts.WithDefaults().Lease, q: buildQueries(cfg.schema),
		lq: buildLedgerQueries(cfg.schema), renew: renewQuery(cfg.schema)}
	s.audit = newAuditSink(pool, cfg.schema)
	s.outbox = &Outbox{pool: pool, q: buildOutboxQueries(cfg.schema)}
	s.outbound = &Outbound{pool: pool, q: buildOutboundQueries(cfg.schema)}
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
			pool.Close()
			return nil, fmt.Errorf("pgstore: migrations: %w", err)
		}
		if err := Migrate(ctx, pool, cfg.schema, m.component, sub); err != nil {
			pool.Close()
			return nil, err
		}
	}
	return s, nil
}

// Migrate creates schema if needed and applies the NNNN_description.sql
// files at the root of fsys that the schema's gateway_migrations table has
// not recorded for component, in one transaction with search_path set to the
// schema, under an advisory lock so that gateways starting together migrate
// once. It refuses a schema that has applied a version this binary does not
// know. Other components sharing the database (such as a ledger) can use it
// with their own component name.
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema, component string, fsys fs.FS) error {
	if !ValidSchema(schema) {
		return fmt.Errorf("pgstore: schema %q is not a plain lowercase identifier", schema)
	}
	ms, err := migrate.Load(fsys, ".")
	if err != nil {
		return fmt.Errorf("pgstore: %w", err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return wrap("migrate", err)
	}
	defer tx.Rollback(ctx)
	if err := migrateTx(ctx, tx, schema, component, ms); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return wrap("migrate", err)
	}
	return nil
}

func migrateTx(ctx context.Context, tx pgx.Tx, schema, component string, ms []migrate.Migration) error {
	sch := pgx.Identifier{schema}.Sanitize()
	table := pgx.Identifier{schema, "gateway_migrations"}.Sanitize()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, "gateway_migrations:"+schema); err != nil {
		return wrap("migrate", err)
	}
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema).
		Scan(&exists); err != nil {
		return wrap("migrate", err)
	}
	if !exists {
		if _, err := tx.Exec(ctx, `CREATE SCHEMA `+sch); err != nil {
			return wrap("migrate", err)
		}
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (
	component  text        NOT NULL,
	version    integer     NOT NULL,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (component, version))`); err != nil {
		return wrap("migrate", err)
	}
	var newest int
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+table+` WHERE component = $1`,
		component).Scan(&newest); err != nil {
		return wrap("migrate", err)
	}
	if newest > len(ms) {
		return fmt.Errorf("pgstore: migrate: %s schema version %d in %s is newer than this gateway's %d",
			component, newest, schema, len(ms))
	}
	if _, err := tx.Exec(ctx, `SET LOCAL search_path TO `+sch); err != nil {
		return wrap("migrate", err)
	}
	for _, m := range ms[newest:] {
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return wrap("migrate "+m.Name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+table+` (component, version, name) VALUES ($1, $2, $3)`,
			component, m.Version, m.Name); err != nil {
			return wrap("migrate "+m.Name, err)
		}
	}
	return nil
}

// Pool returns the connection pool, for components that keep their tables
// in the same database. Do not close it; close the Store.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Schema returns the schema holding the store's tables.
func (s *Store) Schema() string { return s.schema }

// AuditSink returns the durable audit sink writing to this database.
func (s *Store) AuditSink() audit.Sink { return s.audit }

// Audit returns the audit sink with its read methods.
func (s *Store) Audit() *AuditSink { return s.audit }

// Claim implements dedup.Store. The claim statement either takes the key
// (new, abandoned, lease run out, window passed) or changes nothing; in the
// latter case the row is read to answer Duplicate or InFlight. Should the row
// change between the two statements (accepted, abandoned or expired), the
// claim is tried again, at most claimAttempts times, after which the answer
// is InFlight with a one-second retry.
func (s *Store) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Decision, error) {
	leaseUS, windowUS := ceilUS(s.lease), ceilUS(req.Window)
	db := execerFor(ctx, s.pool) // inside Atomically: its transaction
	for range claimAttempts {
		token, err := dedup.NewToken()
		if err != nil {
			return dedup.Decision{}, fmt.Errorf("pgstore: claim: %w", err)
		}
		var (
			got       string
			takenFrom *string
			firstSeen time.Time
		)
		err = db.QueryRow(ctx, s.q.claim, string(req.Key), string(token), req.PayloadSHA256, leaseUS, windowUS).
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
			return dedup.Decision{}, wrap("claim", err)
		}
		var (
			state, hash              string
			first, leaseUntil, dbNow time.Time
			reply                    []byte
		)
		err = db.QueryRow(ctx, s.q.read, string(req.Key)).Scan(&state, &hash, &first, &leaseUntil, &reply, &dbNow)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // expired in between: claim again
		}
		if err != nil {
			return dedup.Decision{}, wrap("claim", err)
		}
		switch {
		case state == "claimed" && leaseUntil.After(dbNow):
			return dedup.Decision{
				Outcome:    dedup.InFlight,
				FirstSeen:  first.UTC(),
				RetryAfter: dedup.RetryAfter(leaseUntil.Sub(dbNow)),
			}, nil
		case state == "accepted" && !(windowUS > 0 && first.Before(dbNow.Add(-time.Duration(windowUS)*time.Microsecond))):
			if reply == nil {
				reply = []byte{}
			}
			return dedup.Decision{Outcome: dedup.Duplicate, FirstSeen: first.UTC(), PayloadSHA256: hash, Reply: reply}, nil
		}
	}
	return dedup.Decision{Outcome: dedup.InFlight, RetryAfter: time.Second}, nil
}

// Accept implements dedup.Store: one UPDATE compare-and-setting the token of
// a row still claimed. The holder may accept after its lease ran out as long
// as nobody took the key over.
func (s *Store) Accept(ctx context.Context, key dedup.Key, token dedup.Token, reply []byte) error {
	if reply == nil {
		reply = []byte{} // NULL is "no reply stored"
	}
	return s.transition(ctx, "accept", s.q.accept, string(key), string(token), reply)
}

// Abandon implements dedup.Store.
func (s *Store) Abandon(ctx context.Context, key dedup.Key, token dedup.Token) error {
	return s.transition(ctx, "abandon", s.q.abandon, string(key), string(token))
}

func (s *Store) transition(ctx context.Context, op, query string, args ...any) error {
	tag, err := execerFor(ctx, s.pool).Exec(ctx, query, args...)
	if err != nil {
		return wrap(op, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("pgstore: %s: %w", op, dedup.ErrStaleClaim)
	}
	return nil
}

// Expire implements dedup.Store. It deletes in batches of expireBatch rows,
// skipping rows locked by a concurrent claim.
func (s *Store) Expire(ctx context.Context, before time.Time) (int64, error) {
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, s.q.expire, before, expireBatch)
		if err != nil {
			return total, wrap("expire", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < expireBatch {
			return total, nil
		}
	}
}

// Close closes the pool. Later calls fail with ErrUnavailable.
func (s *Store) Close() error {
	s.closeOnce.Do(s.pool.Close)
	return nil
}

func ceilUS(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

// wrap adds context to err and marks failures to reach or use the server
// (network, pool closed, timeouts and cancellation, connection exceptions,
// resource exhaustion, shutdown, serialization failures, read-only standby)
// with dedup.ErrUnavailable. SQL errors of other classes are plain.
func wrap(op string, err error) error {
	if unavailable(err) {
		return fmt.Errorf("pgstore: %s: %w: %w", op, dedup.ErrUnavailable, err)
	}
	return fmt.Errorf("pgstore: %s: %w", op, err)
}

func unavailable(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return true // no answer from the server
	}
	if len(pe.Code) != 5 {
		return true
	}
	switch pe.Code[:2] {
	case "08", // connection exception
		"40", // transaction rollback (serialization, deadlock)
		"53", // insufficient resources
		"57", // operator intervention (shutdown, cancel)
		"58": // system error (I/O)
		return true
	}
	return pe.Code == "25006" || pe.Code == "55P03" // read-only transaction (standby), lock not available
}

var _ dedup.Store = (*Store)(nil)

// ClaimRecord implements dedup.ClaimReader.
func (s *Store) ClaimRecord(ctx context.Context, key dedup.Key) (dedup.ClaimRecord, error) {
	rec := dedup.ClaimRecord{Key: key}
	var lease, now time.Time
	err := s.pool.QueryRow(ctx, s.q.read, string(key)).Scan(&rec.State, &rec.PayloadSHA256, &rec.FirstSeen, &lease, &rec.Reply, &now)
	if errors.Is(err, pgx.ErrNoRows) {
		return dedup.ClaimRecord{}, dedup.ErrNotFound
	}
	if err != nil {
		return dedup.ClaimRecord{}, wrap("claim record", err)
	}
	rec.FirstSeen = rec.FirstSeen.UTC()
	return rec, nil
}

var _ dedup.ClaimReader = (*Store)(nil)
