package pickup

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edigateway/gateway/outbound"
)

// submitter is the Queue's stand-in.
type submitter struct {
	store outbound.Store
	calls atomic.Int32
}

func (s *submitter) Submit(ctx context.Context, sub outbound.Submission) (outbound.Message, bool, error) {
	s.calls.Add(1)
	if sub.Protocol == "" {
		sub.Protocol = outbound.AS2
	}
	id := outbound.NewID(time.Now())
	m := outbound.Message{ID: id, MessageID: "<" + id + "@test>", Partner: sub.Partner, Protocol: sub.Protocol,
		IdempotencyKey: sub.IdempotencyKey, Source: sub.Source, Filename: sub.Filename, Properties: sub.Properties}
	return s.store.Submit(ctx, m, sub.Payload)
}

type fixture struct {
	root  string
	store *outbound.Memory
	sub   *submitter
	w     *Watcher
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{root: t.TempDir(), store: outbound.NewMemory()}
	f.sub = &submitter{store: f.store}
	f.w = f.watcher(t)
	return f
}

func (f *fixture) watcher(t *testing.T) *Watcher {
	t.Helper()
	w, err := New(Config{Dir: f.root, Submitter: f.sub, Store: f.store, MaxPayload: 1000, Interval: time.Hour,
		Targets: func() []Target {
			return []Target{{Partner: "acme", Protocols: []outbound.Protocol{outbound.AS2}},
				{Partner: "both", Protocols: []outbound.Protocol{outbound.AS2, outbound.AS4}, FilenameProperty: "FileName"},
				{Partner: "stadtwerke", Protocols: []outbound.Protocol{outbound.AS4}},
				{Partner: "../evil", Protocols: []outbound.Protocol{outbound.AS2}}}
		}})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// drop writes a file as operators should: under a .tmp name, renamed in.
func drop(t *testing.T, dir, name, content string) string {
	t.Helper()
	tmp := filepath.Join(dir, name+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func (f *fixture) messages(t *testing.T) []outbound.Message {
	t.Helper()
	ms, err := f.store.List(context.Background(), outbound.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// end leases message id and ends it: delivered when reason is empty.
func (f *fixture) end(t *testing.T, id, reason string, ev *outbound.Evidence) {
	t.Helper()
	ctx := context.Background()
	leased, err := f.store.Lease(ctx, 100, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range leased {
		switch {
		case m.ID != id:
			err = f.store.Release(ctx, m.ID, m.LeaseToken)
		case reason == "":
			err = f.store.Delivered(ctx, m.ID, m.LeaseToken, ev)
		default:
			err = f.store.Failed(ctx, m.ID, m.LeaseToken, reason, ev)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func TestPickupQueuesOnceAndFilesTheOutcome(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.w.Scan(ctx)
	acme, as2, as4 := filepath.Join(f.root, "acme"), filepath.Join(f.root, "both", "as2"), filepath.Join(f.root, "both", "as4")
	for _, d := range []string{acme, as2, as4} {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			t.Fatalf("%s not created at start: %v", d, err)
		}
	}
	if exists(filepath.Join(f.root, "evil")) || exists(filepath.Join(filepath.Dir(f.root), "evil")) {
		t.Fatal("a partner id with a path made a directory")
	}
	// Files being written are left alone.
	for _, n := range []string{".other.edi", "other.edi.tmp", "other.edi.part"} {
		if err := os.WriteFile(filepath.Join(acme, n), []byte("half"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	path := drop(t, acme, "inv.edi", "ISA*invoice")
	fi, _ := os.Stat(path)
	f.w.Scan(ctx)
	ms := f.messages(t)
	if len(ms) != 1 {
		t.Fatalf("%d messages, want 1", len(ms))
	}
	m := ms[0]
	if m.Partner != "acme" || m.Protocol != outbound.AS2 || m.Source != "pickup" || m.Filename != "inv.edi" ||
		m.IdempotencyKey != FileKey("inv.edi", fi.Size(), fi.ModTime(), m.SHA256) || m.Size != int64(len("ISA*invoice")) {
		t.Fatalf("queued %+v", m)
	}
	queued := filepath.Join(acme, QueuedDir, m.ID+"--inv.edi")
	if exists(path) || read(t, queued) != "ISA*invoice" {
		t.Fatal("the file was not moved to .queued/")
	}
	for _, n := range []string{".other.edi", "other.edi.tmp", "other.edi.part"} {
		if !exists(filepath.Join(acme, n)) {
			t.Fatalf("%s was touched", n)
		}
	}
	// Not final yet: the file stays queued, nothing submitted again.
	f.w.Scan(ctx)
	if len(f.messages(t)) != 1 || !exists(queued) || f.sub.calls.Load() != 1 {
		t.Fatalf("second scan: %d messages, %d submissions", len(f.messages(t)), f.sub.calls.Load())
	}

	// A partner sending with both protocols: the subdirectory picks it.
	drop(t, as4, "order.xml", "<order/>")
	f.w.Scan(ctx)
	var order outbound.Message
	for _, x := range f.messages(t) {
		if x.Partner == "both" {
			order = x
		}
	}
	if order.Protocol != outbound.AS4 || !exists(filepath.Join(as4, QueuedDir, order.ID+"--order.xml")) {
		t.Fatalf("as4 file: %+v", order)
	}

	f.end(t, m.ID, "", &outbound.Evidence{Kind: "mdn", Body: []byte("the MDN")})
	f.end(t, order.ID, "no such order", &outbound.Evidence{Kind: "error", Body: []byte("<eb:Error/>")})
	f.w.Scan(ctx)
	if exists(queued) || read(t, filepath.Join(acme, SentDir, "inv.edi")) != "ISA*invoice" ||
		read(t, filepath.Join(acme, SentDir, "inv.edi.mdn")) != "the MDN" {
		t.Fatal("delivered file not in sent/ with its MDN")
	}
	failed := filepath.Join(as4, FailedDir, "order.xml")
	if read(t, failed) != "<order/>" || read(t, failed+".error.xml") != "<eb:Error/>" ||
		!strings.Contains(read(t, failed+".reason.txt"), "failed: no such order") {
		t.Fatal("failed file not in failed/ with its reason and error signal")
	}
}

func TestPickupCrashBetweenSubmitAndMoveQueuesOnce(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.w.Scan(ctx)
	acme := filepath.Join(f.root, "acme")
	path := drop(t, acme, "inv.edi", "ISA*invoice")
	// The process dies after Submit, before the move.
	f.w.rename = func(string, string) error { return errors.New("killed") }
	f.w.Scan(ctx)
	ms := f.messages(t)
	if len(ms) != 1 || !exists(path) {
		t.Fatalf("%d messages, file still there: %v", len(ms), exists(path))
	}
	// The restarted gateway finds the file again: the same message.
	f.w = f.watcher(t)
	f.w.Scan(ctx)
	if after := f.messages(t); len(after) != 1 || after[0].ID != ms[0].ID {
		t.Fatalf("after the restart %d messages (%v), want only %s", len(after), after, ms[0].ID)
	}
	if f.sub.calls.Load() != 2 || exists(path) || !exists(filepath.Join(acme, QueuedDir, ms[0].ID+"--inv.edi")) {
		t.Fatalf("%d submissions; file not moved to .queued/ under %s", f.sub.calls.Load(), ms[0].ID)
	}
}

func TestPickupSameNameLaterIsANewMessage(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.w.Scan(ctx)
	acme := filepath.Join(f.root, "acme")
	for i, mtime := range []time.Time{time.Now().Add(-time.Hour), time.Now()} {
		path := drop(t, acme, "inv.edi", "ISA*same")
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		f.w.Scan(ctx)
		ms := f.messages(t)
		if len(ms) != i+1 {
			t.Fatalf("drop %d: %d messages", i+1, len(ms))
		}
		f.end(t, ms[0].ID, "", &outbound.Evidence{Kind: "receipt", Body: []byte("<receipt/>")})
		f.w.Scan(ctx)
	}
	sent := filepath.Join(acme, SentDir)
	for _, n := range []string{"inv.edi", "inv.edi.receipt.xml", "inv.1.edi", "inv.1.edi.receipt.xml"} {
		if !exists(filepath.Join(sent, n)) {
			t.Fatalf("sent/%s missing", n)
		}
	}
}

func TestPickupRefusesAndFailsWhatCannotBeSent(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.w.Scan(ctx)
	acme := filepath.Join(f.root, "acme")
	drop(t, acme, "empty.edi", "")
	drop(t, acme, "big.edi", strings.Repeat("x", 1001))
	// A queued file whose message the queue does not know (a memory:
	// store restarted).
	if err := os.MkdirAll(filepath.Join(acme, QueuedDir), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(acme, QueuedDir, "gone--lost.edi"), []byte("lost"), 0o600); err != nil {
		t.Fatal(err)
	}
	drop(t, acme, "cancel.edi", "c")
	f.w.Scan(ctx)
	if n := len(f.messages(t)); n != 1 {
		t.Fatalf("%d messages queued, want only cancel.edi", n)
	}
	id := f.messages(t)[0].ID
	if err := f.store.Cancel(ctx, id, "wrong partner"); err != nil {
		t.Fatal(err)
	}
	f.w.Scan(ctx)
	failed := filepath.Join(acme, FailedDir)
	for name, want := range map[string]string{"empty.edi": "empty", "big.edi": "more than outbound.max_payload_bytes 1000",
		"lost.edi": "no message gone", "cancel.edi": "cancelled: wrong partner"} {
		if !exists(filepath.Join(failed, name)) || !strings.Contains(read(t, filepath.Join(failed, name+".reason.txt")), want) {
			t.Errorf("failed/%s: want it with a reason saying %q", name, want)
		}
	}
}

func TestPickupRunScansOnFileEvents(t *testing.T) {
	f := newFixture(t) // interval: 1h, so only an event can start the scan
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.w.Run(ctx) }()
	acme := filepath.Join(f.root, "acme")
	deadline := time.Now().Add(10 * time.Second)
	for !exists(acme) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // the watch is added right after the directory
	drop(t, acme, "inv.edi", "ISA")
	for len(f.messages(t)) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(f.messages(t)) != 1 {
		t.Fatal("a file renamed in was not queued without waiting for the interval")
	}
}
