package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
)

// JSONFile appends one JSON object per line to a file and syncs it before
// Write returns, so it is a durable sink.
type JSONFile struct {
	mu sync.Mutex
	f  *os.File
}

// OpenJSONFile opens (creating if needed) a JSON-lines audit file for appending.
func OpenJSONFile(path string) (*JSONFile, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return nil, fmt.Errorf("audit: open %s: %w", path, err)
	}
	return &JSONFile{f: f}, nil
}

func (s *JSONFile) Write(_ context.Context, r Record) error {
	line, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("audit: encode: %w", err)
	}
	line = append(line, '\n')
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return errors.New("audit: file sink closed")
	}
	if _, err := s.f.Write(line); err != nil {
		return fmt.Errorf("audit: write %s: %w", s.f.Name(), err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("audit: sync %s: %w", s.f.Name(), err)
	}
	return nil
}

// Close closes the file.
func (s *JSONFile) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
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

// Multi writes to every sink in order and returns the errors joined. Wrap
// the non-durable ones with BestEffort.
type Multi []Sink

func (m Multi) Write(ctx context.Context, r Record) error {
	var errs []error
	for _, s := range m {
		if err := s.Write(ctx, r); err != nil {
			errs = append(errs, err)
		}
	}
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
