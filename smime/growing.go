package smime

import (
	"errors"
	"io"
	"os"
	"sync"
)

// errLayerAborted stops the writer of a growing layer whose reader gave up
// (the layer after it is malformed): the rest would be inflated for nothing.
var errLayerAborted = errors.New("smime: the next layer stopped reading")

// growingLayer is a layer file that one goroutine writes (the inflater)
// while another reads it (the multipart/signed split and its hashes), so
// that the two layers run on two cores instead of one after the other.
// ReadAt blocks until the bytes asked for are written or the writer has
// finished; it then behaves as os.File's ReadAt on the finished file. Only
// the spool file holds the bytes: nothing is buffered in memory.
type growingLayer struct {
	f       *os.File
	mu      sync.Mutex
	more    *sync.Cond
	written int64
	done    bool
	err     error // the writer's error, once done
	size    int64 // what the writer reported, once done
	stopped bool
}

func newGrowingLayer(f *os.File) *growingLayer {
	g := &growingLayer{f: f}
	g.more = sync.NewCond(&g.mu)
	return g
}

// Write appends to the file and wakes the readers.
func (g *growingLayer) Write(p []byte) (int, error) {
	g.mu.Lock()
	stopped := g.stopped
	g.mu.Unlock()
	if stopped {
		return 0, errLayerAborted
	}
	n, err := g.f.Write(p)
	g.mu.Lock()
	g.written += int64(n)
	g.more.Broadcast()
	g.mu.Unlock()
	return n, err
}

// finish records the writer's end: the size it reports and its error (nil:
// the layer is complete).
func (g *growingLayer) finish(size int64, err error) {
	g.mu.Lock()
	g.done, g.err, g.size = true, err, size
	g.more.Broadcast()
	g.mu.Unlock()
}

// stop makes the writer's next Write fail with errLayerAborted.
func (g *growingLayer) stop() {
	g.mu.Lock()
	g.stopped = true
	g.mu.Unlock()
}

// ReadAt waits for off+len(p) bytes or the writer's end.
func (g *growingLayer) ReadAt(p []byte, off int64) (int, error) {
	end := off + int64(len(p))
	g.mu.Lock()
	for !g.done && g.written < end {
		g.more.Wait()
	}
	written, done, werr := g.written, g.done, g.err
	g.mu.Unlock()
	if written >= end {
		return g.f.ReadAt(p, off)
	}
	if done && werr != nil {
		return 0, werr
	}
	if off >= written {
		return 0, io.EOF
	}
	n, err := g.f.ReadAt(p[:written-off], off)
	if err == nil {
		err = io.EOF
	}
	return n, err
}

// complete reports whether the writer has finished.
func (g *growingLayer) complete() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.done
}

// wait blocks until the writer has finished and returns what it reported.
func (g *growingLayer) wait() (int64, error) {
	g.mu.Lock()
	for !g.done {
		g.more.Wait()
	}
	defer g.mu.Unlock()
	return g.size, g.err
}

// waitFor blocks until n bytes are written or the writer has finished.
func (g *growingLayer) waitFor(n int64) {
	g.mu.Lock()
	for !g.done && g.written < n {
		g.more.Wait()
	}
	g.mu.Unlock()
}

// onFile rebases a section of the growing layer onto its file, for those
// that need the file itself (the payload's path) once the layer is done.
func (g *growingLayer) onFile(s *Section) {
	if s.R == io.ReaderAt(g) {
		s.R = g.f
	}
}
