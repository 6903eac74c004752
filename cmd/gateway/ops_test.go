package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gateway/audit"
	"gateway/dedup"
	"gateway/retention"
	"gateway/store"
)

func TestAuditExportAndPurgeOnSQLite(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "gateway.yaml")
	os.MkdirAll(filepath.Join(dir, "partners"), 0o750)
	os.WriteFile(cfgPath, []byte("store: sqlite:gw.db\narchive_dir: archive\npartners: partners\n"), 0o600)
	ctx := context.Background()
	be, err := store.Open(ctx, "sqlite:"+filepath.Join(dir, "gw.db"), dedup.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l := be
	ic := dedup.Interchange{Key: dedup.HashFields("t", "REF1"), Partner: "acme", Standard: "edifact", Reference: "REF1"}
	for _, id := range []string{"m1", "m2"} {
		d, err := l.ClaimInterchange(ctx, dedup.InterchangeClaim{Interchange: ic, PayloadSHA256: "h", MessageID: id, Window: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if d.Outcome == dedup.Claimed {
			l.AcceptInterchange(ctx, ic.Key, d.Token)
		}
	}
	be.AuditSink().Write(ctx, audit.Record{Step: audit.StepDecision, Partner: "acme", MessageID: "m2", Reference: "REF1", Decision: "duplicate-interchange"})
	be.Close()

	var out, errb bytes.Buffer
	if code := run([]string{"audit", "export", "-config", cfgPath, "-reference", "REF1"}, &out, &errb); code != 0 {
		t.Fatalf("export exit %d: %s", code, errb.String())
	}
	var ev retention.Evidence
	if err := json.Unmarshal(out.Bytes(), &ev); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if len(ev.Interchanges) != 1 || ev.Interchanges[0].Retries != 1 || len(ev.Records) != 1 || ev.Records[0].Decision != "duplicate-interchange" {
		t.Fatalf("evidence %+v", ev)
	}

	time.Sleep(600 * time.Millisecond) // the window passes
	out.Reset()
	if code := run([]string{"dedup", "purge", "-config", cfgPath}, &out, &errb); code != 0 {
		t.Fatalf("purge exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "and 1 interchanges past their windows") || !strings.Contains(out.String(), filepath.Join(dir, "archive")) {
		t.Fatalf("purge output %q", out.String())
	}
}

// TestDedupPurgeRefusesRetentionInsideWindow: a retention (1h) shorter than
// the demo partner's longest dedup window (AS4, 30 days) makes `gateway dedup purge`
// refuse, as `serve` does, and the transport key accepted 2 hours ago (inside
// the window) survives, so that its retransmission stays a duplicate.
func TestDedupPurgeRefusesRetentionInsideWindow(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "gateway.yaml")
	demoPartners := filepath.Join(filepath.Dir(demoConfig(t)), "partners")
	os.WriteFile(cfgPath, []byte("store: sqlite:gw.db\narchive_dir: archive\nretention: 1h\npartners: "+demoPartners+"\n"), 0o600)
	ctx := context.Background()
	be, err := store.Open(ctx, "sqlite:"+filepath.Join(dir, "gw.db"), dedup.Options{})
	if err != nil {
		t.Fatal(err)
	}
	key := dedup.HashFields("t", "inside-window")
	d, err := be.Claim(ctx, dedup.ClaimRequest{Key: key, PayloadSHA256: "h", Window: 7 * 24 * time.Hour})
	if err != nil || d.Outcome != dedup.Claimed {
		t.Fatal(err, d.Outcome)
	}
	if err := be.Accept(ctx, key, d.Token, []byte("reply")); err != nil {
		t.Fatal(err)
	}
	db := be.(interface{ DB() *sql.DB }).DB()
	if _, err := db.Exec(`UPDATE dedup_claims SET first_seen = first_seen - 2 * 3600 * 1000 WHERE key = ?`, string(key)); err != nil {
		t.Fatal(err)
	}
	be.Close()

	var out, errb bytes.Buffer
	code := run([]string{"dedup", "purge", "-config", cfgPath}, &out, &errb)
	if code == 0 {
		t.Errorf("purge with retention 1h and a 30-day window: exit 0 (%s), want a refusal", out.String())
	}
	if !strings.Contains(errb.String(), "shorter than partner demo's dedup window 720h0m0s") || !strings.Contains(errb.String(), "dedup purge refused") {
		t.Errorf("stderr %q does not explain the refusal", errb.String())
	}
	be, err = store.Open(ctx, "sqlite:"+filepath.Join(dir, "gw.db"), dedup.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	d, err = be.Claim(ctx, dedup.ClaimRequest{Key: key, PayloadSHA256: "h", Window: 7 * 24 * time.Hour})
	if err != nil || d.Outcome != dedup.Duplicate {
		t.Errorf("retransmission after the refused purge: %v %v, want duplicate", d.Outcome, err)
	}
}
