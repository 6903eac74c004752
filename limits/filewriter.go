package limits

import (
	"io"
	"os"
)

// FileWriterBuffer is the size of each of fileWriter's two buffers.
const FileWriterBuffer = 1 << 20

// FileWriter writes to a spool file from its own goroutine, so that the
// kernel's copy into the page cache runs on another core while the caller
// receives, decrypts or inflates the next megabyte: two buffers of
// FileWriterBuffer bytes, the one being filled and the one being written.
// Write errors are reported by Finish (and by Write once finished);
// Truncate and Seek first wait for everything written (as Finish does),
// after which writes go to the file directly. It is a cms.Sink.
type FileWriter struct {
	f    *os.File
	buf  []byte
	full chan []byte
	free chan []byte
	done chan error
	err  error
	sync bool // finished: write to f directly
}

// NewFileWriter starts writing to f.
func NewFileWriter(f *os.File) *FileWriter {
	w := &FileWriter{f: f, buf: make([]byte, 0, FileWriterBuffer), full: make(chan []byte, 1),
		free: make(chan []byte, 2), done: make(chan error, 1)}
	w.free <- make([]byte, 0, FileWriterBuffer)
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

func (w *FileWriter) Write(p []byte) (int, error) {
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

// Finish writes what is buffered, waits for the goroutine and returns the
// first write error (a failed write is reported here, not by Write).
func (w *FileWriter) Finish() error {
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
	for len(w.free) > 0 {
		<-w.free // the buffers go with the writer's work
	}
	return w.err
}

func (w *FileWriter) Truncate(size int64) error {
	w.Finish()
	return w.f.Truncate(size)
}

func (w *FileWriter) Seek(offset int64, whence int) (int64, error) {
	if err := w.Finish(); err != nil {
		return 0, err
	}
	return w.f.Seek(offset, whence)
}

var _ io.Writer = (*FileWriter)(nil)
