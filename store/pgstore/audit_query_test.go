package pgstore

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/audit/audittest"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/internal/pgtest"
)

func TestAuditQuery(t *testing.T) {
	dsn, schema := pgtest.Schema(t)
	s, err := Open(context.Background(), dsn, dedup.Options{}, WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	audittest.ExerciseReader(t, s.Audit())
}

// TestAuditQueryByIncidentUsesIndex: a generic plan of Query by incident
// (the plan PostgreSQL may keep for a prepared statement run more than
// five times) finds the rows through the partial index
// audit_records_incident instead of walking every audit record in id
// order. Before, it could not use the index: its condition (incident <> ”)
// was not in the query.
func TestAuditQueryByIncidentUsesIndex(t *testing.T) {
	ctx := context.Background()
	dsn, schema := pgtest.Schema(t)
	s, err := Open(ctx, dsn, dedup.Options{}, WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a := s.Audit()
	if _, err := s.Pool().Exec(ctx, `INSERT INTO `+a.table+` (recorded_at, step, incident)
SELECT now(), 'reply', CASE WHEN g % 100 = 0 THEN 'GW-' || g ELSE '' END FROM generate_series(1, 20000) AS g`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `ANALYZE `+a.table); err != nil {
		t.Fatal(err)
	}
	conn, err := s.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, newest := range []bool{false, true} {
		query, args := a.querySQL(audit.Query{Incident: "GW-500", Newest: newest})
		if len(args) != 2 {
			t.Fatalf("args %v", args)
		}
		for _, stmt := range []string{`SET plan_cache_mode = force_generic_plan`, `DEALLOCATE ALL`,
			`PREPARE incident_query AS ` + query} {
			if _, err := conn.Exec(ctx, stmt); err != nil {
				t.Fatalf("%s: %v", stmt, err)
			}
		}
		rows, err := conn.Query(ctx, `EXPLAIN EXECUTE incident_query('GW-500', 100)`, pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			t.Fatal(err)
		}
		var plan strings.Builder
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan.WriteString(line + "\n")
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(plan.String(), "audit_records_incident") {
			t.Errorf("generic plan of Query by incident (newest %v):\n%s", newest, plan.String())
		}
	}
}
