package exchange

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
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

// storeChunk is the piece in which Store reads what it may keep in memory:
// fixed pieces, never a doubling buffer (a payload just over the threshold
// would otherwise cost three times it in garbage).
const storeChunk = 64 << 10

// storeChunks holds Store's pieces between payloads (what Store keeps is
// copied out of them): a 64 KiB piece made per payload of a few KiB was a
// large part of what a message allocated.
var storeChunks = sync.Pool{New: func() any { b := make([]byte, storeChunk); return &b }}

// Store reads r to its end and returns a body with its size and SHA-256.
func (s *Spool) Store(r io.Reader) (Body, int64, string, error) {
	limit := s.Threshold
	if limit <= 0 {
		limit = DefaultSpoolThreshold
	}
	h := sha256.New()
	tr := io.TeeReader(r, h)
	var chunks [][]byte
	var pooled []*[]byte
	defer func() {
		for _, c := range pooled {
			storeChunks.Put(c)
		}
	}()
	var n int64
	for n <= limit {
		cp := storeChunks.Get().(*[]byte)
		pooled = append(pooled, cp)
		c := (*cp)[:min(storeChunk, limit+1-n)]
		k, err := fill(tr, c)
		chunks = append(chunks, c[:k])
		n += int64(k)
		if err == io.EOF {
			// All of it fits: one allocation of exactly its size.
			b := make([]byte, 0, n)
			for _, c := range chunks {
				b = append(b, c...)
			}
			return MemoryBody(b), n, hex.EncodeToString(h.Sum(nil)), nil
		}
		if err != nil {
			return nil, 0, "", fmt.Errorf("exchange: spool: %w", err)
		}
	}
	f, err := os.CreateTemp(s.Dir, "gateway-spool-*")
	if err != nil {
		return nil, 0, "", fmt.Errorf("exchange: spool: %w", err)
	}
	s.files = append(s.files, f.Name())
	for _, c := range chunks {
		if err == nil {
			_, err = f.Write(c) // already hashed
		}
	}
	chunks = nil
	var rest int64
	if err == nil {
		rest, err = io.CopyBuffer(f, struct{ io.Reader }{tr}, make([]byte, 256<<10))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, 0, "", fmt.Errorf("exchange: spool: %w", err)
	}
	return FileBody(f.Name()), n + rest, hex.EncodeToString(h.Sum(nil)), nil
}

// fill reads into c until it is full (nil) or r ends (io.EOF) or fails;
// unlike io.ReadFull it passes r's own errors on unchanged, so that a
// reader reporting truncation with io.ErrUnexpectedEOF is not taken for
// one that ended.
func fill(r io.Reader, c []byte) (int, error) {
	n := 0
	for n < len(c) {
		k, err := r.Read(c[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
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
