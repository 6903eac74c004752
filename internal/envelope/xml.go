package envelope

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"unicode/utf8"
)

// maxXMLDepth bounds element nesting; UBL and SBDH documents stay far
// below it.
const maxXMLDepth = 64

// XML namespaces, matched by URI, never by prefix.
const (
	nsSBDH      = "http://www.unece.org/cefact/namespaces/StandardBusinessDocumentHeader"
	nsUBLPrefix = "urn:oasis:names:specification:ubl:schema:xsd:"
	nsCBC       = nsUBLPrefix + "CommonBasicComponents-2"
	nsCAC       = nsUBLPrefix + "CommonAggregateComponents-2"
)

// xmlCapture is one leaf element whose trimmed text (and optionally one
// unqualified attribute) is read into the Interchange.
type xmlCapture struct {
	name  string     // for messages, e.g. "cbc:ID"
	path  []xml.Name // below the root element
	attr  string     // unqualified attribute read into qual, if any
	value *string
	qual  *string
	seen  bool
}

// ublPartyPaths names the cac elements leading from the root to the
// cbc:EndpointID of the sending and receiving party, per UBL document type.
var ublPartyPaths = map[string][2][]string{
	"Order":               {{"BuyerCustomerParty", "Party"}, {"SellerSupplierParty", "Party"}},
	"OrderChange":         {{"BuyerCustomerParty", "Party"}, {"SellerSupplierParty", "Party"}},
	"OrderCancellation":   {{"BuyerCustomerParty", "Party"}, {"SellerSupplierParty", "Party"}},
	"OrderResponse":       {{"SellerSupplierParty", "Party"}, {"BuyerCustomerParty", "Party"}},
	"OrderResponseSimple": {{"SellerSupplierParty", "Party"}, {"BuyerCustomerParty", "Party"}},
	"DespatchAdvice":      {{"DespatchSupplierParty", "Party"}, {"DeliveryCustomerParty", "Party"}},
	"ReceiptAdvice":       {{"DeliveryCustomerParty", "Party"}, {"DespatchSupplierParty", "Party"}},
	"ApplicationResponse": {{"SenderParty"}, {"ReceiverParty"}},
}

var ublDefaultPartyPaths = [2][]string{{"AccountingSupplierParty", "Party"}, {"AccountingCustomerParty", "Party"}}

func ublEndpointPath(cac []string) []xml.Name {
	p := make([]xml.Name, 0, len(cac)+1)
	for _, l := range cac {
		p = append(p, xml.Name{Space: nsCAC, Local: l})
	}
	return append(p, xml.Name{Space: nsCBC, Local: "EndpointID"})
}

func cbc(local string) []xml.Name { return []xml.Name{{Space: nsCBC, Local: local}} }

func sbdhPath(locals ...string) []xml.Name {
	p := make([]xml.Name, len(locals))
	for i, l := range locals {
		p[i] = xml.Name{Space: nsSBDH, Local: l}
	}
	return p
}

// extractXML reads an XML document from r, which starts with '<'. The
// decoder reads through an xmlRunBound filter, so that memory does not grow
// with the size of the document or of any text in it.
//
// recognised says that the payload is XML whatever follows: its MIME type
// declares XML, or it starts with an XML declaration. Otherwise it is XML
// only once its root start tag parses: a payload that breaks before (random
// binary data starting with '<') is no envelope, not a damaged one.
func extractXML(r io.Reader, recognised bool) (*Interchange, error) {
	src := &readErrRecorder{r: r}
	ic, err := extractXMLFrom(newXMLRunBound(src, xmlRunBound), recognised)
	if src.err != nil {
		return nil, readErr(src.err)
	}
	return ic, err
}

// readErrRecorder remembers a read error other than io.EOF, which the XML
// decoder would report as malformed XML.
type readErrRecorder struct {
	r   io.Reader
	err error
}

func (e *readErrRecorder) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF && e.err == nil {
		e.err = err
	}
	return n, err
}

func extractXMLFrom(r io.Reader, recognised bool) (*Interchange, error) {
	var cs charsetState
	d := xml.NewDecoder(r)
	d.Strict = true
	d.CharsetReader = cs.reader

	// Prolog: a payload recognised as XML must parse to a root element; one
	// that does not (cut inside its declaration or root start tag, text
	// before the root) is damaged, not "no envelope": a UBL document
	// declared application/xml and cut inside its root start tag must not be
	// delivered. A payload that merely starts with '<' and breaks before its
	// root start tag parses is an opaque payload.
	var (
		root    xml.StartElement
		doctype bool
	)
	prologErr := func(err error) (*Interchange, error) {
		if !recognised {
			return nil, ErrNoEnvelope
		}
		return nil, err
	}
prolog:
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			return prologErr(damagedf(standardXML, "the document ends before its root element"))
		}
		if err != nil {
			return prologErr(damagedWrap(standardXML, err, "malformed XML before the root element"))
		}
		switch t := tok.(type) {
		case xml.StartElement:
			root = t
			break prolog
		case xml.Directive:
			doctype = true
		case xml.CharData:
			if len(bytes.TrimSpace(t)) > 0 {
				return prologErr(damagedf(standardXML, "text before the root element"))
			}
		}
	}

	ic := &Interchange{}
	var (
		std      string
		captures []*xmlCapture
		uuid, id string
	)
	switch {
	case root.Name.Space == nsSBDH && root.Name.Local == "StandardBusinessDocument":
		std = "sbdh"
		ic.Standard = StandardPeppolSBDH
		hdr := func(locals ...string) []xml.Name {
			return sbdhPath(append([]string{"StandardBusinessDocumentHeader"}, locals...)...)
		}
		captures = []*xmlCapture{
			{name: "Sender/Identifier", path: hdr("Sender", "Identifier"), attr: "Authority", value: &ic.Sender, qual: &ic.SenderQualifier},
			{name: "Receiver/Identifier", path: hdr("Receiver", "Identifier"), attr: "Authority", value: &ic.Recipient, qual: &ic.RecipientQualifier},
			{name: "DocumentIdentification/Standard", path: hdr("DocumentIdentification", "Standard"), value: &ic.Syntax},
			{name: "DocumentIdentification/TypeVersion", path: hdr("DocumentIdentification", "TypeVersion"), value: &ic.TypeVersion},
			{name: "DocumentIdentification/InstanceIdentifier", path: hdr("DocumentIdentification", "InstanceIdentifier"), value: &ic.Reference},
			{name: "DocumentIdentification/Type", path: hdr("DocumentIdentification", "Type"), value: &ic.Type},
			{name: "DocumentIdentification/CreationDateAndTime", path: hdr("DocumentIdentification", "CreationDateAndTime"), value: &ic.Date},
		}
	case strings.HasPrefix(root.Name.Space, nsUBLPrefix):
		std = StandardUBL
		ic.Standard = StandardUBL
		ic.Type = root.Name.Local
		ic.Syntax = root.Name.Space
		if doc := strings.TrimSuffix(strings.TrimPrefix(root.Name.Space, nsUBLPrefix), "-2"); doc != root.Name.Local {
			return nil, damagedf(std, "root element %q is not the document element of namespace %q", root.Name.Local, root.Name.Space)
		}
		parties, ok := ublPartyPaths[root.Name.Local]
		if !ok {
			parties = ublDefaultPartyPaths
		}
		captures = []*xmlCapture{
			{name: "cbc:UUID", path: cbc("UUID"), value: &uuid},
			{name: "cbc:ID", path: cbc("ID"), value: &id},
			{name: "cbc:IssueDate", path: cbc("IssueDate"), value: &ic.Date},
			{name: "cbc:IssueTime", path: cbc("IssueTime"), value: &ic.Time},
			{name: "cbc:UBLVersionID", path: cbc("UBLVersionID"), value: &ic.TypeVersion},
			{name: "cac:" + strings.Join(parties[0], "/cac:") + "/cbc:EndpointID", path: ublEndpointPath(parties[0]), attr: "schemeID", value: &ic.Sender, qual: &ic.SenderQualifier},
			{name: "cac:" + strings.Join(parties[1], "/cac:") + "/cbc:EndpointID", path: ublEndpointPath(parties[1]), attr: "schemeID", value: &ic.Recipient, qual: &ic.RecipientQualifier},
		}
	default:
		return nil, ErrNoEnvelope
	}
	if err := cs.check(std, doctype); err != nil {
		return nil, err
	}
	if err := walkXML(d, std, root, captures); err != nil {
		return nil, err
	}
	if ic.Standard == StandardUBL {
		ic.Reference = uuid
		if ic.Reference == "" {
			ic.Reference = id
		}
		if ic.Reference == "" {
			return nil, damagedf(std, "%s has neither cbc:UUID nor cbc:ID", root.Name.Local)
		}
	} else if ic.Reference == "" {
		return nil, damagedf(std, "no StandardBusinessDocumentHeader/DocumentIdentification/InstanceIdentifier")
	}
	return ic, nil
}

// walkXML reads the document below root to its end, filling the captures.
// It refuses DTDs (checked by the caller for the prolog, here inside the
// document), enforces the depth and size limits and single-root structure,
// and turns every XML error into a damaged envelope.
func walkXML(d *xml.Decoder, std string, root xml.StartElement, captures []*xmlCapture) error {
	var (
		stack  []xml.Name // below root
		active *xmlCapture
		text   []byte
		closed bool
	)
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			if !closed {
				return damagedf(std, "document ends inside <%s>", root.Name.Local)
			}
			return nil
		}
		if err != nil {
			return damagedWrap(std, err, "malformed XML")
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if closed {
				return damagedf(std, "element <%s> after the root element", t.Name.Local)
			}
			if active != nil {
				return damagedf(std, "%s contains element <%s>", active.name, t.Name.Local)
			}
			if len(stack)+2 > maxXMLDepth {
				return damagedf(std, "elements nested deeper than %d", maxXMLDepth)
			}
			stack = append(stack, t.Name)
			for _, c := range captures {
				if !namesEqual(stack, c.path) {
					continue
				}
				if c.seen {
					return damagedf(std, "more than one %s", c.name)
				}
				c.seen, active, text = true, c, text[:0]
				if c.attr != "" {
					for _, a := range t.Attr {
						if a.Name.Space == "" && a.Name.Local == c.attr {
							*c.qual = strings.TrimSpace(a.Value)
						}
					}
				}
			}
		case xml.EndElement:
			if len(stack) == 0 {
				closed = true
				continue
			}
			if active != nil {
				*active.value = strings.TrimSpace(string(text))
				active = nil
			}
			stack = stack[:len(stack)-1]
		case xml.CharData:
			switch {
			case active != nil:
				text = append(text, t...)
			case closed && len(bytes.TrimSpace(t)) > 0:
				return damagedf(std, "text after the root element")
			}
		case xml.Directive:
			return damagedf(std, "DOCTYPE or other declaration refused inside the document")
		}
	}
}

func namesEqual(a, b []xml.Name) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// charsetState is the Decoder.CharsetReader. UTF-8 is built in; US-ASCII
// and ISO-8859-1 are converted. Any other declared encoding is read as
// ISO-8859-1 only far enough to see the root element, and remembered so that
// a UBL or SBDH document in it is reported as damaged rather than misread.
type charsetState struct {
	unsupported string
}

func (c *charsetState) reader(label string, in io.Reader) (io.Reader, error) {
	switch strings.ToLower(strings.TrimSpace(label)) {
	case "utf8", "us-ascii", "ascii":
		return in, nil
	case "iso-8859-1", "iso8859-1", "iso_8859-1", "latin1", "l1":
		return &latin1Reader{r: in}, nil
	}
	c.unsupported = label
	return &latin1Reader{r: in}, nil
}

// check reports a refused prolog: a DOCTYPE, or an unsupported encoding.
func (c *charsetState) check(std string, doctype bool) error {
	if doctype {
		return damagedf(std, "DOCTYPE declaration refused (DTDs and entity declarations are not read)")
	}
	if c.unsupported != "" {
		return damagedf(std, "unsupported encoding %q (UTF-8, US-ASCII and ISO-8859-1 are read)", c.unsupported)
	}
	return nil
}

// latin1Reader converts ISO-8859-1 bytes to UTF-8.
type latin1Reader struct {
	r       io.Reader
	in      [2048]byte
	out     []byte
	pending []byte
	err     error
}

func (l *latin1Reader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if len(l.pending) == 0 {
		if l.err != nil {
			return 0, l.err
		}
		n, err := l.r.Read(l.in[:])
		l.err = err
		l.out = l.out[:0]
		for _, b := range l.in[:n] {
			l.out = utf8.AppendRune(l.out, rune(b))
		}
		l.pending = l.out
		if len(l.pending) == 0 {
			return 0, l.err
		}
	}
	n := copy(p, l.pending)
	l.pending = l.pending[n:]
	return n, nil
}
