package as4

import (
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"
)

// bigTextEnvelope streams a SOAP envelope whose body holds a text node of
// n bytes, without building it in memory.
func bigTextEnvelope(n int64) io.Reader {
	head := `<S:Envelope xmlns:S="http://www.w3.org/2003/05/soap-envelope"><S:Header/><S:Body><p>`
	tail := `</p></S:Body></S:Envelope>`
	return io.MultiReader(strings.NewReader(head), io.LimitReader(repeatReader('a'), n), strings.NewReader(tail))
}

type repeatReader byte

func (r repeatReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}

// TestEnvelopeSizeBoundedBeforeParsing: the 90 MiB text node (which
// cost 742 MB and 5 s of CPU) is refused while the envelope part is read,
// before any XML parsing, in bare SOAP and as the root of a multipart.
func TestEnvelopeSizeBoundedBeforeParsing(t *testing.T) {
	const n = 90 << 20
	lim := Limits{MaxMessageSize: 100 << 20}
	multipartBody := func() io.Reader {
		return io.MultiReader(strings.NewReader("--b\r\nContent-Type: application/soap+xml\r\nContent-ID: <root>\r\n\r\n"),
			bigTextEnvelope(n), strings.NewReader("\r\n--b--\r\n"))
	}
	for name, read := range map[string]func() error{
		"bare": func() error {
			_, err := ReadMessage("application/soap+xml", bigTextEnvelope(n), lim)
			return err
		},
		"multipart": func() error {
			_, err := ReadMessage(`multipart/related; boundary=b; type="application/soap+xml"; start="<root>"`, multipartBody(), lim)
			return err
		},
	} {
		var a, b runtime.MemStats
		runtime.ReadMemStats(&a)
		start := time.Now()
		err := read()
		took := time.Since(start)
		runtime.ReadMemStats(&b)
		if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "SOAP envelope larger than") {
			t.Fatalf("%s: %v", name, err)
		}
		if alloc := b.TotalAlloc - a.TotalAlloc; alloc > 32<<20 || took > 2*time.Second {
			t.Fatalf("%s: refusing a %d MiB envelope allocated %d MiB in %s", name, n>>20, alloc>>20, took)
		}
	}
	// An envelope within the limit is still read.
	if _, err := ReadMessage("application/soap+xml", bigTextEnvelope(1<<20), lim); err != nil {
		t.Fatalf("1 MiB text node: %v", err)
	}
}
