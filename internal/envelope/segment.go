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
	// win is the reader's buffered data, of which pos bytes are read (and
	// discarded from br when win is refilled).
	win []byte
	pos int
	// buf is the current segment (its first MaxSegmentLength bytes), valid
	// until the next call of read, skipSpace or rest: either own or, for a
	// segment found whole in win, part of win.
	buf []byte
	own []byte
	n   int64 // length of the current segment
}

// fill makes unread data available in win; more is false at the end of the
// data.
func (s *segmentReader) fill() (more bool, err error) {
	if s.pos < len(s.win) {
		return true, nil
	}
	s.br.Discard(s.pos)
	s.win, s.pos = nil, 0
	if _, err := s.br.Peek(1); err == io.EOF {
		return false, nil
	} else if err != nil {
		return false, readErr(err)
	}
	s.win, _ = s.br.Peek(s.br.Buffered())
	return true, nil
}

// skipSpace skips white space; more is false at the end of the data.
func (s *segmentReader) skipSpace() (more bool, err error) {
	for {
		if more, err := s.fill(); !more || err != nil {
			return false, err
		}
		for s.pos < len(s.win) && isSpace(s.win[s.pos]) {
			s.pos++
		}
		if s.pos < len(s.win) {
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
	s.own, s.n = s.own[:0], 0
	run := 0 // release characters at the end of the segment so far
	for first := true; ; first = false {
		more, err := s.fill()
		if err != nil {
			return false, false, err
		}
		if !more {
			s.buf = s.own
			return false, run%2 == 1, nil
		}
		chunk := s.win[s.pos:]
		i := bytes.IndexByte(chunk, s.term)
		part := chunk
		if i >= 0 {
			part = chunk[:i]
		}
		run = s.releaseRun(part, run)
		if first && i >= 0 && run%2 == 0 && i <= MaxSegmentLength {
			// The whole segment is in the buffer: no copy.
			s.buf, s.n = part, int64(i)
			s.pos += i + 1
			return true, false, nil
		}
		s.keep(part)
		switch {
		case i < 0:
			s.pos = len(s.win)
		case run%2 == 1: // an escaped terminator
			s.keep(chunk[i : i+1])
			s.pos += i + 1
			run = 0
		default:
			s.pos += i + 1
			s.buf = s.own
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
	if room := MaxSegmentLength - len(s.own); room > 0 {
		s.own = append(s.own, p[:min(room, len(p))]...)
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
	n := int64(len(s.win) - s.pos)
	s.br.Discard(len(s.win))
	s.win, s.pos = nil, 0
	m, err := io.Copy(io.Discard, s.br)
	if err != nil {
		return 0, readErr(err)
	}
	return n + m, nil
}
