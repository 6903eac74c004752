package sqlitestore

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/store/internal/outboundcheck"
)

// TestOutboundRetentionPurge: Purge removes a final message's every chunk
// (a payload of more chunks than one transaction deletes, and a small one)
// and leaves no upload behind; with 10,000
// old queued messages it finds the final ones from
// outbound_messages_final_updated, without scanning the queue.
func TestOutboundRetentionPurge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openOutbound(t)
	ob := s.Outbound()
	big := bytes.Repeat([]byte("x"), purgeChunks*ChunkSize+17)
	m, _, err := ob.Submit(ctx, outboundcheck.Message("acme", ""), bytes.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	kept, _, err := ob.Submit(ctx, outboundcheck.Message("acme", ""), strings.NewReader("kept"))
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Cancel(ctx, m.ID, "operator"); err != nil {
		t.Fatal(err)
	}
	small, _, err := ob.Submit(ctx, outboundcheck.Message("acme", ""), strings.NewReader("small"))
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Cancel(ctx, small.ID, "operator"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec(bulkWaitingSQL, 10_000); err != nil {
		t.Fatal(err)
	}
	// Queued messages last updated long ago stay.
	if _, err := s.db.Exec(`UPDATE outbound_messages SET updated = 1 WHERE state = 'queued'`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec(`ANALYZE outbound_messages`); err != nil {
		t.Fatal(err)
	}
	if plan := queryPlan(t, s, obPurgeSQL, time.Now().UnixMilli(), 100); !strings.Contains(plan,
		"INDEX outbound_messages_final_updated (updated<?)") || strings.Contains(plan, "TEMP B-TREE") {
		t.Errorf("Purge does not walk outbound_messages_final_updated:\n%s", plan)
	}
	if got, want := chunkCount(s)(t), purgeChunks+3; got != want {
		t.Fatalf("%d chunks before the purge, want %d", got, want)
	}
	n, err := ob.Purge(ctx, time.Now().Add(time.Hour), 1000)
	if err != nil || n != 2 {
		t.Fatalf("Purge = %d, %v; want 2", n, err)
	}
	if got := chunkCount(s)(t); got != 1 {
		t.Errorf("%d chunks after the purge, want 1 (the kept message's)", got)
	}
	var uploads, queued int
	if err := s.db.QueryRow(`SELECT count(*) FROM outbound_uploads`).Scan(&uploads); err != nil || uploads != 0 {
		t.Errorf("%d uploads left after the purge (%v), want 0", uploads, err)
	}
	if err := s.db.QueryRow(`SELECT count(*) FROM outbound_messages WHERE state = 'queued'`).Scan(&queued); err != nil ||
		queued != 10_001 {
		t.Errorf("%d queued messages after the purge (%v), want 10001", queued, err)
	}
	if _, err := ob.Get(ctx, kept.ID); err != nil {
		t.Errorf("kept message: %v", err)
	}
}

// TestOutboundPurgeCrashLeftovers: a purge that dies after deleting the
// messages (their payloads registered as uploads started at 0) leaves
// chunks that PurgeOrphanPayloads removes.
func TestOutboundPurgeCrashLeftovers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openOutbound(t)
	big := bytes.Repeat([]byte("y"), (purgeChunks+1)*ChunkSize)
	m, _, err := s.Outbound().Submit(ctx, outboundcheck.Message("acme", ""), bytes.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Outbound().Cancel(ctx, m.ID, "operator"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec(`UPDATE outbound_chunks SET written = 1`); err != nil {
		t.Fatal(err)
	}
	n, pids, err := s.OutboundQueue().purgeMessages(ctx, unixMSCeil(time.Now().Add(time.Hour)), 10)
	if err != nil || n != 1 || len(pids) != 1 {
		t.Fatalf("purgeMessages = %d, %v, %v", n, pids, err)
	}
	if got := chunkCount(s)(t); got != purgeChunks+1 {
		t.Fatalf("%d chunks after the messages' transaction, want %d", got, purgeChunks+1)
	}
	n, err = s.OutboundQueue().PurgeOrphanPayloads(ctx, time.Hour)
	if err != nil || n != 1 {
		t.Fatalf("PurgeOrphanPayloads = %d, %v; want 1", n, err)
	}
	if got := chunkCount(s)(t); got != 0 {
		t.Errorf("%d chunks left, want 0", got)
	}
}
