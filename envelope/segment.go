package envelope

import (
	"bufio"
	"bytes"
	"io"
)

// MaxSegmentLength is the longest EDIFACT or X12 service segment (UNB, UNH,
// UNZ; GS, ST, IEA), in bytes, that Extract reads: a longer one makes the
// envelope damaged. Real service segments are a few hundred bytes (EDIFACT
// UNB with every optional element stays under 400, X12 GS under 120). Other
// segments may be of any length (an X12 BIN or an EDIFACT free-text
// segment can carry megabytes): only their tag is looked at, and the rest
// of them is skipped without being kept.
const MaxSegmentLength = 1 << 20

// segmentReader reads the segments of an EDIFACT or X12 interchange from a
// buffered reader, keeping at most the first MaxSegmentLength bytes of each.
type segmentReader struct {
	br            *bufio.Reader
	term, release byte // release is 0 when not used
	buf           []byte
	n             int64 // length of the current segment
}

// skipSpace skips white space; more is false at the end of the data.
func (s *segmentReader) skipSpace() (more bool, err error) {
	for {
		b, err := s.br.ReadByte()
		if err == io.EOF {
			return false, nil
		}
		if err != nil {
			return false, readErr(err)
		}
		if !isSpace(b) {
			s.br.UnreadByte()
			return true, nil
		}
	}
}

// read reads one segment and its terminator into buf (its first
// MaxSegmentLength bytes). A terminator preceded by an odd run of release
// characters is escaped and part of the segment. terminated is false when
// the data ends first; oddRelease then tells whether it ends in an odd run
// of release characters.
func (s *segmentReader) read() (terminated, oddRelease bool, err error) {
	s.buf, s.n = s.buf[:0], 0
	run := 0 // release characters at the end of the segment so far
	for {
		if s.br.Buffered() == 0 {
			if _, err := s.br.Peek(1); err == io.EOF {
				return false, run%2 == 1, nil
			} else if err != nil {
				return false, false, readErr(err)
			}
		}
		chunk, _ := s.br.Peek(s.br.Buffered())
		i := bytes.IndexByte(chunk, s.term)
		part := chunk
		if i >= 0 {
			part = chunk[:i]
		}
		run = s.releaseRun(part, run)
		s.keep(part)
		switch {
		case i < 0:
			s.br.Discard(len(chunk))
		case run%2 == 1: // an escaped terminator
			s.keep(chunk[i : i+1])
			s.br.Discard(i + 1)
			run = 0
		default:
			s.br.Discard(i + 1)
			return true, false, nil
		}
	}
}

// releaseRun returns the run of release characters at the end of part,
// continuing prev when part consists of release characters only.
func (s *segmentReader) releaseRun(part []byte, prev int) int {
	if s.release == 0 {
		return 0
	}
	n := 0
	for i := len(part) - 1; i >= 0 && part[i] == s.release; i-- {
		n++
	}
	if n == len(part) {
		return prev + n
	}
	return n
}

func (s *segmentReader) keep(p []byte) {
	s.n += int64(len(p))
	if room := MaxSegmentLength - len(s.buf); room > 0 {
		s.buf = append(s.buf, p[:min(room, len(p))]...)
	}
}

// long reports whether the current segment is longer than buf.
func (s *segmentReader) long() bool { return s.n > int64(len(s.buf)) }

// rest reads the data to its end and returns how many bytes follow the
// white space at the current position.
func (s *segmentReader) rest() (int64, error) {
	if _, err := s.skipSpace(); err != nil {
		return 0, err
	}
	n, err := io.Copy(io.Discard, s.br)
	if err != nil {
		return 0, readErr(err)
	}
	return n, nil
}
