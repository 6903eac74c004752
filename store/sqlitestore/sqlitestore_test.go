package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/dedup/deduptest"
	"github.com/edigateway/gateway/store/sqlitestore"
)

func open(t testing.TB, path string, opts dedup.Options, o ...sqlitestore.Option) *sqlitestore.Store {
	t.Helper()
	s, err := sqlitestore.Open(context.Background(), path, opts, o...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestContract(t *testing.T) {
	t.Parallel()
	deduptest.Exercise(t, func(t testing.TB, opts dedup.Options) dedup.Store {
		return open(t, filepath.Join(t.TempDir(), "dedup.db"), opts)
	})
}

// TestContractTwoHandles runs the kit against two Store handles on one file
// used alternately, as two gateway processes sharing a database would.
func TestContractTwoHandles(t *testing.T) {
	t.Parallel()
	deduptest.Exercise(t, func(t testing.TB, opts dedup.Options) dedup.Store {
		path := filepath.Join(t.TempDir(), "dedup.db")
		return &alternate{a: open(t, path, opts), b: open(t, path, opts)}
	})
}

// alternate sends each call to the next of two stores.
type alternate struct {
	mu   sync.Mutex
	n    int
	a, b dedup.Store
}

func (s *alternate) next() dedup.Store {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	if s.n%2 == 0 {
		return s.a
	}
	return s.b
}

func (s *alternate) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Decision, error) {
	return s.next().Claim(ctx, req)
}
func (s *alternate) Accept(ctx context.Context, k dedup.Key, tok dedup.Token, reply []byte) error {
	return s.next().Accept(ctx, k, tok, reply)
}
func (s *alternate) Abandon(ctx context.Context, k dedup.Key, tok dedup.Token) error {
	return s.next().Abandon(ctx, k, tok)
}
func (s *alternate) Expire(ctx context.Context, before time.Time) (int64, error) {
	return s.next().Expire(ctx, before)
}
func (s *alternate) Close() error { return errors.Join(s.a.Close(), s.b.Close()) }

func TestWALAndSurvivesReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sub", "dir", "dedup.db") // directories are created
	s, err := sqlitestore.Open(ctx, path, dedup.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var mode, sync string
	if err := s.DB().QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode %q, %v", mode, err)
	}
	if err := s.DB().QueryRowContext(ctx, "PRAGMA synchronous").Scan(&sync); err != nil || sync != "2" {
		t.Fatalf("synchronous %q (want 2 = FULL), %v", sync, err)
	}
	key := deduptest.NewKey(t)
	d, err := s.Claim(ctx, dedup.ClaimRequest{Key: key, PayloadSHA256: "h"})
	if err != nil || d.Outcome != dedup.Claimed {
		t.Fatalf("claim: %+v %v", d, err)
	}
	if err := s.Accept(ctx, key, d.Token, []byte("\x00mdn\xff")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopen: migrations are not applied twice and the accepted key stays.
	s = open(t, path, dedup.Options{})
	got, err := s.Claim(ctx, dedup.ClaimRequest{Key: key})
	if err != nil || got.Outcome != dedup.Duplicate || string(got.Reply) != "\x00mdn\xff" || got.PayloadSHA256 != "h" {
		t.Fatalf("after reopen: %+v %v", got, err)
	}
	var versions int
	if err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM gateway_migrations WHERE component = 'dedup'`).
		Scan(&versions); err != nil || versions != 5 {
		t.Fatalf("%d migrations recorded, %v; want 5", versions, err)
	}
}

func TestFirstSeenFromDatabaseClock(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "d.db"), dedup.Options{})
	before := time.Now().Truncate(time.Millisecond)
	d, err := s.Claim(ctx, dedup.ClaimRequest{Key: deduptest.NewKey(t)})
	after := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	if d.FirstSeen.Before(before) || d.FirstSeen.After(after) || d.FirstSeen.Nanosecond()%int(time.Millisecond) != 0 {
		t.Fatalf("FirstSeen %v: want SQLite's millisecond clock between %v and %v", d.FirstSeen, before, after)
	}
}

func TestRefusesNewerSchema(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "d.db")
	s := open(t, path, dedup.Options{})
	if _, err := s.DB().ExecContext(ctx, `INSERT INTO gateway_migrations VALUES ('dedup', 99, '0099_future', 0)`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := sqlitestore.Open(ctx, path, dedup.Options{}); err == nil {
		t.Fatal("Open accepted a database migrated by a newer gateway")
	}
}

func TestMigrateOtherComponent(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "d.db"), dedup.Options{})
	fsys := fstest.MapFS{"0001_example.sql": {Data: []byte("CREATE TABLE example (id INTEGER PRIMARY KEY);")}}
	for range 2 {
		if err := sqlitestore.Migrate(ctx, s.DB(), "example", fsys); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.DB().ExecContext(ctx, "INSERT INTO example DEFAULT VALUES"); err != nil {
		t.Fatal(err)
	}
}

func TestOpenRefusesNonPaths(t *testing.T) {
	for _, p := range []string{"", ":memory:", "file:x.db", "x.db?mode=ro", "x#y"} {
		if _, err := sqlitestore.Open(context.Background(), p, dedup.Options{}); err == nil {
			t.Errorf("Open(%q) succeeded", p)
		}
	}
}

func TestUnavailable(t *testing.T) {
	ctx := context.Background()
	t.Run("closed", func(t *testing.T) {
		s := open(t, filepath.Join(t.TempDir(), "d.db"), dedup.Options{})
		s.Close()
		if _, err := s.Claim(ctx, dedup.ClaimRequest{Key: deduptest.NewKey(t)}); !errors.Is(err, dedup.ErrUnavailable) {
			t.Errorf("Claim after Close: %v", err)
		}
		if err := s.Accept(ctx, deduptest.NewKey(t), "x", nil); !errors.Is(err, dedup.ErrUnavailable) {
			t.Errorf("Accept after Close: %v", err)
		}
		if _, err := s.Expire(ctx, time.Now()); !errors.Is(err, dedup.ErrUnavailable) {
			t.Errorf("Expire after Close: %v", err)
		}
		if err := s.Audit().Write(ctx, audit.Record{Step: audit.StepReceived}); !errors.Is(err, dedup.ErrUnavailable) {
			t.Errorf("audit Write after Close: %v", err)
		}
	})
	t.Run("cannot-open", func(t *testing.T) {
		dir := t.TempDir() // a directory is not a database file
		_, err := sqlitestore.Open(ctx, dir, dedup.Options{})
		if !errors.Is(err, dedup.ErrUnavailable) {
			t.Errorf("Open(directory): %v", err)
		}
	})
	t.Run("busy", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "d.db")
		s := open(t, path, dedup.Options{}, sqlitestore.WithBusyTimeout(100*time.Millisecond))
		// Another process holds the write lock.
		other, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		conn, err := other.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
			t.Fatal(err)
		}
		key := deduptest.NewKey(t)
		start := time.Now()
		_, err = s.Claim(ctx, dedup.ClaimRequest{Key: key})
		if !errors.Is(err, dedup.ErrUnavailable) {
			t.Fatalf("Claim while another process writes: %v", err)
		}
		if waited := time.Since(start); waited < 100*time.Millisecond {
			t.Errorf("Claim gave up after %v, before the busy timeout", waited)
		}
		if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
			t.Fatal(err)
		}
		if d, err := s.Claim(ctx, dedup.ClaimRequest{Key: key}); err != nil || d.Outcome != dedup.Claimed {
			t.Fatalf("Claim after the lock was released: %+v %v", d, err)
		}
	})
	t.Run("canceled", func(t *testing.T) {
		s := open(t, filepath.Join(t.TempDir(), "d.db"), dedup.Options{})
		c, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := s.Claim(c, dedup.ClaimRequest{Key: deduptest.NewKey(t)}); !errors.Is(err, dedup.ErrUnavailable) {
			t.Errorf("Claim with a canceled context: %v", err)
		}
	})
}

func TestExpireBatches(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "d.db"), dedup.Options{})
	const n = 2500 // more than two batches
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := tx.ExecContext(ctx, `INSERT INTO dedup_claims (key, state, token, first_seen, lease_until, reply)
VALUES (?, 'accepted', 't', ?, 0, x'00')`, deduptest.NewKey(t), int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	held := deduptest.NewKey(t)
	if _, err := s.Claim(ctx, dedup.ClaimRequest{Key: held}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Expire(ctx, time.UnixMilli(n-100))
	if err != nil || got != n-100 {
		t.Fatalf("Expire: %d, %v; want %d", got, err, n-100)
	}
	got, err = s.Expire(ctx, time.Now().Add(time.Hour))
	if err != nil || got != 100 {
		t.Fatalf("second Expire: %d, %v; want 100", got, err)
	}
	if d, _ := s.Claim(ctx, dedup.ClaimRequest{Key: held}); d.Outcome != dedup.InFlight {
		t.Fatalf("the claim in progress did not survive Expire: %v", d.Outcome)
	}
}

func TestAuditSink(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "d.db"), dedup.Options{})
	var sink audit.Sink = s.AuditSink()
	at := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)
	recs := []audit.Record{
		{Time: at, Step: audit.StepReceived, Partner: "acme", Protocol: "as2", MessageID: "m1@acme",
			Key: "k1", PayloadSHA256: "abc"},
		{Time: at.Add(time.Millisecond), Step: audit.StepDecision, Partner: "acme", Protocol: "as2",
			MessageID: "m1@acme", Key: "k1", InterchangeKey: "ik", Reference: "000000001", Decision: "new"},
		{Time: at.Add(2 * time.Millisecond), Step: audit.StepReply, Partner: "acme", Protocol: "as2",
			MessageID: "m1@acme", Key: "k1", Disposition: "automatic-action/MDN-sent-automatically; processed",
			Error: "handler: disk full\n\"quoted\" ünïcode"},
		{Time: at, Step: audit.StepReceived, Partner: "other", Protocol: "as4", MessageID: "m1@acme", Key: "k2"},
	}
	for _, r := range recs {
		if err := sink.Write(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Audit().ByKey(ctx, "k1")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("ByKey: %d records, want 3", len(got))
	}
	for i, r := range got {
		want := recs[i]
		want.Time = want.Time.Truncate(time.Microsecond)
		if r != want {
			t.Errorf("record %d:\n got %+v\nwant %+v", i, r, want)
		}
	}
	got, err = s.Audit().ByMessage(ctx, "other", "m1@acme")
	if err != nil || len(got) != 1 || got[0].Key != "k2" || got[0].Protocol != "as4" {
		t.Fatalf("ByMessage: %+v %v", got, err)
	}
	// A record without a time gets the database's.
	if err := sink.Write(ctx, audit.Record{Step: audit.StepHandler, Key: "k3"}); err != nil {
		t.Fatal(err)
	}
	got, err = s.Audit().ByKey(ctx, "k3")
	if err != nil || len(got) != 1 || time.Since(got[0].Time) > 5*time.Second || time.Since(got[0].Time) < -5*time.Second {
		t.Fatalf("record without time: %+v %v", got, err)
	}
}
