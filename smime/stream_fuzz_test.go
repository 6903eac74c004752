package smime

import (
	"bytes"
	"testing"
)

// FuzzSplitMultipartStream: the streaming multipart splitter finds the
// same parts, byte for byte, as the in-memory one.
func FuzzSplitMultipartStream(f *testing.F) {
	f.Add([]byte("preamble\r\n--b\r\nContent-Type: text/plain\r\n\r\nhello\r\n--b\r\n\r\nsig\r\n--b--\r\n"), "b")
	f.Add([]byte("--b\nA: 1\n\nx\n--bb\n--b \t\n\n--b--"), "b")
	f.Add([]byte("--xyz\r\n\r\n\r\n--xyz--"), "xyz")
	f.Add([]byte("--b\r\n\r\n--b\r\n--b--"), "b")
	f.Fuzz(func(t *testing.T, body []byte, boundary string) {
		if boundary == "" || len(boundary) > 200 || len(body) > 1<<20 {
			return
		}
		want, werr := splitMultipart(body, boundary)
		got, gerr := splitMultipartStream(Section{R: bytes.NewReader(body), N: int64(len(body))}, boundary)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("in memory %v, stream %v", werr, gerr)
		}
		if len(got) != len(want) {
			t.Fatalf("%d parts streamed, %d in memory", len(got), len(want))
		}
		for i := range got {
			b := body[got[i].Off : got[i].Off+got[i].N]
			if !bytes.Equal(b, want[i]) {
				t.Fatalf("part %d: %q streamed, %q in memory", i, b, want[i])
			}
		}
	})
}
