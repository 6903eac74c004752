// Package smime is the MIME entity layer of the AS2 gateway: a parser that
// keeps the exact bytes of every entity and part (signatures and MICs are
// computed over bytes as sent), Unwrap for inbound S/MIME layers
// (enveloped-data, multipart/signed, compressed-data, opaque signed-data) in
// any order, the RFC 4130 / RFC 5402 MIC, and Build for outbound messages.
package smime

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/quotedprintable"
	"net/http"
	"strings"

	"github.com/edigateway/gateway/internal/base64body"
)

// ErrMalformedMIME is wrapped by every error about MIME syntax: header
// blocks, media types, multipart framing, transfer encodings, nesting.
var ErrMalformedMIME = errors.New("malformed MIME")

// Limits of the header parser. A header block beyond them is malformed.
const (
	maxHeaderBytes  = 64 << 10
	maxHeaderFields = 1000
)

// Field is one header field as sent.
type Field struct {
	// Name is the field name with its case as sent.
	Name string
	// Value is the unfolded value: line breaks removed (the whitespace that
	// followed them kept), leading and trailing whitespace trimmed. A TAB
	// inside a single line (quirk 4: "; \tboundary=") is kept.
	Value string
}

// Header is the ordered list of fields of an entity.
type Header []Field

// Get returns the value of the first field named name (case-insensitive),
// or "".
func (h Header) Get(name string) string {
	for _, f := range h {
		if strings.EqualFold(f.Name, name) {
			return f.Value
		}
	}
	return ""
}

// Has reports whether a field named name (case-insensitive) is present.
func (h Header) Has(name string) bool {
	for _, f := range h {
		if strings.EqualFold(f.Name, name) {
			return true
		}
	}
	return false
}

// Entity is a MIME entity with its exact bytes.
type Entity struct {
	Header Header
	// Body is the body as sent, still transfer-encoded. It aliases Raw.
	Body []byte
	// Raw is the whole entity exactly as received: header block, empty
	// line, body. It is nil for entities made by EntityFromHTTP, whose
	// header came from HTTP.
	Raw []byte
}

// ParseEntity parses a MIME entity (or an HTTP capture: header lines, empty
// line, body). Lines may end in CRLF or bare LF; folded lines are unfolded;
// field names are matched case-insensitively. An entity that starts with an
// empty line has no header fields. It is an error (ErrMalformedMIME) when a
// line of the header block is not a field, when no empty line ends the
// block, or when the block exceeds 64 KiB or 1000 fields.
func ParseEntity(raw []byte) (*Entity, error) {
	h, bodyStart, err := parseHeaderBlock(raw)
	if err != nil {
		return nil, err
	}
	return &Entity{Header: h, Body: raw[bodyStart:], Raw: raw}, nil
}

// EntityFromHTTP makes the outermost entity of an AS2 request from its HTTP
// header (Content-Type, Content-Transfer-Encoding, Content-Disposition) and
// body. The body is not copied.
func EntityFromHTTP(h http.Header, body []byte) *Entity {
	var hdr Header
	for _, name := range []string{"Content-Type", "Content-Transfer-Encoding", "Content-Disposition"} {
		if v := h.Values(name); len(v) > 0 {
			hdr = append(hdr, Field{Name: name, Value: strings.TrimSpace(v[0])})
		}
	}
	return &Entity{Header: hdr, Body: body}
}

func parseHeaderBlock(raw []byte) (Header, int, error) {
	var h Header
	window := raw
	if len(window) > maxHeaderBytes {
		window = window[:maxHeaderBytes]
	}
	// Folded values are assembled in cont and stored once per field, so
	// many continuation lines cost linear, not quadratic, time.
	var cont strings.Builder
	folded := false
	flush := func() {
		if folded {
			h[len(h)-1].Value = strings.TrimSpace(cont.String())
			cont.Reset()
			folded = false
		}
	}
	off := 0
	for {
		nl := bytes.IndexByte(window[off:], '\n')
		if nl < 0 {
			if len(raw) > maxHeaderBytes {
				return nil, 0, fmt.Errorf("%w: header block larger than %d bytes", ErrMalformedMIME, maxHeaderBytes)
			}
			return nil, 0, fmt.Errorf("%w: header block not terminated by an empty line", ErrMalformedMIME)
		}
		line := window[off : off+nl]
		next := off + nl + 1
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(line) == 0 {
			flush()
			return h, next, nil
		}
		if line[0] == ' ' || line[0] == '\t' {
			if len(h) == 0 {
				return nil, 0, fmt.Errorf("%w: continuation line before the first field", ErrMalformedMIME)
			}
			if !folded {
				cont.WriteString(h[len(h)-1].Value)
				folded = true
			}
			cont.Write(line)
			off = next
			continue
		}
		flush()
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return nil, 0, fmt.Errorf("%w: header line %q is not a field", ErrMalformedMIME, truncate(line, 40))
		}
		name := bytes.TrimRight(line[:colon], " \t")
		if !validFieldName(name) {
			return nil, 0, fmt.Errorf("%w: invalid field name %q", ErrMalformedMIME, truncate(name, 40))
		}
		if len(h) >= maxHeaderFields {
			return nil, 0, fmt.Errorf("%w: more than %d header fields", ErrMalformedMIME, maxHeaderFields)
		}
		h = append(h, Field{Name: string(name), Value: strings.TrimSpace(string(line[colon+1:]))})
		off = next
	}
}

// validFieldName: RFC 5322 ftext, printable US-ASCII except colon.
func validFieldName(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c < 33 || c > 126 || c == ':' {
			return false
		}
	}
	return true
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

// MediaType returns the lowercased media type of the Content-Type field and
// its parameters (names lowercased). Without a Content-Type it returns
// "text/plain" (RFC 2045 §5.2). Parameters that mime.ParseMediaType rejects
// (duplicates, stray characters) are read leniently.
func (e *Entity) MediaType() (string, map[string]string, error) {
	v := e.Header.Get("Content-Type")
	if v == "" {
		return "text/plain", map[string]string{}, nil
	}
	return parseMediaType(v)
}

func parseMediaType(v string) (string, map[string]string, error) {
	mt, params, err := mime.ParseMediaType(v)
	if err == nil {
		return mt, params, nil
	}
	// Lenient fallback for parameters mime.ParseMediaType rejects
	// (duplicates, stray characters): the media type itself must be valid.
	head, tail, _ := strings.Cut(v, ";")
	mt = strings.ToLower(strings.TrimSpace(head))
	typ, sub, ok := strings.Cut(mt, "/")
	if !ok || !isToken(typ) || !isToken(sub) {
		return "", nil, fmt.Errorf("%w: media type %q: %v", ErrMalformedMIME, v, err)
	}
	params = map[string]string{}
	for _, p := range strings.Split(tail, ";") {
		k, val, ok := strings.Cut(p, "=")
		if !ok {
			continue
		}
		k = strings.ToLower(strings.TrimSpace(k))
		val = strings.TrimSpace(val)
		if len(val) >= 2 && val[0] == '"' && val[len(val)-1] == '"' {
			val = val[1 : len(val)-1]
		}
		if _, dup := params[k]; k != "" && !dup {
			params[k] = val
		}
	}
	return mt, params, nil
}

// isToken reports whether s is an RFC 2045 token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`()<>@,;:\"/[]?=`, c) >= 0 {
			return false
		}
	}
	return true
}

// Filename returns the filename parameter of Content-Disposition (RFC 2231
// encodings decoded), falling back to the Content-Type name parameter. It is
// partner input: sanitise it before using it as a path.
func (e *Entity) Filename() string {
	if d := e.Header.Get("Content-Disposition"); d != "" {
		if _, p, err := parseMediaType(d); err == nil && p["filename"] != "" {
			return p["filename"]
		}
	}
	if _, p, err := e.MediaType(); err == nil {
		return p["name"]
	}
	return ""
}

// DecodedBody returns the body with its Content-Transfer-Encoding removed:
// base64 and quoted-printable are decoded; binary, 7bit, 8bit and an absent
// field (RFC 4130 §5.2.1: binary) return the body unchanged. Other
// encodings are an error.
func (e *Entity) DecodedBody() ([]byte, error) {
	return decodeTransfer(e.Header.Get("Content-Transfer-Encoding"), e.Body)
}

// decodeBase64Stream decodes a padded base64 body, skipping white space
// (base64body refuses text after the padding, as the one-go decoder in
// decodeTransfer does); ok is false when it is not one (decodeTransfer then
// tries harder).
func decodeBase64Stream(body []byte) ([]byte, bool) {
	out := make([]byte, base64.StdEncoding.DecodedLen(len(body))+1) // +1: room to see the end
	dec := base64body.NewDecoder(bytes.NewReader(body))
	n := 0
	for {
		k, err := dec.Read(out[n:])
		n += k
		if err == io.EOF {
			return out[:n:n], true
		}
		if err != nil || n == len(out) && k == 0 {
			return nil, false
		}
	}
}

func decodeTransfer(cte string, body []byte) ([]byte, error) {
	switch strings.ToLower(strings.TrimSpace(cte)) {
	case "", "binary", "7bit", "8bit":
		return body, nil
	case "base64":
		// Decoded as it is read, into one buffer of at most the decoded
		// size: no cleaned copy of the encoded body.
		if out, ok := decodeBase64Stream(body); ok {
			return out, nil
		}
		clean := make([]byte, 0, len(body))
		for _, c := range body {
			switch c {
			case ' ', '\t', '\r', '\n':
			default:
				clean = append(clean, c)
			}
		}
		out := make([]byte, base64.StdEncoding.DecodedLen(len(clean)))
		n, err := base64.StdEncoding.Decode(out, clean)
		if err != nil {
			// Some senders drop the padding.
			unpadded := bytes.TrimRight(clean, "=")
			out = make([]byte, base64.RawStdEncoding.DecodedLen(len(unpadded)))
			n, err = base64.RawStdEncoding.Decode(out, unpadded)
			if err != nil {
				return nil, fmt.Errorf("%w: base64 body: %v", ErrMalformedMIME, err)
			}
		}
		return out[:n], nil
	case "quoted-printable":
		out, err := io.ReadAll(quotedprintable.NewReader(bytes.NewReader(body)))
		if err != nil {
			return nil, fmt.Errorf("%w: quoted-printable body: %v", ErrMalformedMIME, err)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: unsupported Content-Transfer-Encoding %q", ErrMalformedMIME, cte)
}

// Parts splits a multipart entity at its boundary and returns each part
// with its exact bytes as sent (Raw: from after the delimiter line to before
// the line break that precedes the next delimiter). Preamble and epilogue
// are ignored; delimiter lines may end in CRLF or LF and carry trailing
// whitespace. A missing close delimiter is an error.
func (e *Entity) Parts() ([]*Entity, error) {
	mt, params, err := e.MediaType()
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(mt, "multipart/") {
		return nil, fmt.Errorf("%w: %s is not multipart", ErrMalformedMIME, mt)
	}
	b := params["boundary"]
	if b == "" || len(b) > 200 {
		return nil, fmt.Errorf("%w: multipart without a usable boundary", ErrMalformedMIME)
	}
	raws, err := splitMultipart(e.Body, b)
	if err != nil {
		return nil, err
	}
	parts := make([]*Entity, 0, len(raws))
	for i, r := range raws {
		p, err := ParseEntity(r)
		if err != nil {
			return nil, fmt.Errorf("part %d: %w", i+1, err)
		}
		parts = append(parts, p)
	}
	return parts, nil
}

func splitMultipart(body []byte, boundary string) ([][]byte, error) {
	delim := []byte("--" + boundary)
	var parts [][]byte
	start := -1 // start of the current part's bytes, -1 while in the preamble
	for off := 0; off < len(body); {
		i := bytes.Index(body[off:], delim)
		if i < 0 {
			break
		}
		p := off + i
		off = p + len(delim)
		if p > 0 && body[p-1] != '\n' {
			continue // not at the start of a line
		}
		// The rest of the delimiter line: "--" for the close delimiter,
		// then optional whitespace (transport padding).
		eol := bytes.IndexByte(body[off:], '\n')
		var rest []byte
		lineEnd := len(body)
		if eol >= 0 {
			rest = body[off : off+eol]
			lineEnd = off + eol + 1
		} else {
			rest = body[off:]
		}
		closing := bytes.HasPrefix(rest, []byte("--"))
		if closing {
			rest = rest[2:]
		}
		if len(bytes.Trim(rest, " \t\r")) != 0 {
			continue // a longer boundary that merely starts with ours
		}
		if start >= 0 {
			end := p
			if end > 0 && body[end-1] == '\n' {
				end--
				if end > start && body[end-1] == '\r' {
					end--
				}
			}
			if end < start {
				end = start
			}
			parts = append(parts, body[start:end])
		}
		if closing {
			if len(parts) == 0 {
				return nil, fmt.Errorf("%w: multipart without parts", ErrMalformedMIME)
			}
			return parts, nil
		}
		if eol < 0 {
			break
		}
		start = lineEnd
		off = lineEnd
	}
	return nil, fmt.Errorf("%w: multipart close delimiter --%s-- not found", ErrMalformedMIME, boundary)
}

// hasMIMEHeader reports whether a header looks like a MIME entity header
// rather than the first lines of a bare payload that happen to contain
// colons (quirk 3: "UNB+UNOA:2+..." is a syntactically valid field).
func hasMIMEHeader(h Header) bool {
	for _, f := range h {
		n := strings.ToLower(f.Name)
		if strings.HasPrefix(n, "content-") || n == "mime-version" {
			return true
		}
	}
	return false
}

// parseInner parses decrypted or decompressed content: a MIME entity when it
// has a header block with at least one MIME field, otherwise a bare payload
// (nil entity).
func parseInner(b []byte) *Entity {
	e, err := ParseEntity(b)
	if err != nil || !hasMIMEHeader(e.Header) {
		return nil
	}
	return e
}
