package sqlitestore

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/outbound"
	"github.com/edigateway/gateway/outbound/outboundtest"
	"github.com/edigateway/gateway/store/internal/outboundcheck"
)

func openOutbound(t testing.TB) *Store {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "gw.db"), dedup.Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func chunkCount(s *Store) func(t testing.TB) int {
	return func(t testing.TB) int {
		var n int
		if err := s.db.QueryRow(`SELECT count(*) FROM outbound_chunks`).Scan(&n); err != nil {
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

// bulkWaitingSQL inserts ?1 messages of partner bulk due in a day.
const bulkWaitingSQL = `WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < ?1)
INSERT INTO outbound_messages (id, partner, protocol, message_id, payload, size, sha256, state, next_attempt,
	created, updated)
SELECT printf('w%08d', i), 'bulk', 'as2', printf('<w%08d@gw.test>', i), printf('w%08d', i), 0, '', 'queued',
	` + nowMS + ` + 86400000, ` + nowMS + `, ` + nowMS + ` FROM g`

func TestOutboundBacklogLease(t *testing.T) {
	if testing.Short() {
		t.Skip("inserts 100,000 messages")
	}
	outboundcheck.BacklogLease(t, func(t testing.TB) outboundcheck.Backlog {
		s := openOutbound(t)
		return outboundcheck.Backlog{
			Store: s.Outbound(),
			Wait: func(t testing.TB, n int) {
				if _, err := s.db.Exec(bulkWaitingSQL, n); err != nil {
					t.Fatal(err)
				}
				if _, err := s.db.Exec(`ANALYZE outbound_messages`); err != nil {
					t.Fatal(err)
				}
			},
			Plan: func(t testing.TB) string {
				plan, err := s.OutboundQueue().LeaseQueryPlan(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				return plan
			},
			Due: func(t testing.TB) {
				var id string
				if err := s.db.QueryRow(obDueSQL, 1).Scan(&id); err != nil {
					t.Fatal(err)
				}
			},
			PlanOK: func(plan string) bool {
				return strings.Contains(plan, "SEARCH outbound_messages USING INDEX outbound_messages_due") &&
					!strings.Contains(plan, "SCAN") && !strings.Contains(plan, "TEMP B-TREE")
			},
		}
	})
}

// TestOutboundStatsFromTheIndex: Stats (every /metrics scrape, the
// console's outbound pages) counts from outbound_messages_stats alone, with
// 10,000 messages in the queue: the rows (the evidence of delivered
// messages, kilobytes each) are not read.
func TestOutboundStatsFromTheIndex(t *testing.T) {
	t.Parallel()
	s := openOutbound(t)
	if _, err := s.db.Exec(bulkWaitingSQL, 10_000); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec(`ANALYZE outbound_messages`); err != nil {
		t.Fatal(err)
	}
	rows, err := s.db.Query(`EXPLAIN QUERY PLAN ` + obStatsSQL)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan strings.Builder
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(detail + "\n")
	}
	if !strings.Contains(plan.String(), "USING COVERING INDEX outbound_messages_stats") || strings.Contains(plan.String(), "TEMP B-TREE") {
		t.Fatalf("Stats reads the table:\n%s", plan.String())
	}
	st, err := s.Outbound().Stats(context.Background())
	if err != nil || len(st) != 1 || st[0].Partner != "bulk" || st[0].Queued != 10_000 || st[0].OldestQueued.IsZero() {
		t.Fatalf("Stats: %+v %v", st, err)
	}
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
	for _, q := range []string{
		`INSERT INTO outbound_uploads VALUES ('crashed', ` + nowMS + ` - 7200000)`,
		`INSERT INTO outbound_chunks VALUES ('crashed', 0, x'00', ` + nowMS + ` - 7200000)`,
		`INSERT INTO outbound_chunks VALUES ('crashed', 1, x'00', ` + nowMS + ` - 7100000)`,
		// started long ago, still writing
		`INSERT INTO outbound_uploads VALUES ('slow', ` + nowMS + ` - 7200000)`,
		`INSERT INTO outbound_chunks VALUES ('slow', 0, x'00', ` + nowMS + ` - 7200000)`,
		`INSERT INTO outbound_chunks VALUES ('slow', 1, x'00', ` + nowMS + ` - 1000)`,
	} {
		if _, err := s.db.Exec(q); err != nil {
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

func TestOutboundContract(t *testing.T) {
	t.Parallel()
	outboundtest.Exercise(t, func(t *testing.T) outbound.Store { return openOutbound(t).Outbound() })
}

// TestOutboundContractTwoHandles runs the kit against two Store handles on
// one file used alternately, as two gateway processes sharing a database.
func TestOutboundContractTwoHandles(t *testing.T) {
	t.Parallel()
	outboundtest.Exercise(t, func(t *testing.T) outbound.Store {
		path := filepath.Join(t.TempDir(), "gw.db")
		open := func() *Store {
			s, err := Open(context.Background(), path, dedup.Options{})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
		return outboundcheck.Alternate(open().Outbound(), open().Outbound())
	})
}

func TestOutboundPurgeMidway(t *testing.T) {
	t.Parallel()
	s := openOutbound(t)
	outboundcheck.PurgeMidway(t, s.Outbound(), s.OutboundQueue().PurgeOrphanPayloads, outboundcheck.Hooks{Chunks: chunkCount(s)})
}
