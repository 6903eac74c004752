package pgstore_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/dedup/deduptest"
	"github.com/edigateway/gateway/internal/pgtest"
	"github.com/edigateway/gateway/store/pgstore"
)

func open(t testing.TB, dsn, schema string, opts dedup.Options) *pgstore.Store {
	t.Helper()
	s, err := pgstore.Open(context.Background(), dsn, opts, pgstore.WithSchema(schema))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestContract(t *testing.T) {
	t.Parallel()
	deduptest.Exercise(t, func(t testing.TB, opts dedup.Options) dedup.Store {
		dsn, schema := pgtest.Schema(t)
		return open(t, dsn, schema, opts)
	})
}

// TestContractTwoPools runs the kit against two stores (two pools) on one
// schema used alternately, as two gateways of a fleet would.
func TestContractTwoPools(t *testing.T) {
	t.Parallel()
	deduptest.Exercise(t, func(t testing.TB, opts dedup.Options) dedup.Store {
		dsn, schema := pgtest.Schema(t)
		return &alternate{a: open(t, dsn, schema, opts), b: open(t, dsn, schema, opts)}
	})
}

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

func TestSchemaValidation(t *testing.T) {
	for _, name := range []string{"", "Gateway", "bad-name", `x"; DROP SCHEMA public; --`, "1abc", "pg_catalog",
		"a234567890123456789012345678901234567890123456789012345678901234"} {
		if pgstore.ValidSchema(name) {
			t.Errorf("ValidSchema(%q) = true", name)
		}
		_, err := pgstore.Open(context.Background(), pgtest.DefaultDSN, dedup.Options{}, pgstore.WithSchema(name))
		if err == nil || errors.Is(err, dedup.ErrUnavailable) {
			t.Errorf("Open with schema %q: %v", name, err)
		}
	}
	for _, name := range []string{"gateway", "_x", "edi_2026", "a23456789012345678901234567890123456789012345678901234567890123"} {
		if !pgstore.ValidSchema(name) {
			t.Errorf("ValidSchema(%q) = false", name)
		}
	}
}

func TestInvalidDSNDoesNotLeakPassword(t *testing.T) {
	_, err := pgstore.Open(context.Background(), "postgres://u:s3cret@host:notaport/db", dedup.Options{})
	if err == nil || containsString(err.Error(), "s3cret") {
		t.Fatalf("Open with a bad DSN: %v", err)
	}
}

func containsString(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func TestMigrations(t *testing.T) {
	ctx := context.Background()
	dsn, schema := pgtest.Schema(t)
	// Gateways starting together migrate once.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := pgstore.Open(ctx, dsn, dedup.Options{}, pgstore.WithSchema(schema))
			if err == nil {
				s.Close()
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("concurrent Open: %v", err)
		}
	}
	s := open(t, dsn, schema, dedup.Options{})
	var n int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, "gateway_migrations"}.Sanitize()+
		` WHERE component = 'dedup'`).Scan(&n); err != nil || n != 4 {
		t.Fatalf("%d migrations recorded, %v; want 4", n, err)
	}
	// Another component shares the schema.
	fsys := fstest.MapFS{"0001_example.sql": {Data: []byte("CREATE TABLE example (id bigint PRIMARY KEY);")}}
	for range 2 {
		if err := pgstore.Migrate(ctx, s.Pool(), schema, "example", fsys); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Pool().Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "example"}.Sanitize()+` VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	// A schema migrated by a newer gateway is refused.
	if _, err := s.Pool().Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "gateway_migrations"}.Sanitize()+
		` (component, version, name) VALUES ('dedup', 99, '0099_future')`); err != nil {
		t.Fatal(err)
	}
	if s2, err := pgstore.Open(ctx, dsn, dedup.Options{}, pgstore.WithSchema(schema)); err == nil {
		s2.Close()
		t.Fatal("Open accepted a schema migrated by a newer gateway")
	}
}

func TestCreatesSchema(t *testing.T) {
	ctx := context.Background()
	dsn, schema := pgtest.Schema(t)
	inner := schema + "_store" // does not exist yet
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, pgtest.DSN(t))
		if err == nil {
			conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{inner}.Sanitize()+` CASCADE`)
			conn.Close(ctx)
		}
	})
	s := open(t, dsn, inner, dedup.Options{})
	if s.Schema() != inner {
		t.Fatalf("Schema() = %q", s.Schema())
	}
	if _, err := s.Claim(ctx, dedup.ClaimRequest{Key: deduptest.NewKey(t)}); err != nil {
		t.Fatal(err)
	}
}

func TestFirstSeenIsDatabaseTime(t *testing.T) {
	ctx := context.Background()
	dsn, schema := pgtest.Schema(t)
	s := open(t, dsn, schema, dedup.Options{Lease: time.Minute})
	key := deduptest.NewKey(t)
	d, err := s.Claim(ctx, dedup.ClaimRequest{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	var first, until time.Time
	if err := s.Pool().QueryRow(ctx, `SELECT first_seen, lease_until FROM `+
		pgx.Identifier{schema, "dedup_claims"}.Sanitize()+` WHERE key = $1`, string(key)).Scan(&first, &until); err != nil {
		t.Fatal(err)
	}
	if !d.FirstSeen.Equal(first) || until.Sub(first) != time.Minute {
		t.Fatalf("FirstSeen %v, row first_seen %v, lease_until %v", d.FirstSeen, first, until)
	}
}

func TestUnavailable(t *testing.T) {
	ctx := context.Background()
	t.Run("unreachable", func(t *testing.T) {
		_, err := pgstore.Open(ctx, "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=2", dedup.Options{})
		if !errors.Is(err, dedup.ErrUnavailable) {
			t.Fatalf("Open of an unreachable server: %v", err)
		}
	})
	t.Run("closed", func(t *testing.T) {
		dsn, schema := pgtest.Schema(t)
		s := open(t, dsn, schema, dedup.Options{})
		key := deduptest.NewKey(t)
		d, err := s.Claim(ctx, dedup.ClaimRequest{Key: key})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		if _, err := s.Claim(ctx, dedup.ClaimRequest{Key: key}); !errors.Is(err, dedup.ErrUnavailable) {
			t.Errorf("Claim after Close: %v", err)
		}
		if err := s.Accept(ctx, key, d.Token, nil); !errors.Is(err, dedup.ErrUnavailable) {
			t.Errorf("Accept after Close: %v", err)
		}
		if err := s.Abandon(ctx, key, d.Token); !errors.Is(err, dedup.ErrUnavailable) {
			t.Errorf("Abandon after Close: %v", err)
		}
		if _, err := s.Expire(ctx, time.Now()); !errors.Is(err, dedup.ErrUnavailable) {
			t.Errorf("Expire after Close: %v", err)
		}
		if err := s.AuditSink().Write(ctx, audit.Record{Step: audit.StepReceived}); !errors.Is(err, dedup.ErrUnavailable) {
			t.Errorf("audit Write after Close: %v", err)
		}
	})
	t.Run("terminated-connections", func(t *testing.T) {
		dsn, schema := pgtest.Schema(t)
		// The store's sessions carry their own application_name, so that
		// only they are killed, not those of tests running beside this one.
		app := "gateway-test-" + schema
		s := open(t, withApplicationName(t, dsn, app), schema, dedup.Options{})
		if _, err := s.Claim(ctx, dedup.ClaimRequest{Key: deduptest.NewKey(t)}); err != nil {
			t.Fatal(err)
		}
		// An operator kills the store's sessions: the pool reconnects and
		// the next claims work.
		admin, err := pgx.Connect(ctx, pgtest.DSN(t))
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close(ctx)
		var killed int
		if err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE pid <> pg_backend_pid() AND datname = current_database() AND application_name = $1`, app).Scan(&killed); err != nil {
			t.Fatal(err)
		}
		if killed == 0 {
			t.Fatalf("no session of the store (application_name %s) to kill", app)
		}
		var ok int
		for range 3 {
			if _, err := s.Claim(ctx, dedup.ClaimRequest{Key: deduptest.NewKey(t)}); err == nil {
				ok++
			} else if !errors.Is(err, dedup.ErrUnavailable) {
				t.Errorf("Claim on a killed session: %v, want ErrUnavailable", err)
			}
		}
		if ok == 0 {
			t.Errorf("the pool did not reconnect")
		}
	})
	t.Run("sql-error-is-not-unavailable", func(t *testing.T) {
		dsn, schema := pgtest.Schema(t)
		s := open(t, dsn, schema, dedup.Options{})
		if _, err := s.Pool().Exec(ctx, `DROP TABLE `+pgx.Identifier{schema, "dedup_claims"}.Sanitize()); err != nil {
			t.Fatal(err)
		}
		_, err := s.Claim(ctx, dedup.ClaimRequest{Key: deduptest.NewKey(t)})
		if err == nil || errors.Is(err, dedup.ErrUnavailable) {
			t.Fatalf("Claim on a missing table: %v, want a plain error", err)
		}
	})
}

func TestExpireBatches(t *testing.T) {
	ctx := context.Background()
	dsn, schema := pgtest.Schema(t)
	s := open(t, dsn, schema, dedup.Options{})
	table := pgx.Identifier{schema, "dedup_claims"}.Sanitize()
	const n = 12000 // more than two batches
	if _, err := s.Pool().Exec(ctx, `INSERT INTO `+table+` (key, state, token, first_seen, lease_until, reply)
SELECT md5(i::text) || md5((i+1)::text), 'accepted', 't', now() - interval '2 days' - i * interval '1 second', now(), '\x00'
FROM generate_series(1, $1::int) i`, n); err != nil {
		t.Fatal(err)
	}
	held := deduptest.NewKey(t)
	if _, err := s.Claim(ctx, dedup.ClaimRequest{Key: held}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Expire(ctx, time.Now().Add(-24*time.Hour))
	if err != nil || got != n {
		t.Fatalf("Expire: %d, %v; want %d", got, err, n)
	}
	if d, _ := s.Claim(ctx, dedup.ClaimRequest{Key: held}); d.Outcome != dedup.InFlight {
		t.Fatalf("the claim in progress did not survive Expire: %v", d.Outcome)
	}
}

func TestAuditSink(t *testing.T) {
	ctx := context.Background()
	dsn, schema := pgtest.Schema(t)
	s := open(t, dsn, schema, dedup.Options{})
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
	if err := sink.Write(ctx, audit.Record{Step: audit.StepHandler, Key: "k3"}); err != nil {
		t.Fatal(err)
	}
	got, err = s.Audit().ByKey(ctx, "k3")
	if err != nil || len(got) != 1 || time.Since(got[0].Time).Abs() > 5*time.Second {
		t.Fatalf("record without time: %+v %v", got, err)
	}
}

// withApplicationName sets application_name in a PostgreSQL URL or
// keyword/value DSN.
func withApplicationName(t testing.TB, dsn, name string) string {
	t.Helper()
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set("application_name", name)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return dsn + " application_name=" + name
}

// TestPoolSize: the pool holds DefaultMaxConns connections unless the DSN
// sets pool_max_conns, so that concurrent exchanges do not queue behind
// pgx's default of 4 on a small machine.
func TestPoolSize(t *testing.T) {
	_, schema := pgtest.Schema(t)
	dsn := pgtest.DSN(t) // the server's DSN as given, without the tests' pool cap
	if got := open(t, dsn, schema, dedup.Options{}).Pool().Config().MaxConns; got != pgstore.DefaultMaxConns {
		t.Errorf("MaxConns %d, want %d", got, pgstore.DefaultMaxConns)
	}
	if got := open(t, pgtest.WithPoolMaxConns(dsn, 3), schema, dedup.Options{}).Pool().Config().MaxConns; got != 3 {
		t.Errorf("with pool_max_conns=3: MaxConns %d", got)
	}
}
