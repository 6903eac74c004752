package as4

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/beevik/etree"

	"github.com/edigateway/gateway/internal/wssec"
)

// Namespace URIs used by AS4 messages.
const (
	NSEbMS   = "http://docs.oasis-open.org/ebxml-msg/ebms/v3.0/ns/core/200704/"
	NSSOAP12 = "http://www.w3.org/2003/05/soap-envelope"
	NSSOAP11 = "http://schemas.xmlsoap.org/soap/envelope/"
	NSEbbp   = "http://docs.oasis-open.org/ebxml-bp/ebbp-signals-2.0"
	NSDSig   = "http://www.w3.org/2000/09/xmldsig#"
	NSWSU    = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd"
	NSXML    = "http://www.w3.org/XML/1998/namespace"
)

// DefaultMaxXMLDepth is the element nesting limit used when a limit is zero.
const DefaultMaxXMLDepth = 64

// MaxXMLAttrs is the most attributes (namespace declarations included) one
// element may carry. It bounds the cost of etree's namespace lookups, which
// scan the attributes of every ancestor.
const MaxXMLAttrs = 128

// MaxXMLElements is the most elements one document may hold. A parsed
// element costs about 110–160 bytes of heap, so without a bound a large
// body of empty elements would take gigabytes before any signature is
// checked; 140 000 empty ones stay under MaxXMLTreeBytes.
const MaxXMLElements = 140000

// The memory one node of the parsed tree takes, in bytes, besides the text
// of its strings: measured with the tree kept alive (TestXMLTreeCost: about
// 110 bytes an element in a wide parent, 60 an attribute, 65 a text node,
// 45–60 a comment or processing instruction), with a margin for the
// parent's child slice as it doubles and for the decoder's garbage that
// the collector has not taken yet (the gateway's resident set grows by
// about twice the live tree while an envelope is parsed:
// TestXMLAmplificationWithinBudget in cmd/gateway).
const (
	xmlElementCost = 230
	xmlAttrCost    = 110
	xmlTextCost    = 130
	xmlOtherCost   = 110
	// xmlMaxCostPerByte bounds the cost per byte of any document: the
	// dearest is an empty element and one byte of text, "<a/>\n", 362
	// bytes of tree for 5 of XML (FuzzXMLTreeBound).
	xmlMaxCostPerByte = 73
	// xmlChargeStep is the cost ParseXML accumulates before it charges it.
	xmlChargeStep = 256 << 10
)

// MaxXMLTreeBytes is the most heap the parsed tree of one document may
// take, counted as ParseXML builds it (nodes at the costs above plus their
// text): a 4 MiB envelope, held four times over, and its tree stay under
// 48 MiB. Payloads travel as attachments; a SOAP body of ordinary XML
// costs 6–10 times its bytes. A 2.2 MB envelope of 249 000 small
// elements (a tree counted as 85 MB) is refused when its tree reaches it.
const MaxXMLTreeBytes = 32 << 20

// XMLTreeBound is the most heap the parsed tree of n bytes of XML can
// take as ParseXMLCharged counts it: what to reserve before parsing, so
// that a parse is either covered from its start or refused before it
// begins (an envelope that fails half-way has spent the work and the
// memory for nothing).
func XMLTreeBound(n int) int64 {
	return min(MaxXMLTreeBytes, int64(n)*xmlMaxCostPerByte+xmlElementCost)
}

// Sentinel causes, reachable with errors.Is through the *Error values that
// wrap them.
var (
	// ErrDTD reports a document type declaration or another directive.
	ErrDTD = errors.New("DTDs and entity declarations are not accepted")
	// ErrXMLDepth reports element nesting deeper than the limit.
	ErrXMLDepth = errors.New("XML nesting too deep")
	// ErrLimit reports input beyond a size or count limit.
	ErrLimit = errors.New("limit exceeded")
)

// ParseXML parses partner XML into an etree document. It refuses DTDs and
// every other <!...> directive, undeclared namespace prefixes, duplicate
// attributes, more than MaxXMLAttrs attributes on an element, more than
// MaxXMLElements elements, character sets other than UTF-8 (and its subset
// US-ASCII) and nesting deeper than maxDepth (DefaultMaxXMLDepth when
// maxDepth <= 0).
// Errors are EBMS:0009 InvalidHeader.
func ParseXML(data []byte, maxDepth int) (*etree.Document, error) {
	return ParseXMLCharged(data, maxDepth, nil)
}

// ParseXMLCharged is ParseXML that also counts the heap the tree takes as
// it is built (about 35 bytes per input byte for small elements) and
// refuses more than MaxXMLTreeBytes (ErrLimit). charge, when set, is
// called with that cost in steps of xmlChargeStep as the tree grows (the
// request's memory budget: limits.Reservation.Grow); its error ends the
// parse and is wrapped in the EBMS:0009 error (limits.ErrBusy stays
// reachable with errors.Is, for a 503).
func ParseXMLCharged(data []byte, maxDepth int, charge func(n int64) error) (*etree.Document, error) {
	if maxDepth <= 0 {
		maxDepth = DefaultMaxXMLDepth
	}
	// A UTF-8 byte order mark may open the document (.NET writes one).
	// encoding/xml leaves literal tabs and line breaks in attribute values;
	// every conformant parser (and so every signer) turns them into spaces.
	data = wssec.NormalizeAttributeWhitespace(bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")))
	doc, err := buildXML(data, maxDepth, charge)
	if err != nil {
		return nil, InvalidHeader("XML not accepted", err)
	}
	return doc, nil
}

// asciiCharsetReader accepts the character sets that are UTF-8 byte for byte.
func asciiCharsetReader(charset string, input io.Reader) (io.Reader, error) {
	switch strings.ToLower(charset) {
	case "utf-8", "utf8", "us-ascii", "ascii":
		return input, nil
	}
	return nil, fmt.Errorf("character set %q not supported", charset)
}

// buildXML reads the token stream once with encoding/xml, checks it (well
// formed with matching tags and strict entities, no directive, the depth,
// element and attribute limits, bound prefixes, unique attributes) and
// builds the etree document from the same tokens, as etree's own reader
// would have built it from them (the reference test compares both): an
// element per start tag with its prefix and attributes in order, character
// data marked as whitespace when it is, comments and processing
// instructions. Until 4 December 2026 a check pass ran before etree parsed
// the bytes a second time; one pass costs about half as much.
func buildXML(data []byte, maxDepth int, charge func(n int64) error) (*etree.Document, error) {
	dec := xml.NewDecoder(bytes.NewReader(data))
	dec.Strict = true
	dec.CharsetReader = asciiCharsetReader
	doc := etree.NewDocument()
	doc.ReadSettings = etree.ReadSettings{MaxDepth: maxDepth + 1, CharsetReader: asciiCharsetReader}
	type frame struct {
		name  xml.Name
		decls map[string]string
		el    *etree.Element
	}
	var stack []frame
	lookup := func(prefix string) (string, bool) {
		if prefix == "xml" {
			return NSXML, true
		}
		for i := len(stack) - 1; i >= 0; i-- {
			if uri, ok := stack[i].decls[prefix]; ok {
				return uri, uri != "" || prefix == ""
			}
		}
		return "", prefix == ""
	}
	parent := func() *etree.Element {
		if len(stack) == 0 {
			return &doc.Element
		}
		return stack[len(stack)-1].el
	}
	seenRoot := false
	elements := 0
	var seen map[xml.Name]bool
	// The tree's cost so far, and the part of it not yet charged.
	var cost, pending int64
	account := func(n int) error {
		cost += int64(n)
		pending += int64(n)
		if cost > MaxXMLTreeBytes {
			return fmt.Errorf("%w: the parsed XML would take more than %d bytes of memory", ErrLimit, MaxXMLTreeBytes)
		}
		if charge != nil && pending >= xmlChargeStep {
			n := pending
			pending = 0
			if err := charge(n); err != nil {
				return fmt.Errorf("memory for the parsed XML: %w", err)
			}
		}
		return nil
	}
	for {
		tok, err := dec.RawToken()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		switch t := tok.(type) {
		case xml.StartElement:
			n := xmlElementCost + len(t.Name.Space) + len(t.Name.Local)
			for _, a := range t.Attr {
				n += xmlAttrCost + len(a.Name.Space) + len(a.Name.Local) + len(a.Value)
			}
			if err := account(n); err != nil {
				return nil, err
			}
		case xml.CharData:
			if err := account(xmlTextCost + len(t)); err != nil {
				return nil, err
			}
		case xml.Comment:
			if err := account(xmlOtherCost + len(t)); err != nil {
				return nil, err
			}
		case xml.ProcInst:
			if err := account(xmlOtherCost + len(t.Target) + len(t.Inst)); err != nil {
				return nil, err
			}
		}
		switch t := tok.(type) {
		case xml.Directive:
			return nil, ErrDTD
		case xml.StartElement:
			if len(stack) == 0 {
				if seenRoot {
					return nil, errors.New("more than one root element")
				}
				seenRoot = true
			}
			if elements++; elements > MaxXMLElements {
				return nil, fmt.Errorf("%w: more than %d elements", ErrLimit, MaxXMLElements)
			}
			if len(stack) >= maxDepth {
				return nil, fmt.Errorf("%w: more than %d levels", ErrXMLDepth, maxDepth)
			}
			if len(t.Attr) > MaxXMLAttrs {
				return nil, fmt.Errorf("%w: more than %d attributes on <%s>", ErrLimit, MaxXMLAttrs, t.Name.Local)
			}
			f := frame{name: t.Name}
			for _, a := range t.Attr {
				switch {
				case a.Name.Space == "xmlns":
					if f.decls == nil {
						f.decls = map[string]string{}
					}
					if a.Value == "" {
						return nil, fmt.Errorf("prefix %q undeclared (XML 1.0 namespaces do not allow it)", a.Name.Local)
					}
					f.decls[a.Name.Local] = a.Value
				case a.Name.Space == "" && a.Name.Local == "xmlns":
					if f.decls == nil {
						f.decls = map[string]string{}
					}
					f.decls[""] = a.Value
				}
			}
			el := parent().CreateElement("")
			el.Space, el.Tag = t.Name.Space, t.Name.Local
			f.el = el
			stack = append(stack, f)
			if t.Name.Space != "" {
				if _, ok := lookup(t.Name.Space); !ok {
					return nil, fmt.Errorf("undeclared namespace prefix %q on <%s:%s>", t.Name.Space, t.Name.Space, t.Name.Local)
				}
			}
			if len(t.Attr) > 1 {
				if seen == nil {
					seen = make(map[xml.Name]bool, len(t.Attr))
				}
				clear(seen)
			}
			for _, a := range t.Attr {
				n := a.Name
				if n.Space != "" && n.Space != "xmlns" {
					uri, ok := lookup(n.Space)
					if !ok {
						return nil, fmt.Errorf("undeclared namespace prefix %q on attribute %s:%s", n.Space, n.Space, n.Local)
					}
					n.Space = uri
				}
				if len(t.Attr) > 1 {
					if seen[n] {
						return nil, fmt.Errorf("duplicate attribute %q on <%s>", a.Name.Local, t.Name.Local)
					}
					seen[n] = true
				}
				// CreateAttr with the empty key matches no attribute read
				// from XML; the name is set as the decoder read it (a
				// colon splits it as encoding/xml splits it, not etree).
				at := el.CreateAttr("", a.Value)
				at.Space, at.Key = a.Name.Space, a.Name.Local
			}
		case xml.EndElement:
			if len(stack) == 0 || stack[len(stack)-1].name != t.Name {
				return nil, fmt.Errorf("unexpected end tag </%s>", t.Name.Local)
			}
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) == 0 && len(bytes.TrimSpace(t)) > 0 {
				return nil, errors.New("text outside the root element")
			}
			// SetData marks whitespace as etree's reader does.
			parent().CreateText("").SetData(string(t))
		case xml.Comment:
			parent().CreateComment(string(t))
		case xml.ProcInst:
			parent().CreateProcInst(t.Target, string(t.Inst))
		}
	}
	if len(stack) != 0 {
		return nil, errors.New("unexpected end of XML")
	}
	if !seenRoot {
		return nil, errors.New("no root element")
	}
	if charge != nil && pending > 0 {
		if err := charge(pending); err != nil {
			return nil, fmt.Errorf("memory for the parsed XML: %w", err)
		}
	}
	return doc, nil
}

// Is reports whether el is the element {ns}local, matched by namespace URI.
func Is(el *etree.Element, ns, local string) bool {
	return el != nil && el.Tag == local && el.NamespaceURI() == ns
}

// Children returns the child elements of el named {ns}local. Each child
// costs a namespace lookup; callers bound the number of children of partner
// elements they walk.
func Children(el *etree.Element, ns, local string) []*etree.Element {
	var out []*etree.Element
	for _, c := range el.ChildElements() {
		if Is(c, ns, local) {
			out = append(out, c)
		}
	}
	return out
}

// Attr returns the value of the attribute {ns}local of el; ns "" names an
// unqualified attribute. ok is false when the attribute is absent.
func Attr(el *etree.Element, ns, local string) (value string, ok bool) {
	for i := range el.Attr {
		a := &el.Attr[i]
		if a.Key != local {
			continue
		}
		if ns == "" {
			if a.Space == "" {
				return a.Value, true
			}
			continue
		}
		if a.Space == "" || a.Space == "xmlns" {
			continue
		}
		uri := a.NamespaceURI()
		if a.Space == "xml" {
			uri = NSXML
		}
		if uri == ns {
			return a.Value, true
		}
	}
	return "", false
}

// Text returns all character data directly inside el (comments and child
// elements skipped, as canonical XML without comments sees it), trimmed.
func Text(el *etree.Element) string {
	var b strings.Builder
	for _, t := range el.Child {
		if cd, ok := t.(*etree.CharData); ok {
			b.WriteString(cd.Data)
		}
	}
	return strings.TrimSpace(b.String())
}
