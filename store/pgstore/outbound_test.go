package pgstore_test

import (
	"context"
	"strings"
	"testing"

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

func TestOutboundContract(t *testing.T) {
	t.Parallel()
	outboundtest.Exercise(t, func(t *testing.T) outbound.Store { return openOutbound(t).Outbound() })
}
