package readahead

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"github.com/edigateway/gateway/internal/heaptest"
)

// The bytes come out as they went in, whatever the read sizes; the
// source's error, io.ErrUnexpectedEOF included, comes after its bytes;
// Close ends the goroutine whether or not the source was read to its end.
func TestReadAhead(t *testing.T) {
	data := make([]byte, 1<<20+12345)
	for i := range data {
		data[i] = byte(i * 31)
	}
	r := New(iotest.HalfReader(bytes.NewReader(data)), 3, 10000)
	got, err := io.ReadAll(iotest.OneByteReader(io.LimitReader(r, 5000)))
	if err != nil || !bytes.Equal(got, data[:5000]) {
		t.Fatalf("first bytes: %d, %v", len(got), err)
	}
	rest, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(rest, data[5000:]) {
		t.Fatalf("rest: %d, %v", len(rest), err)
	}
	r.Close()

	cut := io.MultiReader(bytes.NewReader(data[:30000]), iotest.ErrReader(io.ErrUnexpectedEOF))
	r = New(cut, 2, 4096)
	got, err = io.ReadAll(r)
	if !errors.Is(err, io.ErrUnexpectedEOF) || !bytes.Equal(got, data[:30000]) {
		t.Fatalf("cut source: %d bytes, %v", len(got), err)
	}
	r.Close()

	r = New(bytes.NewReader(data), 2, 4096)
	if _, err := r.Read(make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	r.Close() // the goroutine is blocked handing over a full buffer
	if _, err := r.Read(make([]byte, 10)); !errors.Is(err, ErrClosed) {
		t.Fatalf("read after Close: %v", err)
	}
}

// TestBuffersArePooled: a Reader takes only the buffers its source needs
// and gives them back at Close, so that reading ahead a small source after
// a warm-up allocates far less than its n × size buffers.
func TestBuffersArePooled(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop buffers at random")
	}
	const size = 256 << 10
	small := bytes.Repeat([]byte("UNB+UNOA:2+X+Y'"), 700) // 10 KB
	read := func() {
		r := New(bytes.NewReader(small), 4, size)
		got, err := io.ReadAll(r)
		r.Close()
		if err != nil || !bytes.Equal(got, small) {
			t.Fatalf("read %d bytes, %v", len(got), err)
		}
	}
	read()
	const rounds = 50
	allocated := heaptest.Allocated(func() {
		for range rounds {
			read()
		}
	})
	// Without the pool each round made 4 × 256 KiB (50 MiB in all).
	if per := allocated / rounds; per > size/2 {
		t.Fatalf("%d bytes allocated per small source, want far less than the %d of its buffers", per, 4*size)
	}
}
