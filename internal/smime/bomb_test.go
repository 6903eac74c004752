package smime

import (
	"crypto/rand"
	"errors"
	"testing"

	"github.com/edigateway/gateway/internal/cms"
	"github.com/edigateway/gateway/internal/heaptest"
	"github.com/edigateway/gateway/internal/testbomb"
)

// TestUnwrapNestedBomb: the request, two nested zlib CompressedData
// layers of a few KiB inflating to 4 GiB, is refused with ErrTooLarge in
// bounded memory.
func TestUnwrapNestedBomb(t *testing.T) {
	body := testbomb.NestedAS2(4 << 30)
	raw := append([]byte("Content-Type: "+testbomb.ContentType+"\r\nContent-Transfer-Encoding: binary\r\n\r\n"), body...)
	var res *Result
	var err error
	n := heaptest.Allocated(func() { res, err = Unwrap(raw, Options{}) })
	if !errors.Is(err, cms.ErrTooLarge) {
		t.Fatalf("nested bomb (%d bytes): %v", len(body), err)
	}
	if len(res.Layers) == 0 || res.Layers[len(res.Layers)-1] != LayerCompressed {
		t.Fatalf("layers %v", res.Layers)
	}
	if n > 32<<20 {
		t.Fatalf("refusing a %d-byte nested bomb allocated %d MiB", len(body), n>>20)
	}
}

// TestUnwrapCompressedTotal: two layers each under MaxSize but over it
// together are refused; the ratio counts against the outermost layer.
func TestUnwrapCompressedTotal(t *testing.T) {
	random := make([]byte, 2<<20)
	rand.Read(random)
	inner, err := cms.Compress(append([]byte("Content-Type: application/octet-stream\r\n\r\n"), random...))
	if err != nil {
		t.Fatal(err)
	}
	outer, err := cms.Compress(wrapCMS(t, "compressed-data", inner))
	if err != nil {
		t.Fatal(err)
	}
	msg := wrapCMS(t, "compressed-data", outer)
	if _, err := Unwrap(msg, Options{MaxSize: 6 << 20}); err != nil {
		t.Fatalf("within the total: %v", err)
	}
	if _, err := Unwrap(msg, Options{MaxSize: 4 << 20}); !errors.Is(err, cms.ErrTooLarge) {
		t.Fatalf("each layer under 4 MiB, together over: %v", err)
	}
}
