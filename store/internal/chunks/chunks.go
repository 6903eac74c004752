// Package chunks reads a payload the SQL stores keep in rows of a chunk
// table (the outbound queue's payloads): one row per read of the next
// chunk, so that memory does not grow with the payload, and the size
// recorded with the message checked at the end.
package chunks

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// NewReader returns a reader of the payload of message id, of size bytes,
// whose chunk seq (0, 1, …) next returns (io.EOF when there is none).
func NewReader(ctx context.Context, id string, size int64, next func(ctx context.Context, seq int) ([]byte, error)) io.ReadCloser {
	return &reader{ctx: ctx, id: id, size: size, next: next}
}

// reader reads a payload chunk by chunk and checks that it has the size
// recorded with its message.
type reader struct {
	ctx    context.Context
	id     string
	size   int64
	read   int64
	seq    int
	buf    []byte
	next   func(ctx context.Context, seq int) ([]byte, error)
	err    error
	closed bool
}

func (r *reader) Read(p []byte) (int, error) {
	if r.closed {
		return 0, errors.New("outbound payload: read after close")
	}
	for len(r.buf) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		if r.read >= r.size {
			r.err = io.EOF
			return 0, io.EOF
		}
		data, err := r.next(r.ctx, r.seq)
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("outbound payload of %s: %d of %d bytes stored: %w", r.id, r.read, r.size, io.ErrUnexpectedEOF)
		}
		if err != nil {
			r.err = err
			return 0, err
		}
		r.seq++
		r.buf = data
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	r.read += int64(n)
	if r.read > r.size {
		r.err = fmt.Errorf("outbound payload of %s: more than the %d bytes recorded", r.id, r.size)
		return n, r.err
	}
	return n, nil
}

func (r *reader) Close() error {
	r.closed = true
	r.buf = nil
	return nil
}
