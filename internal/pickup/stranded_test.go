package pickup

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/outbound"
)

// crashBetweenSidecarAndPayload makes the watcher's renames stand for a
// gateway stopped after moving a sidecar to .queued/ and before its
// payload.
func crashBetweenSidecarAndPayload(w *Watcher) {
	w.rename = func(oldpath, newpath string) error {
		if !strings.HasSuffix(oldpath, ".properties") {
			return errors.New("killed")
		}
		return os.Rename(oldpath, newpath)
	}
}

// subFiles maps the names in dir's sub/ to their content.
func subFiles(t *testing.T, dir, sub string) map[string]string {
	t.Helper()
	es, err := os.ReadDir(filepath.Join(dir, sub))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range es {
		out[e.Name()] = read(t, filepath.Join(dir, sub, e.Name()))
	}
	return out
}

// A sidecar stranded in .queued/ by a stop is not attached to another
// file of the same name dropped after the waiting one was removed; it is
// filed once its message is final, and the other file does not land
// beside it.
func TestPickupStrandedSidecarIsNotAnotherFilesSidecar(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.w.Scan(ctx)
	dir := filepath.Join(f.root, "stadtwerke")
	writeSidecar(t, dir, "utilmd.edi", "BDEWDocumentNo=1\n")
	path := drop(t, dir, "utilmd.edi", "UNB+1")
	crashBetweenSidecarAndPayload(f.w)
	f.w.Scan(ctx)
	ms := f.messages(t)
	if len(ms) != 1 || len(queuedNames(t, dir)) != 1 {
		t.Fatalf("after the stop: %d messages, .queued/ holds %v", len(ms), queuedNames(t, dir))
	}
	first := ms[0]
	// The operator removes the waiting file and drops another of that name,
	// without a sidecar (another modification time: another key).
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	path = drop(t, dir, "utilmd.edi", "UNB+2")
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(path, later, later); err != nil {
		t.Fatal(err)
	}
	f.w = f.watcher(t)
	f.w.Scan(ctx)
	var second outbound.Message
	for _, m := range f.messages(t) {
		if m.ID != first.ID {
			second = m
		}
	}
	if second.ID == "" || len(second.Properties) != 0 {
		t.Fatalf("the later file: message %q with properties %q, want one without (the stranded sidecar is message %s's)",
			second.ID, second.Properties, first.ID)
	}
	q := filepath.Join(dir, QueuedDir)
	if !exists(filepath.Join(q, queuedSidecarName(first.ID, "utilmd.edi"))) || exists(filepath.Join(q, queuedSidecarName(second.ID, "utilmd.edi"))) {
		t.Fatalf(".queued/ holds %v", queuedNames(t, dir))
	}

	// The first message is sent (its payload is in the queue): its sidecar
	// is filed with its receipt, without a payload.
	f.end(t, first.ID, "", &outbound.Evidence{Kind: "receipt", Body: []byte("<receipt/>")})
	f.w.Scan(ctx)
	if got := queuedNames(t, dir); len(got) != 1 || got[0] != second.ID+"--utilmd.edi" {
		t.Fatalf(".queued/ holds %v, want only the later file", got)
	}
	sent := subFiles(t, dir, SentDir)
	if sent["utilmd.edi.properties"] != "BDEWDocumentNo=1\n" || sent["utilmd.edi.receipt.xml"] != "<receipt/>" || len(sent) != 2 {
		t.Fatalf("sent/ holds %v, want the stranded sidecar and its receipt", sent)
	}
	// The later file, which had no sidecar, does not land beside it.
	f.end(t, second.ID, "", nil)
	f.w.Scan(ctx)
	sent = subFiles(t, dir, SentDir)
	if sent["utilmd.1.edi"] != "UNB+2" || exists(filepath.Join(dir, SentDir, "utilmd.1.edi.properties")) || len(sent) != 3 {
		t.Fatalf("sent/ holds %v, want the later file as utilmd.1.edi", sent)
	}
	if got := queuedNames(t, dir); len(got) != 0 {
		t.Fatalf(".queued/ keeps %v", got)
	}
}

// A sidecar beside the waiting payload wins over the stranded one (another
// message); the stranded one is filed once its own message is final.
func TestPickupStrandedSidecarOutvotedIsFiled(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.w.Scan(ctx)
	dir := filepath.Join(f.root, "stadtwerke")
	writeSidecar(t, dir, "utilmd.edi", "BDEWDocumentNo=1\n")
	drop(t, dir, "utilmd.edi", "UNB")
	crashBetweenSidecarAndPayload(f.w)
	f.w.Scan(ctx)
	writeSidecar(t, dir, "utilmd.edi", "BDEWDocumentNo=2\n")
	f.w = f.watcher(t)
	f.w.Scan(ctx)
	ms := f.messages(t)
	if len(ms) != 2 {
		t.Fatalf("%d messages, want 2", len(ms))
	}
	for _, m := range ms {
		f.end(t, m.ID, "refused by the partner", nil)
	}
	f.w.Scan(ctx)
	if got := queuedNames(t, dir); len(got) != 0 {
		t.Fatalf("all messages final, .queued/ keeps %v", got)
	}
	failed := subFiles(t, dir, FailedDir)
	var payloads, orphans int
	for n, c := range failed {
		base, ok := strings.CutSuffix(n, ".properties")
		if !ok {
			continue
		}
		switch _, beside := failed[base]; {
		case beside && c == "BDEWDocumentNo=2\n" && failed[base] == "UNB":
			payloads++
		case !beside && c == "BDEWDocumentNo=1\n":
			orphans++
		default:
			t.Errorf("failed/%s = %q (payload beside: %v)", n, c, beside)
		}
		if !strings.Contains(failed[base+".reason.txt"], "refused by the partner") {
			t.Errorf("failed/%s has no reason beside it", n)
		}
	}
	if payloads != 1 || orphans != 1 {
		t.Fatalf("failed/ holds %v, want the payload with sidecar 2 and sidecar 1 alone", failed)
	}
}

// A stranded sidecar is not filed while a file of its name waits: it may
// be that file's, whose move failed again.
func TestPickupStrandedSidecarWaitsForItsPayload(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.w.Scan(ctx)
	dir := filepath.Join(f.root, "stadtwerke")
	writeSidecar(t, dir, "utilmd.edi", bdewSidecar)
	path := drop(t, dir, "utilmd.edi", "UNB")
	crashBetweenSidecarAndPayload(f.w)
	f.w.Scan(ctx)
	ms := f.messages(t)
	if len(ms) != 1 {
		t.Fatalf("%d messages", len(ms))
	}
	f.end(t, ms[0].ID, "", nil)
	f.w.Scan(ctx) // the payload's move fails again
	if !exists(path) || exists(filepath.Join(dir, SentDir)) {
		t.Fatalf("the sidecar was filed while its payload waits: sent/ %v, .queued/ %v", subFiles(t, dir, SentDir), queuedNames(t, dir))
	}
	f.w = f.watcher(t)
	f.w.Scan(ctx)
	if n := len(f.messages(t)); n != 1 {
		t.Fatalf("%d messages, want 1", n)
	}
	sent := subFiles(t, dir, SentDir)
	if sent["utilmd.edi"] != "UNB" || sent["utilmd.edi.properties"] != bdewSidecar || len(sent) != 2 {
		t.Fatalf("sent/ holds %v", sent)
	}
}

// A stranded sidecar of a message the queue does not know (a memory:
// store restarted) cannot be told to be the waiting file's or not: the
// file is refused with it, not sent with or without its properties. One
// without a file of its name waiting goes to failed/.
func TestPickupStrandedSidecarOfAnUnknownMessage(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.w.Scan(ctx)
	dir := filepath.Join(f.root, "stadtwerke")
	q := filepath.Join(dir, QueuedDir)
	if err := os.MkdirAll(q, 0o750); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"utilmd.edi", "alone.edi"} {
		if err := os.WriteFile(filepath.Join(q, queuedSidecarName("01NOSUCHMESSAGE", n)), []byte("BDEWDocumentNo=1\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	drop(t, dir, "utilmd.edi", "UNB")
	f.w.Scan(ctx)
	if n := len(f.messages(t)); n != 0 {
		t.Fatalf("%d messages queued, want none", n)
	}
	failed := subFiles(t, dir, FailedDir)
	for _, n := range []string{"utilmd.edi", "alone.edi"} {
		if failed[n+".properties"] != "BDEWDocumentNo=1\n" || !strings.Contains(failed[n+".reason.txt"], "01NOSUCHMESSAGE") {
			t.Errorf("failed/ lacks %s.properties or its reason: %v", n, failed)
		}
	}
	if failed["utilmd.edi"] != "UNB" || exists(filepath.Join(dir, FailedDir, "alone.edi")) {
		t.Errorf("failed/ holds %v", failed)
	}
	if got := queuedNames(t, dir); len(got) != 0 {
		t.Fatalf(".queued/ keeps %v", got)
	}
}

// Filing a payload with its sidecar does not replace an archived file
// named <name>.properties, nor one named as another companion.
func TestPickupFilingKeepsArchivedFilesOfCompanionNames(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.w.Scan(ctx)
	dir := filepath.Join(f.root, "stadtwerke")
	drop(t, dir, "a.properties", "PAYLOAD A.PROPERTIES")
	drop(t, dir, "b.receipt.xml", "PAYLOAD B.RECEIPT.XML")
	f.w.Scan(ctx)
	for _, m := range f.messages(t) {
		f.end(t, m.ID, "", nil)
	}
	f.w.Scan(ctx)
	writeSidecar(t, dir, "a", "BDEWDocumentType=UTILMD\n")
	drop(t, dir, "a", "PAYLOAD A")
	drop(t, dir, "b", "PAYLOAD B")
	f.w.Scan(ctx)
	for _, m := range f.messages(t) {
		f.end(t, m.ID, "", &outbound.Evidence{Kind: "receipt", Body: []byte("<receipt/>")})
	}
	f.w.Scan(ctx)
	sent := subFiles(t, dir, SentDir)
	want := map[string]string{"a.properties": "PAYLOAD A.PROPERTIES", "b.receipt.xml": "PAYLOAD B.RECEIPT.XML",
		"a.1": "PAYLOAD A", "a.1.properties": "BDEWDocumentType=UTILMD\n", "a.1.receipt.xml": "<receipt/>",
		"b.1": "PAYLOAD B", "b.1.receipt.xml": "<receipt/>"}
	if len(sent) != len(want) {
		t.Fatalf("sent/ holds %v, want %v", sent, want)
	}
	for n, c := range want {
		if sent[n] != c {
			t.Errorf("sent/%s = %q, want %q", n, sent[n], c)
		}
	}
}

// A stop while filing (evidence written, sidecar moved, payload not) puts
// the payload beside its sidecar and evidence at the next scan, not under
// another name.
func TestPickupCrashWhileFilingKeepsThePayloadBesideItsSidecar(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.w.Scan(ctx)
	dir := filepath.Join(f.root, "stadtwerke")
	writeSidecar(t, dir, "utilmd.edi", bdewSidecar)
	drop(t, dir, "utilmd.edi", "UNB")
	f.w.Scan(ctx)
	ms := f.messages(t)
	if len(ms) != 1 {
		t.Fatalf("%d messages", len(ms))
	}
	f.end(t, ms[0].ID, "", &outbound.Evidence{Kind: "receipt", Body: []byte("<receipt/>")})
	f.w.rename = func(oldpath, newpath string) error {
		if filepath.Base(oldpath) == ms[0].ID+"--utilmd.edi" {
			return errors.New("killed")
		}
		return os.Rename(oldpath, newpath)
	}
	f.w.Scan(ctx)
	f.w = f.watcher(t)
	f.w.Scan(ctx)
	sent := subFiles(t, dir, SentDir)
	if sent["utilmd.edi"] != "UNB" || sent["utilmd.edi.properties"] != bdewSidecar || sent["utilmd.edi.receipt.xml"] != "<receipt/>" ||
		len(sent) != 3 {
		t.Fatalf("sent/ holds %v", sent)
	}
}
