package exchange

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/edigateway/gateway/internal/envelope"
	"github.com/edigateway/gateway/internal/heaptest"
)

// TestSpoolBytesWithoutCopies: bytes the endpoint already holds are kept
// (in memory) or written (to the spool file) without a growing buffer, and
// the envelope scan reads either in fixed memory.
func TestSpoolBytesWithoutCopies(t *testing.T) {
	s := &Spool{Dir: t.TempDir(), Threshold: 2 << 20}
	defer s.Cleanup()
	for _, size := range []int{1 << 20, 3 << 20} {
		data := []byte("UNB+UNOA:2+S:14+R:14+240315:0930+X'UNH+1+INVOIC'" + strings.Repeat("LIN+1++4000862141404:SRS'", size/25) + "UNZ+1+X'")
		var body Body
		var n int64
		var err error
		if a := heaptest.Allocated(func() { body, n, _, err = s.Bytes(data) }); err != nil || n != int64(len(data)) || a > 64<<10 {
			t.Fatalf("%d bytes: stored %d, %v, allocated %d KiB", len(data), n, err, a>>10)
		}
		r, err := body.Open()
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(r)
		r.Close()
		if !bytes.Equal(got, data) {
			t.Fatalf("%d bytes: read back %d", len(data), len(got))
		}
		pl := NewPayload(Payload{Size: n}, body)
		var ic *envelope.Interchange
		a := heaptest.Allocated(func() { ic, err = extractPayload(pl) })
		if err != nil || ic.Reference != "X" || a > 256<<10 {
			t.Fatalf("%d bytes: envelope %+v, %v, allocated %d KiB", len(data), ic, err, a>>10)
		}
	}
}

// TestSpoolStoreWithoutGrowingBuffer: Store keeps a stream up to the
// threshold in memory and spills a longer one to a file, reading in fixed
// pieces (no doubling buffer: a stream just over the threshold allocates
// about twice it, not four times); a reader's io.ErrUnexpectedEOF is an
// error, not the end.
func TestSpoolStoreWithoutGrowingBuffer(t *testing.T) {
	s := &Spool{Dir: t.TempDir(), Threshold: 2 << 20}
	defer s.Cleanup()
	for _, size := range []int{0, 1, 2 << 20, 2<<20 + 1, 5 << 20} {
		data := bytes.Repeat([]byte("x"), size)
		var body Body
		var n int64
		var err error
		a := heaptest.Allocated(func() { body, n, _, err = s.Store(bytes.NewReader(data)) })
		if err != nil || n != int64(size) || a > 5<<20 {
			t.Fatalf("%d bytes: stored %d, %v, allocated %d KiB", size, n, err, a>>10)
		}
		_, onDisk := body.(FileBody)
		if onDisk != (size > 2<<20) {
			t.Fatalf("%d bytes: on disk %v", size, onDisk)
		}
		r, _ := body.Open()
		got, _ := io.ReadAll(r)
		r.Close()
		if !bytes.Equal(got, data) {
			t.Fatalf("%d bytes: read back %d", size, len(got))
		}
	}
	trunc := io.MultiReader(bytes.NewReader([]byte("abc")), iotest.ErrReader(io.ErrUnexpectedEOF))
	if _, _, _, err := s.Store(trunc); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated stream stored: %v", err)
	}
}

// TestSpoolStoreSmallAllocatesItsSize: storing a small payload allocates
// about its size (the copy kept), not a 64 KiB read piece per payload; a
// piece used for one payload holds nothing of it for the next.
func TestSpoolStoreSmallAllocatesItsSize(t *testing.T) {
	s := &Spool{Dir: t.TempDir()}
	defer s.Cleanup()
	big := bytes.Repeat([]byte("A"), 60<<10)
	if _, _, _, err := s.Store(bytes.NewReader(big)); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("UNB+UNOA:2+S+R+240315:0930+X'"), 340) // ~10 KB
	const rounds = 50
	var body Body
	var err error
	a := heaptest.Allocated(func() {
		for range rounds {
			body, _, _, err = s.Store(bytes.NewReader(data))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if per := a / rounds; per > 32<<10 && !raceEnabled {
		t.Fatalf("a %d-byte payload allocated %d KiB per Store", len(data), per>>10)
	}
	r, _ := body.Open()
	got, _ := io.ReadAll(r)
	r.Close()
	if !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes, not the %d stored", len(got), len(data))
	}
	short, _, _, err := s.Store(strings.NewReader("abc"))
	if err != nil {
		t.Fatal(err)
	}
	r, _ = short.Open()
	got, _ = io.ReadAll(r)
	r.Close()
	if string(got) != "abc" {
		t.Fatalf("a 3-byte payload after larger ones read back %q", got)
	}
}
