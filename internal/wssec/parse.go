package wssec

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"strings"

	"github.com/beevik/etree"
)

// Limits bound what ParseEnvelope accepts. Zero fields take the defaults.
type Limits struct {
	// MaxBytes is the largest accepted document (default 16 MiB).
	MaxBytes int64
	// MaxDepth is the deepest element nesting (default 64).
	MaxDepth int
	// MaxElements is the largest number of elements (default 100000).
	MaxElements int
	// MaxAttributes is the largest number of attributes, namespace
	// declarations included, on one element (default 64).
	MaxAttributes int
}

// Default limits.
const (
	DefaultMaxBytes      = 16 << 20
	DefaultMaxDepth      = 64
	DefaultMaxElements   = 100000
	DefaultMaxAttributes = 64
)

func (l Limits) withDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultMaxDepth
	}
	if l.MaxElements <= 0 {
		l.MaxElements = DefaultMaxElements
	}
	if l.MaxAttributes <= 0 {
		l.MaxAttributes = DefaultMaxAttributes
	}
	return l
}

// ParseEnvelope reads a SOAP 1.1 or 1.2 envelope from r with XML safety
// checks: it refuses any DOCTYPE (so no DTD, no entity declarations, no
// external entities), non-UTF-8 encodings, undefined entity references,
// duplicate attributes, and input beyond the limits. The document element
// must be a SOAP Envelope. All failures wrap ErrInvalidXML.
func ParseEnvelope(r io.Reader, limits Limits) (*etree.Document, error) {
	limits = limits.withDefaults()
	b, err := io.ReadAll(io.LimitReader(r, limits.MaxBytes+1))
	if err != nil {
		return nil, xmlErrCause(err, "the envelope could not be read")
	}
	if int64(len(b)) > limits.MaxBytes {
		return nil, xmlErr("envelope larger than %d bytes", limits.MaxBytes)
	}
	doc, err := parseXML(b, limits)
	if err != nil {
		return nil, err
	}
	if _, err := locateEnvelope(doc); err != nil {
		return nil, err
	}
	return doc, nil
}

// parseXML parses a whole XML document from b with the safety checks of
// ParseEnvelope (except the size limit, which the caller applies).
func parseXML(b []byte, limits Limits) (*etree.Document, error) {
	limits = limits.withDefaults()
	if int64(len(b)) > limits.MaxBytes {
		return nil, xmlErr("document larger than %d bytes", limits.MaxBytes)
	}
	b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf"))
	b = normalizeAttributeWhitespace(b)
	if err := prescan(b, limits); err != nil {
		return nil, err
	}
	doc := etree.NewDocument()
	doc.ReadSettings = etree.ReadSettings{
		CharsetReader: asciiOnlyCharsetReader,
		MaxDepth:      limits.MaxDepth + 1,
	}
	if err := doc.ReadFromBytes(b); err != nil {
		return nil, xmlErrCause(err, "the envelope is not well-formed XML")
	}
	return doc, nil
}

func asciiOnlyCharsetReader(charset string, input io.Reader) (io.Reader, error) {
	switch strings.ToLower(charset) {
	case "us-ascii", "ascii", "utf8":
		return input, nil
	}
	return nil, fmt.Errorf("encoding %q not supported (UTF-8 only)", charset)
}

// prescan walks the token stream once with the namespace-resolving, strict
// encoding/xml decoder and enforces the safety rules before etree builds the
// tree.
func prescan(b []byte, limits Limits) error {
	d := xml.NewDecoder(bytes.NewReader(b))
	d.Strict = true
	d.CharsetReader = asciiOnlyCharsetReader
	depth, elements, roots := 0, 0, 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return xmlErrCause(err, "the envelope is not well-formed XML")
		}
		switch t := tok.(type) {
		case xml.Directive:
			return xmlErr("DOCTYPE/DTD and other directives are not allowed")
		case xml.StartElement:
			depth++
			elements++
			if depth == 1 {
				roots++
				if roots > 1 {
					return xmlErr("more than one document element")
				}
			}
			if depth > limits.MaxDepth {
				return xmlErr("element nesting deeper than %d", limits.MaxDepth)
			}
			if elements > limits.MaxElements {
				return xmlErr("more than %d elements", limits.MaxElements)
			}
			if len(t.Attr) > limits.MaxAttributes {
				return xmlErr("more than %d attributes on <%s>", limits.MaxAttributes, t.Name.Local)
			}
			for i := range t.Attr {
				for j := i + 1; j < len(t.Attr); j++ {
					if t.Attr[i].Name == t.Attr[j].Name {
						return xmlErr("duplicate attribute %s on <%s>", t.Attr[i].Name.Local, t.Name.Local)
					}
				}
			}
		case xml.EndElement:
			depth--
		case xml.CharData:
			if depth == 0 && len(bytes.TrimSpace(t)) > 0 {
				return xmlErr("text outside the document element")
			}
		}
	}
	if roots != 1 {
		return xmlErr("no document element")
	}
	return nil
}

// NormalizeAttributeWhitespace returns b with the attribute-value
// normalization of XML 1.0 §3.3.3 applied (see normalizeAttributeWhitespace).
// Callers that parse a document to be verified with a parser other than
// ParseEnvelope must apply it to the bytes first, or digests of partner XML
// with line breaks inside attribute values will not match.
func NormalizeAttributeWhitespace(b []byte) []byte { return normalizeAttributeWhitespace(b) }

// normalizeAttributeWhitespace applies XML 1.0 §3.3.3 attribute-value
// normalization, which encoding/xml leaves out: a literal tab, line feed,
// carriage return or CR LF pair inside a quoted attribute value of a tag
// becomes one space (character references such as &#10; are untouched, so
// they still yield the character). Without it, canonical forms, and thus
// digests, of partner XML with multi-line attribute values would differ from
// every conformant implementation. b is returned unchanged when there is
// nothing to normalise.
func normalizeAttributeWhitespace(b []byte) []byte {
	var out []byte // allocated on the first change
	last := 0      // b[last:] is not yet copied to out
	skipTo := func(i int, end string) int {
		if j := bytes.Index(b[i:], []byte(end)); j >= 0 {
			return i + j + len(end)
		}
		return len(b)
	}
	for i := 0; i < len(b); {
		if b[i] != '<' {
			i++
			continue
		}
		rest := b[i:]
		switch {
		case bytes.HasPrefix(rest, []byte("<!--")):
			i = skipTo(i+4, "-->")
			continue
		case bytes.HasPrefix(rest, []byte("<![CDATA[")):
			i = skipTo(i+9, "]]>")
			continue
		case bytes.HasPrefix(rest, []byte("<?")):
			i = skipTo(i+2, "?>")
			continue
		case bytes.HasPrefix(rest, []byte("<!")):
			i = skipTo(i+2, ">")
			continue
		}
		// A start or end tag: scan to its '>' outside quotes.
		i++
		var quote byte
	tag:
		for i < len(b) {
			c := b[i]
			if quote == 0 {
				i++
				switch c {
				case '"', '\'':
					quote = c
				case '>':
					break tag
				}
				continue
			}
			switch c {
			case quote:
				quote = 0
			case '\t', '\n', '\r':
				if out == nil {
					out = make([]byte, 0, len(b))
				}
				out = append(out, b[last:i]...)
				out = append(out, ' ')
				if c == '\r' && i+1 < len(b) && b[i+1] == '\n' {
					i++
				}
				last = i + 1
			}
			i++
		}
	}
	if out == nil {
		return b
	}
	return append(out, b[last:]...)
}
