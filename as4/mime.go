package as4

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net/textproto"
	"strings"
	"sync"

	"github.com/beevik/etree"

	glimits "github.com/edigateway/gateway/internal/limits"

	"github.com/edigateway/gateway/internal/base64body"
	"github.com/edigateway/gateway/internal/bufpool"
	"github.com/edigateway/gateway/internal/readahead"
)

// readAhead is the piece in which a multipart body is read.
const readAhead = 64 << 10

// bodyReaders keeps the readAhead buffers between messages.
var bodyReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readAhead) }}

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
	// ReserveXML, when set, is called with the memory the SOAP envelope's
	// parsed tree may take (XMLTreeBound) before it is parsed, and with
	// any more it takes as it is built (see ParseXMLCharged): the
	// request's memory budget. Its error ends ReadMessage with an
	// EBMS:0009 error that wraps it.
	ReserveXML func(n int64) error
	// ReleaseXML, when set with ReserveXML, is given back the part of
	// the reservation (XMLTreeBound, made before the parse) that the tree
	// did not need.
	ReleaseXML func(n int64)
	// AfterEnvelope, when set, is called once the SOAP envelope part has
	// been read and parsed, before the attachments after it are read. It
	// may lower (or raise) the message size limit: max > 0 replaces
	// MaxMessageSize for the whole message, counted from its first byte.
	// An error it returns ends ReadMessage with that error.
	AfterEnvelope func(env *Envelope) (max int64, err error)
	// StreamAttachment, when set, is asked for each attachment after the
	// envelope whether the caller will read it while it arrives. For true
	// (and a part larger than glimits.SmallInMemory) ReadMessage returns as
	// soon as the part begins: the part's Content waits for its bytes
	// (and fails with the reading's error), and the part and the rest of
	// the body are read behind the caller's back. The caller must then
	// call Envelope.Rest before it uses anything of the message but the
	// envelope and that part.
	StreamAttachment func(env *Envelope, contentID string) bool
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

	// An attachment still arriving when ReadMessage returned
	// (Limits.StreamAttachment): rest is closed once it and the parts
	// after it are read, with restErr the outcome; arrived is its file,
	// later and laterFiles the parts after it, merged by Rest.
	rest       chan struct{}
	restErr    error
	arrived    *glimits.BodyFile
	later      []Part
	laterFiles []*glimits.Spooled
	merged     bool
}

// Rest waits until the whole message is read when an attachment was still
// arriving as ReadMessage returned (see Limits.StreamAttachment), and
// returns what ReadMessage would have returned for the rest of the body:
// from then on Attachments holds every part. It returns nil at once
// otherwise.
func (e *Envelope) Rest() error {
	if e == nil || e.rest == nil {
		return nil
	}
	<-e.rest
	if !e.merged {
		e.merged = true
		e.Attachments = append(e.Attachments, e.later...)
		e.files = append(e.files, e.laterFiles...)
		e.later, e.laterFiles = nil, nil
	}
	return e.restErr
}

// Arriving reports whether ReadMessage returned while an attachment was
// still arriving.
func (e *Envelope) Arriving() bool { return e != nil && e.rest != nil }

// Close waits for the rest of the message (see Rest) and removes the files
// the attachments were spooled to.
func (e *Envelope) Close() error {
	if e == nil {
		return nil
	}
	e.Rest()
	var errs []error
	for _, f := range e.files {
		errs = append(errs, f.Remove())
	}
	e.files = nil
	if e.arrived != nil {
		errs = append(errs, e.arrived.Remove())
		e.arrived = nil
	}
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
		br := bodyReaders.Get().(*bufio.Reader)
		br.Reset(r)
		release := func() {
			br.Reset(nil)
			bodyReaders.Put(br)
		}
		if err := env.readMultipart(br, r, params, limits, release); err != nil {
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
		if err := env.parseRoot(limits.MaxXMLDepth, limits.ReserveXML, limits.ReleaseXML); err != nil {
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
//
// release is called once body is read no more: before readMultipart
// returns, or, while an attachment arrives, when the rest has been read.
func (env *Envelope) readMultipart(body io.Reader, r *capReader, params map[string]string, limits Limits, release func()) error {
	arriving := false
	defer func() {
		if !arriving {
			release()
		}
	}()
	boundary := params["boundary"]
	if boundary == "" {
		return MimeInconsistency("multipart/related without boundary", nil)
	}
	if t, ok := params["type"]; ok {
		if tt, _, err := mime.ParseMediaType(t); err != nil || !isSOAPType(tt) {
			return MimeInconsistency(fmt.Sprintf("multipart/related type %q is not SOAP", t), err)
		}
	}
	pr := &partsReader{env: env, mr: multipart.NewReader(body, boundary), limits: limits, r: r,
		start: stripAngles(params["start"]), seen: map[string]bool{}, atts: &env.Attachments, files: &env.files, release: release}
	for {
		err := pr.next()
		if err == io.EOF {
			return pr.end()
		}
		if err == errArriving {
			arriving = true // the goroutine reading the rest releases body
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// partsReader reads the parts of a multipart/related body one at a time.
type partsReader struct {
	env      *Envelope
	mr       *multipart.Reader
	limits   Limits
	r        *capReader
	start    string
	seen     map[string]bool
	parts    int
	haveRoot bool
	// Where the attachments read go: the envelope's, or, behind an
	// attachment that was still arriving, those Rest merges.
	atts  *[]Part
	files *[]*glimits.Spooled
	// release gives the body's reader back once nothing reads it.
	release func()
}

// errArriving ends ReadMessage's reading while an attachment arrives
// (Limits.StreamAttachment).
var errArriving = errors.New("as4: an attachment is arriving")

// next reads the next part; io.EOF after the last, errArriving when the
// part is read while it arrives.
func (pr *partsReader) next() error {
	p, err := pr.mr.NextRawPart()
	if err == io.EOF {
		return io.EOF
	}
	if err != nil {
		return readErr("reading MIME part", err)
	}
	if pr.parts >= pr.limits.MaxParts {
		return Other("too many MIME parts", fmt.Errorf("more than %d parts: %w", pr.limits.MaxParts, ErrLimit))
	}
	pr.parts++
	// The envelope is the start part, else the first one: its limit is
	// known from its headers, before its body is read.
	cid := stripAngles(p.Header.Get("Content-ID"))
	isRoot := pr.start != "" && cid == pr.start || pr.start == "" && pr.parts == 1
	if cid != "" {
		if pr.seen[cid] {
			return MimeInconsistency("duplicate Content-ID <"+cid+">", nil)
		}
		pr.seen[cid] = true
	}
	if !isRoot {
		if pr.haveRoot && pr.atts == &pr.env.Attachments && pr.limits.StreamAttachment != nil && pr.limits.StreamAttachment(pr.env, cid) {
			return pr.arriving(p, cid)
		}
		part, f, err := spoolPart(p, pr.limits)
		if err != nil {
			return err
		}
		*pr.atts = append(*pr.atts, part)
		*pr.files = append(*pr.files, f)
		return nil
	}
	max := pr.limits.MaxEnvelopeSize
	data, err := readPart(p, cid, func(r io.Reader) ([]byte, error) { return readAtMost(r, max, pr.limits.SpoolDir) })
	if errors.Is(err, ErrLimit) && !errors.Is(err, ErrMessageLimit) {
		return envelopeTooLarge(max)
	}
	if err != nil {
		return err
	}
	pr.env.Root = Part{Header: p.Header, ContentID: cid, Body: data}
	pr.haveRoot = true
	return pr.env.checkRoot(pr.limits, pr.r)
}

// end checks the body once every part is read.
func (pr *partsReader) end() error {
	if pr.parts == 0 {
		return MimeInconsistency("multipart/related without parts", nil)
	}
	if !pr.haveRoot {
		return MimeInconsistency("no part has the start Content-ID <"+pr.start+">", nil)
	}
	return nil
}

// arriving makes attachment p one that is read while it arrives: a part
// of at most glimits.SmallInMemory bytes is read into memory at once (and
// reading goes on); a larger one is spooled by a goroutine into a file
// that the part's Content reads as it grows, after which the goroutine
// reads the rest of the body (errArriving).
func (pr *partsReader) arriving(p *multipart.Part, cid string) error {
	dec, cte, err := decodePart(p)
	if err != nil {
		return err
	}
	head := bufpool.Get(glimits.SmallInMemory + 1)
	n, err := readahead.Fill(dec, head)
	if err != nil {
		defer bufpool.Put(head)
	}
	if err == io.EOF {
		if pr.limits.MaxPartSize > 0 && int64(n) > pr.limits.MaxPartSize {
			return Other("MIME part too large", fmt.Errorf("part <%s> over %d bytes: %w", cid, pr.limits.MaxPartSize, ErrLimit))
		}
		f := glimits.InMemory(bytes.Clone(head[:n]))
		*pr.atts = append(*pr.atts, Part{Header: p.Header, ContentID: cid, Content: func() (io.ReadCloser, error) {
			return io.NopCloser(f.Reader()), nil
		}})
		*pr.files = append(*pr.files, f)
		return nil
	}
	if err != nil {
		return partSpoolError(cid, partError(cte, cid, err), pr.limits)
	}
	g := glimits.SpoolPartAsync(io.MultiReader(bytes.NewReader(head[:n]), dec), pr.limits.SpoolDir, pr.limits.MaxPartSize)
	env := pr.env
	env.Attachments = append(env.Attachments, Part{Header: p.Header, ContentID: cid, Content: func() (io.ReadCloser, error) {
		return io.NopCloser(io.NewSectionReader(g, 0, math.MaxInt64/2)), nil
	}})
	env.rest = make(chan struct{})
	pr.atts, pr.files = &env.later, &env.laterFiles
	go func() {
		defer close(env.rest)
		defer pr.release()
		defer func() {
			if v := recover(); v != nil {
				env.restErr = Other("internal error while reading the message", fmt.Errorf("panic: %v", v))
			}
		}()
		b, err := g.Wait()
		bufpool.Put(head) // the spooling has ended: nothing reads it any more
		env.arrived = b
		if err != nil {
			env.restErr = partSpoolError(cid, partError(cte, cid, partOver(cid, err, pr.limits)), pr.limits)
			return
		}
		for {
			err := pr.next()
			if err == io.EOF {
				env.restErr = pr.end()
				return
			}
			if err != nil {
				env.restErr = err
				return
			}
		}
	}()
	return errArriving
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
	if err := env.parseRoot(limits.MaxXMLDepth, limits.ReserveXML, limits.ReleaseXML); err != nil {
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
	r, cte, err := decodePart(p)
	if err != nil {
		return zero, err
	}
	v, err := read(r)
	if err != nil {
		return zero, partError(cte, cid, err)
	}
	return v, nil
}

// decodePart returns p's content, transfer-decoded as it is read (no copy
// of the encoded part is kept), and its Content-Transfer-Encoding.
func decodePart(p *multipart.Part) (io.Reader, string, error) {
	cte := strings.ToLower(strings.TrimSpace(p.Header.Get("Content-Transfer-Encoding")))
	switch cte {
	case "", "binary", "8bit", "7bit":
		return p, cte, nil
	case "base64":
		return base64body.NewDecoder(p), cte, nil
	case "quoted-printable":
		return quotedprintable.NewReader(p), cte, nil
	}
	return nil, cte, MimeInconsistency(fmt.Sprintf("unsupported Content-Transfer-Encoding %q", cte), nil)
}

// partError is the error of reading part cid (transfer encoding cte).
func partError(cte, cid string, err error) error {
	if cte == "base64" && !errors.Is(err, ErrLimit) && !errors.Is(err, glimits.ErrTooLarge) && !isReadErr(err) {
		return MimeInconsistency("bad base64 in part <"+cid+">", err)
	}
	if errors.Is(err, glimits.ErrSpool) {
		return err // our file system, not the message
	}
	return readErr("reading part <"+cid+">", err)
}

// partOver is err of spooling part cid, with the spool's ErrTooLarge as
// the part's limit (ErrLimit).
func partOver(cid string, err error, limits Limits) error {
	if errors.Is(err, glimits.ErrTooLarge) {
		return fmt.Errorf("part <%s> over %d bytes: %w", cid, limits.MaxPartSize, ErrLimit)
	}
	return err
}

// partSpoolError is the error of spooling part cid: over the part size
// limit, or err as it is.
func partSpoolError(cid string, err error, limits Limits) error {
	if errors.Is(err, ErrLimit) && !errors.Is(err, ErrMessageLimit) {
		return Other("MIME part too large", err)
	}
	return err
}

// spoolPart writes an attachment, transfer-decoded, to a spool file as it
// arrives (a small one stays in memory).
func spoolPart(p *multipart.Part, limits Limits) (Part, *glimits.Spooled, error) {
	cid := stripAngles(p.Header.Get("Content-ID"))
	f, err := readPart(p, cid, func(r io.Reader) (*glimits.Spooled, error) {
		f, err := glimits.SpoolSmall(r, limits.SpoolDir, limits.MaxPartSize, glimits.SmallInMemory)
		return f, partOver(cid, err, limits)
	})
	if err != nil {
		return Part{}, nil, partSpoolError(cid, err, limits)
	}
	return Part{Header: p.Header, ContentID: cid, Content: func() (io.ReadCloser, error) {
		return io.NopCloser(f.Reader()), nil
	}}, f, nil
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

func (e *Envelope) parseRoot(maxDepth int, reserve func(n int64) error, release func(n int64)) error {
	var charge func(n int64) error
	if reserve != nil {
		// The tree's bound is reserved before the parse; what the tree
		// turns out not to need goes back after it.
		reserved, used := XMLTreeBound(len(e.Root.Body)), int64(0)
		if err := reserve(reserved); err != nil {
			return InvalidHeader("XML not accepted", fmt.Errorf("memory for the parsed XML: %w", err))
		}
		charge = func(n int64) error {
			if used += n; used > reserved {
				if err := reserve(used - reserved); err != nil {
					return err
				}
				reserved = used
			}
			return nil
		}
		defer func() {
			if release != nil && reserved > used {
				release(reserved - used)
			}
		}()
	}
	doc, err := ParseXMLCharged(e.Root.Body, maxDepth, charge)
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
