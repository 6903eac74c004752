package as4

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"runtime"
	"testing"
	"testing/iotest"

	"github.com/edigateway/gateway/internal/limits"

	"github.com/edigateway/gateway/internal/testbomb"
)

func TestDecompress(t *testing.T) {
	// The interop payloads are encrypted, so Decompress is checked on a
	// generated gzip stream: exact output, the length limit, corrupt input.
	plain := bytes.Repeat([]byte("UNA:+.? 'UNB+UNOC:3+SENDER+RECEIVER'\n"), 200)
	gz := gzipBytes(t, plain)
	got, err := Decompress(gz, map[string]string{"CompressionType": "application/gzip"}, int64(len(plain)))
	if err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("Decompress: %v", err)
	}
	if same, err := Decompress(gz, map[string]string{"MimeType": "application/xml"}, 10); err != nil || !bytes.Equal(same, gz) {
		t.Fatalf("uncompressed part changed: %v", err)
	}
	for name, c := range map[string]struct {
		data  []byte
		props map[string]string
		limit int64
	}{
		"bomb":        {gz, map[string]string{"CompressionType": "application/gzip"}, int64(len(plain)) - 1},
		"not gzip":    {plain, map[string]string{"CompressionType": "application/gzip"}, 1 << 20},
		"truncated":   {gz[:len(gz)-9], map[string]string{"CompressionType": "application/gzip"}, 1 << 20},
		"bad crc":     {flipByte(gz, len(gz)-6), map[string]string{"CompressionType": "application/gzip"}, 1 << 20},
		"trailing":    {append(append([]byte{}, gz...), "junk"...), map[string]string{"CompressionType": "application/gzip"}, 1 << 20},
		"other codec": {gz, map[string]string{"CompressionType": "application/zstd"}, 1 << 20},
	} {
		_, err := Decompress(c.data, c.props, c.limit)
		if CodeOf(err) != CodeDecompressionFailure {
			t.Errorf("%s: error %v, want EBMS:0303", name, err)
		}
		if name == "bomb" && !errors.Is(err, ErrLimit) {
			t.Errorf("bomb: %v does not wrap ErrLimit", err)
		}
	}
}

func flipByte(b []byte, i int) []byte {
	c := append([]byte{}, b...)
	c[i] ^= 0xff
	return c
}

// TestDecompressGzipBomb: a 1 GiB gzip bomb is refused with EBMS:0303 after
// about 1 MiB of output (ratio cap), in bounded memory.
func TestDecompressGzipBomb(t *testing.T) {
	bomb := testbomb.Gzip(1 << 30)
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	_, err := Decompress(bomb, map[string]string{"CompressionType": "application/gzip"}, 0)
	runtime.ReadMemStats(&b)
	if e := AsError(err); e == nil || e.Code != CodeDecompressionFailure {
		t.Fatalf("gzip bomb: %v", err)
	}
	if n := b.TotalAlloc - a.TotalAlloc; n > 8<<20 {
		t.Fatalf("refusing a %d-byte gzip bomb allocated %d MiB", len(bomb), n>>20)
	}
}

// DecompressReader gunzips as it is read: a bomb is refused with EBMS:0303
// as soon as it passes the ratio, and an error of the source (a spool file)
// comes back as it is, not as a corrupt stream.
func TestDecompressReaderStreams(t *testing.T) {
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	zw.Write(make([]byte, 64<<20))
	zw.Close()
	props := map[string]string{PropCompressionType: CompressionGzip}
	r, err := DecompressReader(iotest.HalfReader(bytes.NewReader(gz.Bytes())), props, limits.Inflation{MaxRatio: 100}, nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, r)
	if AsError(err).Code != CodeDecompressionFailure || n > 8<<20 {
		t.Fatalf("bomb: %d bytes, %v", n, err)
	}
	broken := errors.New("disk read")
	r, err = DecompressReader(io.MultiReader(bytes.NewReader(gz.Bytes()[:1000]), iotest.ErrReader(broken)), props, limits.Inflation{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, r); !errors.Is(err, broken) || AsError(err).Code == CodeDecompressionFailure {
		t.Fatalf("source error: %v", err)
	}
}

// TestDecompressReaderReusesGunzippers: the gzip readers are pooled, so a
// stream must come out whole and alone after streams that failed (corrupt,
// a bomb, a source error) or ended, read by several goroutines at once, and
// a reader read again after its end must keep answering that end.
func TestDecompressReaderReusesGunzippers(t *testing.T) {
	props := map[string]string{PropCompressionType: CompressionGzip}
	plain := func(i int) []byte {
		return bytes.Repeat([]byte{byte('A' + i%26), byte(i), '\n'}, 5000+i*7)
	}
	gz := func(b []byte) []byte {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write(b)
		zw.Close()
		return buf.Bytes()
	}
	bomb := gz(make([]byte, 4<<20))
	done := make(chan error, 4)
	for w := range 4 {
		go func() {
			for i := range 50 {
				k := w*50 + i
				var err error
				switch k % 4 {
				case 1: // corrupt in the middle
					z := gz(plain(k))
					z[len(z)/2] ^= 0xff
					r, rerr := DecompressReader(bytes.NewReader(z), props, limits.Inflation{}, nil)
					if rerr == nil {
						_, rerr = io.Copy(io.Discard, r)
					}
					if rerr == nil {
						err = errors.New("corrupt stream accepted")
					}
				case 2: // a bomb stopped half way
					r, rerr := DecompressReader(bytes.NewReader(bomb), props, limits.Inflation{MaxBytes: 1 << 20}, nil)
					if rerr == nil {
						_, rerr = io.Copy(io.Discard, r)
					}
					if AsError(rerr).Code != CodeDecompressionFailure {
						err = errors.New("bomb not stopped")
					}
				default:
					want := plain(k)
					r, rerr := DecompressReader(iotest.OneByteReader(bytes.NewReader(gz(want))), props, limits.Inflation{}, nil)
					if rerr != nil {
						err = rerr
						break
					}
					got, rerr := io.ReadAll(r)
					if rerr != nil || !bytes.Equal(got, want) {
						err = errors.New("stream came out different")
						break
					}
					if n, rerr := r.Read(make([]byte, 10)); n != 0 || rerr != io.EOF {
						err = errors.New("read after the end did not answer EOF")
					}
				}
				if err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
