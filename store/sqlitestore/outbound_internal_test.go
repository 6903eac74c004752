package sqlitestore

import (
	"context"
	"io"
	"math"
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

// queryPlan is SQLite's plan of query with args, one detail a line.
func queryPlan(t *testing.T, s *Store, query string, args ...any) string {
	t.Helper()
	rows, err := s.db.Query(`EXPLAIN QUERY PLAN `+query, args...)
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
	return plan.String()
}

// TestOutboundStatsAndStateListFromIndexes, with 10,000 messages queued:
// Stats (every /metrics scrape, the console's outbound pages) counts from
// outbound_messages_stats alone, without reading the rows (the evidence
// of delivered messages, kilobytes each); a list of one state walks
// outbound_messages_state_created, so that a page of failed messages does
// not scan every queued one newer.
func TestOutboundStatsAndStateListFromIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openOutbound(t)
	failed, _, err := s.Outbound().Submit(ctx, outboundcheck.Message("acme", ""), strings.NewReader("old"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec(`UPDATE outbound_messages SET state = 'failed', created = 1 WHERE id = ?1`, failed.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec(bulkWaitingSQL, 10_000); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec(`ANALYZE outbound_messages`); err != nil {
		t.Fatal(err)
	}
	if plan := queryPlan(t, s, obStatsSQL); !strings.Contains(plan, "USING COVERING INDEX outbound_messages_stats") ||
		strings.Contains(plan, "TEMP B-TREE") {
		t.Errorf("Stats reads the table:\n%s", plan)
	}
	if plan := queryPlan(t, s, obListStateSQL, "", "failed", math.MaxInt64, 51, ""); !strings.Contains(plan,
		"SEARCH outbound_messages USING INDEX outbound_messages_state_created (state=? AND (created,id)<(?,?))") ||
		strings.Contains(plan, "TEMP B-TREE") {
		t.Errorf("a list of one state scans:\n%s", plan)
	}
	st, err := s.Outbound().Stats(ctx)
	if err != nil || len(st) != 2 || st[1].Partner != "bulk" || st[1].Queued != 10_000 || st[1].OldestQueued.IsZero() ||
		st[0].Partner != "acme" || st[0].Failed != 1 {
		t.Fatalf("Stats: %+v %v", st, err)
	}
	ms, err := s.Outbound().List(ctx, outbound.Filter{States: []outbound.State{outbound.Failed}})
	if err != nil || len(ms) != 1 || ms[0].ID != failed.ID {
		t.Fatalf("List failed: %d messages, %v", len(ms), err)
	}
	ms, err = s.Outbound().List(ctx, outbound.Filter{States: []outbound.State{outbound.Queued}, Limit: 3})
	if err != nil || len(ms) != 3 || ms[0].ID != "w00010000" || ms[2].ID != "w00009998" {
		t.Fatalf("List queued: %+v, %v", ms, err)
	}
}

// TestOutboundListKeysetFromIndexes, with 10,000 messages queued in one
// millisecond: a page after a keyset cursor (the last message's created
// and id) is a search of the (created, id) indexes bounded by the cursor,
// with no sort, for every kind of filter, and the pages hold every
// message once.
func TestOutboundListKeysetFromIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openOutbound(t)
	if _, err := s.db.Exec(bulkWaitingSQL, 10_000); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec(`ANALYZE outbound_messages`); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, query, want string
		args              []any
	}{
		{"all", obListSQL, "USING INDEX outbound_messages_created ((created,id)<(?,?))",
			[]any{"", "[]", int64(5), 51, "w00000005"}},
		{"states", obListSQL, "USING INDEX outbound_messages_created ((created,id)<(?,?))",
			[]any{"", `["queued","failed"]`, int64(5), 51, "w00000005"}},
		{"partner", obListPartnerSQL, "USING INDEX outbound_messages_partner_created (partner=? AND (created,id)<(?,?))",
			[]any{"bulk", "[]", int64(5), 51, "w00000005"}},
		{"state", obListStateSQL, "USING INDEX outbound_messages_state_created (state=? AND (created,id)<(?,?))",
			[]any{"", "queued", int64(5), 51, "w00000005"}},
	} {
		if plan := queryPlan(t, s, tc.query, tc.args...); !strings.Contains(plan, "SEARCH outbound_messages "+tc.want) ||
			strings.Contains(plan, "TEMP B-TREE") {
			t.Errorf("a page of %s after a cursor is not a search of its index:\n%s", tc.name, plan)
		}
	}
	seen := map[string]bool{}
	f := outbound.Filter{Partner: "bulk", Limit: 1000}
	for range 20 {
		ms, err := s.Outbound().List(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if seen[m.ID] {
				t.Fatalf("%s listed twice", m.ID)
			}
			seen[m.ID] = true
		}
		if len(ms) < f.Limit {
			break
		}
		f.Before, f.BeforeID = ms[len(ms)-1].Created, ms[len(ms)-1].ID
	}
	if len(seen) != 10_000 {
		t.Errorf("paging by 1000 listed %d messages, want 10000", len(seen))
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

// backdated is s's queue with SubmitAt for the kit's checks of messages
// created in one instant.
func backdated(s *Store) outbound.Store {
	return outboundcheck.Backdated(s.Outbound(), func(ctx context.Context, id string, created time.Time) error {
		_, err := s.db.ExecContext(ctx, `UPDATE outbound_messages SET created = ?2 WHERE id = ?1`, id, created.UnixMilli())
		return err
	})
}

func TestOutboundContract(t *testing.T) {
	t.Parallel()
	outboundtest.Exercise(t, func(t *testing.T) outbound.Store { return backdated(openOutbound(t)) })
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
		return outboundcheck.Alternate(backdated(open()), open().Outbound())
	})
}

func TestOutboundPurgeMidway(t *testing.T) {
	t.Parallel()
	s := openOutbound(t)
	outboundcheck.PurgeMidway(t, s.Outbound(), s.OutboundQueue().PurgeOrphanPayloads, outboundcheck.Hooks{Chunks: chunkCount(s)})
}
