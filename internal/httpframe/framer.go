// Package httpframe guards an HTTP/1.1 server against request smuggling:
// it follows the framing of every request on a connection (the head, then
// a Content-Length or chunked body) as the bytes arrive, before the server
// reads them, and refuses a head whose framing a proxy in front could read
// differently (RFC 9112 §6.1, §6.3, §5.2):
//
//   - Content-Length together with Transfer-Encoding (whatever the
//     whitespace or case of "chunked"): Go's server silently drops the
//     Content-Length and keeps the connection open;
//   - Transfer-Encoding in an HTTP/1.0 request (Go ignores it and uses the
//     Content-Length);
//   - more than one Content-Length field, even with equal values (Go
//     merges them), or a Content-Length that is not a decimal number;
//   - a Transfer-Encoding other than one "chunked";
//   - a header line folded onto the previous one (obs-fold, which Go joins
//     to the previous field), a field name with whitespace or other bytes
//     outside a token, control characters in a field value;
//   - a request line that is not "method target HTTP/1.0|1.1".
//
// A refused head never reaches the server: the connection delivers, in
// its place, a request that carries the refusal's nonce and
// "Connection: close", which the server's handler answers (see
// Conn.Refused) before the connection is closed. A chunked body that
// breaks its framing (as Go's own chunked reader decides) ends the
// connection's input there.
package httpframe

import (
	"bytes"
	"errors"
	"fmt"
)

// Refusal says why a request head was refused.
type Refusal struct {
	// Status is the HTTP status of the reply: 400, or 431 for a head over
	// the size limit.
	Status int
	// Reason is a short text for the partner and the log.
	Reason string
}

// ErrFraming ends a connection whose chunked body breaks its framing.
var ErrFraming = errors.New("httpframe: malformed chunked body")

type state uint8

const (
	stHead      state = iota // reading a request head
	stBody                   // n bytes of a Content-Length body left
	stChunkLine              // reading a chunk-size line
	stChunkData              // n bytes of chunk data left
	stChunkEnd               // the CRLF after the chunk data
	stTrailer                // the (empty) trailer section
)

// DefaultMaxHead is the default limit of a request head (request line and
// header fields).
const DefaultMaxHead = 64 << 10

// maxChunkLine is Go's limit of a chunk-size line (net/http/internal).
const maxChunkLine = 4096

// framer follows the framing of the requests on one connection.
type framer struct {
	maxHead int
	st      state
	n       uint64 // bytes left in the body or chunk
	crlf    int    // bytes of the chunk's CRLF seen
	excess  int64  // chunk overhead, as Go counts it
	// lastPOST: the previous request was a POST, after which Go skips up
	// to 4 leading CR/LF bytes before the next head.
	lastPOST bool
	// the current head: the bytes of its complete lines so far, and what
	// they said
	headLen int
	lines   int
	head    head
	// requests counts the heads accepted, completed the requests whose
	// body ended.
	requests, completed int
}

// head is what a request head says about its framing.
type head struct {
	method         string
	http10         bool
	contentLengths int
	contentLength  uint64
	badLength      bool
	transferCodes  int
	chunked        bool
}

func newFramer(maxHead int) *framer {
	if maxHead <= 0 {
		maxHead = DefaultMaxHead
	}
	return &framer{maxHead: maxHead}
}

// feed looks at b, the bytes after those already passed. It returns how
// many of them may pass now (the framer has followed them); then, with a
// refusal, the head at b[pass:] is refused, or, with ErrFraming, the body
// breaks at b[pass:]. Bytes of an incomplete head are not passed: feed
// sees them again, with what follows, at the next call.
func (f *framer) feed(b []byte) (pass int, ref *Refusal, err error) {
	for {
		rest := b[pass:]
		switch f.st {
		case stHead:
			if f.headLen == 0 && f.lines == 0 && f.lastPOST {
				if len(rest) < 4 {
					return pass, nil, nil
				}
				skip := 0
				for skip < 4 && (rest[skip] == '\r' || rest[skip] == '\n') {
					skip++
				}
				pass += skip
				f.lastPOST = false
				continue
			}
			done, ref := f.headLines(rest)
			if ref != nil {
				return pass, ref, nil
			}
			if !done {
				return pass, nil, nil
			}
			pass += f.headLen
			f.startBody()
		case stBody:
			if f.n == 0 {
				f.st = stHead
				f.completed++
				continue
			}
			if len(rest) == 0 {
				return pass, nil, nil
			}
			k := uint64(len(rest))
			if k > f.n {
				k = f.n
			}
			pass += int(k)
			f.n -= k
		case stChunkLine:
			// Go reads the line, LF included, within its 4 KiB buffer.
			i := bytes.IndexByte(rest, '\n')
			if i >= maxChunkLine || (i < 0 && len(rest) >= maxChunkLine) {
				return pass, nil, ErrFraming
			}
			if i < 0 {
				return pass, nil, nil
			}
			if err := f.chunkLine(rest[:i+1]); err != nil {
				return pass, nil, err
			}
			pass += i + 1
		case stChunkData:
			if len(rest) == 0 {
				return pass, nil, nil
			}
			k := uint64(len(rest))
			if k > f.n {
				k = f.n
			}
			pass += int(k)
			if f.n -= k; f.n == 0 {
				f.st, f.crlf = stChunkEnd, 0
			}
		case stChunkEnd:
			n, done, err := f.crlfOf(rest)
			if pass += n; !done || err != nil {
				return pass, nil, err
			}
			f.st = stChunkLine
		case stTrailer:
			// Only the empty trailer section: trailer fields are not
			// followed (no AS2 or AS4 client sends them).
			n, done, err := f.crlfOf(rest)
			if pass += n; !done || err != nil {
				return pass, nil, err
			}
			f.st = stHead
			f.completed++
		}
	}
}

// headLines reads the complete lines of the current head in b (b[0] is
// the head's first byte; b[:f.headLen] were read before). done: the empty
// line ending the head was read, f.headLen is the head's length and f.head
// its framing.
func (f *framer) headLines(b []byte) (done bool, ref *Refusal) {
	for {
		rest := b[f.headLen:]
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			if len(b) > f.maxHead {
				return false, &Refusal{431, "request header fields too large"}
			}
			return false, nil
		}
		if f.headLen+i+1 > f.maxHead {
			return false, &Refusal{431, "request header fields too large"}
		}
		line := rest[:i]
		if len(line) > 0 && line[len(line)-1] == '\r' {
			line = line[:len(line)-1]
		}
		f.headLen += i + 1
		f.lines++
		if f.lines == 1 {
			if ref := f.requestLine(line); ref != nil {
				return false, ref
			}
			continue
		}
		if len(line) == 0 {
			return true, f.verdict()
		}
		if ref := f.field(line); ref != nil {
			return false, ref
		}
	}
}

func (f *framer) requestLine(line []byte) *Refusal {
	method, rest, ok1 := bytes.Cut(line, []byte(" "))
	target, version, ok2 := bytes.Cut(rest, []byte(" "))
	if !ok1 || !ok2 || len(method) == 0 || !isToken(method) || len(target) == 0 || bytes.ContainsFunc(target, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return &Refusal{400, "malformed request line"}
	}
	switch string(version) {
	case "HTTP/1.1":
	case "HTTP/1.0":
		f.head.http10 = true
	default:
		return &Refusal{400, "unsupported HTTP version (HTTP/1.0 or HTTP/1.1 only)"}
	}
	f.head.method = string(method)
	return nil
}

func (f *framer) field(line []byte) *Refusal {
	if line[0] == ' ' || line[0] == '\t' {
		return &Refusal{400, "header field folded over lines (obs-fold, RFC 9112 §5.2)"}
	}
	name, value, ok := bytes.Cut(line, []byte(":"))
	if !ok || len(name) == 0 || !isToken(name) {
		return &Refusal{400, "malformed header field name (RFC 9112 §5.1)"}
	}
	for _, c := range value {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return &Refusal{400, "control character in a header field value"}
		}
	}
	value = bytes.Trim(value, " \t")
	switch {
	case asciiEqualFold(name, "Content-Length"):
		f.head.contentLengths++
		n, ok := parseLength(value)
		f.head.contentLength, f.head.badLength = n, f.head.badLength || !ok
	case asciiEqualFold(name, "Transfer-Encoding"):
		f.head.transferCodes++
		f.head.chunked = asciiEqualFold(value, "chunked")
	}
	return nil
}

// verdict decides the framing of a complete head.
func (f *framer) verdict() *Refusal {
	h := f.head
	switch {
	case h.transferCodes > 0 && h.contentLengths > 0:
		return &Refusal{400, "Content-Length together with Transfer-Encoding (RFC 9112 §6.1)"}
	case h.transferCodes > 0 && h.http10:
		return &Refusal{400, "Transfer-Encoding in an HTTP/1.0 request (RFC 9112 §6.1)"}
	case h.transferCodes > 1 || (h.transferCodes == 1 && !h.chunked):
		return &Refusal{400, "Transfer-Encoding other than a single chunked"}
	case h.contentLengths > 1:
		return &Refusal{400, "more than one Content-Length (RFC 9112 §6.3)"}
	case h.badLength:
		return &Refusal{400, "Content-Length is not a decimal number (RFC 9112 §6.3)"}
	}
	return nil
}

// startBody follows the accepted head into its body.
func (f *framer) startBody() {
	h := f.head
	f.requests++
	f.lastPOST = h.method == "POST"
	f.head, f.headLen, f.lines = head{}, 0, 0
	switch {
	case h.chunked:
		f.st, f.excess = stChunkLine, 0
	case h.contentLengths == 1:
		f.st, f.n = stBody, h.contentLength
	default:
		f.st, f.n = stBody, 0
	}
}

// chunkLine reads a chunk-size line (with its LF) as Go's chunked reader
// does: CRLF only at its end, less than 4096 bytes, trailing whitespace
// and extensions cut, at most 16 hex digits, and no more than 16 KiB of
// overhead beyond what the data justifies.
func (f *framer) chunkLine(p []byte) error {
	if len(p) < 2 || bytes.IndexByte(p, '\r') != len(p)-2 {
		return ErrFraming
	}
	p = p[:len(p)-2]
	if len(p) >= maxChunkLine {
		return ErrFraming
	}
	f.excess += int64(len(p)) + 2
	p = bytes.TrimRight(p, " \t")
	p, _, _ = bytes.Cut(p, []byte(";"))
	if len(p) == 0 || len(p) > 16 {
		return ErrFraming
	}
	var n uint64
	for _, c := range p {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return ErrFraming
		}
		n = n<<4 | uint64(c)
	}
	f.excess -= 16 + 2*int64(n)
	f.excess = max(f.excess, 0)
	if f.excess > 16*1024 {
		return ErrFraming
	}
	if n == 0 {
		f.st, f.crlf = stTrailer, 0
		return nil
	}
	f.st, f.n = stChunkData, n
	return nil
}

// parseLength parses a Content-Length value as Go does: decimal digits
// only, below 2^63.
func parseLength(v []byte) (uint64, bool) {
	if len(v) == 0 || len(v) > 19 {
		return 0, false
	}
	var n uint64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	return n, n < 1<<63
}

// isToken: every byte is a tchar (RFC 9110 §5.6.2).
func isToken(b []byte) bool {
	for _, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || bytes.IndexByte([]byte("!#$%&'*+-.^_`|~"), c) >= 0) {
			return false
		}
	}
	return true
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		x, y := b[i], s[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

func (r *Refusal) Error() string { return fmt.Sprintf("%d %s", r.Status, r.Reason) }

// crlfOf consumes what rest holds of the CRLF that ends a chunk or the
// trailer section (f.crlf counts the bytes of it already seen): n bytes of
// it, done once both have come; ErrFraming for any other byte.
func (f *framer) crlfOf(rest []byte) (n int, done bool, err error) {
	for f.crlf < 2 {
		if n == len(rest) {
			return n, false, nil
		}
		if rest[n] != "\r\n"[f.crlf] {
			return n, false, ErrFraming
		}
		f.crlf++
		n++
	}
	return n, true, nil
}
