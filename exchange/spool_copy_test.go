package exchange

import (
	"bytes"
	"io"
	"runtime"
	"testing"
)

func allocated(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// TestSpoolBytesWithoutCopies: bytes the endpoint already holds are kept
// (in memory) or written (to the spool file) without a growing buffer, and
// the envelope reader uses a memory payload as it is.
func TestSpoolBytesWithoutCopies(t *testing.T) {
	s := &Spool{Dir: t.TempDir(), Threshold: 2 << 20}
	defer s.Cleanup()
	for _, size := range []int{1 << 20, 3 << 20} {
		data := bytes.Repeat([]byte("UNH+1+INVOIC'"), size/13)
		var body Body
		var n int64
		var err error
		if a := allocated(func() { body, n, _, err = s.Bytes(data) }); err != nil || n != int64(len(data)) || a > 64<<10 {
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
		var b []byte
		a := allocated(func() { b, err = payloadBytes(pl, 8<<20) })
		if err != nil || !bytes.Equal(b, data) || a > int64Alloc(len(data))+64<<10 {
			t.Fatalf("%d bytes: payloadBytes %d bytes, %v, allocated %d KiB", len(data), len(b), err, a>>10)
		}
	}
}

// int64Alloc is what reading a spooled payload may allocate: its size once
// for a file, nothing for memory.
func int64Alloc(n int) uint64 { return uint64(n) }
