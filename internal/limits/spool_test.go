package limits

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/edigateway/gateway/internal/heaptest"
	"github.com/edigateway/gateway/internal/spooltest"
)

// A crashed gateway's area (lock free) is removed at the next start; a
// running gateway's area (lock held) on the same spool_dir is left alone.
func TestOpenSpoolAreaRemovesOnlyDeadLeftovers(t *testing.T) {
	parent := t.TempDir()
	dead := filepath.Join(parent, spoolAreaPrefix+"crashed")
	if err := os.MkdirAll(dead, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dead, "gateway-body-1"), []byte("left by kill -9"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dead+".lock", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	running, err := OpenSpoolArea(parent, nil)
	if err != nil {
		t.Fatal(err)
	}
	busy := filepath.Join(running.Dir, "gateway-body-2")
	if err := os.WriteFile(busy, []byte("in flight"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dead); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("crashed area still there: %v", err)
	}
	if _, err := os.Stat(dead + ".lock"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("crashed area's lock file still there: %v", err)
	}
	second, err := OpenSpoolArea(parent, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(busy); err != nil {
		t.Fatalf("a running gateway's spool file was removed: %v", err)
	}
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
	if err := running.Close(); err != nil {
		t.Fatal(err)
	}
	left, _ := os.ReadDir(parent)
	if len(left) != 0 {
		t.Fatalf("left after Close: %v", left)
	}
}

func TestSpoolBodyHashesAndLimits(t *testing.T) {
	dir := t.TempDir()
	data := bytes.Repeat([]byte("0123456789abcdef"), 10000) // several chunks
	b, err := SpoolBody(bytes.NewReader(data), dir, int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if b.Size != int64(len(data)) || b.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("size %d sha %s", b.Size, b.SHA256)
	}
	got, err := b.Bytes()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back: %v", err)
	}
	if err := b.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := SpoolBody(bytes.NewReader(data), dir, int64(len(data))-1); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("over the limit: %v", err)
	}
	// What is left is one emptied file, kept for the next body.
	left, _ := os.ReadDir(dir)
	if len(left) != 1 {
		t.Fatalf("files left: %v", left)
	}
	if st, err := os.Stat(filepath.Join(dir, left[0].Name())); err != nil || st.Size() != 0 {
		t.Fatalf("the spare file holds bytes: %v %v", st, err)
	}
}

// TestSpoolBodyReusesEmptiedFiles: a removed body's file is emptied and
// taken by the next body (no new file, no deletion), the next body never
// reads the earlier one's bytes, and the removed BodyFile fails instead of
// reading the next body. Beyond maxSpareBodies removed files are deleted.
func TestSpoolBodyReusesEmptiedFiles(t *testing.T) {
	dir := t.TempDir()
	long := bytes.Repeat([]byte("first partner's body "), 1000)
	a, err := SpoolBody(bytes.NewReader(long), dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	name := a.Path()
	stale := a.Reader()
	if err := a.Remove(); err != nil {
		t.Fatal(err)
	}
	b, err := SpoolBody(strings.NewReader("short"), dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if b.Path() != name {
		t.Errorf("the second body went to %s, not the emptied %s", b.Path(), name)
	}
	if got, err := b.Bytes(); err != nil || string(got) != "short" {
		t.Fatalf("second body reads %.40q, %v", got, err)
	}
	if st, err := os.Stat(name); err != nil || st.Size() != 5 {
		t.Fatalf("the reused file: %v %v", st, err)
	}
	if n, err := io.ReadAll(stale); err == nil || len(n) != 0 {
		t.Errorf("the removed body's reader read %d bytes, err %v", len(n), err)
	}
	if _, err := a.ReadAt(make([]byte, 1), 0); err == nil {
		t.Error("the removed body can still be read")
	}
	b.Remove()

	var bodies []*BodyFile
	for range maxSpareBodies + 3 {
		f, err := SpoolBody(strings.NewReader("x"), dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, f)
	}
	for _, f := range bodies {
		if err := f.Remove(); err != nil {
			t.Fatal(err)
		}
	}
	if left, _ := os.ReadDir(dir); len(left) != maxSpareBodies {
		t.Errorf("%d files left, want the %d spares", len(left), maxSpareBodies)
	}
	// The area removed underneath (shutdown): a new file is made.
	os.RemoveAll(dir)
	os.Mkdir(dir, 0o700)
	c, err := SpoolBody(strings.NewReader("after"), dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := c.Bytes(); string(got) != "after" {
		t.Errorf("after the area was removed: %q", got)
	}
	c.Remove()
}

// Gateways starting together on one spool_dir each get their own area:
// one's sweep never takes another's fresh lock or removes its area.
func TestOpenSpoolAreaConcurrentStarts(t *testing.T) {
	parent := t.TempDir()
	const n = 16
	areas := make([]*SpoolArea, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for round := 0; round < 20; round++ {
		for i := range n {
			wg.Add(1)
			go func() { defer wg.Done(); areas[i], errs[i] = OpenSpoolArea(parent, slog.New(slog.DiscardHandler)) }()
		}
		wg.Wait()
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("round %d: start %d: %v", round, i, errs[i])
			}
			if fi, err := os.Stat(areas[i].Dir); err != nil || !fi.IsDir() {
				t.Fatalf("round %d: area %s of a running gateway is gone: %v", round, areas[i].Dir, err)
			}
		}
		for i := range n {
			areas[i].Close()
		}
	}
}

// SpoolSmall keeps up to keep bytes in memory (no file in the directory),
// spools more, refuses past max, and Remove leaves no byte behind (an
// emptied file may stay for reuse: spareBodies).
func TestSpoolSmall(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []int{0, 10, 64, 65, 300} {
		data := bytes.Repeat([]byte("z"), n)
		s, err := SpoolSmall(bytes.NewReader(data), dir, 1000, 64)
		if err != nil {
			t.Fatal(err)
		}
		files := len(spooltest.Leftovers(t, dir))
		if got, _ := io.ReadAll(s.Reader()); !bytes.Equal(got, data) || s.Size != int64(n) || (files == 1) != (n > 64) {
			t.Fatalf("%d bytes: read %d, size %d, %d files with content", n, len(got), s.Size, files)
		}
		if err := s.Remove(); err != nil {
			t.Fatal(err)
		}
		if files := len(spooltest.Leftovers(t, dir)); files != 0 {
			t.Fatalf("%d bytes: %d files with content after Remove", n, files)
		}
	}
	for _, n := range []int{60, 1001} {
		if _, err := SpoolSmall(bytes.NewReader(make([]byte, n)), dir, 50, 64); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("%d bytes over max 50: %v", n, err)
		}
	}
	if files := len(spooltest.Leftovers(t, dir)); files != 0 {
		t.Fatalf("%d files with content left after refusals", files)
	}
}

// SpoolBodyAsync gives the body's bytes while they arrive (a read waits for
// bytes not yet written), ends as SpoolBody would (size, SHA-256, bytes),
// and when the body fails midway its readers get that failure, Wait
// returns it and the partial file is emptied.
func TestSpoolBodyAsyncReadsWhileArriving(t *testing.T) {
	dir := t.TempDir()
	data := bytes.Repeat([]byte("0123456789abcdef"), 100000) // 1.6 MB, several chunks
	pr, pw := io.Pipe()
	g := SpoolBodyAsync(pr, dir, int64(len(data)))
	half := len(data) / 2
	go pw.Write(data[:half])
	got := make([]byte, 1000)
	if n, err := g.ReadAt(got, 0); n != len(got) || err != nil || !bytes.Equal(got, data[:1000]) {
		t.Fatalf("first bytes while arriving: %d, %v", n, err)
	}
	read := make(chan error, 1)
	go func() {
		// Beyond what has arrived: waits for the rest.
		p := make([]byte, 1000)
		n, err := g.ReadAt(p, int64(len(data)-1000))
		if err == nil && (n != len(p) || !bytes.Equal(p, data[len(data)-1000:])) {
			err = errors.New("wrong bytes")
		}
		read <- err
	}()
	select {
	case err := <-read:
		t.Fatalf("a read beyond the arrived bytes returned before they arrived: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	go func() { pw.Write(data[half:]); pw.Close() }()
	if err := <-read; err != nil {
		t.Fatal(err)
	}
	b, err := g.Wait()
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if b.Size != int64(len(data)) || b.SHA256 != hex.EncodeToString(sum[:]) || g.Path() != b.Path() {
		t.Fatalf("size %d sha %s", b.Size, b.SHA256)
	}
	if all, err := b.Bytes(); err != nil || !bytes.Equal(all, data) {
		t.Fatalf("read back: %v", err)
	}
	if n, err := g.ReadAt(make([]byte, 10), int64(len(data)-5)); n != 5 || !errors.Is(err, io.EOF) {
		t.Fatalf("read past the end: %d, %v", n, err)
	}
	b.Remove()

	// Cut midway: the reader's failure reaches the readers and Wait.
	pr, pw = io.Pipe()
	g = SpoolBodyAsync(pr, dir, 0)
	cut := errors.New("connection reset")
	go func() { pw.Write(data[:half]); pw.CloseWithError(cut) }()
	if _, err := g.ReadAt(make([]byte, 10), int64(len(data)-10)); !errors.Is(err, cut) {
		t.Fatalf("read of a cut body: %v", err)
	}
	path := g.Path()
	if _, err := g.Wait(); !errors.Is(err, cut) {
		t.Fatalf("Wait of a cut body: %v", err)
	}
	if st, err := os.Stat(path); err == nil && st.Size() != 0 {
		t.Fatalf("the cut body's file keeps %d bytes", st.Size())
	}
	// Over the limit: ErrTooLarge, as SpoolBody.
	g = SpoolBodyAsync(bytes.NewReader(data), dir, int64(len(data))-1)
	if _, err := g.Wait(); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("over the limit: %v", err)
	}
}

// TestGrowingBodyReadersWhileAFailedBodyIsRemoved: readers that are still
// reading a body when it fails and Wait removes it get an error, never
// bytes read from a file being emptied and reused (the race detector
// caught ReadAt taking the file while Wait's Remove cleared it).
func TestGrowingBodyReadersWhileAFailedBodyIsRemoved(t *testing.T) {
	dir := t.TempDir()
	data := bytes.Repeat([]byte("0123456789abcdef"), 20000)
	for range 20 {
		g := SpoolPartAsync(bytes.NewReader(data), dir, int64(len(data))-1)
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p := make([]byte, 4096)
				for off := int64(0); off < int64(len(data)); off += int64(len(p)) {
					n, err := g.ReadAt(p, off)
					if err != nil {
						return
					}
					if !bytes.Equal(p[:n], data[off:off+int64(n)]) {
						t.Errorf("bytes at %d are not the body's", off)
						return
					}
				}
			}()
		}
		if _, err := g.Wait(); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("over the limit: %v", err)
		}
		wg.Wait()
		if _, err := g.ReadAt(make([]byte, 10), 0); err == nil {
			t.Fatal("a read after the failed body was removed succeeded")
		}
	}
}

// TestSpoolAllocatesLittlePerBody: spooling a 10 KB body allocates a few
// KiB, not a 256 KiB read buffer per body, and keeping a small one in
// memory (SpoolSmall, 64 KiB keep) about its size; a reused buffer holds
// nothing of the body before.
func TestSpoolAllocatesLittlePerBody(t *testing.T) {
	dir := t.TempDir()
	data := bytes.Repeat([]byte("0123456789"), 1024)
	first := bytes.Repeat([]byte("Z"), 60<<10)
	if s, err := SpoolSmall(bytes.NewReader(first), dir, 0, SmallInMemory); err != nil {
		t.Fatal(err)
	} else {
		s.Remove()
	}
	const rounds = 50
	var err error
	a := heaptest.Allocated(func() {
		for range rounds {
			var b *BodyFile
			if b, err = SpoolBody(bytes.NewReader(data), dir, 0); err != nil {
				return
			}
			b.Remove()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if per := a / rounds; per > 32<<10 && !raceEnabled {
		t.Fatalf("SpoolBody of %d bytes allocated %d KiB per body", len(data), per>>10)
	}
	var s *Spooled
	a = heaptest.Allocated(func() {
		for range rounds {
			if s, err = SpoolSmall(bytes.NewReader(data), dir, 0, SmallInMemory); err != nil {
				return
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if per := a / rounds; per > 24<<10 && !raceEnabled {
		t.Fatalf("SpoolSmall of %d bytes allocated %d KiB per part", len(data), per>>10)
	}
	if got, _ := io.ReadAll(s.Reader()); !bytes.Equal(got, data) {
		t.Fatalf("SpoolSmall read back %d bytes, not the %d stored", len(got), len(data))
	}
	short, err := SpoolSmall(strings.NewReader("abc"), dir, 0, SmallInMemory)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := io.ReadAll(short.Reader()); string(got) != "abc" {
		t.Fatalf("a 3-byte part after larger ones read back %q", got)
	}
	b, err := SpoolBody(strings.NewReader("xyz"), dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Remove()
	if got, _ := io.ReadAll(b.Reader()); string(got) != "xyz" || b.Size != 3 {
		t.Fatalf("a 3-byte body after larger ones read back %q (size %d)", got, b.Size)
	}
}

// TestSpoolBodyKeep: a body of at most keep bytes stays in memory (no file
// in the directory) with its size and hash; a larger one is spooled to a
// file whole; max holds for both; a removed body cannot be read.
func TestSpoolBodyKeep(t *testing.T) {
	dir := t.TempDir()
	files := func() int {
		es, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		return len(es)
	}
	for _, size := range []int{1, 100, 1000, 1001, 5000} {
		data := bytes.Repeat([]byte("x"), size)
		data[0] = 'a'
		b, err := SpoolBodyKeep(iotest.OneByteReader(bytes.NewReader(data)), dir, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		got, err := b.Bytes()
		if err != nil || !bytes.Equal(got, data) || b.Size != int64(size) || b.SHA256 != hex.EncodeToString(sum[:]) {
			t.Fatalf("%d bytes: read %d, %v, size %d, hash %s", size, len(got), err, b.Size, b.SHA256)
		}
		if all, err := io.ReadAll(b.Reader()); err != nil || !bytes.Equal(all, data) {
			t.Fatalf("%d bytes: reader gave %d, %v", size, len(all), err)
		}
		if inMemory := b.Path() == ""; inMemory != (size <= 1000) || (files() == 0) != inMemory {
			t.Errorf("%d bytes: path %q, %d files", size, b.Path(), files())
		}
		if err := b.Remove(); err != nil {
			t.Fatal(err)
		}
		if _, err := b.ReadAt(make([]byte, 1), 0); err == nil {
			t.Errorf("%d bytes: the removed body can still be read", size)
		}
	}
	for _, size := range []int{600, 2000} {
		if _, err := SpoolBodyKeep(bytes.NewReader(make([]byte, size)), dir, 500, 1000); !errors.Is(err, ErrTooLarge) {
			t.Errorf("%d bytes over max 500: %v", size, err)
		}
	}
	if _, err := SpoolBodyKeep(iotest.ErrReader(io.ErrUnexpectedEOF), dir, 0, 1000); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a cut body: %v", err)
	}
}
