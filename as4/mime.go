package as4

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net/textproto"
	"strings"

	"github.com/beevik/etree"

	glimits "github.com/edigateway/gateway/limits"

	"github.com/edigateway/gateway/internal/base64body"
)

// Default limits, used for every zero field of Limits.
const (
	DefaultMaxMessageSize = 64 << 20
	DefaultMaxParts       = 32
	// DefaultMaxEnvelopeSize bounds the SOAP envelope part. Parsing,
	// checking and canonicalising XML costs several times its size in
	// memory and CPU (a 90 MiB text node cost 742 MB and 5 s), and AS4
	// payloads travel as attachments, so the envelope must be small.
	DefaultMaxEnvelopeSize = 4 << 20
)

// Limits bound what ReadMessage accepts. A zero field takes its default:
// DefaultMaxMessageSize, DefaultMaxParts, MaxPartSize = MaxMessageSize,
// DefaultMaxEnvelopeSize and DefaultMaxXMLDepth.
type Limits struct {
	// MaxMessageSize is the most bytes read from the body.
	MaxMessageSize int64
	// MaxParts is the most MIME parts, the SOAP root part included.
	MaxParts int
	// MaxPartSize is the most bytes of one part after transfer decoding.
	MaxPartSize int64
	// MaxXMLDepth is the deepest element nesting of the SOAP envelope.
	MaxXMLDepth int
	// MaxEnvelopeSize is the most bytes of the SOAP envelope (root) part,
	// enforced while it is read, before it is parsed.
	MaxEnvelopeSize int64
	// SpoolDir holds parts of unknown length while they are read ("" =
	// system temporary directory).
	SpoolDir string
}

func (l Limits) withDefaults() Limits {
	if l.MaxMessageSize <= 0 {
		l.MaxMessageSize = DefaultMaxMessageSize
	}
	if l.MaxParts <= 0 {
		l.MaxParts = DefaultMaxParts
	}
	if l.MaxPartSize <= 0 || l.MaxPartSize > l.MaxMessageSize {
		l.MaxPartSize = l.MaxMessageSize
	}
	if l.MaxXMLDepth <= 0 {
		l.MaxXMLDepth = DefaultMaxXMLDepth
	}
	if l.MaxEnvelopeSize <= 0 {
		l.MaxEnvelopeSize = DefaultMaxEnvelopeSize
	}
	if l.MaxEnvelopeSize > l.MaxPartSize {
		l.MaxEnvelopeSize = l.MaxPartSize
	}
	return l
}

// SOAPVersion is the SOAP version of an envelope.
type SOAPVersion string

const (
	SOAP11 SOAPVersion = "1.1"
	SOAP12 SOAPVersion = "1.2"
)

// Namespace returns the envelope namespace URI of v.
func (v SOAPVersion) Namespace() string {
	if v == SOAP11 {
		return NSSOAP11
	}
	return NSSOAP12
}

// Part is one MIME part of a message (or the whole body of a bare SOAP
// message, then with only a Content-Type header).
type Part struct {
	// ContentID is the Content-ID without angle brackets, "" when absent.
	ContentID string
	// Header holds the part's MIME headers as received (values unfolded).
	Header textproto.MIMEHeader
	// Body is the part content after Content-Transfer-Encoding decoding.
	Body []byte
}

// ContentType returns the part's Content-Type header value.
func (p *Part) ContentType() string { return p.Header.Get("Content-Type") }

// Envelope is a received SOAP message: the parsed envelope and its parts.
type Envelope struct {
	// Doc is the parsed SOAP envelope (root part).
	Doc *etree.Document
	// SOAPVersion is taken from the envelope's namespace.
	SOAPVersion SOAPVersion
	// Root is the part that carried the envelope.
	Root Part
	// Attachments are the other MIME parts, in message order.
	Attachments []Part
}

// Header returns the soap:Header element, or nil.
func (e *Envelope) Header() *etree.Element {
	return firstChild(e.Doc.Root(), e.SOAPVersion.Namespace(), "Header")
}

// Body returns the soap:Body element.
func (e *Envelope) Body() *etree.Element {
	return firstChild(e.Doc.Root(), e.SOAPVersion.Namespace(), "Body")
}

// Messaging returns the eb:Messaging element, which must be the only one
// among the children of soap:Header (EBMS:0009 otherwise).
func (e *Envelope) Messaging() (*etree.Element, error) {
	h := e.Header()
	if h == nil {
		return nil, invalidHeaderf("no SOAP Header")
	}
	if _, err := boundedChildren(h); err != nil {
		return nil, err
	}
	ms := Children(h, NSEbMS, "Messaging")
	switch len(ms) {
	case 0:
		return nil, invalidHeaderf("no eb:Messaging header")
	case 1:
		return ms[0], nil
	}
	return nil, invalidHeaderf("%d eb:Messaging headers", len(ms))
}

// Attachment returns the attachment whose Content-ID is cid (without angle
// brackets), or nil.
func (e *Envelope) Attachment(cid string) *Part {
	for i := range e.Attachments {
		if e.Attachments[i].ContentID == cid {
			return &e.Attachments[i]
		}
	}
	return nil
}

func firstChild(el *etree.Element, ns, local string) *etree.Element {
	if el == nil {
		return nil
	}
	for _, c := range el.ChildElements() {
		if Is(c, ns, local) {
			return c
		}
	}
	return nil
}

// ReadMessage reads an AS4 request body: multipart/related SOAP with
// attachments (the root part chosen by the start parameter, else the first
// part) or a bare SOAP envelope (application/soap+xml or text/xml).
// Errors are *Error values: EBMS:0007 for MIME problems, EBMS:0009 for the
// envelope, EBMS:0004 wrapping ErrLimit for size and count limits.
func ReadMessage(contentType string, body io.Reader, limits Limits) (*Envelope, error) {
	limits = limits.withDefaults()
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return nil, MimeInconsistency("unreadable Content-Type", err)
	}
	r := &capReader{r: body, n: limits.MaxMessageSize}
	var root Part
	var attachments []Part
	switch {
	case mt == "multipart/related":
		root, attachments, err = readMultipart(r, params, limits)
		if err != nil {
			return nil, err
		}
	case isSOAPType(mt):
		if err := checkCharset(params); err != nil {
			return nil, err
		}
		data, err := glimits.Collect(r, glimits.CollectOptions{Max: limits.MaxEnvelopeSize, SpoolDir: limits.SpoolDir})
		if errors.Is(err, glimits.ErrTooLarge) {
			return nil, envelopeTooLarge(limits.MaxEnvelopeSize)
		}
		if err != nil {
			return nil, readErr("reading body", err)
		}
		root = Part{Header: textproto.MIMEHeader{"Content-Type": {contentType}}, Body: data}
	default:
		return nil, MimeInconsistency(fmt.Sprintf("Content-Type %q is neither multipart/related nor SOAP", mt), nil)
	}
	env := &Envelope{Root: root, Attachments: attachments}
	if err := env.parseRoot(limits.MaxXMLDepth); err != nil {
		return nil, err
	}
	return env, nil
}

// checkCharset accepts a SOAP part declared as UTF-8 (or US-ASCII), or
// without a charset parameter.
func checkCharset(params map[string]string) error {
	cs, ok := params["charset"]
	if !ok {
		return nil
	}
	switch strings.ToLower(strings.Trim(cs, `"' `)) {
	case "utf-8", "utf8", "us-ascii":
		return nil
	}
	return MimeInconsistency(fmt.Sprintf("SOAP part charset %q is not UTF-8", cs), nil)
}

func isSOAPType(mt string) bool { return mt == "application/soap+xml" || mt == "text/xml" }

func readErr(what string, err error) *Error {
	if errors.Is(err, ErrLimit) {
		return Other("message too large", fmt.Errorf("%s: %w", what, err))
	}
	return MimeInconsistency(what, err)
}

func readMultipart(r io.Reader, params map[string]string, limits Limits) (Part, []Part, error) {
	boundary := params["boundary"]
	if boundary == "" {
		return Part{}, nil, MimeInconsistency("multipart/related without boundary", nil)
	}
	if t, ok := params["type"]; ok {
		if tt, _, err := mime.ParseMediaType(t); err != nil || !isSOAPType(tt) {
			return Part{}, nil, MimeInconsistency(fmt.Sprintf("multipart/related type %q is not SOAP", t), err)
		}
	}
	start := stripAngles(params["start"])
	mr := multipart.NewReader(r, boundary)
	var parts []Part
	seen := map[string]bool{}
	for {
		p, err := mr.NextRawPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return Part{}, nil, readErr("reading MIME part", err)
		}
		if len(parts) >= limits.MaxParts {
			return Part{}, nil, Other("too many MIME parts", fmt.Errorf("more than %d parts: %w", limits.MaxParts, ErrLimit))
		}
		// The envelope is the start part, else the first one: its limit is
		// known from its headers, before its body is read.
		cid := stripAngles(p.Header.Get("Content-ID"))
		isRoot := start != "" && cid == start || start == "" && len(parts) == 0
		max := limits.MaxPartSize
		if isRoot {
			max = limits.MaxEnvelopeSize
		}
		part, err := readPart(p, max, limits.SpoolDir)
		if isRoot && errors.Is(err, ErrLimit) {
			return Part{}, nil, envelopeTooLarge(max)
		}
		if err != nil {
			return Part{}, nil, err
		}
		if part.ContentID != "" {
			if seen[part.ContentID] {
				return Part{}, nil, MimeInconsistency("duplicate Content-ID <"+part.ContentID+">", nil)
			}
			seen[part.ContentID] = true
		}
		parts = append(parts, part)
	}
	if len(parts) == 0 {
		return Part{}, nil, MimeInconsistency("multipart/related without parts", nil)
	}
	rootIdx := 0
	if start != "" {
		rootIdx = -1
		for i := range parts {
			if parts[i].ContentID == start {
				rootIdx = i
				break
			}
		}
		if rootIdx < 0 {
			return Part{}, nil, MimeInconsistency("no part has the start Content-ID <"+start+">", nil)
		}
	}
	root := parts[rootIdx]
	mt, rootParams, err := mime.ParseMediaType(root.ContentType())
	if err != nil || !isSOAPType(mt) {
		return Part{}, nil, MimeInconsistency(fmt.Sprintf("root part Content-Type %q is not SOAP", root.ContentType()), err)
	}
	if err := checkCharset(rootParams); err != nil {
		return Part{}, nil, err
	}
	attachments := append(parts[:rootIdx:rootIdx], parts[rootIdx+1:]...)
	return root, attachments, nil
}

func envelopeTooLarge(max int64) error {
	return Other(fmt.Sprintf("SOAP envelope larger than %d bytes; payloads belong in attachments", max),
		fmt.Errorf("envelope over %d bytes: %w", max, ErrLimit))
}

func readPart(p *multipart.Part, maxSize int64, spoolDir string) (Part, error) {
	part := Part{Header: p.Header, ContentID: stripAngles(p.Header.Get("Content-ID"))}
	cte := strings.ToLower(strings.TrimSpace(p.Header.Get("Content-Transfer-Encoding")))
	var (
		data []byte
		err  error
	)
	switch cte {
	case "", "binary", "8bit", "7bit":
		data, err = readAtMost(p, maxSize, spoolDir)
	case "base64":
		// Decoded as it is read: no copy of the encoded part is kept.
		data, err = readAtMost(base64body.NewDecoder(p), maxSize, spoolDir)
		if err != nil && !errors.Is(err, ErrLimit) && !isReadErr(err) {
			return Part{}, MimeInconsistency("bad base64 in part <"+part.ContentID+">", err)
		}
	case "quoted-printable":
		data, err = readAtMost(quotedprintable.NewReader(p), maxSize, spoolDir)
	default:
		return Part{}, MimeInconsistency(fmt.Sprintf("unsupported Content-Transfer-Encoding %q", cte), nil)
	}
	if err != nil {
		return Part{}, readErr("reading part <"+part.ContentID+">", err)
	}
	if int64(len(data)) > maxSize {
		return Part{}, Other("MIME part too large", fmt.Errorf("part <%s> over %d bytes: %w", part.ContentID, maxSize, ErrLimit))
	}
	part.Body = data
	return part, nil
}

// readAtMost reads r to its end in fixed-size chunks (one exact allocation
// at the end, see limits.Collect), failing with ErrLimit past max bytes.
func readAtMost(r io.Reader, max int64, spoolDir string) ([]byte, error) {
	data, err := glimits.Collect(r, glimits.CollectOptions{Max: max, SpoolDir: spoolDir})
	if errors.Is(err, glimits.ErrTooLarge) {
		return nil, fmt.Errorf("over %d bytes: %w", max, ErrLimit)
	}
	return data, err
}

// isReadErr reports whether err came from reading the request (a limit of
// package limits, the message size cap, a broken connection) rather than
// from decoding.
func isReadErr(err error) bool {
	var ce base64.CorruptInputError
	return !errors.As(err, &ce)
}

// stripAngles removes white space and one pair of angle brackets.
func stripAngles(s string) string {
	s = strings.TrimSpace(s)
	if len(s) >= 2 && s[0] == '<' && s[len(s)-1] == '>' {
		s = strings.TrimSpace(s[1 : len(s)-1])
	}
	return s
}

func (e *Envelope) parseRoot(maxDepth int) error {
	doc, err := ParseXML(e.Root.Body, maxDepth)
	if err != nil {
		return err
	}
	v, err := checkEnvelope(doc)
	if err != nil {
		return err
	}
	e.Doc, e.SOAPVersion = doc, v
	return nil
}

// EnvelopeFromDocument wraps an already parsed SOAP envelope (for example a
// synchronous response read with ParseXML) after checking its structure:
// a SOAP 1.1 or 1.2 Envelope with an optional Header followed by one Body.
// Root holds no bytes and there are no attachments.
func EnvelopeFromDocument(doc *etree.Document) (*Envelope, error) {
	if doc == nil || doc.Root() == nil {
		return nil, invalidHeaderf("no XML document")
	}
	v, err := checkEnvelope(doc)
	if err != nil {
		return nil, err
	}
	return &Envelope{Doc: doc, SOAPVersion: v}, nil
}

func checkEnvelope(doc *etree.Document) (SOAPVersion, error) {
	root := doc.Root()
	var v SOAPVersion
	switch {
	case Is(root, NSSOAP12, "Envelope"):
		v = SOAP12
	case Is(root, NSSOAP11, "Envelope"):
		v = SOAP11
	default:
		return "", invalidHeaderf("root element {%s}%s is not a SOAP envelope", root.NamespaceURI(), root.Tag)
	}
	ns := v.Namespace()
	var header, body int
	for _, c := range root.ChildElements() {
		switch {
		case Is(c, ns, "Header") && header == 0 && body == 0:
			header++
		case Is(c, ns, "Body") && body == 0:
			body++
		default:
			return "", invalidHeaderf("unexpected element <%s> in the SOAP envelope", c.Tag)
		}
	}
	if body == 0 {
		return "", invalidHeaderf("SOAP envelope without Body")
	}
	return v, nil
}

// capReader reads at most n bytes from r and then fails with ErrLimit if r
// holds more.
type capReader struct {
	r io.Reader
	n int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if c.n <= 0 {
		var probe [1]byte
		k, err := c.r.Read(probe[:])
		if k > 0 {
			return 0, ErrLimit
		}
		return 0, err
	}
	if int64(len(p)) > c.n {
		p = p[:c.n]
	}
	k, err := c.r.Read(p)
	c.n -= int64(k)
	return k, err
}
