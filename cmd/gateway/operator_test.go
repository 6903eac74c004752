package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestPartnersList(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"partners", "list", "-config", demoConfig(t)}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	o := out.String()
	for _, want := range []string{"PARTNER", "demo", "as2", "DEMO", "as4",
		"urn:oasis:names:tc:ebcore:partyid-type:unregistered:urn:demo:partner", "168h0m0s", "24h0m0s", "serial ", "expires ", " days)", "1 partners"} {
		if !strings.Contains(o, want) {
			t.Errorf("partners list lacks %q:\n%s", want, o)
		}
	}
}

func TestServeHelpListsEveryFlag(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"serve", "-h"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, f := range []string{"-config", "-listen", "-admin-listen", "-log-level", "-check", "GATEWAY_", "admin.listen"} {
		if !strings.Contains(errb.String(), f) {
			t.Errorf("serve -h lacks %s:\n%s", f, errb.String())
		}
	}
}

func TestServeCheck(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code := run([]string{"serve", "-check", "-config", demoConfig(t), "-admin-listen", "0.0.0.0:9090"}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "not a loopback address") {
		t.Fatalf("open admin listener accepted: %d %s", code, errb.String())
	}
	t.Setenv("GATEWAY_STORE", "sqlite:"+filepath.Join(dir, "gw.db"))
	t.Setenv("GATEWAY_HANDLER_INBOX", filepath.Join(dir, "inbox"))
	t.Setenv("GATEWAY_AUDIT_FILE", filepath.Join(dir, "audit.jsonl"))
	out.Reset()
	errb.Reset()
	if code := run([]string{"serve", "-check", "-config", demoConfig(t)}, &out, &errb); code != 0 || !strings.Contains(out.String(), "configuration ok: 1 partners") {
		t.Fatalf("serve -check: %d %s %s", code, out.String(), errb.String())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestMessagesAndLogVocabulary sends AS2 and AS4 traffic, then reads it
// back with `gateway messages` and its filters; the log calls a
// duplicate interchange a duplicate, not "message accepted", and names
// message ids without angle brackets.
func TestMessagesAndLogVocabulary(t *testing.T) {
	var logs syncBuffer
	g := startLiveLog(t, nil, &logs)
	edi := []byte("UNA:+.? 'UNB+UNOA:2+DEMO:14+GATEWAY:14+261130:1200+OPS1'UNH+1+INVOIC:D:96A:UN'BGM+380+INV-77+9'UNT+3+1'UNZ+1+OPS1'")
	c := g.as2Client(t, "DEMO", "")
	m1, err := c.Prepare(edi, "application/edifact", "a.edi")
	if err != nil {
		t.Fatal(err)
	}
	postAS2(t, c, m1)
	postAS2(t, c, m1)
	stranger := g.as2Client(t, "NOBODY", "")
	m2, _ := stranger.Prepare(edi, "application/edifact", "a.edi")
	postAS2(t, stranger, m2)
	// The same interchange under an AS4 transport id: duplicate-interchange.
	if out := g.sendAS4(t, "urn:demo:partner", "ops-as4@demo", edi); !strings.Contains(out, "signature valid") {
		t.Fatalf("AS4: %s", out)
	}

	cfgFile := filepath.Join(t.TempDir(), "gateway.yaml")
	os.WriteFile(cfgFile, []byte("store: "+g.cfg.Store+"\npartners: "+g.cfg.Partners+"\n"), 0o600)
	msgs := func(args ...string) []string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(append([]string{"messages", "-config", cfgFile}, args...), &out, &errb); code != 0 {
			t.Fatalf("messages %v: exit %d: %s", args, code, errb.String())
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		if !strings.HasPrefix(lines[0], "TIME") {
			t.Fatalf("no header: %s", out.String())
		}
		return lines[1 : len(lines)-1]
	}
	id := strings.Trim(m1.ID, "<>")
	all := msgs()
	if len(all) != 4 {
		t.Fatalf("messages: %d lines, want 4:\n%s", len(all), strings.Join(all, "\n"))
	}
	for i, want := range [][]string{
		{"demo", "as2", id, "accepted", "OPS1"},
		{"demo", "as2", id, "duplicate"},
		{"-", "as2", strings.Trim(m2.ID, "<>"), "rejected", "unknown-trading-partner"},
		{"demo", "as4", "ops-as4@demo", "duplicate-interchange", "OPS1"},
	} {
		f := strings.Fields(all[i])
		if len(f) < 1+len(want) || strings.Join(f[1:1+len(want)], " ") != strings.Join(want, " ") && !strings.Contains(all[i], want[len(want)-1]) {
			t.Errorf("line %d: %q, want %v", i, all[i], want)
		}
		if strings.Contains(all[i], "<") {
			t.Errorf("message id with angle brackets: %s", all[i])
		}
	}
	if got := msgs("-decision", "duplicate"); len(got) != 1 || !strings.Contains(got[0], id) {
		t.Errorf("-decision duplicate: %v", got)
	}
	if got := msgs("-partner", "demo", "-limit", "1"); len(got) != 1 || !strings.Contains(got[0], "ops-as4@demo") {
		t.Errorf("-partner demo -limit 1 (the most recent): %v", got)
	}
	if got := msgs("-since", "1ns"); len(got) != 0 {
		t.Errorf("-since 1ns: %v", got)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"messages", "-config", cfgFile, "-decision", "new"}, &out, &errb); code != 2 {
		t.Errorf("-decision new: exit %d", code)
	}

	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line not JSON: %s", line)
		}
		if rec["decision"] == "duplicate-interchange" && rec["msg"] == "message accepted" {
			t.Errorf("a duplicate interchange logged as accepted: %s", line)
		}
		if mid, _ := rec["message_id"].(string); strings.ContainsAny(mid, "<>") {
			t.Errorf("message id with angle brackets in the log: %s", line)
		}
	}
}

func TestMessagesRefusesWithoutAStore(t *testing.T) {
	t.Setenv("GATEWAY_CONFIG", "")
	var out, errb bytes.Buffer
	if code := run([]string{"messages"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "messages needs a configuration") {
		t.Errorf("without a configuration: %d %s", code, errb.String())
	}
	cfg := filepath.Join(t.TempDir(), "gateway.yaml")
	os.WriteFile(cfg, []byte("store: sqlite:missing.db\n"), 0o600)
	errb.Reset()
	if code := run([]string{"messages", "-config", cfg}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "does not exist") {
		t.Errorf("missing SQLite file: %d %s", code, errb.String())
	}
}
