package envelope

import (
	"bytes"
	"fmt"
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
	data []byte
	pos  int
	d    edifactDelimiters
}

// next returns the next segment without its terminator, release characters
// still in place; ok is false at the end of the data.
func (s *edifactScanner) next() (seg []byte, ok bool, err error) {
	for s.pos < len(s.data) && isSpace(s.data[s.pos]) {
		s.pos++
	}
	if s.pos >= len(s.data) {
		return nil, false, nil
	}
	start := s.pos
	for from := start; ; {
		i := bytes.IndexByte(s.data[from:], s.d.terminator)
		if i < 0 {
			if s.releaseRun(start, len(s.data))%2 == 1 {
				return nil, false, damagedf(StandardEDIFACT, "segment %s ends in a release character at the end of the data", s.tag(s.data[start:]))
			}
			return nil, false, damagedf(StandardEDIFACT, "segment %s is not terminated (no %s before the end of the data)", s.tag(s.data[start:]), quoteByte(s.d.terminator))
		}
		end := from + i
		// A release character escapes the next one, so the terminator is
		// escaped exactly when an odd run of release characters precedes it.
		if s.releaseRun(start, end)%2 == 1 {
			from = end + 1
			continue
		}
		s.pos = end + 1
		return s.data[start:end], true, nil
	}
}

// releaseRun counts the release characters immediately before data[end],
// not looking before start.
func (s *edifactScanner) releaseRun(start, end int) int {
	if s.d.release == 0 {
		return 0
	}
	n := 0
	for i := end - 1; i >= start && s.data[i] == s.d.release; i-- {
		n++
	}
	return n
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

func extractEDIFACT(data []byte) (*Interchange, error) {
	d := edifactLevelA
	start := 0
	if bytes.HasPrefix(data, []byte("UNA")) {
		var err error
		if d, err = parseUNA(data); err != nil {
			return nil, err
		}
		start = 9
	} else if len(data) > 3 && data[3] == edifactLevelB.element {
		d = edifactLevelB
	}
	s := &edifactScanner{data: data, pos: start, d: d}

	seg, ok, err := s.next()
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, damagedf(StandardEDIFACT, "UNB interchange header missing after UNA")
	}
	if len(seg) < 4 || string(seg[:3]) != "UNB" || seg[3] != d.element {
		return nil, damagedf(StandardEDIFACT, "interchange does not start with UNB followed by the data element separator %s (found %s)", quoteByte(d.element), s.tag(seg))
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
		seg, ok, err := s.next()
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
			ref := s.split(seg).get(2, 0)
			if ref != ic.Reference {
				return nil, damagedf(StandardEDIFACT, "UNZ 0020 %q does not match UNB 0020 %q", ref, ic.Reference)
			}
			if !sawUNH {
				return nil, damagedf(StandardEDIFACT, "interchange %q holds no UNH message", ic.Reference)
			}
			if rest := bytes.TrimLeft(data[s.pos:], " \t\r\n"); len(rest) > 0 {
				return nil, damagedf(StandardEDIFACT, "%d bytes after the UNZ of interchange %q (only one interchange per payload is read)", len(rest), ic.Reference)
			}
			return ic, nil
		}
	}
}
