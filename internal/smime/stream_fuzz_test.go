package smime

import (
	"bytes"
	"crypto"
	"crypto/sha256"
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
		var first bytes.Buffer
		got, gerr := splitMultipartStream(Section{R: bytes.NewReader(body), N: int64(len(body))}, boundary, &first)
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
		if gerr == nil && !bytes.Equal(first.Bytes(), want[0]) {
			t.Fatalf("first part passed on as %q, split as %q", first.Bytes(), want[0])
		}
		// The sums taken on the way are those of the part and of its body.
		sums := newSignedPartSums("sha-256")
		sums.Write(first.Bytes())
		if w := sha256.Sum256(first.Bytes()); !bytes.Equal(sums.digests()[crypto.SHA256], w[:]) {
			t.Fatal("digest of the signed part differs")
		}
		if _, start, err := parseHeaderBlock(first.Bytes()); err == nil {
			if w := sha256.Sum256(first.Bytes()[start:]); sums.bodyAt != int64(start) || !bytes.Equal(sums.body.Sum(nil), w[:]) {
				t.Fatalf("body found at %d, header block ends at %d", sums.bodyAt, start)
			}
		}
	})
}

// FuzzSignedPartSumsChunks: the body sum does not depend on how the part
// is cut into writes.
func FuzzSignedPartSumsChunks(f *testing.F) {
	f.Add([]byte("Content-Type: a/b\r\n\r\nbody\r\n"), uint8(1))
	f.Add([]byte("\n\nx"), uint8(2))
	f.Add([]byte("A: b\n\r\n\r\n"), uint8(3))
	f.Fuzz(func(t *testing.T, part []byte, chunk uint8) {
		whole := newSignedPartSums("sha1")
		whole.Write(part)
		cut := newSignedPartSums("sha1")
		for p := part; len(p) > 0; {
			k := min(len(p), int(chunk)+1)
			cut.Write(p[:k])
			p = p[k:]
		}
		if whole.bodyAt != cut.bodyAt || !bytes.Equal(whole.body.Sum(nil), cut.body.Sum(nil)) ||
			!bytes.Equal(whole.digests()[crypto.SHA1], cut.digests()[crypto.SHA1]) {
			t.Fatalf("whole: body at %d; in pieces of %d: at %d", whole.bodyAt, int(chunk)+1, cut.bodyAt)
		}
	})
}
