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
