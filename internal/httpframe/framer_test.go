package httpframe

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
)

const hidden = "GET /hidden HTTP/1.1\r\nHost: x\r\n\r\n"

// shapes are request heads (and bodies) with the verdict the guard gives:
// "" passes, else a word of the refusal's reason.
var shapes = []struct{ name, req, refusal string }{
	{"content-length", "POST /as2 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", ""},
	{"chunked", "POST /as2 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\n\r\n", ""},
	{"chunked tab", "POST /as4 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\tChunked \r\n\r\n0\r\n\r\n", ""},
	{"no body", "GET /as2 HTTP/1.1\r\nHost: x\r\n\r\n", ""},
	{"bare LF", "GET /as2 HTTP/1.1\nHost: x\n\n", ""},
	{"utf-8 value", "POST /as2 HTTP/1.1\r\nHost: x\r\nSubject: Rechnung für März\r\nContent-Length: 0\r\n\r\n", ""},
	{"CL+TE", "POST /as2 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "Content-Length together with Transfer-Encoding"},
	{"TE+CL", "POST /as2 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n", "Content-Length together with Transfer-Encoding"},
	{"CL+TE tab", "POST /as2 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding:\tchunked\r\n\r\n0\r\n\r\n", "Content-Length together"},
	{"CL+TE trailing space", "POST /as2 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked \r\n\r\n0\r\n\r\n", "Content-Length together"},
	{"CL+TE upper case", "POST /as2 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\ntransfer-encoding: CHUNKED\r\n\r\n0\r\n\r\n", "Content-Length together"},
	{"CL+TE vertical tab", "POST /as2 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: \x0bchunked\r\n\r\n0\r\n\r\n", "control character"},
	{"TE space before colon", "POST /as2 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n", "header field name"},
	{"obs-fold hides TE", "POST /as2 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nX-A: b\r\n Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "obs-fold"},
	{"obs-fold TE value", "POST /as2 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n", "obs-fold"},
	{"HTTP/1.0 CL+TE", "POST /as2 HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "Content-Length together"},
	{"HTTP/1.0 TE", "POST /as2 HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "HTTP/1.0"},
	{"duplicate CL", "POST /as2 HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n", "more than one Content-Length"},
	{"CL list", "POST /as2 HTTP/1.1\r\nHost: x\r\nContent-Length: 0, 0\r\n\r\n", "not a decimal"},
	{"CL plus", "POST /as2 HTTP/1.1\r\nHost: x\r\nContent-Length: +0\r\n\r\n", "not a decimal"},
	{"two TE", "POST /as2 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "single chunked"},
	{"TE list", "POST /as2 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", "single chunked"},
	{"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "HTTP version"},
	{"bad request line", "POST  /as2 HTTP/1.1\r\n\r\n", "request line"},
}

// feedAll passes data through a framer in pieces of size step and returns
// how many bytes passed, the refusal and the framing error.
func feedAll(data []byte, step int) (passed int, ref *Refusal, err error) {
	f := newFramer(0)
	var pending []byte
	for i := 0; i < len(data); i += step {
		pending = append(pending, data[i:min(i+step, len(data))]...)
		pass, r, e := f.feed(pending)
		passed += pass
		pending = pending[pass:]
		if r != nil || e != nil {
			return passed, r, e
		}
	}
	return passed, nil, nil
}

func TestShapes(t *testing.T) {
	for _, s := range shapes {
		for _, step := range []int{1, 3, 4096} {
			data := []byte(s.req + hidden)
			passed, ref, err := feedAll(data, step)
			if err != nil {
				t.Errorf("%s (step %d): framing error %v", s.name, step, err)
				continue
			}
			if s.refusal == "" {
				if ref != nil || passed != len(data) {
					t.Errorf("%s (step %d): refused %v, passed %d of %d", s.name, step, ref, passed, len(data))
				}
				continue
			}
			if ref == nil || !strings.Contains(ref.Reason, s.refusal) || ref.Status != 400 {
				t.Errorf("%s (step %d): %v, want a refusal saying %q", s.name, step, ref, s.refusal)
			}
			if passed != 0 {
				t.Errorf("%s (step %d): %d bytes of the refused head passed", s.name, step, passed)
			}
		}
	}
}

func TestRefusalAfterAcceptedRequests(t *testing.T) {
	ok := "POST /as2 HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc\r\n" // a stray CRLF after a POST, as Go tolerates
	bad := "POST /as2 HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
	passed, ref, err := feedAll([]byte(ok+ok+bad+hidden), 7)
	if err != nil || ref == nil || passed != 2*len(ok) {
		t.Fatalf("passed %d (want %d), refusal %v, err %v", passed, 2*len(ok), ref, err)
	}
}

func TestHeadTooLarge(t *testing.T) {
	data := []byte("GET / HTTP/1.1\r\nX-Long: " + strings.Repeat("a", DefaultMaxHead) + "\r\n\r\n")
	_, ref, _ := feedAll(data, 4096)
	if ref == nil || ref.Status != 431 {
		t.Fatalf("refusal %v, want 431", ref)
	}
}

func TestBrokenChunkedBody(t *testing.T) {
	for name, body := range map[string]string{
		"no CRLF after data": "5\r\nhelloXX0\r\n\r\n",
		"bare LF size line":  "5\nhello\r\n0\r\n\r\n",
		"not hex":            "5g\r\nhello\r\n0\r\n\r\n",
		"trailer field":      "0\r\nX-T: 1\r\n\r\n",
		"long size line":     "5;" + strings.Repeat("x", 5000) + "\r\nhello\r\n0\r\n\r\n",
	} {
		head := "POST /as4 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
		passed, ref, err := feedAll([]byte(head+body+hidden), 5)
		if err != ErrFraming || ref != nil || passed < len(head) || passed >= len(head+body) {
			t.Errorf("%s: passed %d of head %d + body %d, refusal %v, err %v", name, passed, len(head), len(body), ref, err)
		}
	}
}

// goRequests parses data as Go's server reads requests from a connection
// and returns where each request (head and body) ended.
func goRequests(data []byte) []int {
	src := bytes.NewReader(data)
	br := bufio.NewReaderSize(src, 4096)
	var ends []int
	lastPOST := false
	for {
		if lastPOST {
			peek, _ := br.Peek(4)
			n := 0
			for n < len(peek) && (peek[n] == '\r' || peek[n] == '\n') {
				n++
			}
			br.Discard(n)
		}
		req, err := http.ReadRequest(br)
		if err != nil {
			return ends
		}
		if _, err := io.Copy(io.Discard, req.Body); err != nil {
			return ends
		}
		lastPOST = req.Method == "POST"
		ends = append(ends, len(data)-br.Buffered()-src.Len())
	}
}

// framerEnds passes data through a framer a byte at a time and returns
// where each request it passed whole ended.
func framerEnds(data []byte) []int {
	f := newFramer(0)
	var ends []int
	var pending []byte
	passed := 0
	for i := range data {
		pending = append(pending, data[i])
		pass, ref, err := f.feed(pending)
		passed += pass
		pending = pending[pass:]
		if ref != nil || err != nil {
			break
		}
		for len(ends) < f.completed {
			ends = append(ends, passed)
		}
	}
	return ends
}

// FuzzFramerAgreesWithGo: every request the framer passes whole, Go's
// server reads with the same end (so no bytes the framer took for a body
// can be a request to Go), and the framer's verdict does not depend on
// how the bytes arrive.
func FuzzFramerAgreesWithGo(f *testing.F) {
	for _, s := range shapes {
		f.Add([]byte(s.req+hidden), 3)
	}
	f.Add([]byte("POST /as2 HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc\r\nGET / HTTP/1.1\r\n\r\n"), 1)
	f.Add([]byte("POST /as4 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"+hidden), 2)
	f.Fuzz(func(t *testing.T, data []byte, step int) {
		if step <= 0 || step > 1<<16 {
			step = 1 + len(data)
		}
		p1, r1, e1 := feedAll(data, step)
		p2, r2, e2 := feedAll(data, 1+len(data))
		if p1 != p2 || (r1 == nil) != (r2 == nil) || e1 != e2 || (r1 != nil && *r1 != *r2) {
			t.Fatalf("step %d: passed %d %v %v; whole: passed %d %v %v", step, p1, r1, e1, p2, r2, e2)
		}
		ends := framerEnds(data[:p2])
		goEnds := goRequests(data)
		for i, e := range ends {
			if i >= len(goEnds) {
				// Go refuses what the framer passed: Go closes the
				// connection there, no desynchronisation.
				return
			}
			if goEnds[i] != e {
				t.Fatalf("request %d ends at %d for the framer, %d for Go (%q)", i, e, goEnds[i], data)
			}
		}
	})
}
