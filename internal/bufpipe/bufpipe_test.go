package bufpipe

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/edigateway/gateway/internal/heaptest"
)

// TestBytesArriveInOrder writes pieces of random sizes (some larger than a
// chunk, some empty) and reads with buffers of random sizes: the reader
// gets exactly the written bytes, then the writer's error.
func TestBytesArriveInOrder(t *testing.T) {
	for _, closeErr := range []error{nil, errors.New("decryption failed")} {
		rng := rand.New(rand.NewPCG(1, 2))
		data := make([]byte, 3<<20+17)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		p := New(3, 64<<10)
		go func() {
			rest := data
			for len(rest) > 0 {
				k := min(len(rest), rng.IntN(200<<10))
				if n, err := p.Write(rest[:k]); n != k || err != nil {
					panic(err)
				}
				rest = rest[k:]
			}
			p.CloseWithError(closeErr)
		}()
		var got bytes.Buffer
		buf := make([]byte, 150<<10)
		var err error
		for {
			var n int
			n, err = p.Read(buf[:1+len(got.Bytes())%len(buf)])
			got.Write(buf[:n])
			if err != nil {
				break
			}
		}
		want := closeErr
		if want == nil {
			want = io.EOF
		}
		if err != want {
			t.Fatalf("end: %v, want %v", err, want)
		}
		if !bytes.Equal(got.Bytes(), data) {
			t.Fatalf("read %d bytes, not the %d written", got.Len(), len(data))
		}
	}
}

// TestWriteWaitsOnlyWhenFull: the writer returns at once while the buffer
// has room and waits when n chunks are full, until the reader takes one.
func TestWriteWaitsOnlyWhenFull(t *testing.T) {
	p := New(2, 4)
	if n, err := p.Write([]byte("12345678")); n != 8 || err != nil {
		t.Fatalf("write into room: %d, %v", n, err)
	}
	done := make(chan struct{})
	go func() {
		p.Write([]byte("9"))
		close(done)
	}()
	select {
	case <-done:
		t.Fatal("write into a full buffer returned")
	case <-time.After(50 * time.Millisecond):
	}
	b := make([]byte, 4)
	if n, _ := p.Read(b); string(b[:n]) != "1234" {
		t.Fatalf("read %q", b[:n])
	}
	<-done
	// A partial chunk is read only once the writer closes.
	if n, _ := p.Read(b); string(b[:n]) != "5678" {
		t.Fatalf("read %q", b[:n])
	}
	got := make(chan string)
	go func() {
		n, _ := p.Read(b)
		got <- string(b[:n])
	}()
	select {
	case s := <-got:
		t.Fatalf("a partial chunk was read before the close: %q", s)
	case <-time.After(50 * time.Millisecond):
	}
	p.Close()
	if s := <-got; s != "9" {
		t.Fatalf("after close: %q", s)
	}
	if _, err := p.Read(b); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
}

// TestCloseReadReleasesTheWriter: a writer waiting on a full buffer
// returns ErrReaderClosed once the reader closes, and so does every later
// write.
func TestCloseReadReleasesTheWriter(t *testing.T) {
	p := New(1, 4)
	errc := make(chan error)
	go func() {
		_, err := p.Write([]byte("123456789"))
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	p.CloseRead()
	if err := <-errc; !errors.Is(err, ErrReaderClosed) {
		t.Fatalf("waiting writer: %v", err)
	}
	if _, err := p.Write([]byte("x")); !errors.Is(err, ErrReaderClosed) {
		t.Fatalf("later write: %v", err)
	}
	if _, err := p.Read(make([]byte, 1)); err != io.ErrClosedPipe {
		t.Fatalf("read after CloseRead: %v", err)
	}
}

// TestChunksArePooled: a pipe read to its end (or closed by its reader)
// gives its chunks back, so that piping a small stream after a warm-up
// allocates far less than a chunk.
func TestChunksArePooled(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop buffers at random")
	}
	const size = 256 << 10
	small := bytes.Repeat([]byte("UNB+UNOA:2+X+Y'"), 700) // 10 KB
	pipe := func(closeRead bool) {
		p := New(4, size)
		p.Write(small)
		p.Close()
		if closeRead {
			p.CloseRead()
			return
		}
		if got, err := io.ReadAll(p); err != nil || !bytes.Equal(got, small) {
			t.Fatalf("read %d bytes, %v", len(got), err)
		}
	}
	for _, closeRead := range []bool{false, true} {
		pipe(closeRead)
		const rounds = 50
		allocated := heaptest.Allocated(func() {
			for range rounds {
				pipe(closeRead)
			}
		})
		if per := allocated / rounds; per > size/4 {
			t.Fatalf("closeRead=%v: %d bytes allocated per small stream, want far less than a %d-byte chunk", closeRead, per, size)
		}
	}
}
