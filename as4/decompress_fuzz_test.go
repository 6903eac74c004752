package as4

import (
	"bytes"
	"compress/gzip"
	"testing"

	"github.com/edigateway/gateway/internal/limits"
	"github.com/edigateway/gateway/internal/testbomb"
)

// FuzzDecompressLimited: any gzip input either inflates within the caps or
// fails with EBMS:0303; it never panics.
func FuzzDecompressLimited(f *testing.F) {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	w.Write(bytes.Repeat([]byte("UNH+1+INVOIC:D:96A:UN'"), 100))
	w.Close()
	f.Add(b.Bytes())
	f.Add(testbomb.Gzip(4 << 20))
	f.Add([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255, 3, 0})
	f.Add([]byte("not gzip"))
	lim := limits.Inflation{MaxBytes: 2 << 20, MaxRatio: 50, RatioFloor: 64 << 10}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := DecompressLimited(in, map[string]string{PropCompressionType: CompressionGzip}, lim, nil)
		if err != nil {
			if CodeOf(err) != CodeDecompressionFailure {
				t.Fatalf("error without EBMS:0303: %v", err)
			}
			return
		}
		if int64(len(out)) > lim.MaxBytes || len(out) > 64<<10 && float64(len(out)) > 50*float64(len(in)) {
			t.Fatalf("%d bytes from %d passed the caps", len(out), len(in))
		}
	})
}
