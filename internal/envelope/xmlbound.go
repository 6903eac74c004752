package envelope

import (
	"bytes"
	"fmt"
	"io"
)

const (
	// xmlRunBound is the most bytes of one run of character data (text
	// between markup, or one CDATA section) that the XML decoder is given;
	// the rest of the run is dropped before it. The values read into an
	// Interchange are at most MaxFieldLength bytes, so cutting a run changes
	// nothing that is read, while an embedded attachment (UBL
	// cbc:EmbeddedDocumentBinaryObject, often megabytes of base64) no
	// longer has to be held whole by the decoder.
	xmlRunBound = 64 << 10
	// xmlMaxMarkup is the longest markup (a start or end tag with its
	// attributes, a comment, a processing instruction, a DOCTYPE or other
	// declaration) read; a longer one makes the document damaged.
	xmlMaxMarkup = 1 << 20
)

// markupTooLongError is returned by the filter for markup longer than
// xmlMaxMarkup.
type markupTooLongError struct{ what string }

func (e *markupTooLongError) Error() string {
	return fmt.Sprintf("%s longer than %d bytes", e.what, xmlMaxMarkup)
}

// xmlFilter states.
const (
	xText      = iota
	xLT        // after '<'
	xBang      // after "<!"
	xBangDash  // after "<!-"
	xCDATAOpen // inside "<![CDATA["
	xCDATA
	xTag
	xTagQuote
	xComment
	xPI
	xDirective
)

// xmlFilter passes an XML document through unchanged except that each run
// of character data and each CDATA section is cut after bound bytes,
// keeping the document well-formed: a cut never splits a UTF-8 sequence or
// an entity or character reference, and markup (tags with quoted attribute
// values that may contain '>', comments, CDATA sections, processing
// instructions, DOCTYPE with its internal subset) is recognised so that it
// is never taken for text. It only removes bytes, so it needs no buffer
// beyond its input chunk.
type xmlFilter struct {
	r     io.Reader
	bound int
	in    []byte
	i, n  int
	err   error

	state   int
	run     int  // bytes of the current run (text or CDATA) passed
	cut     bool // some bytes were dropped (for tests)
	markup  int  // bytes of the current markup
	quote   byte // in xTagQuote and xDirective
	open    int  // bytes of "[CDATA[" matched
	prev    [2]byte
	depth   int  // xDirective nesting
	dcomm   int  // xDirective: 0 outside a comment, 1..3 matching "!--", 4 inside
	cont    int  // UTF-8 continuation bytes still allowed after a cut
	ref     int  // 0 outside a reference, else its length so far
	refPass bool // the current reference is passed
	brs     int  // CDATA: ']' held back after the cut
	pend    []byte
	tmp     [3]byte
}

func newXMLRunBound(r io.Reader, bound int) *xmlFilter {
	return &xmlFilter{r: r, bound: bound, in: make([]byte, 32<<10)}
}

func (f *xmlFilter) Read(p []byte) (int, error) {
	out := copy(p, f.pend)
	f.pend = f.pend[out:]
	for out < len(p) {
		if f.i == f.n {
			if f.err != nil {
				break
			}
			f.n, f.err = f.r.Read(f.in)
			f.i = 0
			if f.n == 0 {
				continue
			}
		}
		if f.skip() {
			continue
		}
		b := f.in[f.i]
		f.i++
		emit, err := f.step(b, f.tmp[:])
		if err != nil {
			f.err, f.i, f.n = err, 0, 0
			break
		}
		n := copy(p[out:], f.tmp[:emit])
		out += n
		f.pend = f.tmp[n:emit]
	}
	if out == 0 && len(f.pend) == 0 && f.i == f.n && f.err != nil {
		return 0, f.err
	}
	return out, nil
}

// skip drops, in one go, input that step would drop byte by byte: the
// rest of a cut text run up to the next '<', the rest of a cut CDATA
// section up to the next ']'. It reports whether it dropped anything.
func (f *xmlFilter) skip() bool {
	if f.run < f.bound || f.cont != 0 {
		return false
	}
	in := f.in[f.i:f.n]
	var j int
	switch f.state {
	case xText:
		if f.ref > 0 && f.refPass {
			return false // a reference begun before the cut is passed whole
		}
		if j = bytes.IndexByte(in, '<'); j < 0 {
			j = len(in)
		}
		f.ref = 0 // one begun after the cut is dropped whole
	case xCDATA:
		if f.prev[1] == ']' {
			return false // the next byte may end the section
		}
		if j = bytes.IndexByte(in, ']'); j < 0 {
			j = len(in)
		}
		if j > 0 {
			f.brs, f.prev = 0, [2]byte{}
		}
	default:
		return false
	}
	if j == 0 {
		return false
	}
	f.i += j
	f.cut = true
	return true
}

// step handles one input byte, writing what passes to p (room for 3
// bytes), and returns how many bytes it wrote.
func (f *xmlFilter) step(b byte, p []byte) (int, error) {
	one := func() int { p[0] = b; return 1 }
	switch f.state {
	case xText:
		if b == '<' {
			f.state, f.run, f.ref, f.cont, f.markup = xLT, 0, 0, 0, 1
			return one(), nil
		}
		return f.text(b, p), nil
	case xLT:
		f.markup++
		switch b {
		case '!':
			f.state = xBang
		case '?':
			f.state, f.prev = xPI, [2]byte{}
		default:
			f.state = xTag
			if b == '>' {
				f.state = xText
			}
		}
		return one(), nil
	case xBang:
		f.markup++
		switch b {
		case '-':
			f.state = xBangDash
		case '[':
			f.state, f.open = xCDATAOpen, 1
		default:
			// As encoding/xml, the first byte of a declaration is
			// taken as it is.
			f.state, f.depth, f.quote, f.dcomm = xDirective, 0, 0, 0
		}
		return one(), nil
	case xBangDash:
		f.markup++
		f.state, f.prev = xComment, [2]byte{}
		if b != '-' { // not a comment: the decoder refuses it
			f.state = xDirective
		}
		return one(), nil
	case xCDATAOpen:
		const open = "[CDATA["
		if b != open[f.open] {
			f.state, f.depth, f.quote, f.dcomm = xDirective, 0, 0, 0
			return f.directive(b, p)
		}
		if f.open++; f.open == len(open) {
			f.state, f.run, f.cont, f.brs, f.prev = xCDATA, 0, 0, 0, [2]byte{}
		}
		return one(), nil
	case xCDATA:
		return f.cdata(b, p), nil
	case xTag, xTagQuote:
		if f.markup++; f.markup > xmlMaxMarkup {
			return 0, &markupTooLongError{"tag"}
		}
		switch {
		case f.state == xTagQuote:
			if b == f.quote {
				f.state = xTag
			}
		case b == '"' || b == '\'':
			f.state, f.quote = xTagQuote, b
		case b == '>':
			f.state = xText
		}
		return one(), nil
	case xComment:
		if f.markup++; f.markup > xmlMaxMarkup {
			return 0, &markupTooLongError{"comment"}
		}
		// As encoding/xml: the comment ends at the byte after "--" (an
		// error unless it is '>').
		if f.prev == [2]byte{'-', '-'} {
			f.state = xText
		}
		f.prev = [2]byte{f.prev[1], b}
		return one(), nil
	case xPI:
		if f.markup++; f.markup > xmlMaxMarkup {
			return 0, &markupTooLongError{"processing instruction"}
		}
		if f.prev[1] == '?' && b == '>' {
			f.state = xText
		}
		f.prev = [2]byte{f.prev[1], b}
		return one(), nil
	case xDirective:
		return f.directive(b, p)
	}
	return one(), nil
}

// directive follows a DOCTYPE or other declaration as encoding/xml does:
// quoted strings, nested '<' '>' and comments.
func (f *xmlFilter) directive(b byte, p []byte) (int, error) {
	if f.markup++; f.markup > xmlMaxMarkup {
		return 0, &markupTooLongError{"DOCTYPE or other declaration"}
	}
	p[0] = b
	switch {
	case f.dcomm == 4: // inside <!-- -->, which ends at "-->"
		if f.prev == [2]byte{'-', '-'} && b == '>' {
			f.dcomm = 0
		}
		f.prev = [2]byte{f.prev[1], b}
		return 1, nil
	case f.dcomm > 0:
		if b == "<!--"[f.dcomm] {
			if f.dcomm++; f.dcomm == 4 {
				f.prev = [2]byte{}
			}
			return 1, nil
		}
		f.dcomm = 0
		f.depth++ // the '<' opened a nested declaration
	}
	return f.directiveByte(b, p)
}

func (f *xmlFilter) directiveByte(b byte, p []byte) (int, error) {
	p[0] = b
	switch {
	case f.quote != 0:
		if b == f.quote {
			f.quote = 0
		}
	case b == '\'' || b == '"':
		f.quote = b
	case b == '>':
		if f.depth == 0 {
			f.state = xText
		} else {
			f.depth--
		}
	case b == '<':
		f.dcomm = 1
	}
	return 1, nil
}

// text passes a byte of character data while the run is within bound;
// after that only what completes a started UTF-8 sequence or reference.
func (f *xmlFilter) text(b byte, p []byte) int {
	pass := f.run < f.bound
	switch {
	case f.ref > 0:
		// After the cut, a reference is passed whole or not at all
		// (within 64 bytes, more than any valid one needs).
		pass = pass || f.refPass && f.ref < 64
		f.ref++
		if b == ';' {
			f.ref = 0
		}
	case b == '&':
		f.ref, f.refPass = 1, pass
	case !pass && f.cont > 0 && b&0xc0 == 0x80:
		pass = true // completes the character the run was cut in
	}
	if !pass {
		f.cut, f.cont = true, 0
		return 0
	}
	f.cont = utf8Follow(b, f.cont)
	f.run++
	p[0] = b
	return 1
}

// utf8Follow returns how many continuation bytes may follow b.
func utf8Follow(b byte, cont int) int {
	switch {
	case b&0xe0 == 0xc0:
		return 1
	case b&0xf0 == 0xe0:
		return 2
	case b&0xf8 == 0xf0:
		return 3
	case b&0xc0 == 0x80 && cont > 0:
		return cont - 1
	}
	return 0
}

// cdata passes a byte of a CDATA section while within bound; after that it
// holds back ']' so that the terminating "]]>" is passed whole.
func (f *xmlFilter) cdata(b byte, p []byte) int {
	end := f.prev == [2]byte{']', ']'} && b == '>'
	f.prev = [2]byte{f.prev[1], b}
	if end {
		f.state = xText
		f.run, f.ref, f.cont = 0, 0, 0 // text follows
		// The ']' held back (at most the two of the terminator; the
		// ones passed before the cut are part of it).
		n := copy(p, "]]>"[2-min(f.brs, 2):])
		f.brs = 0
		return n
	}
	if f.run < f.bound {
		f.run++
		f.cont = utf8Follow(b, f.cont)
		p[0] = b
		return 1
	}
	switch {
	case b == ']':
		f.brs++
		f.cut, f.cont = true, 0
		return 0
	case f.cont > 0 && b&0xc0 == 0x80 && f.brs == 0:
		f.cont--
		p[0] = b
		return 1
	}
	f.cut, f.cont, f.brs = true, 0, 0
	return 0
}
