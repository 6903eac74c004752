package pgstore_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edigateway/gateway/store/internal/outboundcheck"
)

// TestOutboundRetentionPurge: with 10,000 old queued messages, Purge finds
// the final ones from outbound_messages_final_updated (no scan of the
// queue), removes their every chunk and leaves no upload behind; the
// queued ones stay.
func TestOutboundRetentionPurge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openOutbound(t)
	ob := s.Outbound()
	table := pgx.Identifier{s.Schema(), "outbound_messages"}.Sanitize()
	m, _, err := ob.Submit(ctx, outboundcheck.Message("acme", ""), bytes.NewReader(bytes.Repeat([]byte("x"), 3<<18+5)))
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Cancel(ctx, m.ID, "operator"); err != nil {
		t.Fatal(err)
	}
	kept, _, err := ob.Submit(ctx, outboundcheck.Message("acme", ""), strings.NewReader("kept"))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO ` + table + ` (id, partner, protocol, message_id, payload, size, sha256, state, next_attempt, created, updated)
SELECT 'w' || lpad(i::text, 8, '0'), 'bulk', 'as2', '<w' || i || '@gw.test>', 'w' || i, 0, '', 'queued',
	now() + interval '1 day', now() - interval '1 year', now() - interval '1 year'
FROM generate_series(1, 10000) AS i`,
		`ANALYZE ` + table,
	} {
		if _, err := s.Pool().Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	plan, err := s.OutboundQueue().PurgeQueryPlan(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan, "outbound_messages_final_updated") || strings.Contains(plan, "Seq Scan") {
		t.Errorf("Purge does not walk outbound_messages_final_updated:\n%s", plan)
	}
	if got := chunkCount(s)(t); got != 5 {
		t.Fatalf("%d chunks before the purge, want 5", got)
	}
	n, err := ob.Purge(ctx, time.Now().Add(time.Hour), 1000)
	if err != nil || n != 1 {
		t.Fatalf("Purge = %d, %v; want 1", n, err)
	}
	if got := chunkCount(s)(t); got != 1 {
		t.Errorf("%d chunks after the purge, want 1 (the kept message's)", got)
	}
	var uploads, queued int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{s.Schema(), "outbound_uploads"}.Sanitize()).
		Scan(&uploads); err != nil || uploads != 0 {
		t.Errorf("%d uploads left after the purge (%v), want 0", uploads, err)
	}
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE state = 'queued'`).Scan(&queued); err != nil ||
		queued != 10_001 {
		t.Errorf("%d queued messages after the purge (%v), want 10001", queued, err)
	}
	if _, err := ob.Get(ctx, kept.ID); err != nil {
		t.Errorf("kept message: %v", err)
	}
}
