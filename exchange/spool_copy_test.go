package exchange

import (
	"bytes"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/edigateway/gateway/envelope"
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
// the envelope scan reads either in fixed memory.
func TestSpoolBytesWithoutCopies(t *testing.T) {
	s := &Spool{Dir: t.TempDir(), Threshold: 2 << 20}
	defer s.Cleanup()
	for _, size := range []int{1 << 20, 3 << 20} {
		data := []byte("UNB+UNOA:2+S:14+R:14+240315:0930+X'UNH+1+INVOIC'" + strings.Repeat("LIN+1++4000862141404:SRS'", size/25) + "UNZ+1+X'")
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
		var ic *envelope.Interchange
		a := allocated(func() { ic, err = extractPayload(pl) })
		if err != nil || ic.Reference != "X" || a > 256<<10 {
			t.Fatalf("%d bytes: envelope %+v, %v, allocated %d KiB", len(data), ic, err, a>>10)
		}
	}
}
