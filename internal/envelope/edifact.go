package envelope

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strings"
)

// edifactDelimiters are the service characters of an EDIFACT interchange, in
// UNA order. release and repetition are 0 when not used.
type edifactDelimiters struct {
	component, element, decimal, release, repetition, terminator byte
}

// Syntax level A defaults (ISO 9735 without a UNA): `:+.? '`.
var edifactLevelA = edifactDelimiters{component: ':', element: '+', decimal: '.', release: '?', repetition: 0, terminator: '\''}

// Syntax level B defaults: IS1 component, IS3 element, IS4 terminator, no
// release character.
var edifactLevelB = edifactDelimiters{component: 0x1f, element: 0x1d, decimal: '.', terminator: 0x1c}

// parseUNA reads the service string advice "UNA" + UNA1..UNA6 by position.
func parseUNA(data []byte) (edifactDelimiters, error) {
	if len(data) < 9 {
		return edifactDelimiters{}, damagedf(StandardEDIFACT, "UNA service string advice truncated: %d of 9 bytes", len(data))
	}
	d := edifactDelimiters{
		component:  data[3],
		element:    data[4],
		decimal:    data[5],
		release:    data[6],
		repetition: data[7],
		terminator: data[8],
	}
	if d.release == ' ' {
		d.release = 0
	}
	if d.repetition == ' ' {
		d.repetition = 0
	}
	check := []struct {
		name string
		b    byte
	}{
		{"UNA1 component data element separator", d.component},
		{"UNA2 data element separator", d.element},
		{"UNA4 release character", d.release},
		{"UNA5 repetition separator", d.repetition},
		{"UNA6 segment terminator", d.terminator},
	}
	for i, c := range check {
		if c.b == 0 && (i == 2 || i == 3) {
			continue // release character or repetition separator not used
		}
		if isAlnum(c.b) || c.b == ' ' || (i < 2 && isSpace(c.b)) {
			return edifactDelimiters{}, damagedf(StandardEDIFACT, "UNA: %s %s cannot be a separator", c.name, quoteByte(c.b))
		}
		for j, o := range check[:i] {
			if o.b == c.b && !(o.b == 0 && (j == 2 || j == 3)) {
				return edifactDelimiters{}, damagedf(StandardEDIFACT, "UNA: %s and %s are both %s", o.name, c.name, quoteByte(c.b))
			}
		}
	}
	return d, nil
}

func isSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\r' || b == '\n' }

// edifactScanner walks the segments of an interchange. White space between
// segments is skipped.
type edifactScanner struct {
	segs segmentReader
	d    edifactDelimiters
}

// next returns the next segment without its terminator, release characters
// still in place; ok is false at the end of the data. Of a segment longer
// than MaxSegmentLength only that many bytes are returned and long is true.
func (s *edifactScanner) next() (seg []byte, long, ok bool, err error) {
	more, err := s.segs.skipSpace()
	if err != nil || !more {
		return nil, false, false, err
	}
	terminated, oddRelease, err := s.segs.read()
	if err != nil {
		return nil, false, false, err
	}
	seg = s.segs.buf
	if !terminated {
		if oddRelease {
			return nil, false, false, damagedf(StandardEDIFACT, "segment %s ends in a release character at the end of the data", s.tag(seg))
		}
		return nil, false, false, damagedf(StandardEDIFACT, "segment %s is not terminated (no %s before the end of the data)", s.tag(seg), quoteByte(s.d.terminator))
	}
	return seg, s.segs.long(), true, nil
}

// tooLong is the error for a service segment longer than MaxSegmentLength.
func (s *edifactScanner) tooLong(seg []byte) error {
	return damagedf(StandardEDIFACT, "segment %s is longer than %d bytes", s.tag(seg), MaxSegmentLength)
}

// tag returns the segment tag, quoted, for messages and comparisons.
func (s *edifactScanner) tag(seg []byte) string {
	return fmt.Sprintf("%q", s.rawTag(seg))
}

// rawTag returns the bytes before the first element or component separator.
func (s *edifactScanner) rawTag(seg []byte) string {
	end := len(seg)
	for i, b := range seg {
		if b == s.d.element || b == s.d.component || b == s.d.terminator {
			end = i
			break
		}
	}
	if end > 16 {
		end = 16
	}
	return string(seg[:end])
}

// split cuts a segment into data elements and components, removing release
// characters.
func (s *edifactScanner) split(seg []byte) edifactSegment {
	var (
		elems [][]string
		comps []string
		cur   []byte
	)
	for i := 0; i < len(seg); i++ {
		switch b := seg[i]; {
		case s.d.release != 0 && b == s.d.release && i+1 < len(seg):
			i++
			cur = append(cur, seg[i])
		case b == s.d.element:
			elems = append(elems, append(comps, string(cur)))
			comps, cur = nil, cur[:0]
		case b == s.d.component:
			comps = append(comps, string(cur))
			cur = cur[:0]
		default:
			cur = append(cur, b)
		}
	}
	return append(elems, append(comps, string(cur)))
}

// edifactSegment holds data elements, each a list of components.
type edifactSegment [][]string

// get returns component c of data element e (0 is the tag), trimmed, or "".
func (g edifactSegment) get(e, c int) string {
	if e >= len(g) || c >= len(g[e]) {
		return ""
	}
	return strings.TrimSpace(g[e][c])
}

// join returns components from..to-1 of data element e joined with ':',
// without trailing empty components.
func (g edifactSegment) join(e, from, to int) string {
	var parts []string
	for c := from; c < to; c++ {
		parts = append(parts, g.get(e, c))
	}
	for len(parts) > 0 && parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1]
	}
	return strings.Join(parts, ":")
}

// extractEDIFACT reads an interchange from br, which starts with "UNA" or
// "UNB".
func extractEDIFACT(br *bufio.Reader) (*Interchange, error) {
	d := edifactLevelA
	if head, err := br.Peek(9); bytes.HasPrefix(head, []byte("UNA")) {
		if err != nil && err != io.EOF {
			return nil, readErr(err)
		}
		if d, err = parseUNA(head); err != nil {
			return nil, err
		}
		br.Discard(9)
	} else if len(head) > 3 && head[3] == edifactLevelB.element {
		d = edifactLevelB
	}
	s := &edifactScanner{segs: segmentReader{br: br, term: d.terminator, release: d.release}, d: d}

	seg, long, ok, err := s.next()
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, damagedf(StandardEDIFACT, "UNB interchange header missing after UNA")
	}
	if len(seg) < 4 || string(seg[:3]) != "UNB" || seg[3] != d.element {
		return nil, damagedf(StandardEDIFACT, "interchange does not start with UNB followed by the data element separator %s (found %s)", quoteByte(d.element), s.tag(seg))
	}
	if long {
		return nil, s.tooLong(seg)
	}
	unb := s.split(seg)
	ic := &Interchange{
		Standard:           StandardEDIFACT,
		Syntax:             unb.join(1, 0, 2),
		Sender:             unb.get(2, 0),
		SenderQualifier:    unb.get(2, 1),
		Recipient:          unb.get(3, 0),
		RecipientQualifier: unb.get(3, 1),
		Date:               unb.get(4, 0),
		Time:               unb.get(4, 1),
		Reference:          unb.get(5, 0),
		Test:               unb.get(11, 0) == "1",
	}
	required := []struct{ name, v string }{
		{"S001 syntax identifier (0001)", unb.get(1, 0)},
		{"S002 interchange sender identification (0004)", ic.Sender},
		{"S003 interchange recipient identification (0010)", ic.Recipient},
		{"S004 date (0017)", ic.Date},
		{"S004 time (0019)", ic.Time},
		{"interchange control reference (0020)", ic.Reference},
	}
	for _, r := range required {
		if r.v == "" {
			return nil, damagedf(StandardEDIFACT, "UNB without %s", r.name)
		}
	}

	sawUNH := false
	for {
		seg, long, ok, err := s.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, damagedf(StandardEDIFACT, "UNZ interchange trailer missing (UNB 0020 %q)", ic.Reference)
		}
		switch s.rawTag(seg) {
		case "UNH":
			if sawUNH {
				continue
			}
			if long {
				return nil, s.tooLong(seg)
			}
			sawUNH = true
			unh := s.split(seg)
			ic.Type = unh.get(2, 0)
			ic.TypeVersion = unh.join(2, 1, 5)
			if ic.Type == "" {
				return nil, damagedf(StandardEDIFACT, "first UNH without message type (S009 0065)")
			}
		case "UNA", "UNB":
			return nil, damagedf(StandardEDIFACT, "%s inside interchange %q before its UNZ", s.rawTag(seg), ic.Reference)
		case "UNZ":
			if long {
				return nil, s.tooLong(seg)
			}
			ref := s.split(seg).get(2, 0)
			if ref != ic.Reference {
				return nil, damagedf(StandardEDIFACT, "UNZ 0020 %q does not match UNB 0020 %q", ref, ic.Reference)
			}
			if !sawUNH {
				return nil, damagedf(StandardEDIFACT, "interchange %q holds no UNH message", ic.Reference)
			}
			rest, err := s.segs.rest()
			if err != nil {
				return nil, err
			}
			if rest > 0 {
				return nil, damagedf(StandardEDIFACT, "%d bytes after the UNZ of interchange %q (only one interchange per payload is read)", rest, ic.Reference)
			}
			return ic, nil
		}
	}
}
