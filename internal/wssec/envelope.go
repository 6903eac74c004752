package wssec

import (
	"github.com/beevik/etree"
)

// soapEnvelope is the located structure of a SOAP 1.1/1.2 envelope.
type soapEnvelope struct {
	ns     string // SOAP envelope namespace
	root   *etree.Element
	header *etree.Element // nil if absent
	body   *etree.Element
}

// locateEnvelope checks the document holds one SOAP envelope with at most one
// Header and exactly one Body, and no DTD.
func locateEnvelope(doc *etree.Document) (*soapEnvelope, error) {
	if doc == nil {
		return nil, xmlErr("no document")
	}
	for _, t := range doc.Child {
		if _, ok := t.(*etree.Directive); ok {
			return nil, xmlErr("DOCTYPE or directive in envelope")
		}
	}
	root := doc.Root()
	if root == nil {
		return nil, xmlErr("no document element")
	}
	ns := elementNS(root)
	if root.Tag != "Envelope" || (ns != NamespaceSOAP12 && ns != NamespaceSOAP11) {
		return nil, xmlErr("document element is {%s}%s, not a SOAP Envelope", ns, root.Tag)
	}
	env := &soapEnvelope{ns: ns, root: root}
	headers := childElements(root, ns, "Header")
	bodies := childElements(root, ns, "Body")
	if len(headers) > 1 {
		return nil, xmlErr("%d SOAP Header elements", len(headers))
	}
	if len(bodies) != 1 {
		return nil, xmlErr("%d SOAP Body elements, expected one", len(bodies))
	}
	if len(headers) == 1 {
		env.header = headers[0]
	}
	env.body = bodies[0]
	return env, nil
}

// securityHeaders returns the wsse:Security headers addressed to us: no
// role/actor, or the ultimate receiver / next role.
func (env *soapEnvelope) securityHeaders() []*etree.Element {
	if env.header == nil {
		return nil
	}
	var out []*etree.Element
	for _, h := range childElements(env.header, NamespaceWSSE, "Security") {
		var role string
		if env.ns == NamespaceSOAP12 {
			role, _ = attrValue(h, NamespaceSOAP12, "role")
		} else {
			role, _ = attrValue(h, NamespaceSOAP11, "actor")
		}
		switch role {
		case "", roleUltimateReceiver,
			"http://www.w3.org/2003/05/soap-envelope/role/next",
			"http://schemas.xmlsoap.org/soap/actor/next":
			out = append(out, h)
		}
	}
	return out
}

// messaging returns the eb:Messaging header block (nil if absent).
func (env *soapEnvelope) messaging() (*etree.Element, error) {
	if env.header == nil {
		return nil, nil
	}
	ms := childElements(env.header, NamespaceEbMS, "Messaging")
	if len(ms) > 1 {
		return nil, policyErr("%d eb:Messaging header blocks", len(ms))
	}
	if len(ms) == 0 {
		return nil, nil
	}
	return ms[0], nil
}
