package envelope

import (
	"bufio"
	"bytes"
	"io"
	"strings"
)

// isaLength is the fixed length of an X12 ISA segment including its
// terminator: "ISA", 16 elements of fixed width, 16 element separators, and
// the segment terminator.
const isaLength = 106

// isaWidths are the fixed widths of ISA01..ISA16.
var isaWidths = [16]int{2, 10, 2, 10, 2, 15, 2, 15, 6, 4, 1, 5, 9, 1, 1, 1}

// isaOffsets are the byte offsets of ISA01..ISA16 within the segment; the
// element separator precedes each one.
var isaOffsets = func() (o [16]int) {
	pos := 4
	for i, w := range isaWidths {
		o[i] = pos
		pos += w + 1
	}
	return o
}()

// extractX12 reads an interchange from br, which starts with "ISA".
func extractX12(br *bufio.Reader) (*Interchange, error) {
	data, err := br.Peek(isaLength)
	if err != nil && err != io.EOF {
		return nil, readErr(err)
	}
	if len(data) < isaLength {
		return nil, damagedf(StandardX12, "ISA segment truncated: %d of %d bytes", len(data), isaLength)
	}
	sep, comp, term := data[3], data[104], data[105]
	if isAlnum(sep) || isSpace(sep) {
		return nil, damagedf(StandardX12, "ISA element separator %s cannot be a separator", quoteByte(sep))
	}
	isa := bytes.Clone(data[:isaLength])
	br.Discard(isaLength)
	for n := 1; n <= 16; n++ {
		if off := isaOffsets[n-1]; isa[off-1] != sep {
			return nil, damagedf(StandardX12, "ISA is not 106 bytes of fixed-width elements: expected the element separator %s before ISA%02d at offset %d, found %s", quoteByte(sep), n, off-1, quoteByte(isa[off-1]))
		}
	}
	if isAlnum(comp) || isSpace(comp) {
		return nil, damagedf(StandardX12, "ISA16 component element separator %s cannot be a separator", quoteByte(comp))
	}
	if isAlnum(term) || term == ' ' || term == '\t' {
		return nil, damagedf(StandardX12, "ISA segment terminator %s (offset 105) cannot be a terminator", quoteByte(term))
	}
	if sep == comp || sep == term || comp == term {
		return nil, damagedf(StandardX12, "ISA separators not distinct: element %s, component %s, segment terminator %s", quoteByte(sep), quoteByte(comp), quoteByte(term))
	}
	for n := 1; n < 16; n++ {
		off := isaOffsets[n-1]
		v := isa[off : off+isaWidths[n-1]]
		for _, b := range v {
			if b == sep || b == term {
				return nil, damagedf(StandardX12, "ISA%02d contains a separator %s", n, quoteByte(b))
			}
		}
	}
	field := func(n int) string { // ISA element n (1-based), trimmed
		off := isaOffsets[n-1]
		return strings.TrimSpace(string(isa[off : off+isaWidths[n-1]]))
	}
	ic := &Interchange{
		Standard:           StandardX12,
		SenderQualifier:    field(5),
		Sender:             field(6),
		RecipientQualifier: field(7),
		Recipient:          field(8),
		Date:               field(9),
		Time:               field(10),
		Syntax:             field(12),
		Reference:          field(13),
		Test:               field(15) == "T",
	}
	required := []struct{ name, v string }{
		{"ISA06 interchange sender ID", ic.Sender},
		{"ISA08 interchange receiver ID", ic.Recipient},
		{"ISA09 interchange date", ic.Date},
		{"ISA10 interchange time", ic.Time},
		{"ISA13 interchange control number", ic.Reference},
	}
	for _, r := range required {
		if r.v == "" {
			return nil, damagedf(StandardX12, "ISA without %s", r.name)
		}
	}

	var (
		segs           = segmentReader{br: br, term: term}
		gs08, st03     string
		sawGS, sawTA1  bool
		sawST          bool
		lenientFinalOK = term == '\r' || term == '\n'
	)
	for {
		more, err := segs.skipSpace()
		if err != nil {
			return nil, err
		}
		if !more {
			return nil, damagedf(StandardX12, "IEA interchange trailer missing (ISA13 %q)", ic.Reference)
		}
		terminated, _, err := segs.read()
		if err != nil {
			return nil, err
		}
		seg := segs.buf
		if !terminated && !lenientFinalOK {
			return nil, damagedf(StandardX12, "segment %q is not terminated (no %s before the end of the data)", x12Tag(seg, sep), quoteByte(term))
		}
		// (A newline terminator is often stripped from the last line.)
		if segs.long() && bytes.IndexByte(seg, sep) < 0 {
			return nil, damagedf(StandardX12, "segment %q has no element separator in its first %d bytes", x12Tag(seg, sep), MaxSegmentLength)
		}
		tag := seg
		if i := bytes.IndexByte(seg, sep); i >= 0 {
			tag = seg[:i]
		}
		tag = bytes.TrimSpace(tag)
		switch string(tag) {
		case "GS", "ST", "TA1", "ISA", "IEA":
		default:
			continue // no segment this package reads; do not split it
		}
		if segs.long() && (string(tag) == "IEA" || string(tag) == "GS" && !sawGS || string(tag) == "ST" && !sawST) {
			return nil, damagedf(StandardX12, "segment %q is longer than %d bytes", string(tag), MaxSegmentLength)
		}
		elems := bytes.Split(seg, []byte{sep})
		el := func(i int) string {
			if i >= len(elems) {
				return ""
			}
			return strings.TrimSpace(string(elems[i]))
		}
		switch string(tag) {
		case "GS":
			if !sawGS {
				sawGS = true
				gs08 = el(8)
			}
		case "ST":
			if !sawST {
				sawST = true
				ic.Type, st03 = el(1), el(3)
				if ic.Type == "" {
					return nil, damagedf(StandardX12, "first ST without transaction set identifier code (ST01)")
				}
			}
		case "TA1":
			sawTA1 = true
		case "ISA":
			return nil, damagedf(StandardX12, "ISA inside interchange %q before its IEA", ic.Reference)
		case "IEA":
			if ref := el(2); ref != ic.Reference {
				return nil, damagedf(StandardX12, "IEA02 %q does not match ISA13 %q", ref, ic.Reference)
			}
			if !sawST {
				if !sawTA1 {
					return nil, damagedf(StandardX12, "interchange %q holds no ST transaction set and no TA1", ic.Reference)
				}
				ic.Type = "TA1"
			}
			ic.TypeVersion = st03
			if ic.TypeVersion == "" {
				ic.TypeVersion = gs08
			}
			rest, err := segs.rest()
			if err != nil {
				return nil, err
			}
			if rest > 0 {
				return nil, damagedf(StandardX12, "%d bytes after the IEA of interchange %q (only one interchange per payload is read)", rest, ic.Reference)
			}
			return ic, nil
		}
	}
}

// x12Tag returns the tag of a segment, for messages.
func x12Tag(seg []byte, sep byte) string {
	if i := bytes.IndexByte(seg, sep); i >= 0 {
		seg = seg[:i]
	}
	if len(seg) > 16 {
		seg = seg[:16]
	}
	return string(seg)
}
