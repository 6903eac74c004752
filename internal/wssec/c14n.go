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
	c := &canonicalizer{m: m, skip: skip, scope: nsStack{}, rendered: nsStack{}}
	if m.exclusive {
		c.inclusive = map[string]bool{}
		for _, p := range strings.Fields(prefixList) {
			if p == "#default" {
				p = ""
			}
			c.inclusive[p] = true
		}
	}
	for p, uri := range ancestorScope(el) {
		c.scope.push(p, uri)
	}
	var inherited []etree.Attr
	if !m.exclusive {
		inherited = inheritedXMLAttrs(el, m.v11)
	}
	if err := c.element(el, true, inherited); err != nil {
		return nil, err
	}
	return c.buf.Bytes(), nil
}

// canonicalizeDocument serialises a whole document in canonical form (used
// for XML attachment content).
func canonicalizeDocument(doc *etree.Document, m c14nMethod) ([]byte, error) {
	c := &canonicalizer{m: m, scope: nsStack{}, rendered: nsStack{}}
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
			if err := c.element(t, true, nil); err != nil {
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

// nsDeclPrefix reports whether a is a namespace declaration and the prefix
// it declares ("" for the default namespace).
func nsDeclPrefix(a etree.Attr) (string, bool) {
	switch {
	case a.Space == "xmlns":
		return a.Key, true
	case a.Space == "" && a.Key == "xmlns":
		return "", true
	}
	return "", false
}

// ancestorScope returns the namespace declarations in scope at el's parent.
// It fills one map from the root down (nearer declarations overwrite
// farther ones), never copying it.
func ancestorScope(el *etree.Element) nsMap {
	var chain []*etree.Element
	for p := el.Parent(); p != nil; p = p.Parent() {
		chain = append(chain, p)
	}
	scope := nsMap{}
	for i := len(chain) - 1; i >= 0; i-- {
		for _, a := range chain[i].Attr {
			if p, ok := nsDeclPrefix(a); ok {
				scope[p] = a.Value
			}
		}
	}
	return scope
}

// nsStack is a namespace scope kept as one stack of URIs per prefix, pushed
// and popped while walking a tree: copying a map at every declaring element
// is quadratic on hostile documents (many declarations in scope times many
// declaring descendants).
type nsStack map[string][]string

// lookup returns the innermost URI bound to prefix and whether any binding
// (possibly to "") is in scope.
func (s nsStack) lookup(prefix string) (string, bool) {
	if st := s[prefix]; len(st) > 0 {
		return st[len(st)-1], true
	}
	return "", false
}

// get returns the innermost URI bound to prefix, "" if none.
func (s nsStack) get(prefix string) string {
	uri, _ := s.lookup(prefix)
	return uri
}

func (s nsStack) push(prefix, uri string) { s[prefix] = append(s[prefix], uri) }

// pop removes the innermost binding of each prefix (in reverse order).
func (s nsStack) pop(prefixes []string) {
	for i := len(prefixes) - 1; i >= 0; i-- {
		p := prefixes[i]
		s[p] = s[p][:len(s[p])-1]
		if len(s[p]) == 0 {
			delete(s, p)
		}
	}
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
	// scope holds the namespace declarations in scope, rendered those
	// output by the ancestors in the canonical form.
	scope, rendered nsStack
}

type nsDecl struct{ prefix, uri string }

type sortAttr struct {
	uri  string
	attr etree.Attr
}

// element writes e and its subtree. apex marks the first element output
// (the subtree root or the document element).
func (c *canonicalizer) element(e *etree.Element, apex bool, extra []etree.Attr) error {
	var declared []string
	for _, a := range e.Attr {
		if p, ok := nsDeclPrefix(a); ok {
			c.scope.push(p, a.Value)
			declared = append(declared, p)
		}
	}
	defer c.scope.pop(declared)

	// Namespace declarations to render.
	var decls []nsDecl
	considered := map[string]bool{}
	consider := func(p string) {
		if considered[p] {
			return
		}
		considered[p] = true
		uri := c.scope.get(p)
		if p != "" && uri == "" {
			return
		}
		if c.rendered.get(p) == uri {
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
			if _, inScope := c.scope.lookup(p); inScope || p == "" {
				used[p] = true
			}
		}
		for p := range used {
			if p != "" && c.scope.get(p) == "" && !c.inclusive[p] {
				return fmt.Errorf("c14n: undeclared namespace prefix %q on <%s>", p, qname(e.Space, e.Tag))
			}
			consider(p)
		}
	} else {
		if e.Space != "" && e.Space != "xml" && c.scope.get(e.Space) == "" {
			return fmt.Errorf("c14n: undeclared namespace prefix %q on <%s>", e.Space, qname(e.Space, e.Tag))
		}
		consider("")
		// Below the apex the ancestors have rendered every binding in
		// scope at the parent, so only e's own declarations can differ.
		prefixes := declared
		if apex {
			prefixes = make([]string, 0, len(c.scope))
			for p := range c.scope {
				prefixes = append(prefixes, p)
			}
		}
		for _, p := range prefixes {
			if p != "" && p != "xml" {
				consider(p)
			}
		}
	}
	sort.Slice(decls, func(i, j int) bool { return decls[i].prefix < decls[j].prefix })
	renderedHere := make([]string, 0, len(decls))
	for _, d := range decls {
		c.rendered.push(d.prefix, d.uri)
		renderedHere = append(renderedHere, d.prefix)
	}
	defer c.rendered.pop(renderedHere)

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
			uri = c.scope.get(a.Space)
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
			if err := c.element(t, false, nil); err != nil {
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
