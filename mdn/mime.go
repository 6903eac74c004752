package mdn

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/quotedprintable"
	"net/textproto"
	"strings"
)

// This file holds a minimal MIME reader for MDNs as partners send them. It
// keeps the exact bytes of every body part, which signature verification of
// multipart/signed needs, and it is tolerant of what real AS2 products emit:
// LF-only line ends, folded header lines with a TAB, preambles, transport
// padding after boundaries and a missing close delimiter.

// entity is one MIME entity: its header fields and its body bytes (not yet
// content-transfer-decoded).
type entity struct {
	header textproto.MIMEHeader
	body   []byte
}

// parseHeaderBlock parses header lines up to the first empty line. It returns
// the fields and the offset of the body (after the empty line). A block
// without an empty line ends at the end of b. Lines that are not header
// fields are skipped; continuation lines (leading SP or HTAB) are unfolded.
func parseHeaderBlock(b []byte) (textproto.MIMEHeader, int) {
	h := textproto.MIMEHeader{}
	var lastKey string
	pos := 0
	for pos < len(b) {
		end := bytes.IndexByte(b[pos:], '\n')
		var line []byte
		next := len(b)
		if end >= 0 {
			line = b[pos : pos+end]
			next = pos + end + 1
		} else {
			line = b[pos:]
		}
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if len(line) == 0 {
			return h, next
		}
		pos = next
		if line[0] == ' ' || line[0] == '\t' {
			if lastKey != "" {
				vals := h[lastKey]
				cont := strings.TrimSpace(string(line))
				if cont != "" {
					if vals[len(vals)-1] == "" {
						vals[len(vals)-1] = cont
					} else {
						vals[len(vals)-1] += " " + cont
					}
				}
			}
			continue
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 || !validFieldName(line[:colon]) {
			lastKey = ""
			continue
		}
		key := textproto.CanonicalMIMEHeaderKey(string(bytes.TrimRight(line[:colon], " \t")))
		h[key] = append(h[key], strings.TrimSpace(string(line[colon+1:])))
		lastKey = key
	}
	return h, len(b)
}

// validFieldName reports whether name is a header field name (RFC 5322
// printable ASCII except colon), allowing trailing white space before the
// colon as some products write it.
func validFieldName(name []byte) bool {
	name = bytes.TrimRight(name, " \t")
	if len(name) == 0 {
		return false
	}
	for _, c := range name {
		if c <= ' ' || c >= 0x7f || c == ':' {
			return false
		}
	}
	return true
}

// parseEntity splits b into header fields and body. A part that does not
// start with a header field has no header block: all of it is the body
// (RFC 2046 §5.1.1: a part without headers is text/plain).
func parseEntity(b []byte) entity {
	if len(b) == 0 {
		return entity{header: textproto.MIMEHeader{}}
	}
	if b[0] == '\n' || (b[0] == '\r' && len(b) > 1 && b[1] == '\n') {
		_, off := parseHeaderBlock(b)
		return entity{header: textproto.MIMEHeader{}, body: b[off:]}
	}
	first := b
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		first = b[:i]
	}
	colon := bytes.IndexByte(first, ':')
	if colon <= 0 || !validFieldName(first[:colon]) {
		return entity{header: textproto.MIMEHeader{}, body: b}
	}
	h, off := parseHeaderBlock(b)
	return entity{header: h, body: b[off:]}
}

// mediaType parses a Content-Type value: the lower-case media type and its
// parameters (keys lower-case). It uses mime.ParseMediaType and falls back
// to a lenient parser for values it rejects (duplicate or malformed
// parameters), so that one bad parameter does not lose the boundary.
func mediaType(v string) (string, map[string]string) {
	v = strings.TrimSpace(v)
	if v == "" {
		return "", map[string]string{}
	}
	mt, params, err := mime.ParseMediaType(v)
	if err == nil {
		return mt, params
	}
	return lenientMediaType(v)
}

func lenientMediaType(v string) (string, map[string]string) {
	params := map[string]string{}
	mt, rest, _ := strings.Cut(v, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	for rest != "" {
		rest = strings.TrimLeft(rest, " \t;")
		if rest == "" {
			break
		}
		eq := strings.IndexAny(rest, "=;")
		if eq < 0 || rest[eq] == ';' {
			// A parameter without a value: skip it.
			if eq < 0 {
				break
			}
			rest = rest[eq+1:]
			continue
		}
		key := strings.ToLower(strings.TrimSpace(rest[:eq]))
		rest = strings.TrimLeft(rest[eq+1:], " \t")
		var val string
		if strings.HasPrefix(rest, `"`) {
			var sb strings.Builder
			i := 1
			for ; i < len(rest); i++ {
				c := rest[i]
				if c == '\\' && i+1 < len(rest) {
					i++
					sb.WriteByte(rest[i])
					continue
				}
				if c == '"' {
					break
				}
				sb.WriteByte(c)
			}
			val = sb.String()
			if i < len(rest) {
				i++
			}
			rest = rest[i:]
			if j := strings.IndexByte(rest, ';'); j >= 0 {
				rest = rest[j+1:]
			} else {
				rest = ""
			}
		} else {
			end := strings.IndexByte(rest, ';')
			if end < 0 {
				end = len(rest)
			}
			val = strings.TrimSpace(rest[:end])
			if end < len(rest) {
				rest = rest[end+1:]
			} else {
				rest = ""
			}
		}
		if _, dup := params[key]; key != "" && !dup {
			params[key] = val
		}
	}
	return mt, params
}

// errNoBoundary is returned when a multipart body has no delimiter line.
var errNoBoundary = errors.New("no multipart delimiter found")

// splitMultipart returns the exact bytes of each body part of a multipart
// body with the given boundary (RFC 2046 §5.1.1). A part's bytes start after
// the line break that ends its delimiter line and end before the line break
// (CRLF, or a bare LF) that precedes the next delimiter. The preamble and the
// epilogue are dropped. A missing close delimiter is tolerated: the last part
// then runs to the end of the body.
func splitMultipart(body []byte, boundary string) ([][]byte, error) {
	if boundary == "" {
		return nil, errors.New("empty boundary")
	}
	delim := []byte("--" + boundary)
	var parts [][]byte
	start := -1 // start of the current part, -1 while in the preamble
	pos := 0
	for pos <= len(body) {
		// pos is always at the start of a line.
		lineEnd := bytes.IndexByte(body[pos:], '\n')
		var line []byte
		next := len(body) + 1
		if lineEnd >= 0 {
			line = body[pos : pos+lineEnd]
			next = pos + lineEnd + 1
		} else {
			line = body[pos:]
		}
		if isDelimiter(line, delim) {
			closing := bytes.HasPrefix(line[len(delim):], []byte("--"))
			if start >= 0 {
				end := pos
				// Remove the line break that belongs to the delimiter.
				if end > start && body[end-1] == '\n' {
					end--
					if end > start && body[end-1] == '\r' {
						end--
					}
				}
				parts = append(parts, body[start:end])
			}
			if closing {
				return parts, nil
			}
			if next > len(body) {
				// Delimiter on the last line with nothing after it.
				return parts, nil
			}
			start = next
		}
		if next > len(body) {
			break
		}
		pos = next
	}
	if start < 0 {
		return nil, errNoBoundary
	}
	// No close delimiter: the last part runs to the end of the body.
	last := body[start:]
	last = bytes.TrimSuffix(last, []byte("\n"))
	last = bytes.TrimSuffix(last, []byte("\r"))
	parts = append(parts, last)
	return parts, nil
}

// isDelimiter reports whether line (without its LF) is a delimiter line for
// delim: delim, optionally "--", then only transport padding (SP, HTAB) and
// an optional CR.
func isDelimiter(line, delim []byte) bool {
	if !bytes.HasPrefix(line, delim) {
		return false
	}
	rest := line[len(delim):]
	rest = bytes.TrimPrefix(rest, []byte("--"))
	for _, c := range rest {
		if c != ' ' && c != '\t' && c != '\r' {
			return false
		}
	}
	return true
}

// sniffBoundary finds a boundary in a multipart body whose Content-Type lost
// its boundary parameter: the first line that starts with "--".
func sniffBoundary(body []byte) string {
	pos := 0
	for pos < len(body) {
		end := bytes.IndexByte(body[pos:], '\n')
		line := body[pos:]
		if end >= 0 {
			line = body[pos : pos+end]
		}
		line = bytes.TrimRight(line, " \t\r")
		if len(line) > 2 && line[0] == '-' && line[1] == '-' {
			return string(line[2:])
		}
		if end < 0 {
			break
		}
		pos += end + 1
	}
	return ""
}

// decodeBody undoes a Content-Transfer-Encoding. 7bit, 8bit, binary and an
// absent header leave the bytes unchanged; base64 ignores line breaks and
// white space; quoted-printable is decoded leniently.
func decodeBody(cte string, body []byte) ([]byte, error) {
	switch strings.ToLower(strings.TrimSpace(cte)) {
	case "", "7bit", "8bit", "binary":
		return body, nil
	case "base64":
		return decodeBase64(body)
	case "quoted-printable":
		out, err := io.ReadAll(quotedprintable.NewReader(bytes.NewReader(body)))
		if err != nil {
			return nil, fmt.Errorf("quoted-printable: %w", err)
		}
		return out, nil
	default:
		return nil, fmt.Errorf("unsupported Content-Transfer-Encoding %q", cte)
	}
}

// decodeBase64 decodes base64 text with any white space in it, with or
// without padding.
func decodeBase64(b []byte) ([]byte, error) {
	clean := make([]byte, 0, len(b))
	for _, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		clean = append(clean, c)
	}
	clean = bytes.TrimRight(clean, "=")
	out := make([]byte, base64.RawStdEncoding.DecodedLen(len(clean)))
	n, err := base64.RawStdEncoding.Decode(out, clean)
	if err != nil {
		return nil, fmt.Errorf("base64: %w", err)
	}
	return out[:n], nil
}
