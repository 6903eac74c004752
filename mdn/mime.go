package mdn

import (
	"bytes"
	"errors"
	"mime"
	"strings"

	"github.com/edigateway/gateway/internal/smime"
)

// This file holds what MDN parsing needs beyond package smime, whose
// parser (smime.ParseEntity, Entity.DecodedBody) reads every header block
// and transfer encoding here. smime's Entity.Parts requires a boundary
// parameter and a close delimiter and rejects a part without a header block;
// MDNs as partners send them may lack any of these, so the multipart
// framing and boundary sniffing stay here. The media type fallback stays too: smime's
// splits parameters at every ';', also inside a quoted boundary.

// parsePart parses one body part with smime.ParseEntity. A part smime
// rejects (a line of its header block is not a field, or no empty line ends
// the block) is taken to have no header block:
// all of it is the body (RFC 2046 §5.1.1: a part without headers is
// text/plain).
func parsePart(raw []byte) *smime.Entity {
	e, err := smime.ParseEntity(raw)
	if err != nil {
		return &smime.Entity{Body: raw, Raw: raw}
	}
	return e
}

// unfold normalises an unfolded field value from smime: each run of SP and
// HTAB (a fold keeps the white space that followed the line break) becomes
// one SP.
func unfold(v string) string {
	return strings.Join(strings.FieldsFunc(v, func(r rune) bool { return r == ' ' || r == '\t' }), " ")
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

// decodeBase64 decodes base64 text with any white space in it, with or
// without padding, using smime's transfer decoding.
func decodeBase64(b []byte) ([]byte, error) {
	e := smime.Entity{Header: smime.Header{{Name: "Content-Transfer-Encoding", Value: "base64"}}, Body: b}
	return e.DecodedBody()
}
