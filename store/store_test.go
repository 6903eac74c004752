package store_test

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/dedup/deduptest"
	"github.com/edigateway/gateway/internal/pgtest"
	"github.com/edigateway/gateway/outbound"
	"github.com/edigateway/gateway/outbound/outboundtest"
	"github.com/edigateway/gateway/outbox"
	"github.com/edigateway/gateway/store"
	"github.com/edigateway/gateway/store/pgstore"
	"github.com/edigateway/gateway/store/sqlitestore"
)

func TestMemoryBackendContract(t *testing.T) {
	t.Parallel()
	deduptest.Exercise(t, func(t testing.TB, opts dedup.Options) dedup.Store {
		b, err := store.Open(context.Background(), "memory:", opts)
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}

func TestMemoryBackendLedgerContract(t *testing.T) {
	t.Parallel()
	deduptest.ExerciseLedger(t, func(t testing.TB, opts dedup.Options) dedup.Ledger {
		b, err := store.Open(context.Background(), "memory:", opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	})
}

func TestMemoryBackendOutboxContract(t *testing.T) {
	t.Parallel()
	deduptest.ExerciseOutbox(t, func(t testing.TB) outbox.Store {
		b, err := store.Open(context.Background(), "memory:", dedup.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return b.Outbox()
	})
}

func TestMemoryBackendOutboundContract(t *testing.T) {
	t.Parallel()
	outboundtest.Exercise(t, func(t *testing.T) outbound.Store {
		b, err := store.Open(context.Background(), "memory:", dedup.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return b.Outbound()
	})
}

// roundTrip claims, accepts, sees the duplicate, does the same for an
// interchange in the ledger, queues and leases a reply, submits and leases
// a message to send and writes an audit record: every part of the backend
// in one database.
func roundTrip(t *testing.T, b store.Backend) {
	t.Helper()
	ctx := context.Background()
	ic := deduptest.NewInterchange(t)
	li, err := b.ClaimInterchange(ctx, dedup.InterchangeClaim{Interchange: ic, PayloadSHA256: "h", MessageID: "m1", Window: time.Hour})
	if err != nil || li.Outcome != dedup.Claimed {
		t.Fatalf("claim interchange: %+v %v", li, err)
	}
	if err := b.AcceptInterchange(ctx, ic.Key, li.Token); err != nil {
		t.Fatal(err)
	}
	li, err = b.ClaimInterchange(ctx, dedup.InterchangeClaim{Interchange: ic, PayloadSHA256: "h", MessageID: "m2", Window: time.Hour})
	if err != nil || li.Outcome != dedup.Duplicate || li.Retries != 1 {
		t.Fatalf("duplicate interchange: %+v %v", li, err)
	}
	del := deduptest.NewDelivery(t)
	if err := b.Outbox().Enqueue(ctx, del); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Outbox().Lease(ctx, 10, time.Minute); err != nil || len(got) != 1 || got[0].ID != del.ID {
		t.Fatalf("outbox lease: %+v %v", got, err)
	}
	om := outboundtest.NewMessage(t, "acme")
	if _, created, err := b.Outbound().Submit(ctx, om, strings.NewReader("ISA*00~")); err != nil || !created {
		t.Fatalf("outbound submit: created %v, %v", created, err)
	}
	if got, err := b.Outbound().Lease(ctx, 10, time.Minute); err != nil || len(got) != 1 || got[0].ID != om.ID {
		t.Fatalf("outbound lease: %+v %v", got, err)
	}
	key := deduptest.NewKey(t)
	d, err := b.Claim(ctx, dedup.ClaimRequest{Key: key, PayloadSHA256: "h"})
	if err != nil || d.Outcome != dedup.Claimed {
		t.Fatalf("claim: %+v %v", d, err)
	}
	if err := b.Accept(ctx, key, d.Token, []byte("mdn\x00")); err != nil {
		t.Fatal(err)
	}
	d, err = b.Claim(ctx, dedup.ClaimRequest{Key: key})
	if err != nil || d.Outcome != dedup.Duplicate || string(d.Reply) != "mdn\x00" {
		t.Fatalf("duplicate: %+v %v", d, err)
	}
	cr, ok := b.(dedup.ClaimReader)
	if !ok {
		t.Fatalf("backend %T is no dedup.ClaimReader", b)
	}
	if rec, err := cr.ClaimRecord(ctx, key); err != nil || rec.State != "accepted" || rec.PayloadSHA256 != "h" ||
		string(rec.Reply) != "mdn\x00" || rec.FirstSeen.IsZero() {
		t.Fatalf("ClaimRecord: %+v %v", rec, err)
	}
	if _, err := cr.ClaimRecord(ctx, deduptest.NewKey(t)); !errors.Is(err, dedup.ErrNotFound) {
		t.Fatalf("ClaimRecord(unknown) = %v, want ErrNotFound", err)
	}
	if err := b.AuditSink().Write(ctx, audit.Record{Step: audit.StepReceived, Partner: "acme", Key: string(key)}); err != nil {
		t.Fatal(err)
	}
}

func TestOpenMemory(t *testing.T) {
	b, err := store.Open(context.Background(), "memory:", dedup.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	roundTrip(t, b)
	m := b.(*store.Memory)
	if recs := m.Audit.Records(); len(recs) != 1 || recs[0].Partner != "acme" {
		t.Fatalf("audit records %+v", recs)
	}
}

func TestOpenSQLite(t *testing.T) {
	dir := t.TempDir()
	for _, u := range []string{
		"sqlite:" + filepath.Join(dir, "a.db"),
		"sqlite://" + filepath.Join(dir, "b", "b.db"), // sqlite:///abs/path
	} {
		b, err := store.Open(context.Background(), u, dedup.Options{})
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		roundTrip(t, b)
		if _, ok := b.(*sqlitestore.Store); !ok {
			t.Errorf("%s: backend %T", u, b)
		}
		b.Close()
	}
	for _, f := range []string{"a.db", "b/b.db"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
}

func TestOpenPostgres(t *testing.T) {
	dsn, schema := pgtest.Schema(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("schema", schema)
	u.RawQuery = q.Encode()
	for _, s := range []string{u.String(), "postgresql" + strings.TrimPrefix(u.String(), "postgres")} {
		b, err := store.Open(context.Background(), s, dedup.Options{})
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		roundTrip(t, b)
		if pg, ok := b.(*pgstore.Store); !ok || pg.Schema() != schema {
			t.Errorf("backend %T, schema %q", b, pg.Schema())
		}
		b.Close()
	}
}

func TestOpenRejects(t *testing.T) {
	for _, u := range []string{"", "memory:x", "sqlite:", "sqlite://", "mysql://u:pw@h/db", "/var/lib/dedup.db",
		"postgres://u:s3cret@h/db?schema=", "postgres://u:s3cret@h/db?schema=Bad-Name",
		"postgres://u:s3cret@h:notaport/db"} {
		b, err := store.Open(context.Background(), u, dedup.Options{})
		if err == nil {
			b.Close()
			t.Errorf("Open(%q) succeeded", u)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open(%q): error repeats the password: %v", u, err)
		}
		if errors.Is(err, dedup.ErrUnavailable) {
			t.Errorf("Open(%q): a bad URL is not ErrUnavailable: %v", u, err)
		}
	}
}

func TestOpenUnreachablePostgres(t *testing.T) {
	_, err := store.Open(context.Background(), "postgres://postgres:s3cret@127.0.0.1:1/x?sslmode=disable&connect_timeout=2", dedup.Options{})
	if !errors.Is(err, dedup.ErrUnavailable) || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("unreachable: %v", err)
	}
}
