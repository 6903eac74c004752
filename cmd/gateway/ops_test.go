package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/internal/retention"
	"github.com/edigateway/gateway/outbound"
	"github.com/edigateway/gateway/outbound/outboundtest"
	"github.com/edigateway/gateway/store"
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
	if !strings.Contains(errb.String(), "shorter than partner demo's AS4 dedup window plus twice its clock_skew, 720h10m0s") || !strings.Contains(errb.String(), "dedup purge refused") {
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

// TestReusedReferenceKeepsHistoryOnSQLite: a reference reused after its
// window replaces the ledger row, but the accepted row it replaced is kept
// (ledger_history, written by the replacing claim's statement), shown by
// `audit export -reference`, and archived by `dedup purge` before it goes.
func TestReusedReferenceKeepsHistoryOnSQLite(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "gateway.yaml")
	os.MkdirAll(filepath.Join(dir, "partners"), 0o750)
	os.WriteFile(cfgPath, []byte("store: sqlite:gw.db\narchive_dir: archive\npartners: partners\n"), 0o600)
	ctx := context.Background()
	be, err := store.Open(ctx, "sqlite:"+filepath.Join(dir, "gw.db"), dedup.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ic := dedup.Interchange{Key: dedup.HashFields("t", "REUSED1"), Partner: "acme", Standard: "edifact", Reference: "REUSED1"}
	claimAccept := func(id, hash string) {
		t.Helper()
		d, err := be.ClaimInterchange(ctx, dedup.InterchangeClaim{Interchange: ic, PayloadSHA256: hash, MessageID: id, Window: 200 * time.Millisecond})
		if err != nil || d.Outcome != dedup.Claimed {
			t.Fatalf("claim %s: %v %v", id, d.Outcome, err)
		}
		if err := be.AcceptInterchange(ctx, ic.Key, d.Token); err != nil {
			t.Fatal(err)
		}
	}
	claimAccept("first-use", "h1")
	time.Sleep(300 * time.Millisecond) // the window passes; the reference is reused
	claimAccept("second-use", "h2")
	be.Close()

	var out, errb bytes.Buffer
	if code := run([]string{"audit", "export", "-config", cfgPath, "-reference", "REUSED1"}, &out, &errb); code != 0 {
		t.Fatalf("export exit %d: %s", code, errb.String())
	}
	var ev retention.Evidence
	if err := json.Unmarshal(out.Bytes(), &ev); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if len(ev.Interchanges) != 2 || ev.Interchanges[0].Replaced == nil || ev.Interchanges[0].MessageIDs[0] != "first-use" ||
		ev.Interchanges[0].PayloadSHA256 != "h1" || ev.Interchanges[1].Replaced != nil || ev.Interchanges[1].MessageIDs[0] != "second-use" {
		t.Fatalf("evidence does not show both uses of the reference: %s", out.String())
	}

	time.Sleep(300 * time.Millisecond) // the second use's window passes too
	out.Reset()
	if code := run([]string{"dedup", "purge", "-config", cfgPath}, &out, &errb); code != 0 {
		t.Fatalf("purge exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "archived and removed 1 earlier uses") {
		t.Errorf("purge output %q", out.String())
	}
	archives, _ := filepath.Glob(filepath.Join(dir, "archive", "ledger-*.jsonl.gz"))
	var uses []retention.ArchivedInterchange
	for _, a := range archives {
		uses = append(uses, readArchive(t, a)...)
	}
	var first, second bool
	for _, u := range uses {
		first = first || u.Reference == "REUSED1" && u.PayloadSHA256 == "h1" && u.Replaced != nil && u.MessageIDs[0] == "first-use"
		second = second || u.Reference == "REUSED1" && u.PayloadSHA256 == "h2" && u.Replaced == nil
	}
	if !first || !second {
		t.Errorf("archives %v hold %+v; want both uses of REUSED1", archives, uses)
	}
}

func readArchive(t *testing.T, path string) []retention.ArchivedInterchange {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var out []retention.ArchivedInterchange
	dec := json.NewDecoder(zr)
	for dec.More() {
		var a retention.ArchivedInterchange
		if err := dec.Decode(&a); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, a)
	}
	return out
}

// State commands never answer from a database they would have to create:
// without a configuration they refuse, and with one naming an SQLite file
// that does not exist they refuse rather than create it.
func TestStateCommandsRefuseWithoutConfigOrDatabase(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("GATEWAY_CONFIG", "")
	t.Setenv("GATEWAY_STORE", "")
	os.Unsetenv("GATEWAY_STORE")
	missing := filepath.Join(dir, "cfg", "gateway.yaml")
	os.MkdirAll(filepath.Join(dir, "cfg", "partners"), 0o750)
	os.WriteFile(missing, []byte("store: sqlite:state/gw.db\npartners: partners\n"), 0o600)
	mem := filepath.Join(dir, "cfg", "memory.yaml")
	os.WriteFile(mem, []byte("store: \"memory:\"\npartners: partners\n"), 0o600)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"export without config", []string{"audit", "export", "-reference", "R"}, "needs a configuration"},
		{"purge without config", []string{"dedup", "purge"}, "needs a configuration"},
		{"export, database missing", []string{"audit", "export", "-config", missing, "-reference", "R"}, "does not exist"},
		{"purge, database missing", []string{"dedup", "purge", "-config", missing}, "does not exist"},
		{"export, memory store", []string{"audit", "export", "-config", mem}, "memory:"},
		{"purge, memory store", []string{"dedup", "purge", "-config", mem}, "memory:"},
	} {
		var out, errb bytes.Buffer
		code := run(tc.args, &out, &errb)
		if code == 0 || !strings.Contains(errb.String(), tc.want) || out.Len() != 0 {
			t.Errorf("%s: exit %d, stdout %q, stderr %q (want non-zero exit naming %q)", tc.name, code, out.String(), errb.String(), tc.want)
		}
	}
	for _, p := range []string{filepath.Join(dir, "var"), filepath.Join(dir, "cfg", "state")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s was created (%v)", p, err)
		}
	}

	// An explicit store in the environment is a configuration too.
	db := filepath.Join(dir, "env.db")
	be, err := store.Open(context.Background(), "sqlite:"+db, dedup.Options{})
	if err != nil {
		t.Fatal(err)
	}
	be.Close()
	t.Setenv("GATEWAY_STORE", "sqlite:"+db)
	var out, errb bytes.Buffer
	if code := run([]string{"audit", "export", "-reference", "R"}, &out, &errb); code != 0 {
		t.Fatalf("export with GATEWAY_STORE: exit %d, %s", code, errb.String())
	}
}

// TestDedupPurgePurgesFinalOutboundMessages: `gateway dedup purge` runs the
// purge serve runs, outbound messages included: a cancelled message past
// outbound.retention goes with its payload, a queued one stays.
func TestDedupPurgePurgesFinalOutboundMessages(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "gateway.yaml")
	os.MkdirAll(filepath.Join(dir, "partners"), 0o750)
	os.WriteFile(cfgPath, []byte("store: sqlite:gw.db\narchive_dir: archive\npartners: partners\noutbound:\n  retention: 10ms\n"), 0o600)
	ctx := context.Background()
	be, err := store.Open(ctx, "sqlite:"+filepath.Join(dir, "gw.db"), dedup.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cancelled, queued := outboundtest.NewMessage(t, "acme"), outboundtest.NewMessage(t, "acme")
	for _, m := range []outbound.Message{cancelled, queued} {
		if _, _, err := be.Outbound().Submit(ctx, m, strings.NewReader("UNB+1'")); err != nil {
			t.Fatal(err)
		}
	}
	if err := be.Outbound().Cancel(ctx, cancelled.ID, "test"); err != nil {
		t.Fatal(err)
	}
	be.Close()
	time.Sleep(50 * time.Millisecond) // past outbound.retention

	var out, errb bytes.Buffer
	if code := run([]string{"dedup", "purge", "-config", cfgPath}, &out, &errb); code != 0 {
		t.Fatalf("purge exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "purged 1 delivered, failed or cancelled outbound messages past outbound.retention 10ms") {
		t.Fatalf("purge output %q", out.String())
	}
	be, err = store.Open(ctx, "sqlite:"+filepath.Join(dir, "gw.db"), dedup.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	if _, err := be.Outbound().Get(ctx, cancelled.ID); !errors.Is(err, outbound.ErrNotFound) {
		t.Errorf("cancelled message after the purge: %v", err)
	}
	if m, err := be.Outbound().Get(ctx, queued.ID); err != nil || m.State != outbound.Queued {
		t.Errorf("queued message after the purge: %+v, %v", m, err)
	}
}
