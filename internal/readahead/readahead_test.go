package readahead

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
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
