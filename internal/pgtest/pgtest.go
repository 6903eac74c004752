// Package pgtest gives tests a PostgreSQL database: the server named by
// GATEWAY_TEST_PG_DSN (default DefaultDSN) and a fresh schema per test,
// dropped when the test ends.
//
// When the server cannot be reached the test is skipped with a message,
// except under CI=true, where it fails: CI must run the PostgreSQL tests.
//
// The DSN Schema returns caps each pool at PoolMaxConns connections. The
// gateway's own default (pgstore.DefaultMaxConns, 32) is right for one
// process per server, but go test runs two test binaries at once, each with
// stores open side by side (two pools per store pair in the fleet kits), and
// the server's max_connections (100 by default) is shared by all of them:
// uncapped, a run asked for more and failed with SQLSTATE 53300 "sorry, too
// many clients already".
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PoolMaxConns caps the pool of every store opened with a DSN from Schema.
// Concurrency tests still run 32 goroutines against it: they queue for a
// connection, as deliveries queue in a gateway whose pool is full.
const PoolMaxConns = 4

// DefaultDSN is used when GATEWAY_TEST_PG_DSN is not set.
const DefaultDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// EnvDSN names the environment variable holding the test server's DSN.
const EnvDSN = "GATEWAY_TEST_PG_DSN"

var (
	once    sync.Once
	admin   *pgxpool.Pool
	dsn     string
	openErr error
)

// connect checks the server once per test binary and keeps a small pool
// for creating and dropping schemas.
func connect() {
	dsn = os.Getenv(EnvDSN)
	if dsn == "" {
		dsn = DefaultDSN
	}
	// The tests set the pool size (Schema); DSN must stay one that
	// pgx.Connect takes.
	dsn = withoutPoolMaxConns(dsn)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		openErr = err
		return
	}
	cfg.MaxConns = 2
	admin, openErr = pgxpool.NewWithConfig(ctx, cfg)
	if openErr == nil {
		if openErr = admin.Ping(ctx); openErr != nil {
			admin.Close()
		}
	}
}

// DSN returns the test server's DSN after checking that it answers, or skips
// (fails under CI=true) the test. It never sets pool_max_conns (one the
// environment's DSN sets is removed), so pgx.Connect takes it.
func DSN(t testing.TB) string {
	t.Helper()
	once.Do(connect)
	if openErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL not reachable at %s: %v (CI=true requires it; set %s)", redact(dsn), openErr, EnvDSN)
		}
		t.Skipf("PostgreSQL not reachable at %s: %v; set %s to run this test", redact(dsn), openErr, EnvDSN)
	}
	return dsn
}

// Schema creates a schema with a random name on the test server and drops it
// (with everything in it) when the test ends. It returns the DSN, its pool
// capped at PoolMaxConns, and the schema name.
func Schema(t testing.TB) (dsn, schema string) {
	t.Helper()
	dsn = DSN(t)
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	schema = "test_" + hex.EncodeToString(b[:])
	exec(t, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	t.Cleanup(func() { exec(t, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE") })
	return WithPoolMaxConns(dsn, PoolMaxConns), schema
}

// withoutPoolMaxConns removes pool_max_conns from dsn (URL or
// keyword/value form).
func withoutPoolMaxConns(dsn string) string {
	if !strings.Contains(dsn, "pool_max_conns") {
		return dsn
	}
	if strings.Contains(dsn, "://") {
		if u, err := url.Parse(dsn); err == nil {
			q := u.Query()
			q.Del("pool_max_conns")
			u.RawQuery = q.Encode()
			return u.String()
		}
		return dsn
	}
	var kept []string
	for _, f := range strings.Fields(dsn) {
		if !strings.HasPrefix(f, "pool_max_conns=") {
			kept = append(kept, f)
		}
	}
	return strings.Join(kept, " ")
}

// WithPoolMaxConns returns dsn with pool_max_conns set to n, in the DSN's own
// form (URL or keyword/value). A DSN that already sets pool_max_conns is
// returned as it is.
func WithPoolMaxConns(dsn string, n int) string {
	if strings.Contains(dsn, "pool_max_conns") {
		return dsn
	}
	v := "pool_max_conns=" + strconv.Itoa(n)
	switch {
	case !strings.Contains(dsn, "://"):
		return dsn + " " + v
	case strings.Contains(dsn, "?"):
		return dsn + "&" + v
	}
	return dsn + "?" + v
}

func exec(t testing.TB, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := admin.Exec(ctx, sql); err != nil {
		t.Fatalf("pgtest: %s: %v", sql, err)
	}
}

// redact hides a password in a URL DSN.
func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(unparsable DSN)"
	}
	return u.Redacted()
}
