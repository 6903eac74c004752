package pickup

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edigateway/gateway/outbound"
)

// These tests drive Scan only (no function of the sidecar code), so that
// they run against a pickup without sidecars too.

// writeSidecar writes the sidecar of payload name in place, as operators
// may (it is read only when its payload appears).
func writeSidecar(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, "."+name+".properties")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// queuedNames lists the entries of dir's .queued/.
func queuedNames(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(filepath.Join(dir, QueuedDir))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

const bdewSidecar = "# UTILMD for Stadtwerke\n" +
	"BDEWDocumentType=UTILMD\n" +
	"\n" +
	"  BDEWDocumentNo  =4711\n" +
	"   # indented comment\n" +
	"BDEWDocumentDate=2026-12-05\n" +
	"BDEWApplicationReference= a=b \n"

var bdewProps = []outbound.Property{{Name: "BDEWDocumentType", Value: "UTILMD"}, {Name: "BDEWDocumentNo", Value: "4711"},
	{Name: "BDEWDocumentDate", Value: "2026-12-05"}, {Name: "BDEWApplicationReference", Value: " a=b "}}

func TestPickupSidecarPropertiesReachTheSubmission(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.w.Scan(ctx)
	dir := filepath.Join(f.root, "stadtwerke")
	sc := writeSidecar(t, dir, "utilmd.edi", bdewSidecar)
	// A sidecar whose payload is not there yet is left alone.
	waiting := writeSidecar(t, dir, "later.edi", "BDEWDocumentType=MSCONS\n")
	drop(t, dir, "utilmd.edi", "UNB+UTILMD")
	drop(t, dir, "plain.edi", "UNB+PLAIN")
	f.w.Scan(ctx)
	byName := map[string]outbound.Message{}
	for _, m := range f.messages(t) {
		byName[m.Filename] = m
	}
	m, plain := byName["utilmd.edi"], byName["plain.edi"]
	if len(byName) != 2 || m.ID == "" || plain.ID == "" {
		t.Fatalf("queued %v, want utilmd.edi and plain.edi", byName)
	}
	if !outbound.EqualProperties(m.Properties, bdewProps) {
		t.Fatalf("properties\n got %q\nwant %q", m.Properties, bdewProps)
	}
	if len(plain.Properties) != 0 {
		t.Fatalf("a payload without a sidecar got properties %q", plain.Properties)
	}
	if exists(sc) || read(t, filepath.Join(dir, QueuedDir, "."+m.ID+"--utilmd.edi.properties")) != bdewSidecar {
		t.Fatalf("the sidecar did not move to .queued/ with its payload: %v", queuedNames(t, dir))
	}
	if !exists(waiting) {
		t.Fatal("a sidecar without its payload was touched")
	}
	// The next scan does not take the queued sidecar for a payload.
	f.w.Scan(ctx)
	if n := len(f.messages(t)); n != 2 || f.sub.calls.Load() != 2 || exists(filepath.Join(dir, FailedDir)) {
		t.Fatalf("second scan: %d messages, %d submissions, failed/ made: %v", n, f.sub.calls.Load(), exists(filepath.Join(dir, FailedDir)))
	}

	f.end(t, m.ID, "", &outbound.Evidence{Kind: "receipt", Body: []byte("<receipt/>")})
	f.w.Scan(ctx)
	sent := filepath.Join(dir, SentDir)
	if read(t, filepath.Join(sent, "utilmd.edi")) != "UNB+UTILMD" || read(t, filepath.Join(sent, "utilmd.edi.properties")) != bdewSidecar ||
		!exists(filepath.Join(sent, "utilmd.edi.receipt.xml")) {
		t.Fatal("sent/ lacks the payload, its sidecar as utilmd.edi.properties or its receipt")
	}
	f.end(t, plain.ID, "no such order", nil)
	f.w.Scan(ctx)
	if !exists(filepath.Join(dir, FailedDir, "plain.edi")) || exists(filepath.Join(dir, FailedDir, "plain.edi.properties")) {
		t.Fatal("the payload without a sidecar is not in failed/ alone")
	}
	if q := queuedNames(t, dir); len(q) != 0 || !exists(waiting) {
		t.Fatalf(".queued/ keeps %v; waiting sidecar there: %v", q, exists(waiting))
	}

	// A failed message's sidecar goes beside it in failed/.
	writeSidecar(t, dir, "orders.edi", "BDEWDocumentType=ORDERS\n")
	drop(t, dir, "orders.edi", "UNB+ORDERS")
	f.w.Scan(ctx)
	var orders outbound.Message
	for _, x := range f.messages(t) {
		if x.Filename == "orders.edi" {
			orders = x
		}
	}
	f.end(t, orders.ID, "refused by the partner", nil)
	f.w.Scan(ctx)
	if read(t, filepath.Join(dir, FailedDir, "orders.edi.properties")) != "BDEWDocumentType=ORDERS\n" {
		t.Fatal("failed/ lacks orders.edi.properties")
	}
}

func TestPickupSidecarCRLFAndByteOrderMark(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.w.Scan(ctx)
	dir := filepath.Join(f.root, "stadtwerke")
	writeSidecar(t, dir, "utilmd.edi", "\xef\xbb\xbf# Notepad\r\nBDEWDocumentType=UTILMD\r\n\r\nBDEWDocumentNo=4711\r\n")
	drop(t, dir, "utilmd.edi", "UNB")
	f.w.Scan(ctx)
	ms := f.messages(t)
	want := []outbound.Property{{Name: "BDEWDocumentType", Value: "UTILMD"}, {Name: "BDEWDocumentNo", Value: "4711"}}
	if len(ms) != 1 || !outbound.EqualProperties(ms[0].Properties, want) {
		t.Fatalf("queued %+v, want one message with %q", ms, want)
	}
}

func TestPickupRefusesInvalidSidecars(t *testing.T) {
	var many strings.Builder
	for i := range 33 {
		many.WriteString("P" + strings.Repeat("x", i) + "=v\n")
	}
	cases := []struct {
		name, partner, content string
		want                   []string
	}{
		{"noequals.edi", "stadtwerke", "BDEWDocumentType=UTILMD\nBDEWDocumentNo 4711\n", []string{"line 2", `no "="`}},
		{"badname.edi", "stadtwerke", "# c\nBDEW Document Type=UTILMD\n", []string{"line 2", "only A-Z a-z 0-9"}},
		{"emptyname.edi", "stadtwerke", " =UTILMD\n", []string{"line 1", "empty name"}},
		{"twice.edi", "stadtwerke", "BDEWDocumentNo=1\n\nbdewdocumentno=2\n", []string{"line 3", "given twice"}},
		{"reserved.edi", "stadtwerke", "mimetype=text/plain\n", []string{"line 1", "reserved"}},
		{"long.edi", "stadtwerke", "A=" + strings.Repeat("v", 1025) + "\n", []string{"line 1", "at most 1024"}},
		{"latin1.edi", "stadtwerke", "A=Stra\xdfe\n", []string{"line 1", "not UTF-8"}},
		{"tab.edi", "stadtwerke", "A=a\tb\n", []string{"line 1", "control character"}},
		{"many.edi", "stadtwerke", many.String(), []string{"line 33", "at most 32"}},
		{"filename.edi", "both/as4", "filename=x.edi\n", []string{"line 1", "as4.send.filename_property"}},
		{"big.edi", "stadtwerke", "A=" + strings.Repeat("v", 64<<10) + "\n", []string{"more than 65536"}},
	}
	f := newFixture(t)
	ctx := context.Background()
	f.w.Scan(ctx)
	for _, c := range cases {
		dir := filepath.Join(f.root, c.partner)
		writeSidecar(t, dir, c.name, c.content)
		drop(t, dir, c.name, "UNB")
	}
	// A directory and a dangling link are not sidecars either.
	dir := filepath.Join(f.root, "stadtwerke")
	if err := os.Mkdir(filepath.Join(dir, ".dir.edi.properties"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("nowhere", filepath.Join(dir, ".link.edi.properties")); err != nil {
		t.Fatal(err)
	}
	drop(t, dir, "dir.edi", "UNB")
	drop(t, dir, "link.edi", "UNB")
	cases = append(cases, struct {
		name, partner, content string
		want                   []string
	}{"dir.edi", "stadtwerke", "", []string{"not a regular file"}}, struct {
		name, partner, content string
		want                   []string
	}{"link.edi", "stadtwerke", "", []string{"not a regular file"}})

	f.w.Scan(ctx)
	if n := len(f.messages(t)); n != 0 || f.sub.calls.Load() != 0 {
		t.Fatalf("%d messages queued (%d submissions), want none", n, f.sub.calls.Load())
	}
	for _, c := range cases {
		dir := filepath.Join(f.root, c.partner)
		failed := filepath.Join(dir, FailedDir, c.name)
		if !exists(failed) || exists(filepath.Join(dir, c.name)) {
			t.Errorf("%s: not moved to failed/", c.name)
			continue
		}
		reason := read(t, failed+".reason.txt")
		for _, w := range append([]string{"sidecar ." + c.name + ".properties"}, c.want...) {
			if !strings.Contains(reason, w) {
				t.Errorf("%s: reason %q does not say %q", c.name, reason, w)
			}
		}
		if !exists(failed+".properties") || exists(filepath.Join(dir, "."+c.name+".properties")) {
			t.Errorf("%s: the sidecar did not move beside it", c.name)
		}
	}
}

func TestPickupSidecarInAnAS2DirectoryFails(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.w.Scan(ctx)
	for _, dir := range []string{filepath.Join(f.root, "acme"), filepath.Join(f.root, "both", "as2")} {
		writeSidecar(t, dir, "inv.edi", "BDEWDocumentType=INVOIC\n")
		drop(t, dir, "inv.edi", "ISA")
	}
	f.w.Scan(ctx)
	if n := len(f.messages(t)); n != 0 || f.sub.calls.Load() != 0 {
		t.Fatalf("%d messages queued (%d submissions), want none", n, f.sub.calls.Load())
	}
	for _, dir := range []string{filepath.Join(f.root, "acme"), filepath.Join(f.root, "both", "as2")} {
		failed := filepath.Join(dir, FailedDir, "inv.edi")
		if !exists(failed) || !exists(failed+".properties") ||
			!strings.Contains(read(t, failed+".reason.txt"), "sidecar .inv.edi.properties gives AS4 part properties; the directory is as2") {
			t.Errorf("%s: the payload and its sidecar are not in failed/ with the reason", dir)
		}
	}
}

func TestPickupCrashWithSidecarQueuesOnce(t *testing.T) {
	for _, c := range []struct {
		name string
		// fails says which renames the crash stops.
		fails func(oldpath string) bool
	}{
		{"before any move", func(string) bool { return true }},
		{"between the sidecar and its payload", func(oldpath string) bool { return !strings.HasSuffix(oldpath, ".properties") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			ctx := context.Background()
			f.w.Scan(ctx)
			dir := filepath.Join(f.root, "stadtwerke")
			writeSidecar(t, dir, "utilmd.edi", bdewSidecar)
			path := drop(t, dir, "utilmd.edi", "UNB+UTILMD")
			f.w.rename = func(oldpath, newpath string) error {
				if c.fails(oldpath) {
					return errors.New("killed")
				}
				return os.Rename(oldpath, newpath)
			}
			f.w.Scan(ctx)
			ms := f.messages(t)
			if len(ms) != 1 || !exists(path) {
				t.Fatalf("%d messages, payload still there: %v", len(ms), exists(path))
			}
			// The restarted gateway finds the payload again: the same message.
			f.w = f.watcher(t)
			f.w.Scan(ctx)
			after := f.messages(t)
			if len(after) != 1 || after[0].ID != ms[0].ID || !outbound.EqualProperties(after[0].Properties, bdewProps) {
				t.Fatalf("after the restart %d messages (%v), want only %s", len(after), after, ms[0].ID)
			}
			q := filepath.Join(dir, QueuedDir)
			if f.sub.calls.Load() != 2 || exists(path) || !exists(filepath.Join(q, ms[0].ID+"--utilmd.edi")) ||
				read(t, filepath.Join(q, "."+ms[0].ID+"--utilmd.edi.properties")) != bdewSidecar {
				t.Fatalf("%d submissions; .queued/ holds %v", f.sub.calls.Load(), queuedNames(t, dir))
			}
			f.end(t, ms[0].ID, "", nil)
			f.w.Scan(ctx)
			if !exists(filepath.Join(dir, SentDir, "utilmd.edi")) || read(t, filepath.Join(dir, SentDir, "utilmd.edi.properties")) != bdewSidecar {
				t.Fatal("sent/ lacks the payload or its sidecar")
			}
		})
	}
}

// The properties are part of the key: a sidecar changed while its payload
// waits after a crash is another submission (docs/sending.md says so).
func TestPickupSidecarChangedAfterACrashIsANewMessage(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.w.Scan(ctx)
	dir := filepath.Join(f.root, "stadtwerke")
	writeSidecar(t, dir, "utilmd.edi", "BDEWDocumentNo=1\n")
	drop(t, dir, "utilmd.edi", "UNB")
	f.w.rename = func(string, string) error { return errors.New("killed") }
	f.w.Scan(ctx)
	writeSidecar(t, dir, "utilmd.edi", "BDEWDocumentNo=2\n")
	f.w = f.watcher(t)
	f.w.Scan(ctx)
	ms := f.messages(t)
	if len(ms) != 2 || ms[0].IdempotencyKey == ms[1].IdempotencyKey {
		t.Fatalf("%d messages, want 2 with different keys", len(ms))
	}
}
