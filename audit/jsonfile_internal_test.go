package audit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// faultyFile is an *os.File whose writes stop after room bytes (a full
// disk: the first bytes of a record land, the rest is refused), whose Sync
// can fail, and whose Truncate can fail.
type faultyFile struct {
	*os.File
	room         int // -1: unlimited
	failSync     bool
	failTruncate bool
}

func (f *faultyFile) Write(b []byte) (int, error) {
	if f.room < 0 || len(b) <= f.room {
		if f.room >= 0 {
			f.room -= len(b)
		}
		return f.File.Write(b)
	}
	n, _ := f.File.Write(b[:f.room])
	f.room = 0
	return n, syscall.ENOSPC
}

func (f *faultyFile) Sync() error {
	if f.failSync {
		return syscall.EIO
	}
	return f.File.Sync()
}

func (f *faultyFile) Truncate(n int64) error {
	if f.failTruncate {
		return syscall.EIO
	}
	return f.File.Truncate(n)
}

func openFaulty(t *testing.T, path string) (*JSONFile, *faultyFile) {
	t.Helper()
	osf, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	ff := &faultyFile{File: osf, room: -1}
	s, err := newJSONFile(ff)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, ff
}

// lines parses the file strictly: every line must be a whole record.
func lines(t *testing.T, path string) []string {
	t.Helper()
	b, _ := os.ReadFile(path)
	if len(b) > 0 && b[len(b)-1] != '\n' {
		t.Errorf("file ends inside a record: %q", b)
	}
	var ids []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Errorf("invalid JSON line %q", sc.Text())
			continue
		}
		ids = append(ids, r.MessageID)
	}
	return ids
}

func TestJSONFileFailedWriteIsRolledBack(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		fail func(*faultyFile)
	}{
		{"short write", func(f *faultyFile) { f.room = 25 }},
		{"sync fails", func(f *faultyFile) { f.failSync = true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.jsonl")
			s, ff := openFaulty(t, path)
			if err := s.Write(ctx, Record{MessageID: "m1"}); err != nil {
				t.Fatal(err)
			}
			tc.fail(ff)
			err := s.Write(ctx, Record{MessageID: "lost", Error: "a record longer than the room left on the disk"})
			if err == nil {
				t.Fatal("failed write reported success")
			}
			if tc.name == "short write" && !errors.Is(err, syscall.ENOSPC) {
				t.Errorf("error %v does not wrap ENOSPC", err)
			}
			*ff = faultyFile{File: ff.File, room: -1} // space returns
			if err := s.Write(ctx, Record{MessageID: "m2"}); err != nil {
				t.Fatal(err)
			}
			if got := lines(t, path); len(got) != 2 || got[0] != "m1" || got[1] != "m2" {
				t.Fatalf("records %q", got)
			}
		})
	}
}

// When the rollback itself fails, the next record starts on a new line and
// readers skip the fragment; once truncation works again the fragment goes.
func TestJSONFileFragmentNeverGluesToNextRecord(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	s, ff := openFaulty(t, path)
	s.Write(ctx, Record{MessageID: "m1"})
	ff.room, ff.failTruncate = 25, true
	if err := s.Write(ctx, Record{MessageID: "lost", Error: "longer than the room left"}); err == nil {
		t.Fatal("failed write reported success")
	}
	ff.room = -1
	if err := s.Write(ctx, Record{MessageID: "m2"}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	sc := bufio.NewScanner(bytes.NewReader(b))
	var valid, invalid int
	for sc.Scan() {
		var r Record
		if json.Unmarshal(sc.Bytes(), &r) == nil {
			valid++
		} else {
			invalid++
		}
	}
	if valid != 2 || invalid != 1 {
		t.Fatalf("%d whole records and %d fragments in %q", valid, invalid, b)
	}
	got, err := QueryJSONFile(ctx, path, Query{})
	if err != nil || len(got) != 2 || got[0].MessageID != "m1" || got[1].MessageID != "m2" {
		t.Fatalf("query: %v %+v", err, got)
	}
}

// A crash in the middle of a record leaves a fragment at the end of the
// file: opening the sink truncates it, and readers skip it before that.
func TestJSONFileTornTailFromCrash(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	os.WriteFile(path, []byte(`{"message_id":"m1"}`+"\n"+`{"message_id":"m`), 0o640)
	got, err := QueryJSONFile(ctx, path, Query{})
	if err != nil || len(got) != 1 || got[0].MessageID != "m1" {
		t.Fatalf("query over a torn tail: %v %+v", err, got)
	}
	s, err := OpenJSONFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Write(ctx, Record{MessageID: "m2"}); err != nil {
		t.Fatal(err)
	}
	if ids := lines(t, path); len(ids) != 2 || ids[1] != "m2" {
		t.Fatalf("records %q", ids)
	}
}

// slowSyncFile counts syncs and makes each one slow, so that writers pile
// up behind it; it records how far the file was written when each sync
// started.
type slowSyncFile struct {
	*os.File
	delay   time.Duration
	mu      sync.Mutex
	written int64
	covered []int64 // file size at the start of each sync
	fail    int     // the next fail syncs fail
}

func (f *slowSyncFile) Write(b []byte) (int, error) {
	n, err := f.File.Write(b)
	f.mu.Lock()
	f.written += int64(n)
	f.mu.Unlock()
	return n, err
}

func (f *slowSyncFile) Sync() error {
	f.mu.Lock()
	size := f.written
	failing := f.fail > 0
	if failing {
		f.fail--
	}
	f.mu.Unlock()
	time.Sleep(f.delay)
	if failing {
		return syscall.EIO
	}
	if err := f.File.Sync(); err != nil {
		return err
	}
	f.mu.Lock()
	f.covered = append(f.covered, size)
	f.mu.Unlock()
	return nil
}

func (f *slowSyncFile) Truncate(n int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.written = n
	return f.File.Truncate(n)
}

func openSlow(t *testing.T, path string, delay time.Duration) (*JSONFile, *slowSyncFile) {
	t.Helper()
	osf, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	sf := &slowSyncFile{File: osf, delay: delay}
	s, err := newJSONFile(sf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, sf
}

// TestJSONFileGroupSync: concurrent writers share fsyncs, and each Write
// returns only after a sync that covered its record (one that started
// when the file already held it).
func TestJSONFileGroupSync(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	s, sf := openSlow(t, path, 5*time.Millisecond)
	const n = 32
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Write(context.Background(), Record{Step: StepReceived, MessageID: fmt.Sprintf("m%d", i)})
			if errs[i] != nil {
				return
			}
			// The record is in the file; some sync that started at or
			// after its end has finished.
			b, _ := os.ReadFile(path)
			end := bytes.Index(b, []byte(fmt.Sprintf(`"message_id":"m%d"`, i)))
			end += bytes.IndexByte(b[end:], '\n') + 1
			sf.mu.Lock()
			defer sf.mu.Unlock()
			ok := false
			for _, c := range sf.covered {
				ok = ok || c >= int64(end)
			}
			if !ok {
				errs[i] = fmt.Errorf("returned before a sync covered its record (end %d, syncs covered %v)", end, sf.covered)
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("write %d: %v", i, err)
		}
	}
	if got := len(lines(t, path)); got != n {
		t.Errorf("%d records, want %d", got, n)
	}
	sf.mu.Lock()
	syncs := len(sf.covered)
	sf.mu.Unlock()
	if syncs > n/2 {
		t.Errorf("%d syncs for %d concurrent records: not shared", syncs, n)
	}
	t.Logf("%d records, %d syncs", n, syncs)
}

// TestJSONFileGroupSyncFailure: a sync that fails fails every writer whose
// record it would have covered, and their records are rolled back; the
// sink goes on.
func TestJSONFileGroupSyncFailure(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	s, sf := openSlow(t, path, 20*time.Millisecond)
	if err := s.Write(context.Background(), Record{MessageID: "before"}); err != nil {
		t.Fatal(err)
	}
	sf.mu.Lock()
	sf.fail = 1
	sf.mu.Unlock()
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Write(context.Background(), Record{MessageID: fmt.Sprintf("m%d", i)})
		}()
	}
	wg.Wait()
	failed := 0
	for _, err := range errs {
		if err != nil {
			if !errors.Is(err, syscall.EIO) {
				t.Errorf("error %v, want EIO", err)
			}
			failed++
		}
	}
	got := lines(t, path)
	if failed == 0 || len(got) != 1+n-failed {
		t.Errorf("%d writes failed, file holds %v", failed, got)
	}
	for i, err := range errs {
		want := fmt.Sprintf("m%d", i)
		in := false
		for _, id := range got {
			in = in || id == want
		}
		if in != (err == nil) {
			t.Errorf("%s: error %v, in the file %v", want, err, in)
		}
	}
	if err := s.Write(context.Background(), Record{MessageID: "after"}); err != nil {
		t.Fatal(err)
	}
}

// TestJSONFileWriteBatch: a batch is appended in order and made durable by
// one sync covering its last record; a failed sync fails the batch and
// rolls all of it back; WriteBatch over a sink without batches writes one
// by one.
func TestJSONFileWriteBatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	s, sf := openSlow(t, path, time.Millisecond)
	batch := []Record{{Step: StepReceived, MessageID: "b1"}, {Step: StepDecision, Decision: "new", MessageID: "b2"}}
	if err := WriteBatch(context.Background(), s, batch); err != nil {
		t.Fatal(err)
	}
	if got := lines(t, path); len(got) != 2 || got[0] != "b1" || got[1] != "b2" {
		t.Fatalf("file: %q", got)
	}
	sf.mu.Lock()
	syncs, covered := len(sf.covered), sf.covered
	sf.mu.Unlock()
	if st, _ := os.Stat(path); syncs != 1 || covered[0] != st.Size() {
		t.Fatalf("%d syncs covering %v for a batch of two (file %d bytes)", syncs, covered, st.Size())
	}
	sf.mu.Lock()
	sf.fail = 1
	sf.mu.Unlock()
	if err := s.WriteBatch(context.Background(), batch); err == nil {
		t.Fatal("a failed sync did not fail the batch")
	}
	if got := lines(t, path); len(got) != 2 {
		t.Fatalf("after the failed batch the file holds %d records, want the 2 before it", len(got))
	}
	mem := &Memory{}
	if err := WriteBatch(context.Background(), Multi{mem}, batch); err != nil || len(mem.Records()) != 2 {
		t.Fatalf("one by one: %v, %d records", err, len(mem.Records()))
	}
}

// TestJSONFileAppendBatch: appended records cost no sync of their own; the
// next write's sync covers them and their wait then returns nil; a failed
// sync in between rolls them back and their wait returns its error, even
// when a later sync succeeds.
func TestJSONFileAppendBatch(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	s, sf := openSlow(t, path, time.Millisecond)
	nsyncs := func() int { sf.mu.Lock(); defer sf.mu.Unlock(); return len(sf.covered) }
	wait, err := s.AppendBatch(ctx, []Record{{Step: StepReceived, MessageID: "a1"}, {Step: StepDecision, MessageID: "a2"}})
	if err != nil {
		t.Fatal(err)
	}
	if n := nsyncs(); n != 0 {
		t.Fatalf("%d syncs after an append", n)
	}
	if err := s.Write(ctx, Record{Step: StepHandler, MessageID: "w1"}); err != nil {
		t.Fatal(err)
	}
	if n := nsyncs(); n != 1 {
		t.Fatalf("%d syncs after append + write, want 1", n)
	}
	if err := wait(ctx); err != nil {
		t.Fatalf("wait after the covering sync: %v", err)
	}
	if n := nsyncs(); n != 1 {
		t.Fatalf("wait synced again: %d syncs", n)
	}
	if got := lines(t, path); len(got) != 3 || got[0] != "a1" || got[1] != "a2" || got[2] != "w1" {
		t.Fatalf("file: %q", got)
	}
	// Lost by a failed sync: wait reports it though the next sync succeeds.
	wait, err = s.AppendBatch(ctx, []Record{{Step: StepReceived, MessageID: "lost"}})
	if err != nil {
		t.Fatal(err)
	}
	sf.mu.Lock()
	sf.fail = 1
	sf.mu.Unlock()
	if err := s.Write(ctx, Record{MessageID: "failing"}); !errors.Is(err, syscall.EIO) {
		t.Fatalf("write with a failing sync: %v", err)
	}
	if err := s.Write(ctx, Record{MessageID: "after"}); err != nil {
		t.Fatal(err)
	}
	if err := wait(ctx); !errors.Is(err, syscall.EIO) {
		t.Fatalf("wait for records a failed sync rolled back: %v, want EIO", err)
	}
	if got := lines(t, path); len(got) != 4 || got[3] != "after" {
		t.Fatalf("file: %q", got)
	}
	// Alone, wait syncs them itself.
	wait, err = s.AppendBatch(ctx, []Record{{MessageID: "alone"}})
	if err != nil {
		t.Fatal(err)
	}
	before := nsyncs()
	if err := wait(ctx); err != nil || nsyncs() != before+1 {
		t.Fatalf("wait alone: %v, %d syncs (was %d)", err, nsyncs(), before)
	}
}
