// Package sendspool keeps an outgoing message (or a step of building one)
// in a temporary file, so that a sender builds and resends messages of any
// size in fixed memory. The file is unlinked as soon as it is created where
// the system allows it (Unix), so that nothing is left behind whatever
// happens; elsewhere Close removes it.
package sendspool

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
)

// bufferSize is the write buffer between a builder and the file.
const bufferSize = 256 << 10

// File is a spool file: written once through Write and Finish, then read
// from its start as often as needed.
type File struct {
	f    *os.File
	bw   *bufio.Writer
	path string // set when the file could not be unlinked while open
	size int64
}

// Create makes a spool file in dir (default os.TempDir()) named after
// pattern (os.CreateTemp).
func Create(dir, pattern string) (*File, error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	s := &File{f: f, bw: bufio.NewWriterSize(f, bufferSize)}
	if os.Remove(f.Name()) != nil {
		s.path = f.Name()
	}
	return s, nil
}

// Write appends to the file (buffered until Finish).
func (s *File) Write(p []byte) (int, error) {
	if s.bw == nil {
		return 0, fmt.Errorf("spool: write after Finish")
	}
	return s.bw.Write(p)
}

// Finish flushes what was written and records the file's size; the file is
// then read with Reader.
func (s *File) Finish() error {
	if s.bw == nil {
		return nil
	}
	if err := s.bw.Flush(); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	s.bw = nil
	n, err := s.f.Seek(0, io.SeekCurrent)
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	s.size = n
	return nil
}

// Size is the length written, once finished.
func (s *File) Size() int64 { return s.size }

// Reader reads the finished file from its start; readers are independent.
func (s *File) Reader() *io.SectionReader { return io.NewSectionReader(s.f, 0, s.size) }

// Open is Reader as the opener the streaming builders take.
func (s *File) Open() (io.ReadCloser, error) { return io.NopCloser(s.Reader()), nil }

// Close releases the file (and removes it where it could not be unlinked).
func (s *File) Close() error {
	if s == nil || s.f == nil {
		return nil
	}
	err := s.f.Close()
	if s.path != "" {
		if rerr := os.Remove(s.path); err == nil {
			err = rerr
		}
	}
	s.f = nil
	return err
}

// BodySize is the length of a message body kept in s, or in mem when s is
// nil (a message built in memory).
func BodySize(s *File, mem []byte) int64 {
	if s != nil {
		return s.Size()
	}
	return int64(len(mem))
}

// BodyReader reads a message body from its start: from s, or from mem when
// s is nil.
func BodyReader(s *File, mem []byte) io.Reader {
	if s != nil {
		return s.Reader()
	}
	return bytes.NewReader(mem)
}
