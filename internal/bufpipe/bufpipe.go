// Package bufpipe is an in-memory pipe with a bounded buffer between a
// goroutine that produces bytes (decrypting an attachment) and one that
// consumes them (inflating it). Unlike io.Pipe, whose Write waits until
// the reader has taken every byte, Write copies into the buffer and
// returns, and each side is woken only for a whole chunk: on a machine
// with two cores a goroutine woken costs more than the copy, and io.Pipe
// under a byte-at-a-time reader wakes both sides every few KiB.
package bufpipe

import (
	"errors"
	"io"
	"sync"

	"github.com/edigateway/gateway/internal/bufpool"
)

// ErrReaderClosed is what Write returns once the reader has closed.
var ErrReaderClosed = errors.New("bufpipe: the reader has closed")

// Pipe buffers at most n chunks of size bytes: memory is bounded by n ×
// size whatever passes through it. One goroutine writes, one reads. The
// chunks come from a pool shared by the pipes of that size and go back to
// it once the reader has read to the end or closed.
type Pipe struct {
	mu       sync.Mutex
	readable *sync.Cond // a whole chunk, or the writer closed
	writable *sync.Cond // a chunk was freed, or the reader closed
	size, n  int
	chunks   [][]byte // filled in order; only the last may be partial
	free     [][]byte
	off      int // read offset in chunks[0]
	werr     error
	wclosed  bool
	rclosed  bool
}

// New returns a pipe of n chunks of size bytes.
func New(n, size int) *Pipe {
	p := &Pipe{size: size, n: max(n, 1)}
	p.readable = sync.NewCond(&p.mu)
	p.writable = sync.NewCond(&p.mu)
	return p
}

// Write copies b into the buffer; it waits only while n chunks are full.
func (p *Pipe) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for len(b) > 0 {
		if p.rclosed {
			return n, ErrReaderClosed
		}
		if p.wclosed {
			return n, io.ErrClosedPipe
		}
		last := len(p.chunks) - 1
		if last < 0 || len(p.chunks[last]) == p.size {
			if len(p.chunks) >= p.n {
				p.writable.Wait()
				continue
			}
			var c []byte
			if f := len(p.free); f > 0 {
				c, p.free = p.free[f-1][:0], p.free[:f-1]
			} else {
				c = bufpool.Get(p.size)[:0]
			}
			p.chunks = append(p.chunks, c)
			last++
		}
		c := p.chunks[last]
		k := min(len(b), p.size-len(c))
		p.chunks[last] = append(c, b[:k]...)
		b, n = b[k:], n+k
		if len(p.chunks[last]) == p.size {
			p.readable.Signal()
		}
	}
	return n, nil
}

// CloseWithError ends the writing: the reader gets the buffered bytes,
// then err (io.EOF when err is nil).
func (p *Pipe) CloseWithError(err error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.wclosed {
		p.wclosed, p.werr = true, err
		p.readable.Signal()
	}
	return nil
}

// Close ends the writing without an error.
func (p *Pipe) Close() error { return p.CloseWithError(nil) }

// Read takes buffered bytes: those of a whole chunk, or, once the writer
// has closed, what is left.
func (p *Pipe) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if p.rclosed {
			return 0, io.ErrClosedPipe
		}
		if len(p.chunks) > 0 && (len(p.chunks) > 1 || len(p.chunks[0]) == p.size || p.wclosed) && p.off < len(p.chunks[0]) {
			break
		}
		if p.wclosed && (len(p.chunks) == 0 || len(p.chunks) == 1 && p.off == len(p.chunks[0])) {
			// Read to the end: no more writes, nothing more to read.
			p.release()
			if p.werr != nil {
				return 0, p.werr
			}
			return 0, io.EOF
		}
		p.readable.Wait()
	}
	k := copy(b, p.chunks[0][p.off:])
	p.off += k
	if p.off == len(p.chunks[0]) && (len(p.chunks) > 1 || len(p.chunks[0]) == p.size) {
		// The chunk is read (a partial last one stays: the writer may
		// still fill it).
		p.free = append(p.free, p.chunks[0])
		p.chunks = append(p.chunks[:0], p.chunks[1:]...)
		p.off = 0
		p.writable.Signal()
	}
	return k, nil
}

// CloseRead ends the reading: the writer's later writes fail with
// ErrReaderClosed and the buffer is dropped.
func (p *Pipe) CloseRead() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rclosed = true
	p.release()
	p.writable.Signal()
	return nil
}

// release gives the chunks back to the pool, with mu held, once neither
// side will touch them again.
func (p *Pipe) release() {
	for _, c := range p.chunks {
		bufpool.Put(c)
	}
	for _, c := range p.free {
		bufpool.Put(c)
	}
	p.chunks, p.free, p.off = nil, nil, 0
}
