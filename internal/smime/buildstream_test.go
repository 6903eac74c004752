package smime

import (
	"bytes"
	"crypto/sha256"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// TestBase64LineWriter: whatever the sizes of the writes, the stream
// encoder writes what base64Lines writes.
func TestBase64LineWriter(t *testing.T) {
	for _, n := range []int{0, 1, 56, 57, 58, 113, 114, 115, 1000, 57 * 1024, 57*1024 + 1, 200000} {
		data := bytes.Repeat([]byte("0123456789abcdefghij\x00\xff"), n/22+1)[:n]
		for _, chunk := range []int{1, 7, 57, 4096, 1 << 20} {
			var out bytes.Buffer
			e := &base64LineWriter{w: &out}
			for p := data; len(p) > 0; {
				k := min(chunk, len(p))
				if _, err := e.Write(p[:k]); err != nil {
					t.Fatal(err)
				}
				p = p[k:]
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			if want := base64Lines(data); !bytes.Equal(out.Bytes(), want) {
				t.Fatalf("n=%d chunk=%d: %d bytes, want %d", n, chunk, out.Len(), len(want))
			}
		}
	}
}

// TestSignedContentFindsBoundary: the boundary is found in the signed
// content also when it straddles two writes, and not where it is absent.
func TestSignedContentFindsBoundary(t *testing.T) {
	const boundary = "----=_Part_0123456789"
	for _, text := range []string{"before " + boundary + " after", boundary, "x" + boundary} {
		for split := 0; split <= len(text); split++ {
			h := sha256.New()
			s := &signedContent{w: io.Discard, h: h, boundary: []byte(boundary)}
			s.Write([]byte(text[:split]))
			s.Write([]byte(text[split:]))
			if !s.found {
				t.Fatalf("%q split at %d: boundary not found", text, split)
			}
		}
	}
	h := sha256.New()
	s := &signedContent{w: io.Discard, h: h, boundary: []byte(boundary)}
	io.Copy(s, iotest.OneByteReader(strings.NewReader(strings.Repeat(boundary[:len(boundary)-1]+"x", 50))))
	if s.found {
		t.Fatal("boundary found where it is absent")
	}
}
