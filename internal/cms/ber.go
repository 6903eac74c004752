package cms

import (
	"errors"
	"fmt"
)

// maxBERDepth bounds the nesting of BER input. CMS structures nest about a
// dozen levels (certificates included); anything deeper is rejected rather
// than recursed into.
const maxBERDepth = 64

var errBER = errors.New("invalid BER")

// berToDER converts one BER-encoded element at the start of in to DER as far
// as parsing with encoding/asn1 needs it: indefinite lengths become definite,
// long-form lengths become minimal, and constructed universal string types
// (OCTET STRING, BIT STRING, character strings), which BER senders such as
// BouncyCastle use to chunk content, are flattened into primitive ones.
// Context-specific constructed elements are left constructed because their
// underlying type is unknown here; see octets. It returns the DER bytes and
// the number of input bytes consumed. SET OF ordering is not changed.
//
// The result is never more than about twice the size of the input and no
// recursion deeper than maxBERDepth happens, so partner input cannot make it
// allocate without bound or exhaust the stack.
func berToDER(in []byte) ([]byte, int, error) {
	der, n, _, err := convertBER(in, 0)
	return der, n, err
}

// convertBER converts the element at in[0:]. same reports that der is the
// input slice itself (the element was already DER as far as this function
// cares), which lets unchanged subtrees skip copying.
func convertBER(in []byte, depth int) (der []byte, n int, same bool, err error) {
	if depth > maxBERDepth {
		return nil, 0, false, fmt.Errorf("%w: nesting deeper than %d", errBER, maxBERDepth)
	}
	h, err := parseBERHeader(in)
	if err != nil {
		return nil, 0, false, err
	}
	id := in[:h.idLen]
	if !h.constructed {
		end := h.hdrLen + h.length
		content := in[h.hdrLen:end]
		if h.minimal {
			return in[:end], end, true, nil
		}
		return appendElement(nil, id, content), end, false, nil
	}

	// Constructed: convert the children.
	var children [][]byte
	allSame := h.minimal && !h.indefinite
	off := h.hdrLen
	limit := len(in)
	if !h.indefinite {
		limit = h.hdrLen + h.length
	}
	for {
		if h.indefinite {
			if off+2 > len(in) {
				return nil, 0, false, fmt.Errorf("%w: missing end-of-contents", errBER)
			}
			if in[off] == 0 && in[off+1] == 0 {
				off += 2
				break
			}
		} else if off == limit {
			break
		}
		child, cn, csame, err := convertBER(in[off:limit], depth+1)
		if err != nil {
			return nil, 0, false, err
		}
		if !csame {
			allSame = false
		}
		children = append(children, child)
		off += cn
	}

	flatten := h.class == 0 && isStringTag(h.tag)
	if allSame && !flatten {
		return in[:off], off, true, nil
	}
	if flatten {
		content, err := flattenString(h.tag, children)
		if err != nil {
			return nil, 0, false, err
		}
		prim := make([]byte, len(id))
		copy(prim, id)
		prim[0] &^= 0x20
		return appendElement(nil, prim, content), off, false, nil
	}
	size := 0
	for _, c := range children {
		size += len(c)
	}
	out := make([]byte, 0, len(id)+9+size)
	out = append(out, id...)
	out = appendLength(out, size)
	for _, c := range children {
		out = append(out, c...)
	}
	return out, off, false, nil
}

// berHeader is the identifier and length octets of one element.
type berHeader struct {
	class       int // 0 universal, 1 application, 2 context-specific, 3 private
	constructed bool
	tag         int
	idLen       int // bytes of identifier octets
	hdrLen      int // identifier + length octets
	length      int // content length (0 when indefinite)
	indefinite  bool
	minimal     bool // definite length in minimal (DER) form
}

func parseBERHeader(in []byte) (berHeader, error) {
	var h berHeader
	if len(in) < 2 {
		return h, fmt.Errorf("%w: truncated header", errBER)
	}
	b := in[0]
	h.class = int(b >> 6)
	h.constructed = b&0x20 != 0
	h.tag = int(b & 0x1f)
	i := 1
	if h.tag == 0x1f {
		h.tag = 0
		for {
			if i >= len(in) {
				return h, fmt.Errorf("%w: truncated tag", errBER)
			}
			if i > 4 {
				return h, fmt.Errorf("%w: tag number too large", errBER)
			}
			c := in[i]
			i++
			h.tag = h.tag<<7 | int(c&0x7f)
			if c&0x80 == 0 {
				break
			}
		}
	}
	h.idLen = i
	if i >= len(in) {
		return h, fmt.Errorf("%w: truncated length", errBER)
	}
	l := in[i]
	i++
	switch {
	case l < 0x80:
		h.length = int(l)
		h.minimal = true
	case l == 0x80:
		if !h.constructed {
			return h, fmt.Errorf("%w: indefinite length on primitive element", errBER)
		}
		h.indefinite = true
	case l == 0xff:
		return h, fmt.Errorf("%w: reserved length octet", errBER)
	default:
		n := int(l & 0x7f)
		if n > 4 {
			return h, fmt.Errorf("%w: length of %d octets too large", errBER, n)
		}
		if i+n > len(in) {
			return h, fmt.Errorf("%w: truncated length", errBER)
		}
		v := 0
		for _, c := range in[i : i+n] {
			v = v<<8 | int(c)
		}
		i += n
		if v < 0 || v > 1<<31-1 {
			return h, fmt.Errorf("%w: length too large", errBER)
		}
		h.length = v
		h.minimal = v >= 0x80 && in[i-n] != 0
	}
	h.hdrLen = i
	if !h.indefinite && h.length > len(in)-i {
		return h, fmt.Errorf("%w: length %d exceeds the %d bytes available", errBER, h.length, len(in)-i)
	}
	return h, nil
}

func isStringTag(tag int) bool {
	switch tag {
	case 3, 4, 12, 18, 19, 20, 21, 22, 25, 26, 27, 28, 30:
		return true
	}
	return false
}

// flattenString joins the already converted (hence primitive) segments of a
// constructed string.
func flattenString(tag int, segs [][]byte) ([]byte, error) {
	var out []byte
	for i, s := range segs {
		h, err := parseBERHeader(s)
		if err != nil {
			return nil, err
		}
		if h.class != 0 || h.tag != tag || h.constructed {
			return nil, fmt.Errorf("%w: constructed string segment of another type", errBER)
		}
		c := s[h.hdrLen : h.hdrLen+h.length]
		if tag == 3 { // BIT STRING: each segment starts with its unused-bits count
			if len(c) == 0 {
				return nil, fmt.Errorf("%w: empty BIT STRING segment", errBER)
			}
			last := i == len(segs)-1
			if !last && c[0] != 0 {
				return nil, fmt.Errorf("%w: unused bits in a middle BIT STRING segment", errBER)
			}
			if i == 0 {
				out = append(out, 0)
			}
			if last {
				out[0] = c[0]
			}
			c = c[1:]
		}
		out = append(out, c...)
	}
	if tag == 3 && len(out) == 0 {
		out = []byte{0}
	}
	return out, nil
}

func appendElement(out, id, content []byte) []byte {
	out = append(out, id...)
	out = appendLength(out, len(content))
	return append(out, content...)
}

func appendLength(out []byte, n int) []byte {
	switch {
	case n < 0x80:
		return append(out, byte(n))
	case n <= 0xff:
		return append(out, 0x81, byte(n))
	case n <= 0xffff:
		return append(out, 0x82, byte(n>>8), byte(n))
	case n <= 0xffffff:
		return append(out, 0x83, byte(n>>16), byte(n>>8), byte(n))
	default:
		return append(out, 0x84, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
}
