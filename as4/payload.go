package as4

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync"

	"github.com/beevik/etree"

	"github.com/edigateway/gateway/internal/limits"
)

// Payload is a PartInfo resolved to the message content it names.
type Payload struct {
	PartInfo PartInfo
	// Part is the attachment of a cid: reference, nil for body payloads.
	Part *Part
	// Element is the SOAP body element of a "#id" or empty href.
	Element *etree.Element
}

// ResolvePayloads maps every PartInfo of um to the attachment or SOAP body
// element it refers to. Run it after decryption. A reference that cannot be
// resolved, a reference to anything outside the message, and an attachment
// no PartInfo refers to give EBMS:0011 ExternalPayloadError; a non-empty
// SOAP body no PartInfo refers to gives EBMS:0003 ValueInconsistent.
func ResolvePayloads(env *Envelope, um *UserMessage) ([]Payload, error) {
	id := um.MessageInfo.MessageID
	used := make([]bool, len(env.Attachments))
	body := env.Body()
	bodyUsed := false
	var out []Payload
	for _, pi := range um.PayloadInfo {
		p := Payload{PartInfo: pi}
		switch href := pi.Href; {
		case strings.HasPrefix(strings.ToLower(href), "cid:"):
			cid, err := url.PathUnescape(href[4:])
			if err != nil {
				return nil, ExternalPayloadError(fmt.Sprintf("bad cid URL %q", href), err).WithRef(id)
			}
			idx := -1
			for i := range env.Attachments {
				if env.Attachments[i].ContentID == cid {
					idx = i
					break
				}
			}
			if idx < 0 {
				return nil, ExternalPayloadError(fmt.Sprintf("no attachment for %q", href), nil).WithRef(id)
			}
			used[idx] = true
			p.Part = &env.Attachments[idx]
		case href == "":
			if body == nil || len(body.ChildElements()) == 0 {
				return nil, ExternalPayloadError("PartInfo refers to an empty SOAP body", nil).WithRef(id)
			}
			bodyUsed = true
			p.Element = body.ChildElements()[0]
		case strings.HasPrefix(href, "#"):
			p.Element = findByID(body, href[1:])
			if p.Element == nil || p.Element == body {
				return nil, ExternalPayloadError(fmt.Sprintf("no SOAP body element for %q", href), nil).WithRef(id)
			}
			bodyUsed = true
		default:
			return nil, ExternalPayloadError(fmt.Sprintf("payload reference %q is outside the message", href), nil).WithRef(id)
		}
		out = append(out, p)
	}
	for i, u := range used {
		if !u {
			return nil, ExternalPayloadError(fmt.Sprintf("attachment <%s> is not referenced by any PartInfo", env.Attachments[i].ContentID), nil).WithRef(id)
		}
	}
	if !bodyUsed && body != nil && len(body.ChildElements()) > 0 {
		return nil, ValueInconsistent("SOAP body has content but no PartInfo refers to it", nil).WithRef(id)
	}
	return out, nil
}

// findByID returns the element below root (root included) whose wsu:Id, Id,
// id or xml:id equals id; nil when there is none or more than one. Values
// are compared before namespaces are resolved, and the walk stops at the
// second match, so hostile documents cannot make it slow.
func findByID(root *etree.Element, id string) *etree.Element {
	if root == nil || id == "" {
		return nil
	}
	var found *etree.Element
	n := 0
	var walk func(e *etree.Element)
	walk = func(e *etree.Element) {
		for i := range e.Attr {
			if n > 1 {
				return
			}
			a := &e.Attr[i]
			if a.Value != id || (a.Key != "Id" && a.Key != "id") {
				continue
			}
			ns := ""
			switch a.Space {
			case "":
			case "xml":
				ns = NSXML
			case "xmlns":
				continue
			default:
				ns = a.NamespaceURI()
			}
			if ns == "" || ns == NSWSU && a.Key == "Id" || ns == NSXML && a.Key == "id" {
				found, n = e, n+1
			}
		}
		for _, c := range e.ChildElements() {
			if n > 1 {
				return
			}
			walk(c)
		}
	}
	walk(root)
	if n != 1 {
		return nil
	}
	return found
}

// CompressionGzip is the only CompressionType of the AS4 profile.
const CompressionGzip = "application/gzip"

// Decompress returns a payload as the application sees it: part unchanged
// when props has no CompressionType, gunzipped when it is application/gzip.
// Output beyond limit bytes or limits.DefaultMaxCompressionRatio times the
// compressed size (a decompression bomb), a corrupt stream and any other
// compression type give EBMS:0303 DecompressionFailure. A limit <= 0 means
// DefaultMaxMessageSize.
func Decompress(part []byte, props map[string]string, limit int64) ([]byte, error) {
	if limit <= 0 {
		limit = DefaultMaxMessageSize
	}
	return DecompressLimited(part, props, limits.Inflation{MaxBytes: limit, MaxRatio: limits.DefaultMaxCompressionRatio}, nil)
}

// DecompressLimited is Decompress under lim, in memory: DecompressReader
// read to its end (in fixed-size chunks, allocated once at the exact size).
func DecompressLimited(part []byte, props map[string]string, lim Inflation, check func(total int64) error) ([]byte, error) {
	r, err := DecompressReader(bytes.NewReader(part), props, lim, check)
	if err != nil {
		return nil, err
	}
	if props[PropCompressionType] == "" {
		return part, nil
	}
	return limits.Collect(r, limits.CollectOptions{SpoolDir: lim.SpoolDir})
}

// DecompressReader returns a reader of a payload as the application sees
// it: src itself when props has no CompressionType, gunzipped as it is read
// when it is application/gzip. The reader fails with EBMS:0303
// DecompressionFailure on a corrupt stream and as soon as the output passes
// lim.MaxBytes or lim.MaxRatio times the compressed bytes read so far (once
// past the ratio floor); check, when set, sees the running output size
// after every read: an error of it wrapping limits.ErrBusy is returned as
// is, any other as EBMS:0303. Errors of src itself (a spool file) are
// returned as they are. Another CompressionType is EBMS:0303 at once.
func DecompressReader(src io.Reader, props map[string]string, lim Inflation, check func(total int64) error) (io.Reader, error) {
	ct := props[PropCompressionType]
	switch ct {
	case "":
		return src, nil
	case CompressionGzip:
	default:
		return nil, DecompressionFailure(fmt.Sprintf("unsupported CompressionType %q", ct), nil)
	}
	cs := &sourceReader{r: src}
	g := getGunzipper(cs)
	if err := g.zr.Reset(&g.br); err != nil {
		g.release()
		if cs.err != nil {
			return nil, cs.err
		}
		return nil, DecompressionFailure("not a gzip stream", err)
	}
	return &inflater{g: g, src: cs, lim: lim, check: check}, nil
}

// gunzipper is a gzip reader with its input buffer (gzip reads a byte at a
// time from what is not an io.ByteReader), kept in gunzippers between
// streams: a new one allocates about 100 KB (the 64 KB buffer, flate's
// 32 KB window and its tables) for every message.
type gunzipper struct {
	br bufio.Reader
	zr gzip.Reader
}

var gunzippers = sync.Pool{New: func() any {
	g := new(gunzipper)
	g.br = *bufio.NewReaderSize(nil, 64<<10)
	return g
}}

func getGunzipper(src io.Reader) *gunzipper {
	g := gunzippers.Get().(*gunzipper)
	g.br.Reset(src)
	return g
}

// release returns g to the pool; nobody may use it afterwards. It drops
// the source so that the pool does not keep it alive.
func (g *gunzipper) release() {
	g.br.Reset(nil)
	gunzippers.Put(g)
}

// sourceReader counts the compressed bytes and keeps src's own error.
type sourceReader struct {
	r   io.Reader
	n   int64
	err error
}

func (s *sourceReader) Read(p []byte) (int, error) {
	k, err := s.r.Read(p)
	s.n += int64(k)
	if err != nil && err != io.EOF {
		s.err = err
	}
	return k, err
}

// inflater is DecompressReader's gunzipping reader. Its gunzipper goes
// back to the pool once the stream has ended or failed (the reader returns
// that end again from then on without touching it); a reader left unread
// leaves its gunzipper to the garbage collector.
type inflater struct {
	g     *gunzipper
	src   *sourceReader
	lim   limits.Inflation
	check func(total int64) error
	total int64
	err   error
}

func (z *inflater) Read(p []byte) (int, error) {
	if z.err != nil {
		return 0, z.err
	}
	k, err := z.g.zr.Read(p)
	z.total += int64(k)
	if err != nil && err != io.EOF {
		if z.src.err != nil {
			err = z.src.err
		} else {
			err = DecompressionFailure("corrupt gzip stream", err)
		}
		z.end(err)
		return k, err
	}
	if cerr := z.caps(); cerr != nil {
		z.end(cerr)
		return 0, cerr
	}
	if err == io.EOF {
		z.end(io.EOF)
	}
	return k, err
}

// end records the reader's last error and gives its gunzipper back.
func (z *inflater) end(err error) {
	z.err = err
	z.g.release()
	z.g = nil
}

// caps checks the output so far against the limits.
func (z *inflater) caps() error {
	var err error
	switch {
	case z.lim.MaxBytes > 0 && z.total > z.lim.MaxBytes:
		err = fmt.Errorf("more than %d bytes: %w", z.lim.MaxBytes, limits.ErrTooLarge)
	default:
		err = z.lim.CheckRatio(z.total, z.src.n)
	}
	if err == nil && z.check != nil {
		err = z.check(z.total)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, limits.ErrBusy):
		return err
	case errors.Is(err, limits.ErrTooLarge) || errors.Is(err, limits.ErrRatio):
		return DecompressionFailure("payload inflates beyond the limits of this gateway", fmt.Errorf("%w: %w", ErrLimit, err))
	}
	return DecompressionFailure("payload inflates beyond the limits of this gateway", err)
}
