package smime

import (
	"bytes"
	"io"
	"math/rand/v2"
	"os"
	"testing"
)

// TestFileWriter: what is written in pieces of any size arrives whole and
// in order; Seek and Truncate see everything written; a failed write is
// reported by finish.
func TestFileWriter(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	data := make([]byte, 3*fileWriterBuffer+12345)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	for _, piece := range []int{1 << 10, 32 << 10, fileWriterBuffer, fileWriterBuffer + 1, len(data)} {
		f, err := os.CreateTemp(t.TempDir(), "fw")
		if err != nil {
			t.Fatal(err)
		}
		w := newFileWriter(f)
		for p := data; len(p) > 0; {
			k := min(piece, len(p))
			if n, err := w.Write(p[:k]); n != k || err != nil {
				t.Fatal(n, err)
			}
			p = p[k:]
		}
		if n, err := w.Seek(0, io.SeekCurrent); n != int64(len(data)) || err != nil {
			t.Fatalf("piece %d: at %d (%v)", piece, n, err)
		}
		w.Write([]byte("tail")) // after finish: straight to the file
		got, _ := os.ReadFile(f.Name())
		if !bytes.Equal(got, append(append([]byte{}, data...), "tail"...)) {
			t.Fatalf("piece %d: %d bytes in the file", piece, len(got))
		}
		if err := w.Truncate(0); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	f, _ := os.CreateTemp(t.TempDir(), "fw")
	f.Close()
	w := newFileWriter(f)
	w.Write(data)
	if err := w.finish(); err == nil {
		t.Fatal("a write to a closed file is not reported")
	}
}
