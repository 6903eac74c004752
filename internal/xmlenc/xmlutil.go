package xmlenc

import (
	"bytes"
	"encoding/base64"
	"encoding/xml"
	"strings"

	"github.com/beevik/etree"

	"github.com/edigateway/gateway/internal/wssec"
)

// is reports whether e is the element {ns}local. Namespaces are resolved
// through the in-scope declarations; prefixes are never compared.
func is(e *etree.Element, ns, local string) bool {
	return e != nil && e.Tag == local && e.NamespaceURI() == ns
}

// child returns the first child element {ns}local of e, or nil.
func child(e *etree.Element, ns, local string) *etree.Element {
	if e == nil {
		return nil
	}
	for _, c := range e.ChildElements() {
		if is(c, ns, local) {
			return c
		}
	}
	return nil
}

// children returns every child element {ns}local of e.
func children(e *etree.Element, ns, local string) []*etree.Element {
	if e == nil {
		return nil
	}
	var out []*etree.Element
	for _, c := range e.ChildElements() {
		if is(c, ns, local) {
			out = append(out, c)
		}
	}
	return out
}

// attr returns the value of the unqualified attribute name of e.
func attr(e *etree.Element, name string) string {
	for _, a := range e.Attr {
		if a.Space == "" && a.Key == name {
			return a.Value
		}
	}
	return ""
}

// attrNS returns the value of the attribute {ns}name of e.
func attrNS(e *etree.Element, ns, name string) string {
	for _, a := range e.Attr {
		if a.Space != "" && a.Space != "xmlns" && a.Key == name && a.NamespaceURI() == ns {
			return a.Value
		}
	}
	return ""
}

// decodeBase64 decodes XML base64Binary text, which may contain whitespace.
func decodeBase64(s string) ([]byte, error) {
	s = strings.Map(func(r rune) rune {
		switch r {
		case ' ', '\t', '\r', '\n':
			return -1
		}
		return r
	}, s)
	return base64.StdEncoding.DecodeString(s)
}

// idIndex maps identifiers (Id, wsu:Id) to elements. An identifier that
// occurs more than once is ambiguous and never resolves, which defeats
// wrapping attacks that duplicate an Id.
type idIndex struct {
	byID map[string]*etree.Element
	dup  map[string]bool
}

func buildIDIndex(root *etree.Element) *idIndex {
	ix := &idIndex{byID: map[string]*etree.Element{}, dup: map[string]bool{}}
	var walk func(e *etree.Element)
	walk = func(e *etree.Element) {
		seen := map[string]bool{}
		for _, a := range e.Attr {
			if a.Key != "Id" && a.Key != "ID" {
				continue
			}
			if a.Space != "" && a.NamespaceURI() != NSWSU {
				continue
			}
			if seen[a.Value] {
				continue
			}
			seen[a.Value] = true
			if _, ok := ix.byID[a.Value]; ok {
				ix.dup[a.Value] = true
			}
			ix.byID[a.Value] = e
		}
		for _, c := range e.ChildElements() {
			walk(c)
		}
	}
	walk(root)
	return ix
}

// lookup resolves a same-document reference "#id".
func (ix *idIndex) lookup(uri string) (*etree.Element, error) {
	id, ok := strings.CutPrefix(strings.TrimSpace(uri), "#")
	if !ok || id == "" {
		return nil, fail(ErrUnsupported, "reference %q is not a same-document reference", truncate(uri))
	}
	if ix.dup[id] {
		return nil, fail(ErrMalformed, "identifier %q occurs more than once", truncate(id))
	}
	e := ix.byID[id]
	if e == nil {
		return nil, fail(ErrMalformed, "reference %q does not resolve", truncate(uri))
	}
	return e, nil
}

// truncate shortens partner-supplied strings quoted in error messages.
func truncate(s string) string {
	const max = 120
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}

// inScopeNamespaces returns the namespace declarations visible at e, nearest
// declaration first per prefix ("" is the default namespace).
func inScopeNamespaces(e *etree.Element) map[string]string {
	ns := map[string]string{}
	for p := e; p != nil; p = p.Parent() {
		for _, a := range p.Attr {
			var prefix string
			switch {
			case a.Space == "xmlns":
				prefix = a.Key
			case a.Space == "" && a.Key == "xmlns":
				prefix = ""
			default:
				continue
			}
			if _, ok := ns[prefix]; !ok {
				ns[prefix] = a.Value
			}
		}
	}
	return ns
}

const fragmentWrapper = "xmlencFragmentWrapper"

// maxFragmentElements bounds the elements of decrypted XML: a parsed element
// costs about 140 bytes of heap, and decryption runs before the signature
// check (the as4 package bounds the envelope the same way).
const maxFragmentElements = 250000

// parseFragment parses decrypted XML (an element or element content) in the
// namespace context of parent and returns the parsed tokens, detached. A
// leading UTF-8 byte order mark and XML declaration are dropped, and
// attribute values get XML 1.0 attribute-whitespace normalisation. DTDs,
// entity declarations and references to undeclared entities are refused; the
// size and depth are bounded.
func parseFragment(parent *etree.Element, plaintext []byte, maxSize, maxDepth int) ([]etree.Token, error) {
	if len(plaintext) > maxSize {
		return nil, fail(ErrLimit, "decrypted XML is %d bytes, limit %d", len(plaintext), maxSize)
	}
	pt := bytes.TrimPrefix(plaintext, []byte("\xef\xbb\xbf"))
	if trimmed := bytes.TrimLeft(pt, " \t\r\n"); bytes.HasPrefix(trimmed, []byte("<?xml")) {
		end := bytes.Index(trimmed, []byte("?>"))
		if end < 0 {
			return nil, fail(ErrMalformed, "decrypted XML has an unterminated XML declaration")
		}
		next := trimmed[5:end]
		if len(next) > 0 && next[0] != ' ' && next[0] != '\t' && next[0] != '\r' && next[0] != '\n' {
			return nil, fail(ErrMalformed, "decrypted XML starts with a processing instruction")
		}
		pt = trimmed[end+2:]
	}
	// encoding/xml leaves literal tabs and line breaks in attribute values;
	// a conformant parser (and so the partner's signer, for a body that was
	// signed before it was encrypted) turns each into a space (XML 1.0
	// §3.3.3). Without this the body digest of such XML never matches.
	pt = wssec.NormalizeAttributeWhitespace(pt)
	var buf bytes.Buffer
	buf.Grow(len(pt) + 256)
	buf.WriteString("<" + fragmentWrapper)
	for prefix, uri := range inScopeNamespaces(parent) {
		if prefix == "" {
			buf.WriteString(` xmlns="`)
		} else {
			buf.WriteString(" xmlns:" + prefix + `="`)
		}
		escapeAttr(&buf, uri)
		buf.WriteByte('"')
	}
	buf.WriteByte('>')
	buf.Write(pt)
	buf.WriteString("</" + fragmentWrapper + ">")

	if n := bytes.Count(pt, []byte("<")); n > maxFragmentElements {
		// Every element needs a '<', so fewer cannot exceed the limit; count
		// exactly only then.
		dec := xml.NewDecoder(bytes.NewReader(pt))
		elements := 0
		for {
			tok, err := dec.RawToken()
			if err != nil {
				break // malformed XML fails in the parse below
			}
			if _, ok := tok.(xml.StartElement); ok {
				if elements++; elements > maxFragmentElements {
					return nil, fail(ErrLimit, "decrypted XML holds more than %d elements", maxFragmentElements)
				}
			}
		}
	}
	d := etree.NewDocument()
	d.ReadSettings = etree.ReadSettings{MaxDepth: maxDepth + 1}
	if err := d.ReadFromBytes(buf.Bytes()); err != nil {
		return nil, fail(ErrMalformed, "decrypted XML does not parse: %v", err)
	}
	if len(d.Child) != 1 {
		return nil, fail(ErrMalformed, "decrypted XML escapes its context")
	}
	w, ok := d.Child[0].(*etree.Element)
	if !ok || w.Space != "" || w.Tag != fragmentWrapper {
		return nil, fail(ErrMalformed, "decrypted XML escapes its context")
	}
	if err := refuseDirectives(w); err != nil {
		return nil, err
	}
	toks := append([]etree.Token(nil), w.Child...)
	// Detach from the end: RemoveChildAt re-indexes every later sibling, so
	// removing from the front is quadratic in the number of tokens.
	for i := len(w.Child) - 1; i >= 0; i-- {
		w.RemoveChildAt(i)
	}
	return toks, nil
}

// refuseDirectives rejects DOCTYPE/ENTITY declarations and XML declarations
// anywhere inside a parsed fragment.
func refuseDirectives(e *etree.Element) error {
	for _, c := range e.Child {
		switch t := c.(type) {
		case *etree.Directive:
			return fail(ErrMalformed, "decrypted XML contains a DTD or directive")
		case *etree.ProcInst:
			if strings.EqualFold(t.Target, "xml") {
				return fail(ErrMalformed, "decrypted XML contains a misplaced XML declaration")
			}
		case *etree.Element:
			if err := refuseDirectives(t); err != nil {
				return err
			}
		}
	}
	return nil
}

func escapeAttr(buf *bytes.Buffer, s string) {
	for _, r := range s {
		switch r {
		case '&':
			buf.WriteString("&amp;")
		case '<':
			buf.WriteString("&lt;")
		case '"':
			buf.WriteString("&quot;")
		default:
			buf.WriteRune(r)
		}
	}
}

// serializeContent writes the child tokens of e with settings that survive a
// parse round trip (attribute whitespace and CR escaped).
func serializeContent(e *etree.Element) []byte {
	var buf bytes.Buffer
	ws := &etree.WriteSettings{CanonicalText: true, CanonicalAttrVal: true}
	for _, c := range e.Child {
		c.WriteTo(&buf, ws)
	}
	return buf.Bytes()
}
