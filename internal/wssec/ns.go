package wssec

import (
	"github.com/beevik/etree"
)

// lookupPrefix resolves prefix to its namespace URI in scope at el, walking
// up the ancestors. The empty prefix resolves to the default namespace ("" if
// none). ok is false for an undeclared non-empty prefix.
func lookupPrefix(el *etree.Element, prefix string) (uri string, ok bool) {
	switch prefix {
	case "xml":
		return namespaceXML, true
	case "xmlns":
		return "", false
	}
	for n := el; n != nil; n = n.Parent() {
		for _, a := range n.Attr {
			if prefix == "" && a.Space == "" && a.Key == "xmlns" {
				return a.Value, true
			}
			if prefix != "" && a.Space == "xmlns" && a.Key == prefix {
				return a.Value, a.Value != ""
			}
		}
	}
	return "", prefix == ""
}

// elementNS returns the namespace URI of el ("" if undeclared or none).
func elementNS(el *etree.Element) string {
	uri, _ := lookupPrefix(el, el.Space)
	return uri
}

// isElement reports whether el is {ns}local.
func isElement(el *etree.Element, ns, local string) bool {
	return el != nil && el.Tag == local && elementNS(el) == ns
}

// childElements returns the element children of parent named {ns}local.
func childElements(parent *etree.Element, ns, local string) []*etree.Element {
	var out []*etree.Element
	for _, c := range parent.ChildElements() {
		if isElement(c, ns, local) {
			out = append(out, c)
		}
	}
	return out
}

// childElement returns the only child {ns}local of parent, nil if there is
// none, and an error if there are several.
func childElement(parent *etree.Element, ns, local string) (*etree.Element, error) {
	cs := childElements(parent, ns, local)
	switch len(cs) {
	case 0:
		return nil, nil
	case 1:
		return cs[0], nil
	}
	return nil, policyErr("%d %s elements under %s, expected at most one", len(cs), local, parent.Tag)
}

// attrValue returns the value of the attribute {ns}local of el. Unqualified
// attributes have the empty namespace (they do not take the default
// namespace).
func attrValue(el *etree.Element, ns, local string) (string, bool) {
	for _, a := range el.Attr {
		if a.Key != local || a.Space == "xmlns" || (a.Space == "" && a.Key == "xmlns") {
			continue
		}
		if a.Space == "" {
			if ns == "" {
				return a.Value, true
			}
			continue
		}
		if uri, ok := lookupPrefix(el, a.Space); ok && uri == ns {
			return a.Value, true
		}
	}
	return "", false
}

// prefixFor returns a prefix bound to ns in scope at el. If none is, it
// returns preferred (or a numbered variant that is free at el) and
// declare=true: the caller must declare it on el.
func prefixFor(el *etree.Element, ns, preferred string) (prefix string, declare bool) {
	seen := map[string]bool{}
	for n := el; n != nil; n = n.Parent() {
		for _, a := range n.Attr {
			if a.Space != "xmlns" || seen[a.Key] {
				continue
			}
			seen[a.Key] = true
			if a.Value == ns {
				return a.Key, false
			}
		}
	}
	p := preferred
	for i := 1; ; i++ {
		if _, taken := lookupPrefix(el, p); !taken {
			return p, true
		}
		p = preferred + itoa(i)
	}
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b [20]byte
	n := len(b)
	for i > 0 {
		n--
		b[n] = byte('0' + i%10)
		i /= 10
	}
	return string(b[n:])
}
