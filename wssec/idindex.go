package wssec

import (
	"github.com/beevik/etree"
)

// idIndex maps an id value to the one element carrying it.
type idIndex map[string]*etree.Element

// buildIDIndex indexes every id attribute WS-Security and XML-DSig
// references may point at: wsu:Id (WSS utility namespace), unqualified Id and
// ID (XML-DSig, XML-Enc, SAML), and xml:id. A value carried by two different
// elements is rejected: it is the classic signature-wrapping set-up.
func buildIDIndex(root *etree.Element) (idIndex, error) {
	idx := idIndex{}
	var walk func(e *etree.Element, scope nsMap) error
	walk = func(e *etree.Element, scope nsMap) error {
		scope = scope.with(e)
		for _, a := range e.Attr {
			if !isIDAttr(a, scope) || a.Value == "" {
				continue
			}
			if prev, dup := idx[a.Value]; dup && prev != e {
				return policyErr("duplicate id %q on <%s> and <%s>", a.Value, qname(prev.Space, prev.Tag), qname(e.Space, e.Tag))
			}
			idx[a.Value] = e
		}
		for _, c := range e.ChildElements() {
			if err := walk(c, scope); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(root, ancestorScope(root)); err != nil {
		return nil, err
	}
	return idx, nil
}

func isIDAttr(a etree.Attr, scope nsMap) bool {
	switch a.Space {
	case "":
		return a.Key == "Id" || a.Key == "ID"
	case "xml":
		return a.Key == "id"
	case "xmlns":
		return false
	}
	return a.Key == "Id" && scope[a.Space] == NamespaceWSU
}
