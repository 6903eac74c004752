// Package pgtest gives tests a PostgreSQL database: the server named by
// GATEWAY_TEST_PG_DSN (default DefaultDSN) and a fresh schema per test,
// dropped when the test ends.
//
// When the server cannot be reached the test is skipped with a message,
// except under CI=true, where it fails: CI must run the PostgreSQL tests.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

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
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	admin, openErr = pgxpool.New(ctx, dsn)
	if openErr == nil {
		if openErr = admin.Ping(ctx); openErr != nil {
			admin.Close()
		}
	}
}

// DSN returns the test server's DSN after checking that it answers, or skips
// (fails under CI=true) the test.
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
// (with everything in it) when the test ends. It returns the DSN and the
// schema name.
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
	return dsn, schema
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
