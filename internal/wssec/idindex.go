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
	// The scope is a stack of declarations per prefix, pushed and popped
	// while walking: copying a map at every declaring element would be
	// quadratic on hostile documents.
	scope := map[string][]string{}
	for p, uri := range ancestorScope(root) {
		scope[p] = []string{uri}
	}
	resolve := func(prefix string) string {
		if s := scope[prefix]; len(s) > 0 {
			return s[len(s)-1]
		}
		return ""
	}
	var walk func(e *etree.Element) error
	walk = func(e *etree.Element) error {
		var pushed []string
		for _, a := range e.Attr {
			switch {
			case a.Space == "xmlns":
				scope[a.Key] = append(scope[a.Key], a.Value)
				pushed = append(pushed, a.Key)
			case a.Space == "" && a.Key == "xmlns":
				scope[""] = append(scope[""], a.Value)
				pushed = append(pushed, "")
			}
		}
		defer func() {
			for _, p := range pushed {
				scope[p] = scope[p][:len(scope[p])-1]
			}
		}()
		for _, a := range e.Attr {
			if !isIDAttr(a, resolve) || a.Value == "" {
				continue
			}
			if prev, dup := idx[a.Value]; dup && prev != e {
				return policyErr("duplicate id %q on <%s> and <%s>", a.Value, qname(prev.Space, prev.Tag), qname(e.Space, e.Tag))
			}
			idx[a.Value] = e
		}
		for _, c := range e.ChildElements() {
			if err := walk(c); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(root); err != nil {
		return nil, err
	}
	return idx, nil
}

func isIDAttr(a etree.Attr, resolve func(prefix string) string) bool {
	switch a.Space {
	case "":
		return a.Key == "Id" || a.Key == "ID"
	case "xml":
		return a.Key == "id"
	case "xmlns":
		return false
	}
	return a.Key == "Id" && resolve(a.Space) == NamespaceWSU
}
