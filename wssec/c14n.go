package wssec

import (
	"bytes"
	"fmt"
	"sort"
	"strings"

	"github.com/beevik/etree"
)

// c14nMethod is a canonicalization algorithm: exclusive or inclusive (1.0 or
// 1.1), with or without comments.
type c14nMethod struct {
	exclusive bool
	v11       bool
	comments  bool
}

// c14nMethodFor maps a CanonicalizationMethod/Transform URI.
func c14nMethodFor(alg string) (c14nMethod, bool) {
	switch alg {
	case AlgExcC14N:
		return c14nMethod{exclusive: true}, true
	case AlgExcC14NWithComments:
		return c14nMethod{exclusive: true, comments: true}, true
	case AlgC14N10:
		return c14nMethod{}, true
	case AlgC14N10WithComments:
		return c14nMethod{comments: true}, true
	case AlgC14N11:
		return c14nMethod{v11: true}, true
	case AlgC14N11WithComments:
		return c14nMethod{v11: true, comments: true}, true
	}
	return c14nMethod{}, false
}

// canonicalize serialises the subtree rooted at el (which stays in its
// document, so that the namespaces and xml:* attributes in scope from its
// ancestors are taken into account) in canonical form. prefixList is the
// exclusive c14n InclusiveNamespaces PrefixList ("#default" names the default
// namespace). skip, if not nil, is a descendant left out of the output (the
// enveloped-signature transform).
//
// This is a direct implementation of Canonical XML 1.0/1.1 and Exclusive XML
// Canonicalization 1.0 for a whole-subtree node-set. goxmldsig's
// canonicalizers are not used here because their attribute ordering compares
// prefixed attributes by local name instead of by namespace URI (C14N §2.2),
// and its inclusive canonicalizers need the subtree detached from its
// document; the tests cross-check this implementation against goxmldsig where
// goxmldsig is right.
func canonicalize(el *etree.Element, m c14nMethod, prefixList string, skip *etree.Element) ([]byte, error) {
	c := &canonicalizer{m: m, skip: skip}
	if m.exclusive {
		c.inclusive = map[string]bool{}
		for _, p := range strings.Fields(prefixList) {
			if p == "#default" {
				p = ""
			}
			c.inclusive[p] = true
		}
	}
	scope := ancestorScope(el)
	var inherited []etree.Attr
	if !m.exclusive {
		inherited = inheritedXMLAttrs(el, m.v11)
	}
	if err := c.element(el, scope, nsMap{}, inherited); err != nil {
		return nil, err
	}
	return c.buf.Bytes(), nil
}

// canonicalizeDocument serialises a whole document in canonical form (used
// for XML attachment content).
func canonicalizeDocument(doc *etree.Document, m c14nMethod) ([]byte, error) {
	c := &canonicalizer{m: m}
	if m.exclusive {
		c.inclusive = map[string]bool{}
	}
	seenRoot := false
	for _, t := range doc.Child {
		switch t := t.(type) {
		case *etree.Element:
			if seenRoot {
				return nil, xmlErr("more than one document element")
			}
			seenRoot = true
			if err := c.element(t, nsMap{}, nsMap{}, nil); err != nil {
				return nil, err
			}
		case *etree.ProcInst:
			if strings.EqualFold(t.Target, "xml") {
				continue
			}
			if seenRoot {
				c.buf.WriteByte('\n')
			}
			c.procInst(t)
			if !seenRoot {
				c.buf.WriteByte('\n')
			}
		case *etree.Comment:
			if !m.comments {
				continue
			}
			if seenRoot {
				c.buf.WriteByte('\n')
			}
			c.comment(t)
			if !seenRoot {
				c.buf.WriteByte('\n')
			}
		case *etree.Directive:
			return nil, xmlErr("DTD or directive in document")
		}
	}
	if !seenRoot {
		return nil, xmlErr("no document element")
	}
	return c.buf.Bytes(), nil
}

// nsMap maps a prefix ("" for the default namespace) to a namespace URI.
type nsMap map[string]string

// with returns the scope extended by el's namespace declarations (a copy if
// el declares any, m itself otherwise).
func (m nsMap) with(el *etree.Element) nsMap {
	var out nsMap
	for _, a := range el.Attr {
		var p string
		switch {
		case a.Space == "xmlns":
			p = a.Key
		case a.Space == "" && a.Key == "xmlns":
			p = ""
		default:
			continue
		}
		if out == nil {
			out = make(nsMap, len(m)+4)
			for k, v := range m {
				out[k] = v
			}
		}
		out[p] = a.Value
	}
	if out == nil {
		return m
	}
	return out
}

// ancestorScope returns the namespace declarations in scope at el's parent.
func ancestorScope(el *etree.Element) nsMap {
	var chain []*etree.Element
	for p := el.Parent(); p != nil; p = p.Parent() {
		chain = append(chain, p)
	}
	scope := nsMap{}
	for i := len(chain) - 1; i >= 0; i-- {
		scope = scope.with(chain[i])
	}
	return scope
}

// inheritedXMLAttrs returns the xml:* attributes of el's ancestors that
// inclusive canonicalization copies onto the apex element (C14N 1.0 §2.4: all
// of them; C14N 1.1: xml:lang and xml:space only; xml:base fix-up is not
// implemented), nearest ancestor first wins, skipping those el has itself.
func inheritedXMLAttrs(el *etree.Element, v11 bool) []etree.Attr {
	have := map[string]bool{}
	for _, a := range el.Attr {
		if a.Space == "xml" {
			have[a.Key] = true
		}
	}
	var out []etree.Attr
	for p := el.Parent(); p != nil; p = p.Parent() {
		for _, a := range p.Attr {
			if a.Space != "xml" || have[a.Key] {
				continue
			}
			if v11 && a.Key != "lang" && a.Key != "space" {
				continue
			}
			have[a.Key] = true
			out = append(out, etree.Attr{Space: "xml", Key: a.Key, Value: a.Value})
		}
	}
	return out
}

type canonicalizer struct {
	buf       bytes.Buffer
	m         c14nMethod
	inclusive map[string]bool // exclusive c14n InclusiveNamespaces prefixes
	skip      *etree.Element
}

type nsDecl struct{ prefix, uri string }

type sortAttr struct {
	uri  string
	attr etree.Attr
}

func (c *canonicalizer) element(e *etree.Element, parentScope, rendered nsMap, extra []etree.Attr) error {
	scope := parentScope.with(e)

	// Namespace declarations to render.
	var decls []nsDecl
	consider := func(p string) {
		uri := scope[p]
		if p != "" && uri == "" {
			return
		}
		if rendered[p] == uri {
			return
		}
		decls = append(decls, nsDecl{p, uri})
	}
	if c.m.exclusive {
		used := map[string]bool{}
		if e.Space != "xml" {
			used[e.Space] = true
		}
		for _, a := range e.Attr {
			if isNSDecl(a) || a.Space == "" || a.Space == "xml" {
				continue
			}
			used[a.Space] = true
		}
		for p := range c.inclusive {
			if _, inScope := scope[p]; inScope || p == "" {
				used[p] = true
			}
		}
		for p := range used {
			if p != "" && scope[p] == "" && !c.inclusive[p] {
				return fmt.Errorf("c14n: undeclared namespace prefix %q on <%s>", p, qname(e.Space, e.Tag))
			}
			consider(p)
		}
	} else {
		if e.Space != "" && e.Space != "xml" && scope[e.Space] == "" {
			return fmt.Errorf("c14n: undeclared namespace prefix %q on <%s>", e.Space, qname(e.Space, e.Tag))
		}
		consider("")
		for p := range scope {
			if p != "" && p != "xml" {
				consider(p)
			}
		}
	}
	sort.Slice(decls, func(i, j int) bool { return decls[i].prefix < decls[j].prefix })
	if len(decls) > 0 {
		nr := make(nsMap, len(rendered)+len(decls))
		for k, v := range rendered {
			nr[k] = v
		}
		for _, d := range decls {
			nr[d.prefix] = d.uri
		}
		rendered = nr
	}

	// Attributes, sorted by (namespace URI, local name).
	attrs := make([]sortAttr, 0, len(e.Attr)+len(extra))
	for _, a := range append(append([]etree.Attr(nil), e.Attr...), extra...) {
		if isNSDecl(a) {
			continue
		}
		var uri string
		switch a.Space {
		case "":
		case "xml":
			uri = namespaceXML
		default:
			uri = scope[a.Space]
			if uri == "" {
				return fmt.Errorf("c14n: undeclared namespace prefix %q on attribute %s", a.Space, a.Key)
			}
		}
		attrs = append(attrs, sortAttr{uri, a})
	}
	sort.SliceStable(attrs, func(i, j int) bool {
		if attrs[i].uri != attrs[j].uri {
			return attrs[i].uri < attrs[j].uri
		}
		return attrs[i].attr.Key < attrs[j].attr.Key
	})

	name := qname(e.Space, e.Tag)
	c.buf.WriteByte('<')
	c.buf.WriteString(name)
	for _, d := range decls {
		if d.prefix == "" {
			c.buf.WriteString(` xmlns="`)
		} else {
			c.buf.WriteString(` xmlns:`)
			c.buf.WriteString(d.prefix)
			c.buf.WriteString(`="`)
		}
		escapeAttr(&c.buf, d.uri)
		c.buf.WriteByte('"')
	}
	for _, a := range attrs {
		c.buf.WriteByte(' ')
		c.buf.WriteString(qname(a.attr.Space, a.attr.Key))
		c.buf.WriteString(`="`)
		escapeAttr(&c.buf, a.attr.Value)
		c.buf.WriteByte('"')
	}
	c.buf.WriteByte('>')

	for _, t := range e.Child {
		switch t := t.(type) {
		case *etree.Element:
			if t == c.skip {
				continue
			}
			if err := c.element(t, scope, rendered, nil); err != nil {
				return err
			}
		case *etree.CharData:
			escapeText(&c.buf, t.Data)
		case *etree.Comment:
			if c.m.comments {
				c.comment(t)
			}
		case *etree.ProcInst:
			c.procInst(t)
		case *etree.Directive:
			return xmlErr("directive inside element <%s>", name)
		}
	}
	c.buf.WriteString("</")
	c.buf.WriteString(name)
	c.buf.WriteByte('>')
	return nil
}

func (c *canonicalizer) procInst(p *etree.ProcInst) {
	c.buf.WriteString("<?")
	c.buf.WriteString(p.Target)
	if inst := strings.TrimLeft(p.Inst, " \t\r\n"); inst != "" {
		c.buf.WriteByte(' ')
		c.buf.WriteString(inst)
	}
	c.buf.WriteString("?>")
}

func (c *canonicalizer) comment(cm *etree.Comment) {
	c.buf.WriteString("<!--")
	c.buf.WriteString(cm.Data)
	c.buf.WriteString("-->")
}

func isNSDecl(a etree.Attr) bool {
	return a.Space == "xmlns" || (a.Space == "" && a.Key == "xmlns")
}

func qname(space, local string) string {
	if space == "" {
		return local
	}
	return space + ":" + local
}

func escapeText(b *bytes.Buffer, s string) {
	for i := 0; i < len(s); i++ {
		switch ch := s[i]; ch {
		case '&':
			b.WriteString("&amp;")
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '\r':
			b.WriteString("&#xD;")
		default:
			b.WriteByte(ch)
		}
	}
}

func escapeAttr(b *bytes.Buffer, s string) {
	for i := 0; i < len(s); i++ {
		switch ch := s[i]; ch {
		case '&':
			b.WriteString("&amp;")
		case '<':
			b.WriteString("&lt;")
		case '"':
			b.WriteString("&quot;")
		case '\t':
			b.WriteString("&#x9;")
		case '\n':
			b.WriteString("&#xA;")
		case '\r':
			b.WriteString("&#xD;")
		default:
			b.WriteByte(ch)
		}
	}
}
