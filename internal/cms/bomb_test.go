package cms

import (
	"errors"
	"testing"

	"github.com/edigateway/gateway/internal/heaptest"
	"github.com/edigateway/gateway/internal/limits"
	"github.com/edigateway/gateway/internal/testbomb"
)

// TestDecompressBombRefusedEarly: a 1 GiB zlib bomb (about 1 MiB of
// CompressedData) is refused by the ratio cap after about 1 MiB of output,
// without a buffer doubling towards the size cap.
func TestDecompressBombRefusedEarly(t *testing.T) {
	bomb := testbomb.CompressedData(testbomb.Zlib(1 << 30))
	var err error
	n := heaptest.Allocated(func() { _, err = Decompress(bomb, 0) })
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("bomb: %v", err)
	}
	if n > 8<<20 {
		t.Fatalf("refusing the bomb allocated %d MiB", n>>20)
	}
	// Without a ratio cap the absolute cap refuses it, still in bounded memory.
	n = heaptest.Allocated(func() {
		_, err = DecompressLimited(bomb, limits.Inflation{MaxBytes: 32 << 20}, nil)
	})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("bomb under the size cap only: %v", err)
	}
	if n > 8<<20 {
		t.Fatalf("refusing the bomb by size allocated %d MiB", n>>20)
	}
}

// TestDecompressSmallCompressibleAndExactAllocation: a small, very
// compressible document passes the ratio cap (below the floor), and a large
// output is allocated once at its exact size.
func TestDecompressSmallCompressibleAndExactAllocation(t *testing.T) {
	small := make([]byte, 900<<10)
	der, err := Compress(small)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := Decompress(der, 0); err != nil || len(out) != len(small) {
		t.Fatalf("small compressible document: %d bytes, %v", len(out), err)
	}
	big := testbomb.CompressedData(testbomb.Zlib(24 << 20))
	var out []byte
	n := heaptest.Allocated(func() {
		out, err = DecompressLimited(big, limits.Inflation{MaxBytes: 32 << 20}, nil)
	})
	if err != nil || len(out) != 24<<20 || cap(out) != len(out) {
		t.Fatalf("24 MiB: %d bytes (cap %d), %v", len(out), cap(out), err)
	}
	if n > 24<<20+4<<20 {
		t.Fatalf("inflating 24 MiB allocated %d MiB", n>>20)
	}
}
