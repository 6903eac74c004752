package sqlitestore

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/audit/audittest"
	"github.com/edigateway/gateway/dedup"
)

func TestAuditQuery(t *testing.T) {
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "a.db"), dedup.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	audittest.ExerciseReader(t, s.Audit())
}

// TestAuditByKeySharedPrefix: keys are found through their first 12
// characters (migration 0005) and then matched whole, so keys sharing the
// prefix (or multibyte ones) are never confused.
func TestAuditByKeySharedPrefix(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "a.db"), dedup.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	keys := []string{"0123456789ab-x", "0123456789ab-y", "0123456789ab", "ünïcødé-ünïcødé-1", "ünïcødé-ünïcødé-2", "k"}
	for i, k := range keys {
		for j := 0; j <= i; j++ {
			if err := s.Audit().Write(ctx, audit.Record{Step: audit.StepReceived, Key: k, MessageID: k}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, k := range keys {
		recs, err := s.Audit().ByKey(ctx, k)
		if err != nil || len(recs) != i+1 {
			t.Fatalf("ByKey(%q): %d records, %v; want %d", k, len(recs), err, i+1)
		}
		got, err := s.Audit().Query(ctx, audit.Query{Key: k, MessageID: k})
		if err != nil || len(got) != i+1 {
			t.Fatalf("Query(key %q): %d records, %v; want %d", k, len(got), err, i+1)
		}
		for _, r := range append(recs, got...) {
			if r.Key != k {
				t.Fatalf("ByKey(%q) returned a record of %q", k, r.Key)
			}
		}
	}
}

// TestAuditQueryUsesIndexes: Query by incident (the reference a partner
// quotes), by key and by partner and message id walks its index, not every
// audit record. The incident index is partial, and SQLite used it only for
// a query repeating its condition: before, a search by incident scanned the
// whole table.
func TestAuditQueryUsesIndexes(t *testing.T) {
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "a.db"), dedup.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, c := range []struct {
		q     audit.Query
		index string
	}{
		{audit.Query{Incident: "GW-7K3QX9"}, "audit_records_incident"},
		{audit.Query{Incident: "GW-7K3QX9", Newest: true}, "audit_records_incident"},
		{audit.Query{Key: "0123456789abcdef0123"}, "audit_records_key_prefix"},
		{audit.Query{Partner: "p", MessageID: "m"}, "audit_records_message"},
	} {
		query, args := auditQuerySQL(c.q)
		if plan := queryPlan(t, s, query, args...); !strings.Contains(plan, "INDEX "+c.index+" ") {
			t.Errorf("plan of %+v:\n%swant %s", c.q, plan, c.index)
		}
	}
}
