package inbox

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/exchange"
)

// checkName asserts the properties every generated name must have.
func checkName(t *testing.T, name string) {
	t.Helper()
	if name == "" || name == "." || name == ".." || strings.HasPrefix(name, ".") {
		t.Fatalf("name %q is empty, a dot name or hidden", name)
	}
	if strings.HasPrefix(name, "-") || strings.HasPrefix(name, "+") {
		t.Fatalf("name %q would be taken for a command-line option", name)
	}
	if filepath.Base(name) != name || strings.ContainsAny(name, "/\\\x00") {
		t.Fatalf("name %q has a path separator or NUL", name)
	}
	if len(name) > 226 || len(name)+len(SidecarSuffix) > 255 {
		t.Fatalf("name %q (%d bytes) too long for a file system with its sidecar", name, len(name))
	}
	for _, r := range name {
		if !safeRune(r) {
			t.Fatalf("name %q has unsafe character %q", name, r)
		}
	}
	if strings.HasSuffix(name, SidecarSuffix) {
		t.Fatalf("payload name %q looks like a sidecar", name)
	}
}

// An operator finds a payload by the partner's message id and by the
// interchange reference; the name is unique per message and payload.
func TestNameIsFindableByMessageIDAndReference(t *testing.T) {
	m := msg(payload("INVOIC.edi", "UNB+x'"), payload("notes.txt", "plain"))
	m.MessageID = "20261201-0042@acme.example"
	m.TransportKey = dedup.TransportKey("as2", "as2", "ACME", m.MessageID)
	ik := dedup.Key(strings.Repeat("ab", 32))
	m.Payloads[0].IdempotencyKey = string(ik)
	m.Payloads[1].IdempotencyKey = strings.Repeat("cd", 32)
	m.Interchanges = []dedup.Interchange{{Key: ik, Standard: "EDIFACT", Reference: "INV 0001/7", Sender: "ACME"}}
	first, second := FileName(m, 0), FileName(m, 1)
	if !strings.HasPrefix(first, "20261201-0042@acme.example_INV_0001_7-") || !strings.HasSuffix(first, "-INVOIC.edi") {
		t.Errorf("first = %q: want message id, reference and file name", first)
	}
	if !strings.HasPrefix(second, "20261201-0042@acme.example-") || !strings.HasSuffix(second, "-notes.txt") {
		t.Errorf("second = %q", second)
	}
	if !strings.Contains(first, string(m.TransportKey)[:16]+"-"+m.Payloads[0].SHA256[:12]) {
		t.Errorf("first = %q lacks the key and hash that keep it unique", first)
	}
	checkName(t, first)
	checkName(t, second)
	// Two message ids that sanitise alike still get different names.
	other := msg(payload("INVOIC.edi", "UNB+x'"))
	other.MessageID = "20261201-0042/acme.example"
	other.TransportKey = dedup.TransportKey("as2", "as2", "ACME", other.MessageID)
	if a, b := FileName(msg(payload("INVOIC.edi", "UNB+x'")), 0), FileName(other, 0); a == b {
		t.Errorf("names collide: %q", a)
	}
}

func TestHostileMessageIDsAndFilenames(t *testing.T) {
	long := strings.Repeat("x", 5000)
	for _, tc := range []struct{ id, filename, ct string }{
		{"../../etc/passwd", "../../etc/passwd", ""},
		{"..", "..", ""},
		{".", ".", "application/xml"},
		{"a\x00b", "evil\x00.edi", ""},
		{"<" + long + "@x>", long + ".edi", ""},
		{"ünïcødé-ид-标识", "rechnung-ü.xml", ""},
		{"\xff\xfe", "\xff.bin", ""},
		{"", "", "application/EDIFACT"},
		{"a/b\\c:d*e?f\"g<h>i|j", "C:\\Windows\\system32\\x.dll", ""},
		{"id", "report" + SidecarSuffix, ""},
		{"...hidden", "...hidden", ""},
		{"-rf", "-rf", ""},
		{"--+-.-x", "x.edi", ""},
		{"id", strings.Repeat(".", 300), ""},
	} {
		p := payload(tc.filename, "body")
		p.ContentType = tc.ct
		m := msg(p)
		m.MessageID = tc.id
		name := FileName(m, 0)
		checkName(t, name)
		if FileName(m, 0) != name {
			t.Fatalf("%q: name not deterministic", tc.id)
		}
		root := t.TempDir()
		if err := (Dir{Root: root}).Handle(context.Background(), m); err != nil {
			t.Fatalf("id %q file %q: %v", tc.id, tc.filename, err)
		}
		files, _ := Payloads(filepath.Join(root, "acme"))
		if len(files) != 1 || files[0] != name {
			t.Fatalf("id %q: files %v, want [%s]", tc.id, files, name)
		}
		all, _ := os.ReadDir(root)
		if len(all) != 1 { // nothing escaped the partner directory
			t.Fatalf("root holds %v", all)
		}
	}
	m := msg(payload("x.edi", "b"))
	m.MessageID = "<" + long + ">"
	if n := FileName(m, 0); !strings.HasPrefix(n, "_"+strings.Repeat("x", maxIDLen-1)+"-") {
		t.Errorf("long id: %q", n)
	}
	m = msg(payload(long+".edi", "b"))
	if n := FileName(m, 0); !strings.HasSuffix(n, "xxx.edi") {
		t.Errorf("long file name lost its extension: %q", n)
	}
}

func TestSidecarContent(t *testing.T) {
	root := t.TempDir()
	p := payload("INVOIC.edi", "UNB+x'")
	ik := dedup.Key(strings.Repeat("ab", 32))
	p.IdempotencyKey = string(ik)
	p.Properties = map[string]string{"MimeType": "application/edifact"}
	m := msg(p)
	m.Protocol = exchange.AS4
	m.Received = time.Date(2026, 12, 1, 10, 0, 0, 0, time.FixedZone("x", 3600))
	m.IdempotencyKey = string(m.TransportKey)
	m.Headers = map[string][]string{"Service": {"urn:invoicing"}, "Action": {"Deliver"}}
	m.Interchanges = []dedup.Interchange{{Key: ik, Standard: "EDIFACT", Sender: "ACME", Recipient: "US", Reference: "REF1", Date: "261201"}}
	if err := (Dir{Root: root}).Handle(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "acme", FileName(m, 0)+SidecarSuffix))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("sidecar is not JSON: %v\n%s", err, b)
	}
	want := map[string]any{"file": FileName(m, 0), "partner": "acme", "protocol": "as4", "message_id": "m1",
		"received": "2026-12-01T09:00:00Z", "content_type": "application/edifact", "filename": "INVOIC.edi",
		"sha256": p.SHA256, "idempotency_key": string(ik), "message_idempotency_key": string(m.TransportKey),
		"payload": 1.0, "payloads": 1.0, "size": 0.0}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	ic, _ := got["interchange"].(map[string]any)
	if ic["reference"] != "REF1" || ic["key"] != string(ik) || ic["standard"] != "EDIFACT" || ic["sender"] != "ACME" {
		t.Errorf("interchange = %v", got["interchange"])
	}
	if h, _ := got["headers"].(map[string]any); h["Action"] == nil {
		t.Errorf("headers = %v", got["headers"])
	}
}

// A second run for the same message (crash before the accept; a later
// received time) leaves exactly one payload and one sidecar, the first.
func TestIdempotentRewriteKeepsOneSidecar(t *testing.T) {
	root := t.TempDir()
	m := msg(payload("a.edi", "one"))
	m.Received = time.Unix(1000, 0)
	if err := (Dir{Root: root}).Handle(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	side := filepath.Join(root, "acme", FileName(m, 0)+SidecarSuffix)
	before, _ := os.ReadFile(side)
	m.Received = time.Unix(2000, 0)
	if err := (Dir{Root: root}).Handle(context.Background(), m); err != nil {
		t.Fatalf("second run: %v", err)
	}
	after, _ := os.ReadFile(side)
	if string(before) != string(after) || len(before) == 0 {
		t.Errorf("sidecar rewritten:\n%s\n%s", before, after)
	}
	all, _ := os.ReadDir(filepath.Join(root, "acme"))
	if len(all) != 2 {
		t.Errorf("files = %v, want payload and sidecar", all)
	}
	// A crash after the sidecar but before the payload: the rerun writes
	// the payload.
	if err := os.Remove(filepath.Join(root, "acme", FileName(m, 0))); err != nil {
		t.Fatal(err)
	}
	if err := (Dir{Root: root}).Handle(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	if files, _ := Payloads(filepath.Join(root, "acme")); len(files) != 1 {
		t.Errorf("payloads = %v", files)
	}
}

// A payload written under the name of an earlier version (before the
// findable names) is not written a second time by a rerun after upgrade.
func TestLegacyNameCountsAsWritten(t *testing.T) {
	root := t.TempDir()
	m := msg(payload("a+b@c.edi", "one"))
	// The name the previous version gave this payload.
	if got := LegacyFileName(m, 0); got != string(m.TransportKey)[:16]+"-"+m.Payloads[0].SHA256[:12]+"-a_b_c.edi" {
		t.Fatalf("legacy name %q", got)
	}
	dir := filepath.Join(root, "acme")
	os.MkdirAll(dir, 0o750)
	if err := os.WriteFile(filepath.Join(dir, LegacyFileName(m, 0)), []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := (Dir{Root: root}).Handle(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	if files, _ := Payloads(dir); len(files) != 1 || files[0] != LegacyFileName(m, 0) {
		t.Errorf("payloads = %v", files)
	}
}

func FuzzFileName(f *testing.F) {
	for _, s := range [][2]string{{"m1", "a.edi"}, {"../../x", "../../etc/passwd"}, {"a\x00b", "\x00"},
		{"ünï", "标识.xml"}, {"\xff", "\xfe"}, {strings.Repeat("y", 300), strings.Repeat("z", 300) + ".edi"},
		{".", ".."}, {"", ""}, {"x", "r" + SidecarSuffix}, {"C:\\a", "C:\\b\\c.txt"}} {
		f.Add(s[0], s[1], "REF"+s[0])
	}
	f.Fuzz(func(t *testing.T, id, filename, ref string) {
		p := payload(filename, "body")
		p.IdempotencyKey = strings.Repeat("ab", 32)
		m := msg(p)
		m.MessageID = id
		m.Interchanges = []dedup.Interchange{{Key: dedup.Key(p.IdempotencyKey), Reference: ref}}
		name := FileName(m, 0)
		checkName(t, name)
		if !utf8.ValidString(name) || name != FileName(m, 0) {
			t.Fatalf("name %q", name)
		}
		for _, part := range []string{sanitize(filename), sanitizeID(id, maxIDLen), sanitizeID(ref, maxRefLen)} {
			if strings.HasPrefix(part, ".") || strings.ContainsAny(part, "/\\\x00") {
				t.Fatalf("part %q", part)
			}
		}
	})
}
