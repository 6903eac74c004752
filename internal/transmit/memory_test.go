package transmit_test

import (
	"io"
	mrand "math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/edigateway/gateway/internal/transmit"
	"github.com/edigateway/gateway/outbound"
)

// streamedSize is the payload of the memory tests; maxHeapGrowth bounds
// the peak heap growth of one attempt (sender and the served gateway
// receiving it, in this process): well below the payload, so that
// holding it in memory anywhere fails the test.
const (
	streamedSize  = 50 << 20
	maxHeapGrowth = 24 << 20
)

// prng yields n bytes of a seeded PRNG as read (incompressible).
type prng struct {
	rng *mrand.PCG
	n   int64
}

func (p *prng) Read(b []byte) (int, error) {
	if p.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(b)) > p.n {
		b = b[:p.n]
	}
	for i := 0; i < len(b); i += 8 {
		v := p.rng.Uint64()
		for j := 0; j < 8 && i+j < len(b); j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	p.n -= int64(len(b))
	return len(b), nil
}

func streamedPayload() (func() (io.ReadCloser, error), string) {
	open := func() (io.ReadCloser, error) {
		return io.NopCloser(&prng{rng: mrand.NewPCG(7, 11), n: streamedSize}), nil
	}
	rc, _ := open()
	b, _ := io.ReadAll(rc) // the expected digest, before the measure
	return open, sum(b)
}

// peakHeapGrowth runs f and returns the peak growth of the live heap
// over its start, sampled every millisecond.
func peakHeapGrowth(f func()) uint64 {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base, peak := ms.HeapAlloc, ms.HeapAlloc
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapAlloc)
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	f()
	close(stop)
	<-done
	return peak - base
}

func streamedTest(t *testing.T, proto outbound.Protocol) {
	if testing.Short() {
		t.Skip("50 MiB through the served gateway")
	}
	open, want := streamedPayload()
	gw := serveGateway(t, gatewayOptions{})
	spool := t.TempDir()
	var tr outbound.Transmitter
	var m *outbound.Message
	if proto == outbound.AS2 {
		tr, m = as2ToIn(t, gw.URL+"/as2", spool, nil), as2Message(t)
	} else {
		tr, m = as4ToIn(t, gw.URL+"/as4", spool, func(s *transmit.AS4Settings) { s.Compress = false }), as4Message(t)
	}
	m.Size = streamedSize
	var a outbound.Attempt
	growth := peakHeapGrowth(func() { a = attemptOpen(t, tr, m, open) })
	t.Logf("%s: %d MiB sent, peak heap growth %.1f MiB", proto, streamedSize>>20, float64(growth)/(1<<20))
	if a.Outcome != outbound.Deliver {
		t.Fatalf("attempt %+v", a)
	}
	if growth > maxHeapGrowth {
		t.Errorf("peak heap growth %d MiB, bound %d MiB", growth>>20, maxHeapGrowth>>20)
	}
	if got := gw.received(); len(got) != 1 || got[0].n != streamedSize || got[0].sum != want {
		t.Fatalf("handler received %+v", got)
	}
	if left, _ := os.ReadDir(spool); len(left) != 0 {
		t.Errorf("the spool directory holds %d files after the attempt", len(left))
	}
}

// A 50 MiB payload is sent by each Transmitter (signed, encrypted; AS4
// uncompressed, so read twice) to the served gateway and delivered, with
// a peak heap growth of sender and receiver together under 24 MiB, and
// nothing left in the spool directory.
func TestAS2StreamedBoundedHeap(t *testing.T) { streamedTest(t, outbound.AS2) }
func TestAS4StreamedBoundedHeap(t *testing.T) { streamedTest(t, outbound.AS4) }
