package audit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
)

// JSONFile appends one JSON object per line to a file and syncs it before
// Write returns, so it is a durable sink. Concurrent writers share syncs
// (group sync): each appends its record, then one fsync covers every record
// appended so far, and each Write returns once a sync that started after its
// record was appended has succeeded. Every record is all or nothing: a
// write that fails (a full disk accepts part of a record) is rolled back by
// truncating the file to the end of the last whole record; a sync that
// fails fails every record not yet synced, which is truncated away the same
// way; if even that fails, the next record starts with a newline so that it
// never glues onto the fragment, and readers (QueryJSONFile) skip the
// fragment. A file left ending inside a record by a crash is truncated the
// same way on open.
type JSONFile struct {
	mu   sync.Mutex
	cond *sync.Cond
	f    file
	// off is the end of the last whole record; dirty means the file may
	// hold bytes past it (a failed write not yet rolled back). synced is
	// the end of the records known to be on disk (≤ off).
	off, synced int64
	dirty       bool
	// syncing: a writer is running Sync without the lock. epoch counts the
	// failed syncs: a writer that appended in an earlier epoch than the
	// current one had its record rolled back, with error failed.
	syncing bool
	epoch   uint64
	failed  error
	// syncs counts the successful syncs (tests).
	syncs int64
}

// file is what JSONFile needs of an *os.File (tests inject failures).
type file interface {
	io.Writer
	io.ReaderAt
	Sync() error
	Truncate(size int64) error
	Stat() (os.FileInfo, error)
	Close() error
	Name() string
}

// OpenJSONFile opens (creating if needed) a JSON-lines audit file for appending.
func OpenJSONFile(path string) (*JSONFile, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o640)
	if err != nil {
		return nil, fmt.Errorf("audit: open %s: %w", path, err)
	}
	s, err := newJSONFile(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return s, nil
}

// newJSONFile takes over an open append-mode file and finds the end of its
// last whole record.
func newJSONFile(f file) (*JSONFile, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("audit: stat %s: %w", f.Name(), err)
	}
	off, err := lastLineEnd(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("audit: read %s: %w", f.Name(), err)
	}
	s := &JSONFile{f: f, off: off, synced: off, dirty: off != st.Size()}
	s.cond = sync.NewCond(&s.mu)
	if s.dirty {
		s.rollback() // a failure here is retried before the next record
	}
	return s, nil
}

// lastLineEnd returns the offset just past the last newline in the first
// size bytes of f (0 when there is none).
func lastLineEnd(f io.ReaderAt, size int64) (int64, error) {
	buf := make([]byte, 4096)
	for end := size; end > 0; {
		start := max(0, end-int64(len(buf)))
		n, err := f.ReadAt(buf[:end-start], start)
		if err != nil && !(errors.Is(err, io.EOF) && int64(n) == end-start) {
			return 0, err
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			return start + int64(i) + 1, nil
		}
		end = start
	}
	return 0, nil
}

// rollback truncates the file to the end of the last whole record and syncs.
func (s *JSONFile) rollback() error {
	if err := s.f.Truncate(s.off); err != nil {
		return err
	}
	if err := s.f.Sync(); err != nil {
		return err
	}
	s.dirty = false
	return nil
}

func (s *JSONFile) Write(ctx context.Context, r Record) error {
	return s.WriteBatch(ctx, []Record{r})
}

// WriteBatch implements BatchWriter: the records are appended in order,
// each all or nothing as for Write, and one sync covers them all.
func (s *JSONFile) WriteBatch(_ context.Context, rs []Record) error {
	lines, err := encodeLines(rs)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return errors.New("audit: file sink closed")
	}
	for _, line := range lines {
		if err := s.appendLine(line); err != nil {
			return err
		}
	}
	return s.waitSynced(s.off, s.epoch)
}

// AppendBatch implements Appender: the records are appended in order, each
// all or nothing as for Write, without waiting for a sync; the returned
// wait returns once they are on disk (nil), which the next Write or
// WriteBatch of any writer brings about, or once a failed sync rolled them
// back (its error).
func (s *JSONFile) AppendBatch(_ context.Context, rs []Record) (wait func(context.Context) error, err error) {
	lines, err := encodeLines(rs)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil, errors.New("audit: file sink closed")
	}
	for _, line := range lines {
		if err := s.appendLine(line); err != nil {
			return nil, err
		}
	}
	end, epoch := s.off, s.epoch
	return func(context.Context) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.waitSynced(end, epoch)
	}, nil
}

func encodeLines(rs []Record) ([][]byte, error) {
	lines := make([][]byte, len(rs))
	for i, r := range rs {
		line, err := appendRecordJSON(make([]byte, 0, 512), r)
		if err != nil {
			return nil, fmt.Errorf("audit: encode: %w", err)
		}
		lines[i] = append(line, '\n')
	}
	return lines, nil
}

// appendLine appends one record's line (see Write). Called with s.mu held.
func (s *JSONFile) appendLine(line []byte) error {
	start := s.off
	if s.dirty && s.rollback() != nil {
		// The fragment of an earlier failed write is still there: begin on
		// a line of our own, after whatever the file holds now.
		st, err := s.f.Stat()
		if err != nil {
			return fmt.Errorf("audit: stat %s: %w", s.f.Name(), err)
		}
		start = st.Size()
		line = append([]byte{'\n'}, line...)
	}
	n, err := s.f.Write(line)
	if err == nil && n < len(line) {
		err = io.ErrShortWrite
	}
	if err != nil {
		err = fmt.Errorf("audit: write %s: %w", s.f.Name(), err)
		s.dirty = true // roll back to s.off, the end of the last whole record
		if rerr := s.rollback(); rerr != nil {
			err = fmt.Errorf("%w (and rolling back the partial record failed: %v)", err, rerr)
		}
		return err
	}
	s.off, s.dirty = start+int64(len(line)), false
	return nil
}

// waitSynced returns once the file is synced up to end (nil), or once the
// record appended in epoch was rolled back by a failed sync (its error).
// One waiting writer at a time runs Sync, without the lock, covering every
// record appended when it starts; the others wait for it and then either
// return or sync what was appended meanwhile. Called with s.mu held.
func (s *JSONFile) waitSynced(end int64, epoch uint64) error {
	for {
		switch {
		case s.epoch != epoch:
			return s.failed
		case s.synced >= end:
			return nil
		case s.syncing:
			s.cond.Wait()
			continue
		case s.f == nil:
			return errors.New("audit: file sink closed before the record was synced")
		}
		s.syncing = true
		target, f := s.off, s.f
		s.mu.Unlock()
		err := f.Sync()
		s.mu.Lock()
		s.syncing = false
		if err == nil {
			s.syncs++
			s.synced = max(s.synced, target)
		} else {
			// Every record past the last sync is in doubt: roll them all
			// back and fail their writers (this epoch's).
			err = fmt.Errorf("audit: sync %s: %w", f.Name(), err)
			s.failed, s.epoch = err, s.epoch+1
			s.off, s.dirty = s.synced, true
			if rerr := s.rollback(); rerr != nil {
				s.failed = fmt.Errorf("%w (and rolling back the partial record failed: %v)", err, rerr)
			}
		}
		s.cond.Broadcast()
	}
}

// Close closes the file once the records written are synced (or failed).
func (s *JSONFile) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.syncing {
		s.cond.Wait()
	}
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}

// BestEffortSink logs and counts write failures instead of failing the exchange.
type BestEffortSink struct {
	Sink   Sink
	Log    *slog.Logger
	failed atomic.Int64
}

// BestEffort wraps a sink so that its failures never fail an exchange.
func BestEffort(s Sink, log *slog.Logger) *BestEffortSink {
	if log == nil {
		log = slog.Default()
	}
	return &BestEffortSink{Sink: s, Log: log}
}

func (b *BestEffortSink) Write(ctx context.Context, r Record) error {
	if err := b.Sink.Write(ctx, r); err != nil {
		b.failed.Add(1)
		b.Log.Warn("best-effort audit write failed", "partner", r.Partner, "protocol", r.Protocol,
			"message_id", r.MessageID, "step", string(r.Step), "err", err)
	}
	return nil
}

// Failures is the number of writes that failed.
func (b *BestEffortSink) Failures() int64 { return b.failed.Load() }

// BatchWriter is implemented by durable sinks that make several records
// durable in one step (JSONFile: one sync for all of them). WriteBatch
// writes rs in order; nil means every one of them is durable.
type BatchWriter interface {
	WriteBatch(ctx context.Context, rs []Record) error
}

// Appender is implemented by durable sinks that can take records now and
// make them durable together with later ones (JSONFile: the sync of a later
// write covers them). AppendBatch writes rs in order without waiting for
// them to be durable; wait returns nil once they are, or the error that
// lost them. Nothing makes them durable but a later write: a caller that
// needs them on disk writes something else after them, or calls wait after
// a write of its own.
type Appender interface {
	AppendBatch(ctx context.Context, rs []Record) (wait func(context.Context) error, err error)
}

// WriteBatch writes rs to s in one step when s is a BatchWriter, else one
// by one, stopping at the first error.
func WriteBatch(ctx context.Context, s Sink, rs []Record) error {
	if b, ok := s.(BatchWriter); ok {
		return b.WriteBatch(ctx, rs)
	}
	for _, r := range rs {
		if err := s.Write(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// Multi writes to every sink and returns the errors joined (in the sinks'
// order). The sinks are written at the same time, so that durable sinks
// (the store's table, a synced file) wait for their commits together
// rather than one after the other; Write returns when every sink has
// answered. Wrap the non-durable ones with BestEffort.
type Multi []Sink

func (m Multi) Write(ctx context.Context, r Record) error {
	switch len(m) {
	case 0:
		return nil
	case 1:
		return m[0].Write(ctx, r)
	}
	errs := make([]error, len(m))
	var wg sync.WaitGroup
	for i, s := range m[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i+1] = s.Write(ctx, r)
		}()
	}
	errs[0] = m[0].Write(ctx, r)
	wg.Wait()
	return errors.Join(errs...)
}

// WriteBatch implements BatchWriter: every sink gets the whole batch (in
// one step where it can), at the same time.
func (m Multi) WriteBatch(ctx context.Context, rs []Record) error {
	errs := make([]error, len(m))
	var wg sync.WaitGroup
	for i, s := range m {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = WriteBatch(ctx, s, rs)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Memory keeps records in memory, for tests and demos. Not durable.
type Memory struct {
	mu      sync.Mutex
	records []Record
}

func (m *Memory) Write(_ context.Context, r Record) error {
	m.mu.Lock()
	m.records = append(m.records, r)
	m.mu.Unlock()
	return nil
}

// Records returns a copy of what was written.
func (m *Memory) Records() []Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Record(nil), m.records...)
}

// Query implements Reader.
func (m *Memory) Query(_ context.Context, q Query) ([]Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultQueryLimit
	}
	var out []Record
	for i := range m.records {
		r := m.records[i]
		if q.Newest {
			r = m.records[len(m.records)-1-i]
		}
		if q.Matches(r) {
			out = append(out, r)
			if len(out) == limit {
				break
			}
		}
	}
	return out, nil
}

// MaxJSONLineBytes bounds one line read back by QueryJSONFile; longer lines
// are skipped like any other line that is not a whole record.
const MaxJSONLineBytes = 1 << 20

// QueryJSONFile reads the records of a JSON-lines audit file that q selects,
// oldest first. Lines that are not a whole record (the fragment a full disk
// or a crash left, at the end or before a newline repair) are skipped, so a
// torn line never hides the records around it.
func QueryJSONFile(ctx context.Context, path string, q Query) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("audit: open %s: %w", path, err)
	}
	defer f.Close()
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultQueryLimit
	}
	br := bufio.NewReaderSize(f, 64<<10)
	var out []Record
	for n := 0; ; n++ {
		if n%1024 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		line, tooLong, err := readLine(br, MaxJSONLineBytes)
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("audit: read %s: %w", path, err)
		}
		var r Record
		if !tooLong && len(line) > 0 && json.Unmarshal(line, &r) == nil && q.Matches(r) {
			out = append(out, r)
			if len(out) == limit {
				return out, nil
			}
		}
		if err == io.EOF {
			return out, nil
		}
	}
}

// readLine returns the next line without its newline, at most max bytes of
// it (tooLong reports that the rest was discarded).
func readLine(br *bufio.Reader, max int) (line []byte, tooLong bool, err error) {
	for {
		chunk, isPrefix, err := br.ReadLine()
		if len(line)+len(chunk) > max {
			tooLong = true
		} else {
			line = append(line, chunk...)
		}
		if err != nil || !isPrefix {
			return line, tooLong, err
		}
	}
}

// Query implements Reader by reading the file back (QueryJSONFile).
func (s *JSONFile) Query(ctx context.Context, q Query) ([]Record, error) {
	s.mu.Lock()
	name := ""
	if s.f != nil {
		name = s.f.Name()
	}
	s.mu.Unlock()
	if name == "" {
		return nil, errors.New("audit: file sink closed")
	}
	return QueryJSONFile(ctx, name, q)
}
