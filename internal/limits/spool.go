package limits

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/edigateway/gateway/internal/readahead"
)

// spoolAreaPrefix names the per-process directories OpenSpoolArea makes in
// spool_dir; each has a lock file of the same name plus ".lock" that its
// process holds (flock) while it runs.
const spoolAreaPrefix = "gateway-spool."

// SpoolArea is this process's private directory inside spool_dir. Every
// file the gateway spools (request bodies, payloads waiting for the
// handler) is created in it, so that what a crashed process left behind
// can be told apart from the files of a gateway still running on the same
// spool_dir, and removed at the next start.
type SpoolArea struct {
	// Dir is the directory to create spool files in.
	Dir  string
	lock *os.File
}

// OpenSpoolArea removes the spool areas in parent ("" = the system
// temporary directory) whose process is gone (their lock is free: a crash
// or kill -9 left them) and makes a new one for this process. Close
// removes it.
func OpenSpoolArea(parent string, log *slog.Logger) (*SpoolArea, error) {
	if parent == "" {
		parent = os.TempDir()
	}
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return nil, fmt.Errorf("limits: spool_dir: %w", err)
	}
	removed, err := sweepSpoolAreas(parent)
	if err != nil {
		log.Warn("spool_dir: leftovers of an earlier run could not all be removed", "dir", parent, "err", err)
	}
	if removed > 0 {
		log.Info("spool_dir: removed the spool files an earlier run left behind", "dir", parent, "areas", removed)
	}
	// The lock is taken before the area exists: another gateway's sweep,
	// starting at the same moment, looks only at areas (directories) and
	// finds this one's lock held. Creating the area first let such a sweep
	// take the fresh lock for its check, and this start failed.
	lock, err := os.CreateTemp(parent, spoolAreaPrefix+"*.lock")
	if err != nil {
		return nil, fmt.Errorf("limits: spool_dir: %w", err)
	}
	if err := holdLock(lock); err != nil {
		lock.Close()
		os.Remove(lock.Name())
		return nil, fmt.Errorf("limits: spool_dir lock: %w", err)
	}
	dir := strings.TrimSuffix(lock.Name(), ".lock")
	if err := os.Mkdir(dir, 0o700); err != nil {
		lock.Close()
		os.Remove(lock.Name())
		return nil, fmt.Errorf("limits: spool_dir: %w", err)
	}
	return &SpoolArea{Dir: dir, lock: lock}, nil
}

// Close removes the area with whatever is still in it.
func (a *SpoolArea) Close() error {
	if a == nil || a.lock == nil {
		return nil
	}
	err := os.RemoveAll(a.Dir)
	if rerr := os.Remove(a.lock.Name()); err == nil && !errors.Is(rerr, os.ErrNotExist) {
		err = rerr
	}
	a.lock.Close()
	a.lock = nil
	if err != nil {
		return fmt.Errorf("limits: spool area: %w", err)
	}
	return nil
}

// sweepSpoolAreas removes the areas of parent whose lock no process holds.
func sweepSpoolAreas(parent string) (int, error) {
	ents, err := os.ReadDir(parent)
	if err != nil {
		return 0, fmt.Errorf("limits: spool_dir: %w", err)
	}
	var errs []error
	n := 0
	for _, ent := range ents {
		name := ent.Name()
		if !ent.IsDir() || !strings.HasPrefix(name, spoolAreaPrefix) {
			continue
		}
		dir := filepath.Join(parent, name)
		lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if tryLock(lock) != nil { // held: a running gateway's area
			lock.Close()
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		} else {
			n++
		}
		os.Remove(lock.Name())
		lock.Close()
	}
	return n, errors.Join(errs...)
}

// ErrSpool is wrapped by SpoolBody's errors of the local file system (not
// of the partner's bytes): the message is answered "retry later".
var ErrSpool = errors.New("spool file")

// BodyFile is a request body spooled to a file as it arrived, with its
// size and SHA-256 computed on the way.
type BodyFile struct {
	f   *os.File
	dir string
	// mem holds the body instead of f when SpoolBodyKeep kept it in memory;
	// removed is set by Remove.
	mem     []byte
	removed bool
	// Size is the number of body bytes; SHA256 their lowercase hex SHA-256.
	Size   int64
	SHA256 string
}

// SpoolBody copies r to a new file in dir in ChunkSize pieces, hashing it,
// and fails with an error wrapping ErrTooLarge as soon as more than max
// bytes (max > 0) arrived; the partial file is removed then. The caller
// must Remove the returned file.
//
// The file is one that an earlier body's Remove left empty for reuse, when
// there is one (see spareBodies), else a new one.
func SpoolBody(r io.Reader, dir string, max int64) (*BodyFile, error) {
	return spool(r, dir, max, sha256.New())
}

// SpoolBodyKeep is SpoolBody for a body that is read whole into memory
// anyway when it is small: one of at most keep bytes (keep ≤ the pooled
// read buffer, 256 KiB) stays in memory, hashed, without a file to write,
// read back and empty (Path is then ""); a larger one is spooled as by
// SpoolBody.
func SpoolBodyKeep(r io.Reader, dir string, max, keep int64) (*BodyFile, error) {
	if keep <= 0 || keep+1 > spoolChunk {
		return SpoolBody(r, dir, max)
	}
	bp := spoolChunks.Get().(*[]byte)
	defer spoolChunks.Put(bp)
	buf := (*bp)[:keep+1]
	// Ending at io.EOF only, as fill does (a body cut short is an error).
	n, err := readahead.Fill(r, buf)
	if max > 0 && int64(n) > max {
		return nil, fmt.Errorf("more than %d bytes: %w", max, ErrTooLarge)
	}
	switch {
	case err == io.EOF:
		sum := sha256.Sum256(buf[:n])
		return &BodyFile{mem: bytes.Clone(buf[:n]), dir: dir, Size: int64(n), SHA256: hex.EncodeToString(sum[:])}, nil
	case err != nil:
		return nil, err
	}
	return SpoolBody(io.MultiReader(bytes.NewReader(buf[:n]), r), dir, max)
}

func spool(r io.Reader, dir string, max int64, h hash.Hash) (*BodyFile, error) {
	b, err := newBodyFile(dir)
	if err != nil {
		return nil, err
	}
	if err := b.fill(r, h, max, nil); err != nil {
		b.Remove()
		return nil, err
	}
	if h != nil {
		b.SHA256 = hex.EncodeToString(h.Sum(nil))
	}
	return b, nil
}

func newBodyFile(dir string) (*BodyFile, error) {
	f, err := spareBodies.take(dir)
	if f == nil && err == nil {
		f, err = os.CreateTemp(dir, "gateway-body-*")
	}
	if err != nil {
		return nil, fmt.Errorf("limits: spool body: %w: %w", ErrSpool, err)
	}
	return &BodyFile{f: f, dir: dir}, nil
}

// GrowingBody is a body being spooled by SpoolBodyAsync: its bytes can be
// read while they arrive.
type GrowingBody struct {
	mu      sync.Mutex
	more    *sync.Cond
	b       *BodyFile
	written int64
	done    bool
	err     error
}

// SpoolBodyAsync is SpoolBody running in its own goroutine: it returns at
// once, and the GrowingBody's ReadAt gives the body's bytes as they are
// written to the file (waiting for those not yet arrived), so that the
// body can be unwrapped while it is received. Wait returns what SpoolBody
// would have; it must be called, once nothing reads the GrowingBody any
// more, and the caller removes the BodyFile it returns.
func SpoolBodyAsync(r io.Reader, dir string, max int64) *GrowingBody {
	return spoolAsync(r, dir, max, sha256.New())
}

// SpoolPartAsync is SpoolBodyAsync without the hash: a MIME part that is
// read while it arrives (its BodyFile's SHA256 is empty).
func SpoolPartAsync(r io.Reader, dir string, max int64) *GrowingBody {
	return spoolAsync(r, dir, max, nil)
}

func spoolAsync(r io.Reader, dir string, max int64, h hash.Hash) *GrowingBody {
	g := &GrowingBody{}
	g.more = sync.NewCond(&g.mu)
	go func() {
		b, err := newBodyFile(dir)
		if err != nil {
			g.end(err)
			return
		}
		g.mu.Lock()
		g.b = b
		g.mu.Unlock()
		err = b.fill(r, h, max, func(n int64) {
			g.mu.Lock()
			g.written = n
			g.more.Broadcast()
			g.mu.Unlock()
		})
		if err == nil && h != nil {
			b.SHA256 = hex.EncodeToString(h.Sum(nil))
		}
		g.end(err)
	}()
	return g
}

func (g *GrowingBody) end(err error) {
	g.mu.Lock()
	g.done, g.err = true, err
	g.more.Broadcast()
	g.mu.Unlock()
}

// ReadAt waits for off+len(p) bytes or the body's end; it fails with the
// spooling's error once that has failed.
func (g *GrowingBody) ReadAt(p []byte, off int64) (int, error) {
	end := off + int64(len(p))
	g.mu.Lock()
	for !g.done && g.written < end {
		g.more.Wait()
	}
	// The file is taken under the lock: Wait removes a failed body under
	// it, and a read that raced with that removal then fails on the
	// closed file instead of racing for the field.
	written, err := g.written, g.err
	var f *os.File
	if g.b != nil {
		f = g.b.f
	}
	g.mu.Unlock()
	if err != nil {
		return 0, err
	}
	if off >= written {
		return 0, io.EOF
	}
	if f == nil {
		return 0, fmt.Errorf("limits: spool body read: %w: %w", ErrSpool, os.ErrClosed)
	}
	n, rerr := f.ReadAt(p[:min(end, written)-off], off)
	if rerr == nil && end > written {
		rerr = io.EOF
	}
	return n, rerr
}

// Wait waits for the body's end and returns the spooled body, or the error
// SpoolBody would have returned (the partial file removed then).
func (g *GrowingBody) Wait() (*BodyFile, error) {
	g.mu.Lock()
	for !g.done {
		g.more.Wait()
	}
	b, err := g.b, g.err
	if err != nil {
		b.Remove() // under the lock: see ReadAt
		g.mu.Unlock()
		return nil, err
	}
	g.mu.Unlock()
	return b, nil
}

// Path is the spool file's name.
func (g *GrowingBody) Path() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.b == nil {
		return ""
	}
	return g.b.Path()
}

// spoolChunk is the piece SpoolBody reads before it writes: large enough
// that a body arriving in small reads (a MIME part reader hands out a few
// KiB at a time) costs few write calls.
const spoolChunk = 256 << 10

// spoolChunks holds the read buffers of fill between bodies: a 256 KiB
// buffer made per body was most of what a 10 KB AS2 message allocated
// (each one zeroed, and pushing the next garbage collection closer).
var spoolChunks = sync.Pool{New: func() any { b := make([]byte, spoolChunk); return &b }}

func (b *BodyFile) fill(r io.Reader, h hash.Hash, max int64, written func(int64)) error {
	bp := spoolChunks.Get().(*[]byte)
	defer spoolChunks.Put(bp)
	buf := *bp
	for {
		// Ending at io.EOF only: io.ReadFull would turn a body cut short
		// (net/http's io.ErrUnexpectedEOF) into a short read, and a cut
		// body into a complete one.
		k, rerr := readahead.Fill(r, buf)
		if k > 0 {
			b.Size += int64(k)
			if max > 0 && b.Size > max {
				return fmt.Errorf("more than %d bytes: %w", max, ErrTooLarge)
			}
			if h != nil {
				h.Write(buf[:k])
			}
			if _, err := b.f.Write(buf[:k]); err != nil {
				return fmt.Errorf("limits: spool body: %w: %w", ErrSpool, err)
			}
			if written != nil {
				written(b.Size)
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

// Path is the file's name ("" for a body kept in memory).
func (b *BodyFile) Path() string {
	if b.f == nil {
		return ""
	}
	return b.f.Name()
}

// ReadAt reads the spooled bytes at off.
func (b *BodyFile) ReadAt(p []byte, off int64) (int, error) {
	if b.removed {
		return 0, fmt.Errorf("limits: spool body: %w", os.ErrClosed)
	}
	if b.f == nil {
		return bytes.NewReader(b.mem).ReadAt(p, off)
	}
	return b.f.ReadAt(p, off)
}

// Reader returns a fresh reader over the whole body.
func (b *BodyFile) Reader() io.Reader { return io.NewSectionReader(b, 0, b.Size) }

// Bytes reads the whole body into one allocation of exactly Size bytes (a
// body kept in memory is returned as it is).
func (b *BodyFile) Bytes() ([]byte, error) {
	if b.removed {
		return nil, fmt.Errorf("limits: spool body read back: %w: %w", ErrSpool, os.ErrClosed)
	}
	if b.f == nil {
		return b.mem, nil
	}
	out := make([]byte, b.Size)
	if _, err := b.f.ReadAt(out, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("limits: spool body read back: %w: %w", ErrSpool, err)
	}
	return out, nil
}

// Remove closes the file and deletes it, or keeps it emptied for the next
// body (spareBodies). Either way the body's bytes are gone, and this
// BodyFile (and every reader it gave out) fails from now on.
func (b *BodyFile) Remove() error {
	if b == nil {
		return nil
	}
	b.mem, b.removed = nil, true
	if b.f == nil {
		return nil
	}
	f := b.f
	b.f = nil
	name := f.Name()
	if f.Truncate(0) == nil && f.Close() == nil && spareBodies.put(b.dir, name) {
		return nil
	}
	f.Close()
	if err := os.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("limits: spool body: %w: %w", ErrSpool, err)
	}
	return nil
}

// spareBodies keeps the names of up to maxSpareBodies emptied body files
// per spool directory for SpoolBody to reuse. Creating a file costs far
// more than opening one: ext4 without a journal skips every inode deleted
// in the last minutes when it allocates one, so a file created and
// deleted per message made each later creation (the inbox's too) slower
// as the load went on. A reused file is truncated to nothing when its body
// is removed and opened anew (a fresh descriptor: whoever still holds the
// old BodyFile reads nothing of the next body). The files stay in the
// process's spool area, which is removed at shutdown or, after a crash, at
// the next start.
var spareBodies = &spareFiles{byDir: map[string][]string{}}

const maxSpareBodies = 64

type spareFiles struct {
	mu    sync.Mutex
	byDir map[string][]string
}

// take opens a spare file of dir for writing, emptied; nil when there is none.
func (s *spareFiles) take(dir string) (*os.File, error) {
	for {
		s.mu.Lock()
		names := s.byDir[dir]
		if len(names) == 0 {
			s.mu.Unlock()
			return nil, nil
		}
		name := names[len(names)-1]
		s.byDir[dir] = names[:len(names)-1]
		s.mu.Unlock()
		f, err := os.OpenFile(name, os.O_RDWR|os.O_TRUNC, 0)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		// The area was removed (shutdown) or the file swept: try the next.
	}
}

// put keeps name (emptied) for reuse; false when dir has enough spares.
func (s *spareFiles) put(dir, name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.byDir[dir]) >= maxSpareBodies {
		return false
	}
	s.byDir[dir] = append(s.byDir[dir], name)
	return true
}

// SmallInMemory is what the AS4 endpoint keeps of an attachment in memory
// before it spools it (SpoolSmall's keep): a typical message's parts
// need no file, a message of 32 parts holds at most 2 MiB.
const SmallInMemory = 64 << 10

// Spooled is content kept in memory when it is small (a few KiB of a
// typical message: no file to create and remove) and in a spool file
// otherwise.
type Spooled struct {
	mem  []byte
	file *BodyFile
	// Size is the number of bytes.
	Size int64
}

// SpoolSmall reads r to its end: up to keep bytes stay in memory, more go
// to a spool file in dir like SpoolLayer (no hash), failing with an error
// wrapping ErrTooLarge past max bytes (max > 0). The caller must Remove it.
func SpoolSmall(r io.Reader, dir string, max, keep int64) (*Spooled, error) {
	// It reads into a pooled buffer and keeps a copy of exactly what
	// arrived: a keep+1 buffer made per call (64 KiB for a part of a few
	// KiB, twice per AS4 message) was a large part of what a message
	// allocated.
	var buf []byte
	if keep+1 <= spoolChunk {
		bp := spoolChunks.Get().(*[]byte)
		defer spoolChunks.Put(bp)
		buf = (*bp)[:keep+1]
	} else {
		buf = make([]byte, keep+1)
	}
	n := 0
	for n < len(buf) {
		k, err := r.Read(buf[n:])
		n += k
		if max > 0 && int64(n) > max {
			return nil, fmt.Errorf("more than %d bytes: %w", max, ErrTooLarge)
		}
		if err == io.EOF {
			return &Spooled{mem: bytes.Clone(buf[:n]), Size: int64(n)}, nil
		}
		if err != nil {
			return nil, err
		}
	}
	f, err := spool(io.MultiReader(bytes.NewReader(buf[:n]), r), dir, max, nil)
	if err != nil {
		return nil, err
	}
	return &Spooled{file: f, Size: f.Size}, nil
}

// InMemory is content already read into memory, as a Spooled.
func InMemory(b []byte) *Spooled { return &Spooled{mem: b, Size: int64(len(b))} }

// Reader returns a fresh reader over the content.
func (s *Spooled) Reader() io.Reader {
	if s.file != nil {
		return s.file.Reader()
	}
	return bytes.NewReader(s.mem)
}

// Remove deletes the spool file, if any.
func (s *Spooled) Remove() error {
	if s == nil {
		return nil
	}
	s.mem = nil
	return s.file.Remove()
}
