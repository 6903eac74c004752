// Package readahead runs a reader in its own goroutine, a few buffers
// ahead of whoever reads it, so that producing the bytes (inflating a
// payload, say) and consuming them (hashing and writing them to a spool
// file) run on two cores instead of one after the other.
package readahead

import (
	"errors"
	"io"
	"sync"

	"github.com/edigateway/gateway/internal/bufpool"
)

// ErrClosed is what Read returns after Close.
var ErrClosed = errors.New("readahead: closed")

type chunk struct {
	b   []byte
	err error
}

// Reader reads its source in a goroutine into at most n buffers of size
// bytes; memory is bounded by n × size whatever the source's length. The
// buffers are taken as they are needed (a small source uses one) from a
// pool shared by the Readers of that size, and go back to it at Close: a
// message of a few KiB does not allocate and clear a MiB of buffers.
type Reader struct {
	full  chan chunk
	free  chan []byte
	stop  chan struct{}
	once  sync.Once
	cur   []byte
	buf   []byte // cur's whole buffer, returned to free when consumed
	err   error
	ended chan struct{}
	// n buffers of size bytes at most; made is how many the goroutine took.
	n, size, made int
}

// New starts reading src ahead. The caller must Close the Reader (which
// waits for the goroutine to end) when done with it, read to the end or
// not; src's own Read must return once it gets no more input.
func New(src io.Reader, n, size int) *Reader {
	n = max(n, 1)
	r := &Reader{full: make(chan chunk, n), free: make(chan []byte, n), stop: make(chan struct{}), ended: make(chan struct{}),
		n: n, size: size}
	go r.run(src)
	return r
}

// take is the goroutine's next buffer: a free one, a new one while fewer
// than n are out, else the first freed; nil once Close stops it.
func (r *Reader) take() []byte {
	select {
	case b := <-r.free:
		return b
	default:
	}
	if r.made < r.n {
		r.made++
		return bufpool.Get(r.size)
	}
	select {
	case b := <-r.free:
		return b
	case <-r.stop:
		return nil
	}
}

func (r *Reader) run(src io.Reader) {
	defer close(r.ended)
	for {
		b := r.take()
		if b == nil {
			return
		}
		k, err := Fill(src, b)
		select {
		case r.full <- chunk{b[:k], err}:
		case <-r.stop:
			return
		}
		if err != nil {
			return
		}
	}
}

// Fill reads from r into b until b is full or r fails, and returns what it
// read with r's error as it is: io.EOF only at r's end. Unlike io.ReadFull
// it does not make a cut stream's io.ErrUnexpectedEOF look like the short
// last read of a complete one (nor an early io.EOF an error).
func Fill(r io.Reader, b []byte) (int, error) {
	k := 0
	var err error
	for k < len(b) && err == nil {
		var m int
		m, err = r.Read(b[k:])
		k += m
	}
	return k, err
}

// Read returns the source's bytes in order, then its error (io.EOF at its
// end).
func (r *Reader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		if r.buf != nil {
			r.free <- r.buf[:cap(r.buf)]
			r.buf = nil
		}
		c, ok := <-r.full
		if !ok {
			return 0, ErrClosed
		}
		r.cur, r.buf, r.err = c.b, c.b, c.err
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

// Close stops the goroutine, waits for it to end and gives the buffers
// back to their pool.
func (r *Reader) Close() error {
	r.once.Do(func() {
		close(r.stop)
		<-r.ended
		r.err, r.cur = ErrClosed, nil
		// Every buffer is the Reader's now: the one being read, those read
		// ahead, those freed.
		give := func(b []byte) {
			if cap(b) == r.size {
				bufpool.Put(b)
			}
		}
		if r.buf != nil {
			give(r.buf)
			r.buf = nil
		}
		for {
			select {
			case c := <-r.full:
				give(c.b)
				continue
			case b := <-r.free:
				give(b)
				continue
			default:
			}
			break
		}
	})
	<-r.ended
	return nil
}
