package as4

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/beevik/etree"

	"github.com/edigateway/gateway/wssec"
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
// element costs about 140 bytes of heap, so without a bound a large body of
// empty elements would take gigabytes before any signature is checked.
const MaxXMLElements = 250000

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
	if maxDepth <= 0 {
		maxDepth = DefaultMaxXMLDepth
	}
	// A UTF-8 byte order mark may open the document (.NET writes one).
	// encoding/xml leaves literal tabs and line breaks in attribute values;
	// every conformant parser (and so every signer) turns them into spaces.
	data = wssec.NormalizeAttributeWhitespace(bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")))
	if err := prescanXML(data, maxDepth); err != nil {
		return nil, InvalidHeader("XML not accepted", err)
	}
	doc := etree.NewDocument()
	doc.ReadSettings = etree.ReadSettings{MaxDepth: maxDepth + 1, CharsetReader: asciiCharsetReader}
	if err := doc.ReadFromBytes(data); err != nil {
		return nil, InvalidHeader("XML not well formed", err)
	}
	if doc.Root() == nil {
		return nil, InvalidHeader("XML has no root element", nil)
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

// prescanXML checks the token stream with encoding/xml before etree builds a
// tree: well-formedness (matching tags, strict entities), no directive, the
// depth limit, bound prefixes and unique attributes.
func prescanXML(data []byte, maxDepth int) error {
	dec := xml.NewDecoder(bytes.NewReader(data))
	dec.Strict = true
	dec.CharsetReader = asciiCharsetReader
	type frame struct {
		name  xml.Name
		decls map[string]string
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
	seenRoot := false
	elements := 0
	for {
		tok, err := dec.RawToken()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		switch t := tok.(type) {
		case xml.Directive:
			return ErrDTD
		case xml.StartElement:
			if len(stack) == 0 {
				if seenRoot {
					return errors.New("more than one root element")
				}
				seenRoot = true
			}
			if elements++; elements > MaxXMLElements {
				return fmt.Errorf("%w: more than %d elements", ErrLimit, MaxXMLElements)
			}
			if len(stack) >= maxDepth {
				return fmt.Errorf("%w: more than %d levels", ErrXMLDepth, maxDepth)
			}
			if len(t.Attr) > MaxXMLAttrs {
				return fmt.Errorf("%w: more than %d attributes on <%s>", ErrLimit, MaxXMLAttrs, t.Name.Local)
			}
			f := frame{name: t.Name}
			for _, a := range t.Attr {
				switch {
				case a.Name.Space == "xmlns":
					if f.decls == nil {
						f.decls = map[string]string{}
					}
					if a.Value == "" {
						return fmt.Errorf("prefix %q undeclared (XML 1.0 namespaces do not allow it)", a.Name.Local)
					}
					f.decls[a.Name.Local] = a.Value
				case a.Name.Space == "" && a.Name.Local == "xmlns":
					if f.decls == nil {
						f.decls = map[string]string{}
					}
					f.decls[""] = a.Value
				}
			}
			stack = append(stack, f)
			if t.Name.Space != "" {
				if _, ok := lookup(t.Name.Space); !ok {
					return fmt.Errorf("undeclared namespace prefix %q on <%s:%s>", t.Name.Space, t.Name.Space, t.Name.Local)
				}
			}
			seen := make(map[xml.Name]bool, len(t.Attr))
			for _, a := range t.Attr {
				n := a.Name
				if n.Space != "" && n.Space != "xmlns" {
					uri, ok := lookup(n.Space)
					if !ok {
						return fmt.Errorf("undeclared namespace prefix %q on attribute %s:%s", n.Space, n.Space, n.Local)
					}
					n.Space = uri
				}
				if seen[n] {
					return fmt.Errorf("duplicate attribute %q on <%s>", a.Name.Local, t.Name.Local)
				}
				seen[n] = true
			}
		case xml.EndElement:
			if len(stack) == 0 || stack[len(stack)-1].name != t.Name {
				return fmt.Errorf("unexpected end tag </%s>", t.Name.Local)
			}
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) == 0 && len(bytes.TrimSpace(t)) > 0 {
				return errors.New("text outside the root element")
			}
		}
	}
	if len(stack) != 0 {
		return errors.New("unexpected end of XML")
	}
	if !seenRoot {
		return errors.New("no root element")
	}
	return nil
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
