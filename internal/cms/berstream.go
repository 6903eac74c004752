package cms

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// ErrInvalidBER is wrapped by the streaming readers' errors about the BER
// encoding itself (truncation, lengths, nesting, trailing bytes), which the
// in-memory functions detect before looking at the content: a caller can
// tell a broken encoding from broken content.
var ErrInvalidBER = errBER

// berStream reads BER from an io.Reader one element header at a time, so
// that the large parts of a CMS structure (the encrypted content, an
// OCTET STRING of any size, definite or indefinite, primitive or chunked
// into constructed segments) are streamed and never held whole, while the
// small parts (OIDs, algorithm identifiers, recipient infos) are read into
// memory under a byte bound.
type berStream struct {
	r   *bufio.Reader
	off int64 // bytes consumed
}

func newBERStream(r io.Reader) *berStream {
	return &berStream{r: bufio.NewReaderSize(r, 64<<10)}
}

// sHeader is one element header read from a stream.
type sHeader struct {
	class       int
	constructed bool
	tag         int
	indefinite  bool
	length      int64 // content length when definite
	raw         []byte
	end         int64 // stream offset just past the content (definite)
}

// maxStreamLength bounds a definite length (1 TiB): larger is malformed.
const maxStreamLength = 1 << 40

func (s *berStream) readByte() (byte, error) {
	c, err := s.r.ReadByte()
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, fmt.Errorf("%w: truncated: %v", errBER, err)
	}
	s.off++
	return c, nil
}

// next reads an element header.
func (s *berStream) next() (sHeader, error) {
	var h sHeader
	b, err := s.readByte()
	if err != nil {
		return h, err
	}
	h.raw = append(h.raw, b)
	h.class = int(b >> 6)
	h.constructed = b&0x20 != 0
	h.tag = int(b & 0x1f)
	if h.tag == 0x1f {
		h.tag = 0
		for i := 0; ; i++ {
			if i >= 4 {
				return h, fmt.Errorf("%w: tag number too large", errBER)
			}
			c, err := s.readByte()
			if err != nil {
				return h, err
			}
			h.raw = append(h.raw, c)
			h.tag = h.tag<<7 | int(c&0x7f)
			if c&0x80 == 0 {
				break
			}
		}
	}
	l, err := s.readByte()
	if err != nil {
		return h, err
	}
	h.raw = append(h.raw, l)
	switch {
	case l < 0x80:
		h.length = int64(l)
	case l == 0x80:
		if !h.constructed {
			return h, fmt.Errorf("%w: indefinite length on primitive element", errBER)
		}
		h.indefinite = true
	case l == 0xff:
		return h, fmt.Errorf("%w: reserved length octet", errBER)
	default:
		n := int(l & 0x7f)
		if n > 8 {
			return h, fmt.Errorf("%w: length of %d octets too large", errBER, n)
		}
		var v uint64
		for range n {
			c, err := s.readByte()
			if err != nil {
				return h, err
			}
			h.raw = append(h.raw, c)
			v = v<<8 | uint64(c)
		}
		if v > maxStreamLength {
			return h, fmt.Errorf("%w: length %d too large", errBER, v)
		}
		h.length = int64(v)
	}
	h.end = s.off + h.length
	return h, nil
}

// more reports whether the constructed element h has another child at the
// current position, consuming the end-of-contents of an indefinite one.
func (s *berStream) more(h sHeader) (bool, error) {
	if !h.indefinite {
		switch {
		case s.off == h.end:
			return false, nil
		case s.off > h.end:
			return false, fmt.Errorf("%w: a child runs past the end of its parent", errBER)
		}
		return true, nil
	}
	p, err := s.r.Peek(2)
	if err != nil {
		return false, fmt.Errorf("%w: missing end-of-contents: %v", errBER, err)
	}
	if p[0] == 0 && p[1] == 0 {
		s.r.Discard(2)
		s.off += 2
		return false, nil
	}
	return true, nil
}

// is reports whether h is the given class, tag and form.
func (h sHeader) is(class, tag int, constructed bool) bool {
	return h.class == class && h.tag == tag && h.constructed == constructed
}

// readRaw reads the rest of the element whose header is h into memory
// (header included, as sent), at most max bytes in all.
func (s *berStream) readRaw(h sHeader, max int64) ([]byte, error) {
	out := append([]byte(nil), h.raw...)
	out, err := s.appendContent(out, h, max, 0)
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (s *berStream) appendContent(out []byte, h sHeader, max int64, depth int) ([]byte, error) {
	if depth > maxBERDepth {
		return nil, fmt.Errorf("%w: nesting deeper than %d", errBER, maxBERDepth)
	}
	if !h.indefinite {
		if int64(len(out))+h.length > max {
			return nil, fmt.Errorf("%w: element of more than %d bytes", errBER, max)
		}
		start := len(out)
		out = append(out, make([]byte, h.length)...)
		if _, err := io.ReadFull(s.r, out[start:]); err != nil {
			return nil, fmt.Errorf("%w: truncated content: %v", errBER, err)
		}
		s.off += h.length
		return out, nil
	}
	for {
		more, err := s.more(h)
		if err != nil {
			return nil, err
		}
		if !more {
			return append(out, 0, 0), nil
		}
		c, err := s.next()
		if err != nil {
			return nil, err
		}
		out = append(out, c.raw...)
		if int64(len(out)) > max {
			return nil, fmt.Errorf("%w: element of more than %d bytes", errBER, max)
		}
		if out, err = s.appendContent(out, c, max, depth+1); err != nil {
			return nil, err
		}
	}
}

// readDER reads the element h into memory (at most max bytes) and returns
// it converted to DER.
func (s *berStream) readDER(h sHeader, max int64) ([]byte, error) {
	raw, err := s.readRaw(h, max)
	if err != nil {
		return nil, err
	}
	der, _, err := berToDER(raw)
	return der, err
}

// octets streams the content of the OCTET STRING h (tagged as it is: the
// caller checked the tag; primitive, or constructed of OCTET STRING
// segments to any nesting) to w.
func (s *berStream) octets(h sHeader, w io.Writer) error {
	return s.octetsDepth(h, w, 0)
}

func (s *berStream) octetsDepth(h sHeader, w io.Writer, depth int) error {
	if depth > maxBERDepth {
		return fmt.Errorf("%w: nesting deeper than %d", errBER, maxBERDepth)
	}
	if !h.constructed {
		n, err := io.CopyN(w, s.r, h.length)
		s.off += n
		if err != nil {
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("%w: truncated OCTET STRING after %d of %d bytes", errBER, n, h.length)
			}
			return err
		}
		return nil
	}
	for {
		more, err := s.more(h)
		if err != nil {
			return err
		}
		if !more {
			return nil
		}
		c, err := s.next()
		if err != nil {
			return err
		}
		if !c.is(0, 4, c.constructed) {
			return fmt.Errorf("%w: constructed OCTET STRING segment of another type", errBER)
		}
		if !c.indefinite && c.end > h.end && !h.indefinite {
			return fmt.Errorf("%w: a segment runs past the end of its OCTET STRING", errBER)
		}
		if err := s.octetsDepth(c, w, depth+1); err != nil {
			return err
		}
	}
}

// skip discards the rest of the element h.
func (s *berStream) skip(h sHeader) error {
	return s.skipDepth(h, 0)
}

func (s *berStream) skipDepth(h sHeader, depth int) error {
	if depth > maxBERDepth {
		return fmt.Errorf("%w: nesting deeper than %d", errBER, maxBERDepth)
	}
	if !h.indefinite {
		n, err := s.r.Discard(int(min(h.length, 1<<62)))
		s.off += int64(n)
		if err != nil {
			return fmt.Errorf("%w: truncated content: %v", errBER, err)
		}
		return nil
	}
	for {
		more, err := s.more(h)
		if err != nil || !more {
			return err
		}
		c, err := s.next()
		if err != nil {
			return err
		}
		if err := s.skipDepth(c, depth+1); err != nil {
			return err
		}
	}
}

// rest reports an error unless only padding (zero bytes, whitespace)
// follows, as parseContentInfo tolerates.
func (s *berStream) rest() error {
	for {
		c, err := s.r.ReadByte()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		switch c {
		case 0, '\r', '\n', '\t', ' ':
		default:
			return fmt.Errorf("%w: %w: trailing data", ErrMalformed, errBER)
		}
	}
}
