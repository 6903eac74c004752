package smime

import (
	"io"
	"os"
)

// fileWriterBuffer is the size of each of fileWriter's two buffers.
const fileWriterBuffer = 1 << 20

// fileWriter writes to a file from its own goroutine, so that the kernel's
// copy into the page cache runs on another core while the caller decrypts
// or inflates the next megabyte: two buffers of 1 MiB, the one being
// filled and the one being written. It is a cms.Sink: Truncate and Seek
// (and finish) first wait for everything written, after which writes go to
// the file directly.
type fileWriter struct {
	f    *os.File
	buf  []byte
	full chan []byte
	free chan []byte
	done chan error
	err  error
	sync bool // finished: write to f directly
}

func newFileWriter(f *os.File) *fileWriter {
	w := &fileWriter{f: f, buf: make([]byte, 0, fileWriterBuffer), full: make(chan []byte, 1),
		free: make(chan []byte, 2), done: make(chan error, 1)}
	w.free <- make([]byte, 0, fileWriterBuffer)
	go func() {
		var err error
		for b := range w.full {
			if err == nil {
				_, err = f.Write(b)
			}
			w.free <- b[:0]
		}
		w.done <- err
	}()
	return w
}

func (w *fileWriter) Write(p []byte) (int, error) {
	if w.sync {
		if w.err != nil {
			return 0, w.err
		}
		return w.f.Write(p)
	}
	n := len(p)
	for len(p) > 0 {
		k := copy(w.buf[len(w.buf):cap(w.buf)], p)
		w.buf, p = w.buf[:len(w.buf)+k], p[k:]
		if len(w.buf) == cap(w.buf) {
			w.full <- w.buf
			w.buf = <-w.free // the other buffer, once written
		}
	}
	return n, nil
}

// finish writes what is buffered, waits for the goroutine and returns the
// first write error (a failed write is reported here, not by Write).
func (w *fileWriter) finish() error {
	if w.sync {
		return w.err
	}
	w.sync = true
	if len(w.buf) > 0 {
		w.full <- w.buf
	}
	close(w.full)
	w.err = <-w.done
	w.buf = nil
	return w.err
}

func (w *fileWriter) Truncate(size int64) error {
	w.finish()
	return w.f.Truncate(size)
}

func (w *fileWriter) Seek(offset int64, whence int) (int64, error) {
	if err := w.finish(); err != nil {
		return 0, err
	}
	return w.f.Seek(offset, whence)
}

var _ io.Writer = (*fileWriter)(nil)
