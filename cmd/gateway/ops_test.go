package main

import (
	"bytes"
	"context"
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
