package exchange

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
)

// Spool keeps payload bytes in memory up to Threshold and in a temporary
// file in Dir beyond it, so that large messages need not sit in memory.
type Spool struct {
	Dir       string
	Threshold int64
	files     []string
}

// DefaultSpoolThreshold is used when Spool.Threshold is zero.
const DefaultSpoolThreshold = 4 << 20

// Store reads r to its end and returns a body with its size and SHA-256.
func (s *Spool) Store(r io.Reader) (Body, int64, string, error) {
	limit := s.Threshold
	if limit <= 0 {
		limit = DefaultSpoolThreshold
	}
	h := sha256.New()
	var buf bytes.Buffer
	n, err := io.Copy(io.MultiWriter(&buf, h), io.LimitReader(r, limit+1))
	if err != nil {
		return nil, 0, "", fmt.Errorf("exchange: spool: %w", err)
	}
	if n <= limit {
		return MemoryBody(buf.Bytes()), n, hex.EncodeToString(h.Sum(nil)), nil
	}
	f, err := os.CreateTemp(s.Dir, "gateway-spool-*")
	if err != nil {
		return nil, 0, "", fmt.Errorf("exchange: spool: %w", err)
	}
	s.files = append(s.files, f.Name())
	m, err := f.Write(buf.Bytes()) // already hashed
	var rest int64
	if err == nil {
		rest, err = io.Copy(io.MultiWriter(f, h), r)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, 0, "", fmt.Errorf("exchange: spool: %w", err)
	}
	return FileBody(f.Name()), int64(m) + rest, hex.EncodeToString(h.Sum(nil)), nil
}

// Bytes stores b, spooling it when it is larger than the threshold. A body
// kept in memory is b itself, not a copy: b must not change afterwards.
func (s *Spool) Bytes(b []byte) (Body, int64, string, error) {
	limit := s.Threshold
	if limit <= 0 {
		limit = DefaultSpoolThreshold
	}
	if int64(len(b)) <= limit {
		sum := sha256.Sum256(b)
		return MemoryBody(b), int64(len(b)), hex.EncodeToString(sum[:]), nil
	}
	f, err := os.CreateTemp(s.Dir, "gateway-spool-*")
	if err != nil {
		return nil, 0, "", fmt.Errorf("exchange: spool: %w", err)
	}
	s.files = append(s.files, f.Name())
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, 0, "", fmt.Errorf("exchange: spool: %w", err)
	}
	sum := sha256.Sum256(b)
	return FileBody(f.Name()), int64(len(b)), hex.EncodeToString(sum[:]), nil
}

// Cleanup removes the spool files this spool created.
func (s *Spool) Cleanup() error {
	var errs []error
	for _, f := range s.files {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	s.files = nil
	return errors.Join(errs...)
}
