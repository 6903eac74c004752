package pgstore_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/internal/pgtest"
	"github.com/edigateway/gateway/outbound"
	"github.com/edigateway/gateway/outbound/outboundtest"
	"github.com/edigateway/gateway/store/internal/outboundcheck"
	"github.com/edigateway/gateway/store/pgstore"
)

func openOutbound(t testing.TB) *pgstore.Store {
	t.Helper()
	dsn, schema := pgtest.Schema(t)
	return open(t, dsn, schema, dedup.Options{})
}

func chunkCount(s *pgstore.Store) func(t testing.TB) int {
	return func(t testing.TB) int {
		var n int
		q := `SELECT count(*) FROM ` + pgx.Identifier{s.Schema(), "outbound_chunks"}.Sanitize()
		if err := s.Pool().QueryRow(context.Background(), q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
}

func TestOutboundIdempotentSubmit(t *testing.T) {
	t.Parallel()
	s := openOutbound(t)
	outboundcheck.IdempotentSubmit(t, s.Outbound(), outboundcheck.Hooks{Chunks: chunkCount(s)})
}

func TestOutboundLargePayload(t *testing.T) {
	s := openOutbound(t)
	outboundcheck.LargePayload(t, s.Outbound())
}

func TestOutboundFailedSubmit(t *testing.T) {
	t.Parallel()
	s := openOutbound(t)
	outboundcheck.FailedSubmit(t, s.Outbound(), outboundcheck.Hooks{Chunks: chunkCount(s)})
}

func TestOutboundLeaseFencing(t *testing.T) {
	t.Parallel()
	s := openOutbound(t)
	outboundcheck.LeaseFencing(t, s.Outbound())
}

func TestOutboundBacklogLease(t *testing.T) {
	if testing.Short() {
		t.Skip("inserts 100,000 messages")
	}
	outboundcheck.BacklogLease(t, func(t testing.TB) outboundcheck.Backlog {
		s := openOutbound(t)
		ctx := context.Background()
		table := pgx.Identifier{s.Schema(), "outbound_messages"}.Sanitize()
		return outboundcheck.Backlog{
			Store: s.Outbound(),
			Wait: func(t testing.TB, n int) {
				_, err := s.Pool().Exec(ctx, `INSERT INTO `+table+` (id, partner, protocol, message_id, payload, size,
	sha256, state, next_attempt, created, updated)
SELECT 'w' || lpad(i::text, 8, '0'), 'bulk', 'as2', '<w' || i || '@gw.test>', 'w' || i, 0, '', 'queued',
	now() + interval '1 day', now(), now()
FROM generate_series(1, $1::int) AS i`, n)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := s.Pool().Exec(ctx, `ANALYZE `+table); err != nil {
					t.Fatal(err)
				}
			},
			Plan: func(t testing.TB) string {
				plan, err := s.OutboundQueue().LeaseQueryPlan(ctx)
				if err != nil {
					t.Fatal(err)
				}
				return plan
			},
			Due: func(t testing.TB) {
				var id string
				err := s.Pool().QueryRow(ctx, `SELECT id FROM `+table+`
WHERE state IN ('queued', 'awaiting-mdn') AND next_attempt <= now() AND (leased_until IS NULL OR leased_until <= now())
ORDER BY next_attempt, id LIMIT 1`).Scan(&id)
				if err != nil {
					t.Fatal(err)
				}
			},
			PlanOK: func(plan string) bool {
				return strings.Contains(plan, "Index Scan using outbound_messages_due") && !strings.Contains(plan, "Seq Scan") &&
					!strings.Contains(plan, "Sort")
			},
		}
	})
}

// backdated is s's queue with SubmitAt for the kit's checks of messages
// created in one instant.
func backdated(s *pgstore.Store) outbound.Store {
	q := `UPDATE ` + pgx.Identifier{s.Schema(), "outbound_messages"}.Sanitize() + ` SET created = $2 WHERE id = $1`
	return outboundcheck.Backdated(s.Outbound(), func(ctx context.Context, id string, created time.Time) error {
		_, err := s.Pool().Exec(ctx, q, id, created)
		return err
	})
}

func TestOutboundContract(t *testing.T) {
	t.Parallel()
	outboundtest.Exercise(t, func(t *testing.T) outbound.Store { return backdated(openOutbound(t)) })
}

// TestOutboundContractTwoPools runs the kit against two stores (two pools)
// on one schema used alternately, as two gateways of a fleet.
func TestOutboundContractTwoPools(t *testing.T) {
	t.Parallel()
	outboundtest.Exercise(t, func(t *testing.T) outbound.Store {
		dsn, schema := pgtest.Schema(t)
		return outboundcheck.Alternate(backdated(open(t, dsn, schema, dedup.Options{})),
			open(t, dsn, schema, dedup.Options{}).Outbound())
	})
}

// TestOutboundPurgeOrphans: the chunks of an upload left by a crash are
// removed once nothing was written to it for the age given; an upload still
// being written and the payloads of messages stay.
func TestOutboundPurgeOrphans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openOutbound(t)
	m, _, err := s.Outbound().Submit(ctx, outboundcheck.Message("acme", ""), strings.NewReader("kept"))
	if err != nil {
		t.Fatal(err)
	}
	uploads := pgx.Identifier{s.Schema(), "outbound_uploads"}.Sanitize()
	chunks := pgx.Identifier{s.Schema(), "outbound_chunks"}.Sanitize()
	for _, q := range []string{
		`INSERT INTO ` + uploads + ` VALUES ('crashed', now() - interval '2 hours')`,
		`INSERT INTO ` + chunks + ` VALUES ('crashed', 0, '\x00', now() - interval '2 hours')`,
		`INSERT INTO ` + chunks + ` VALUES ('crashed', 1, '\x00', now() - interval '119 minutes')`,
		// started long ago, still writing
		`INSERT INTO ` + uploads + ` VALUES ('slow', now() - interval '2 hours')`,
		`INSERT INTO ` + chunks + ` VALUES ('slow', 0, '\x00', now() - interval '2 hours')`,
		`INSERT INTO ` + chunks + ` VALUES ('slow', 1, '\x00', now() - interval '1 second')`,
	} {
		if _, err := s.Pool().Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	n, err := s.OutboundQueue().PurgeOrphanPayloads(ctx, time.Hour)
	if err != nil || n != 1 {
		t.Fatalf("PurgeOrphanPayloads = %d, %v; want 1", n, err)
	}
	if got := chunkCount(s)(t); got != 3 {
		t.Fatalf("%d chunks left, want 3 (the message's and the slow upload's)", got)
	}
	rc, err := s.Outbound().OpenPayload(ctx, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if b, err := io.ReadAll(rc); err != nil || string(b) != "kept" {
		t.Fatalf("payload after the purge: %q, %v", b, err)
	}
}

func TestOutboundPurgeMidway(t *testing.T) {
	t.Parallel()
	s := openOutbound(t)
	outboundcheck.PurgeMidway(t, s.Outbound(), s.OutboundQueue().PurgeOrphanPayloads, outboundcheck.Hooks{Chunks: chunkCount(s)})
}

// TestOutboundStateListUsesItsIndex, with 10,000 messages queued: a list
// of one state (the console's tabs) walks outbound_messages_state_created
// backwards, so that a page of failed messages does not scan every queued
// one newer; a page after a keyset cursor (created, id) is bounded in
// the index of its filter; it lists the right messages.
func TestOutboundStateListUsesItsIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openOutbound(t)
	table := pgx.Identifier{s.Schema(), "outbound_messages"}.Sanitize()
	failed, _, err := s.Outbound().Submit(ctx, outboundcheck.Message("acme", ""), strings.NewReader("old"))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`UPDATE ` + table + ` SET state = 'failed', created = now() - interval '1 day' WHERE id = '` + failed.ID + `'`,
		`INSERT INTO ` + table + ` (id, partner, protocol, message_id, payload, size, sha256, state, next_attempt, created, updated)
SELECT 'w' || lpad(i::text, 8, '0'), 'bulk', 'as2', '<w' || i || '@gw.test>', 'w' || i, 0, '', 'queued',
	now() + interval '1 day', now() + i * interval '1 millisecond', now()
FROM generate_series(1, 10000) AS i`,
		`ANALYZE ` + table,
	} {
		if _, err := s.Pool().Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	f := outbound.Filter{States: []outbound.State{outbound.Failed}, Limit: 51}
	plan, err := s.OutboundQueue().ListQueryPlan(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan, "Index Scan Backward using outbound_messages_state_created") || strings.Contains(plan, "Seq Scan") ||
		strings.Contains(plan, "Sort") {
		t.Errorf("a list of one state scans:\n%s", plan)
	}
	// A page after a keyset cursor (created, id): a backward scan of the
	// (created, id) index of the filter, bounded by the cursor, no sort.
	cursor := time.Now().Add(time.Hour)
	for _, tc := range []struct {
		f     outbound.Filter
		index string
	}{
		{outbound.Filter{}, "outbound_messages_created"},
		{outbound.Filter{States: []outbound.State{outbound.Queued, outbound.Failed}}, "outbound_messages_created"},
		{outbound.Filter{Partner: "acme"}, "outbound_messages_partner_created"},
		{outbound.Filter{States: []outbound.State{outbound.Failed}}, "outbound_messages_state_created"},
	} {
		kf := tc.f
		kf.Before, kf.BeforeID, kf.Limit = cursor, "w00005000", 51
		plan, err := s.OutboundQueue().ListQueryPlan(ctx, kf)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(plan, "Index Scan Backward using "+tc.index) || !strings.Contains(plan, "ROW(created, id) < ROW(") ||
			strings.Contains(plan, "Seq Scan") || strings.Contains(plan, "Sort") {
			t.Errorf("a page of %+v after a cursor is not a bounded scan of %s:\n%s", tc.f, tc.index, plan)
		}
	}
	ms, err := s.Outbound().List(ctx, f)
	if err != nil || len(ms) != 1 || ms[0].ID != failed.ID {
		t.Fatalf("List failed: %d messages, %v", len(ms), err)
	}
	ms, err = s.Outbound().List(ctx, outbound.Filter{States: []outbound.State{outbound.Queued}, Limit: 3})
	if err != nil || len(ms) != 3 || ms[0].ID != "w00010000" || ms[2].ID != "w00009998" {
		t.Fatalf("List queued: %+v, %v", ms, err)
	}
}
