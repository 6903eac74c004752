package wssec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/textproto"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"
)

// Attachment is one SwA MIME part of the message as the signature covers it:
// decrypted (and still compressed, if it was compressed before signing).
type Attachment struct {
	// ContentID is the part's Content-ID, with or without angle brackets.
	ContentID string
	// Header holds the part's MIME headers. After decryption the
	// Content-Type must be the original one (the xenc:EncryptedData
	// MimeType), because the SwA transforms depend on it.
	Header textproto.MIMEHeader
	// Body is the decoded (no transfer encoding), decrypted content.
	Body []byte
	// Open, when set, reads the content instead of Body: a part spooled to
	// a file, digested as a stream (XML content excepted: it is read, up
	// to the attachment limits, to be canonicalised).
	Open func() (io.ReadCloser, error)
	// Digests, when set, hold digests computed while the content streamed
	// elsewhere (AttachmentDigester); a reference whose transform and
	// digest method are among them is checked against it without reading
	// the content again.
	Digests map[DigestKey][]byte
}

// content reads the attachment's content.
func (a Attachment) content() (io.ReadCloser, error) {
	if a.Open != nil {
		return a.Open()
	}
	return io.NopCloser(bytes.NewReader(a.Body)), nil
}

var xmlMediaType = regexp.MustCompile(`^(?:text/xml|application/xml|(?:application|image)/[^;]*\+xml)$`)

// attachmentOctets returns the output of the Attachment-Content-Signature
// (complete=false) or Attachment-Complete-Signature (complete=true)
// transform, as OASIS WSS SwA profile 1.1 §5.3 defines it and Apache WSS4J
// (the WS-Security engine of phase4, Holodeck B2B and Domibus) implements it:
//   - XML content (text/xml, application/xml, */*+xml) is exclusive-c14n
//     canonicalised without comments;
//   - other text/* content has its line ends normalised to CRLF;
//   - anything else is digested as is;
//   - the Complete transform prefixes the canonical MIME headers.
func attachmentOctets(att Attachment, complete bool, limits Limits) ([]byte, error) {
	var out bytes.Buffer
	if err := writeAttachmentOctets(&out, att, complete, limits); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// errReadAttachment wraps a failure to read an attachment's content (a
// spool file), which says nothing about the message.
var errReadAttachment = errors.New("attachment content could not be read")

// writeAttachmentOctets writes the output of attachmentOctets to w (a
// hash) as it reads the content: only XML content is held, up to
// limits.MaxBytes, to be canonicalised.
func writeAttachmentOctets(w io.Writer, att Attachment, complete bool, limits Limits) error {
	ow, finish, err := octetWriter(w, att.Header, complete, limits)
	if err != nil {
		return err
	}
	rc, err := att.content()
	if err != nil {
		return fmt.Errorf("%w: %w", errReadAttachment, err)
	}
	defer rc.Close()
	if _, err := io.CopyBuffer(ow, struct{ io.Reader }{rc}, make([]byte, 64<<10)); err != nil {
		if errors.Is(err, errXMLTooLarge) {
			return finish()
		}
		return fmt.Errorf("%w: %w", errReadAttachment, err)
	}
	return finish()
}

// errXMLTooLarge stops the copy of XML content past the attachment limit.
var errXMLTooLarge = errors.New("XML attachment over the limit")

// octetWriter returns a writer for an attachment's content that writes the
// transform output to w, and finish, which ends it (canonicalises XML
// content, which is held up to limits.MaxBytes).
func octetWriter(w io.Writer, h textproto.MIMEHeader, complete bool, limits Limits) (io.Writer, func() error, error) {
	if complete {
		ch, err := canonicalMIMEHeaders(h)
		if err != nil {
			return nil, nil, err
		}
		io.WriteString(w, ch)
	}
	mt := strings.ToLower(strings.TrimSpace(h.Get("Content-Type")))
	if i := strings.IndexByte(mt, ';'); i >= 0 {
		mt = strings.TrimSpace(mt[:i])
	}
	switch {
	case xmlMediaType.MatchString(mt):
		limits = limits.withDefaults()
		x := &xmlBuffer{max: limits.MaxBytes}
		return x, func() error {
			if x.over {
				return xmlErr("document larger than %d bytes", limits.MaxBytes)
			}
			doc, err := parseXML(x.b.Bytes(), limits)
			if err != nil {
				return fmt.Errorf("XML attachment: %w", err)
			}
			c, err := canonicalizeDocument(doc, c14nMethod{exclusive: true})
			if err != nil {
				return fmt.Errorf("XML attachment: %w", err)
			}
			w.Write(c)
			return nil
		}, nil
	case strings.HasPrefix(mt, "text/"):
		cw := &crlfWriter{w: w}
		return cw, func() error { cw.flush(); return nil }, nil
	}
	return w, func() error { return nil }, nil
}

// xmlBuffer holds XML content up to max bytes.
type xmlBuffer struct {
	b    bytes.Buffer
	max  int64
	over bool
}

func (x *xmlBuffer) Write(p []byte) (int, error) {
	if x.over || int64(x.b.Len()+len(p)) > x.max {
		x.over = true
		return 0, errXMLTooLarge
	}
	return x.b.Write(p)
}

// DigestKey names a digest of an attachment computed ahead: the SwA
// transform and the digest method of the reference that needs it.
type DigestKey struct{ Transform, DigestMethod string }

// AttachmentDigester returns a writer for the content of an attachment
// with MIME headers h and a function that, once the content is written,
// returns the digest a cid: reference with this SwA transform and digest
// method compares (for Attachment.Digests): so that the content is
// digested while it streams elsewhere (decrypted into a spool file).
func AttachmentDigester(h textproto.MIMEHeader, key DigestKey, limits Limits) (io.Writer, func() ([]byte, error), error) {
	hash, err := lookupDigest(key.DigestMethod, true)
	if err != nil {
		return nil, nil, err
	}
	var complete bool
	switch key.Transform {
	case AlgAttachmentContentSignature:
	case AlgAttachmentCompleteSignature:
		complete = true
	default:
		return nil, nil, policyErr("transform %q not supported for attachments", key.Transform)
	}
	d := hash.New()
	w, finish, err := octetWriter(d, h, complete, limits)
	if err != nil {
		return nil, nil, err
	}
	// A write error (XML over the limit) is reported by finish.
	return errorlessWriter{w}, func() ([]byte, error) {
		if err := finish(); err != nil {
			return nil, err
		}
		return d.Sum(nil), nil
	}, nil
}

// errorlessWriter drops its writer's errors, for a tee that must go on.
type errorlessWriter struct{ w io.Writer }

func (e errorlessWriter) Write(p []byte) (int, error) {
	e.w.Write(p)
	return len(p), nil
}

// ContentID is the Content-ID (without angle brackets) a cid: reference
// names, or false for another reference.
func (r Reference) ContentID() (string, bool) {
	id, err := cidContentID(r.URI)
	return id, err == nil
}

// crlf normalises bare LF and bare CR to CRLF.
func crlf(b []byte) []byte {
	var out bytes.Buffer
	cw := &crlfWriter{w: &out}
	cw.Write(b)
	cw.flush()
	return out.Bytes()
}

// crlfWriter normalises bare LF and bare CR to CRLF as it writes; a CR at
// the end of one write waits for the next (flush ends the stream).
type crlfWriter struct {
	w   io.Writer
	cr  bool // the last byte written was a CR
	out []byte
}

func (c *crlfWriter) Write(b []byte) (int, error) {
	out := c.out[:0]
	for _, ch := range b {
		switch {
		case ch == '\n':
			out = append(out, '\r', '\n')
			c.cr = false
		case c.cr:
			out = append(out, '\r', '\n')
			c.cr = ch == '\r'
			if !c.cr {
				out = append(out, ch)
			}
		case ch == '\r':
			c.cr = true
		default:
			out = append(out, ch)
		}
	}
	c.out = out
	if _, err := c.w.Write(out); err != nil {
		return 0, err
	}
	return len(b), nil
}

// flush ends the stream: a last bare CR becomes CRLF.
func (c *crlfWriter) flush() {
	if c.cr {
		c.w.Write([]byte("\r\n"))
		c.cr = false
	}
}

// Headers of the Attachment-Complete-Signature-Transform, in output order.
// WSS4J (and Sun XWSS) leave Content-Language out; so do we, for interop.
var swaHeaders = []string{"Content-Description", "Content-Disposition", "Content-ID", "Content-Location", "Content-Type"}

// canonicalMIMEHeaders implements the SwA MIME header canonicalization
// (profile §5.4.1) the way WSS4J's AttachmentUtils.canonizeMimeHeaders does:
// "Name:value" CRLF lines for the listed headers in lexicographic order,
// comments removed, leading whitespace removed, parameters of Content-Type
// and Content-Disposition RFC 2231-decoded, named in lower case, sorted,
// quoted, and a default Content-Type of text/plain;charset="us-ascii".
func canonicalMIMEHeaders(h textproto.MIMEHeader) (string, error) {
	var b strings.Builder
	for _, name := range swaHeaders {
		vals := h.Values(name)
		if len(vals) == 0 {
			if name == "Content-Type" {
				b.WriteString("Content-Type:text/plain;charset=\"us-ascii\"\r\n")
			}
			continue
		}
		v := vals[len(vals)-1]
		var err error
		switch name {
		case "Content-Description":
			if d, derr := new(mime.WordDecoder).DecodeHeader(v); derr == nil {
				v = d
			}
			v = uncomment(v)
		case "Content-Disposition", "Content-Type":
			v, err = canonicalParams(uncomment(trimLeadingWSP(v)))
		default:
			v = uncomment(trimLeadingWSP(v))
		}
		if err != nil {
			return "", fmt.Errorf("MIME header %s: %w", name, err)
		}
		b.WriteString(name)
		b.WriteByte(':')
		b.WriteString(v)
		if !strings.HasSuffix(v, "\r\n") {
			b.WriteString("\r\n")
		}
	}
	return b.String(), nil
}

func trimLeadingWSP(s string) string { return strings.TrimLeft(s, " \t") }

// uncomment removes RFC 822 comments outside quoted strings.
func uncomment(s string) string {
	var b strings.Builder
	depth := 0
	inQuote := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case depth == 0 && c == '"':
			inQuote = !inQuote
			b.WriteByte(c)
		case inQuote:
			b.WriteByte(c)
		case c == '(':
			depth++
		case c == ')' && depth > 0:
			depth--
		case depth == 0:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// lower-cased values of these parameters (WSS4J ALL_PARAMS).
var lowerCaseParams = map[string]bool{
	"charset": true, "creation-date": true, "filename": true, "modification-date": true,
	"padding": true, "read-date": true, "size": true, "type": true,
}

// canonicalParams canonicalises "value; name=param; ..." (WSS4J
// decodeRfc2184).
func canonicalParams(s string) (string, error) {
	if !strings.Contains(s, ";") {
		return s, nil
	}
	parts := strings.Split(s, ";")
	params := map[string]string{}
	var contName, contValue string
	flush := func() {
		if contName == "" {
			return
		}
		if lowerCaseParams[contName] {
			contValue = strings.ToLower(contValue)
		}
		params[contName] = unquoteInnerText(quote(contValue))
		contName, contValue = "", ""
	}
	for _, p := range parts[1:] {
		eq := strings.IndexByte(p, '=')
		if eq < 0 {
			return "", fmt.Errorf("parameter %q without '='", strings.TrimSpace(p))
		}
		name := strings.ToLower(strings.TrimSpace(p[:eq]))
		value := strings.TrimSpace(p[eq+1:])
		if value == "" {
			return "", fmt.Errorf("parameter %q without value", name)
		}
		if strings.HasSuffix(name, "*") {
			name = strings.TrimSuffix(name, "*")
			var err error
			if value, err = decode2231(value); err != nil {
				return "", err
			}
		}
		if i := strings.LastIndexByte(name, '*'); i >= 0 {
			base := strings.TrimSpace(name[:i])
			switch contName {
			case base:
				contValue = concatParamValues(contValue, value)
			case "":
				contName, contValue = base, value
			default:
				flush()
				contName, contValue = base, value
			}
			continue
		}
		flush()
		if lowerCaseParams[name] {
			value = strings.ToLower(value)
		}
		params[name] = unquoteInnerText(quote(value))
	}
	flush()
	names := make([]string, 0, len(params))
	for n := range params {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString(strings.ToLower(parts[0]))
	for _, n := range names {
		b.WriteByte(';')
		b.WriteString(n)
		b.WriteByte('=')
		b.WriteString(params[n])
	}
	return b.String(), nil
}

// decode2231 decodes an RFC 2231 extended value charset'language'%XX.
func decode2231(v string) (string, error) {
	charset := "us-ascii"
	if i := strings.IndexByte(v, '\''); i >= 0 {
		charset = v[:i]
	}
	v = v[strings.LastIndexByte(v, '\'')+1:]
	raw, err := url.PathUnescape(v)
	if err != nil {
		return "", fmt.Errorf("RFC 2231 value: %w", err)
	}
	switch strings.ToLower(charset) {
	case "", "us-ascii", "utf-8":
		if !utf8.ValidString(raw) {
			return "", errors.New("RFC 2231 value is not valid UTF-8")
		}
		return raw, nil
	case "iso-8859-1", "latin1":
		rs := make([]rune, len(raw))
		for i := 0; i < len(raw); i++ {
			rs[i] = rune(raw[i])
		}
		return string(rs), nil
	}
	return "", fmt.Errorf("RFC 2231 charset %q not supported", charset)
}

func concatParamValues(a, b string) string {
	a = strings.TrimSuffix(a, `"`)
	b = strings.TrimPrefix(b, `"`)
	return a + b
}

func quote(s string) string {
	if s == "" {
		return `""`
	}
	start, end := s[0] == '"', s[len(s)-1] == '"'
	switch {
	case start && end && len(s) > 1:
		return s
	case !start && !end:
		return `"` + s + `"`
	case !start:
		return `"` + s
	}
	return s + `"`
}

// unquoteInnerText escapes inner double quotes and removes redundant
// backslashes of a quoted string, byte for byte as WSS4J does.
func unquoteInnerText(s string) string {
	var b strings.Builder
	n := len(s)
	for i := 0; i < n-1; i++ {
		c, c1 := s[i], s[i+1]
		if i == 0 && c == '"' {
			b.WriteByte(c)
			continue
		}
		switch {
		case c == '\\' && (c1 == '"' || c1 == '\\'):
			if i != 0 && i != n-2 {
				b.WriteByte(c)
			}
			b.WriteByte(c1)
			i++
		case c == '"':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '\\':
			b.WriteByte(c1)
			i++
		default:
			b.WriteByte(c)
			if i == n-2 && c1 == '"' {
				b.WriteByte(c1)
			}
		}
	}
	return b.String()
}
