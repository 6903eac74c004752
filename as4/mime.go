package as4

import (
	"bufio"
	"bytes"
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

// readAhead is the piece in which a multipart body is read.
const readAhead = 64 << 10

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
	// SpoolDir holds the attachments, each spooled to a file as it
	// arrives ("" = system temporary directory); Envelope.Close removes
	// them.
	SpoolDir string
	// AfterEnvelope, when set, is called once the SOAP envelope part has
	// been read and parsed, before the attachments after it are read. It
	// may lower (or raise) the message size limit: max > 0 replaces
	// MaxMessageSize for the whole message, counted from its first byte.
	// An error it returns ends ReadMessage with that error.
	AfterEnvelope func(env *Envelope) (max int64, err error)
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
	// Body is the part content after Content-Transfer-Encoding decoding,
	// when it is held in memory: always for the SOAP envelope part; an
	// attachment ReadMessage received is spooled to a file instead (see
	// Content).
	Body []byte
	// Content, when set, reads the content instead of Body (a spooled
	// attachment, or one decrypted into a spool file).
	Content func() (io.ReadCloser, error)
}

// Open reads the part's content after transfer decoding.
func (p *Part) Open() (io.ReadCloser, error) {
	if p.Content != nil {
		return p.Content()
	}
	return io.NopCloser(bytes.NewReader(p.Body)), nil
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
	// files are the spooled attachments, removed by Close.
	files []*glimits.Spooled
}

// Close removes the files the attachments were spooled to.
func (e *Envelope) Close() error {
	if e == nil {
		return nil
	}
	var errs []error
	for _, f := range e.files {
		errs = append(errs, f.Remove())
	}
	e.files = nil
	return errors.Join(errs...)
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
	env := &Envelope{}
	switch {
	case mt == "multipart/related":
		// The MIME reader asks for a few KiB at a time: read the body in
		// larger pieces (fewer system calls for a message of any size).
		br := bufio.NewReaderSize(r, readAhead)
		if err := env.readMultipart(br, r, params, limits); err != nil {
			env.Close()
			return nil, err
		}
		return env, nil
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
		env.Root = Part{Header: textproto.MIMEHeader{"Content-Type": {contentType}}, Body: data}
		if err := env.parseRoot(limits.MaxXMLDepth); err != nil {
			return nil, err
		}
		if err := env.afterEnvelope(limits, r); err != nil {
			return nil, err
		}
		return env, nil
	}
	return nil, MimeInconsistency(fmt.Sprintf("Content-Type %q is neither multipart/related nor SOAP", mt), nil)
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

// readMultipart reads the parts of a multipart/related body: the SOAP
// envelope part into memory (parsed as soon as it is complete, then
// Limits.AfterEnvelope runs), every other part to a spool file.
func (env *Envelope) readMultipart(body io.Reader, r *capReader, params map[string]string, limits Limits) error {
	boundary := params["boundary"]
	if boundary == "" {
		return MimeInconsistency("multipart/related without boundary", nil)
	}
	if t, ok := params["type"]; ok {
		if tt, _, err := mime.ParseMediaType(t); err != nil || !isSOAPType(tt) {
			return MimeInconsistency(fmt.Sprintf("multipart/related type %q is not SOAP", t), err)
		}
	}
	start := stripAngles(params["start"])
	mr := multipart.NewReader(body, boundary)
	seen := map[string]bool{}
	parts, haveRoot := 0, false
	for {
		p, err := mr.NextRawPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return readErr("reading MIME part", err)
		}
		if parts >= limits.MaxParts {
			return Other("too many MIME parts", fmt.Errorf("more than %d parts: %w", limits.MaxParts, ErrLimit))
		}
		parts++
		// The envelope is the start part, else the first one: its limit is
		// known from its headers, before its body is read.
		cid := stripAngles(p.Header.Get("Content-ID"))
		isRoot := start != "" && cid == start || start == "" && parts == 1
		if cid != "" {
			if seen[cid] {
				return MimeInconsistency("duplicate Content-ID <"+cid+">", nil)
			}
			seen[cid] = true
		}
		if !isRoot {
			part, err := env.spoolPart(p, limits)
			if err != nil {
				return err
			}
			env.Attachments = append(env.Attachments, part)
			continue
		}
		max := limits.MaxEnvelopeSize
		data, err := readPart(p, cid, func(r io.Reader) ([]byte, error) { return readAtMost(r, max, limits.SpoolDir) })
		if errors.Is(err, ErrLimit) && !errors.Is(err, ErrMessageLimit) {
			return envelopeTooLarge(max)
		}
		if err != nil {
			return err
		}
		env.Root = Part{Header: p.Header, ContentID: cid, Body: data}
		haveRoot = true
		if err := env.checkRoot(limits, r); err != nil {
			return err
		}
	}
	if parts == 0 {
		return MimeInconsistency("multipart/related without parts", nil)
	}
	if !haveRoot {
		return MimeInconsistency("no part has the start Content-ID <"+start+">", nil)
	}
	return nil
}

// checkRoot checks and parses the envelope part once it is read, and runs
// Limits.AfterEnvelope.
func (env *Envelope) checkRoot(limits Limits, r *capReader) error {
	mt, rootParams, err := mime.ParseMediaType(env.Root.ContentType())
	if err != nil || !isSOAPType(mt) {
		return MimeInconsistency(fmt.Sprintf("root part Content-Type %q is not SOAP", env.Root.ContentType()), err)
	}
	if err := checkCharset(rootParams); err != nil {
		return err
	}
	if err := env.parseRoot(limits.MaxXMLDepth); err != nil {
		return err
	}
	return env.afterEnvelope(limits, r)
}

// afterEnvelope runs Limits.AfterEnvelope and applies the limit it sets.
func (env *Envelope) afterEnvelope(limits Limits, r *capReader) error {
	if limits.AfterEnvelope == nil {
		return nil
	}
	max, err := limits.AfterEnvelope(env)
	if err != nil {
		return err
	}
	if max > 0 {
		r.n = max - r.read
		if r.n < 0 {
			return Other("message too large", fmt.Errorf("%d bytes read, the limit is %d: %w", r.read, max, ErrMessageLimit))
		}
	}
	return nil
}

func envelopeTooLarge(max int64) error {
	return Other(fmt.Sprintf("SOAP envelope larger than %d bytes; payloads belong in attachments", max),
		fmt.Errorf("envelope over %d bytes: %w", max, ErrLimit))
}

// ErrMessageLimit is wrapped by the errors of a message over its size limit
// (Limits.MaxMessageSize, or what Limits.AfterEnvelope set), as opposed to
// one part's; it wraps ErrLimit.
var ErrMessageLimit = fmt.Errorf("message size limit: %w", ErrLimit)

// readPart transfer-decodes p and hands the decoded stream to read.
func readPart[T any](p *multipart.Part, cid string, read func(io.Reader) (T, error)) (T, error) {
	var zero T
	cte := strings.ToLower(strings.TrimSpace(p.Header.Get("Content-Transfer-Encoding")))
	var v T
	var err error
	switch cte {
	case "", "binary", "8bit", "7bit":
		v, err = read(p)
	case "base64":
		// Decoded as it is read: no copy of the encoded part is kept.
		v, err = read(base64body.NewDecoder(p))
		if err != nil && !errors.Is(err, ErrLimit) && !isReadErr(err) {
			return zero, MimeInconsistency("bad base64 in part <"+cid+">", err)
		}
	case "quoted-printable":
		v, err = read(quotedprintable.NewReader(p))
	default:
		return zero, MimeInconsistency(fmt.Sprintf("unsupported Content-Transfer-Encoding %q", cte), nil)
	}
	if err != nil {
		if errors.Is(err, glimits.ErrSpool) {
			return zero, err // our file system, not the message
		}
		return zero, readErr("reading part <"+cid+">", err)
	}
	return v, nil
}

// spoolPart writes an attachment, transfer-decoded, to a spool file as it
// arrives (a small one stays in memory).
func (env *Envelope) spoolPart(p *multipart.Part, limits Limits) (Part, error) {
	cid := stripAngles(p.Header.Get("Content-ID"))
	f, err := readPart(p, cid, func(r io.Reader) (*glimits.Spooled, error) {
		f, err := glimits.SpoolSmall(r, limits.SpoolDir, limits.MaxPartSize, glimits.SmallInMemory)
		if errors.Is(err, glimits.ErrTooLarge) {
			return nil, fmt.Errorf("part <%s> over %d bytes: %w", cid, limits.MaxPartSize, ErrLimit)
		}
		return f, err
	})
	if err != nil {
		if errors.Is(err, ErrLimit) && !errors.Is(err, ErrMessageLimit) {
			return Part{}, Other("MIME part too large", err)
		}
		return Part{}, err
	}
	env.files = append(env.files, f)
	return Part{Header: p.Header, ContentID: cid, Content: func() (io.ReadCloser, error) {
		return io.NopCloser(f.Reader()), nil
	}}, nil
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

// capReader reads at most n bytes from r and then fails with an error
// wrapping ErrLimit (ErrMessageLimit) if r holds more.
type capReader struct {
	r    io.Reader
	n    int64
	read int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if c.n <= 0 {
		var probe [1]byte
		k, err := c.r.Read(probe[:])
		if k > 0 {
			return 0, ErrMessageLimit
		}
		return 0, err
	}
	if int64(len(p)) > c.n {
		p = p[:c.n]
	}
	k, err := c.r.Read(p)
	c.n -= int64(k)
	c.read += int64(k)
	return k, err
}
