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

// errLayerRewound is what readers of a growing layer get once its writer
// has discarded what it wrote (a decryption attempt with one of several
// keys failed and the next is tried): what they read may not be the
// layer's content.
var errLayerRewound = errors.New("smime: the layer was written again")

// Write-behind of a growing layer: the writer's bytes are copied into
// chunks that a goroutine of the layer appends to the file, so that the
// writer (the inflater, the decrypter) spends its core on its own work
// and not on the file system. At most layerQueue chunks wait: memory is
// bounded (1 MiB per layer) whatever the layer's size.
const (
	layerChunk = 64 << 10
	layerQueue = 16
)

// growingLayer is a layer file that one goroutine writes (the inflater or
// the decrypter) while another reads it (the next layer's parser, the
// multipart/signed split and its hashes), so that the layers run on both
// cores instead of one after the other. ReadAt blocks until the bytes asked
// for are in the file or the writer has finished; it then behaves as
// os.File's ReadAt on the finished file. The bytes live in the spool file;
// memory holds only the write-behind queue.
type growingLayer struct {
	f    *os.File
	mu   sync.Mutex
	more *sync.Cond // readers, finish and Truncate: written, done or the queue changed
	work *sync.Cond // the flusher: a chunk is queued, or the writer finished
	room *sync.Cond // the writer: the queue has room

	queue    [][]byte // chunks waiting for the file, in order
	free     [][]byte
	writing  bool  // the flusher is writing a chunk (outside mu)
	accepted int64 // bytes Write took since the last Truncate
	written  int64 // bytes in the file
	ferr     error // the first file write error
	closing  bool  // finish was called: the flusher drains and ends
	flushed  bool  // the flusher has ended

	done    bool
	err     error // the writer's error (or the file's), once done
	size    int64 // the layer's size, once done
	stopped bool
	rewound bool
}

func newGrowingLayer(f *os.File) *growingLayer {
	g := &growingLayer{f: f}
	g.more = sync.NewCond(&g.mu)
	g.work = sync.NewCond(&g.mu)
	g.room = sync.NewCond(&g.mu)
	go g.flush()
	return g
}

// Write queues p for the file and returns; it waits only while the queue
// is full.
func (g *growingLayer) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for len(p) > 0 {
		for len(g.queue) >= layerQueue && g.ferr == nil && !g.stopped {
			g.room.Wait()
		}
		switch {
		case g.stopped:
			return n, errLayerAborted
		case g.ferr != nil:
			return n, g.ferr
		}
		var c []byte
		if k := len(g.free); k > 0 {
			c, g.free = g.free[k-1][:0], g.free[:k-1]
		} else {
			c = make([]byte, 0, layerChunk)
		}
		k := min(len(p), layerChunk)
		g.queue = append(g.queue, append(c, p[:k]...))
		g.work.Signal()
		p, n, g.accepted = p[k:], n+k, g.accepted+int64(k)
	}
	return n, nil
}

// flush appends the queued chunks to the file until the writer finishes
// and the queue is empty.
func (g *growingLayer) flush() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for {
		for len(g.queue) == 0 && !g.closing {
			g.work.Wait()
		}
		if len(g.queue) == 0 {
			g.flushed = true
			g.more.Broadcast()
			return
		}
		c := g.queue[0]
		g.writing = true
		g.mu.Unlock()
		k, err := g.f.Write(c)
		g.mu.Lock()
		g.writing = false
		g.queue = append(g.queue[:0], g.queue[1:]...)
		g.free = append(g.free, c)
		g.written += int64(k)
		if err != nil && g.ferr == nil {
			// The file is short from here on: nothing more is appended.
			g.ferr = err
			g.free = append(g.free, g.queue...)
			g.queue = g.queue[:0]
		}
		g.room.Signal()
		g.more.Broadcast()
	}
}

// drain waits, with mu held, until the flusher has written every queued
// chunk.
func (g *growingLayer) drain() {
	for len(g.queue) > 0 || g.writing {
		g.more.Wait()
	}
}

// finish records the writer's end once every byte it wrote is in the
// file: its error (nil: the layer is complete) or the file's.
func (g *growingLayer) finish(err error) {
	g.mu.Lock()
	g.closing = true
	g.work.Signal()
	for !g.flushed {
		g.more.Wait()
	}
	if err == nil {
		err = g.ferr
	}
	g.done, g.err, g.size = true, err, g.written
	g.more.Broadcast()
	g.mu.Unlock()
}

// stop makes the writer's next Write fail with errLayerAborted.
func (g *growingLayer) stop() {
	g.mu.Lock()
	g.stopped = true
	g.room.Broadcast()
	g.mu.Unlock()
}

// Truncate and Seek make the layer a cms.Sink: the decrypter discards
// what a failed attempt wrote with Truncate(0) and Seek(0, io.SeekStart).
// From then on readers fail with errLayerRewound (they may have read the
// discarded bytes); the file itself is written again from its start.
func (g *growingLayer) Truncate(size int64) error {
	if size != 0 {
		return errors.New("smime: a growing layer is truncated only to nothing")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.drain()
	if g.accepted > 0 {
		g.rewound = true
	}
	g.accepted, g.written = 0, 0
	g.more.Broadcast()
	return g.f.Truncate(0)
}

func (g *growingLayer) Seek(offset int64, whence int) (int64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.drain()
	return g.f.Seek(offset, whence)
}

// ReadAt waits for off+len(p) bytes in the file or the writer's end.
func (g *growingLayer) ReadAt(p []byte, off int64) (int, error) {
	end := off + int64(len(p))
	g.mu.Lock()
	for !g.done && !g.rewound && g.written < end {
		g.more.Wait()
	}
	written, done, werr, rewound := g.written, g.done, g.err, g.rewound
	g.mu.Unlock()
	switch {
	case rewound:
		return 0, errLayerRewound
	case written >= end:
		return g.f.ReadAt(p, off)
	case done && werr != nil:
		return 0, werr
	case off >= written:
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

// wait blocks until the writer has finished and returns the layer's size
// and the writer's error.
func (g *growingLayer) wait() (int64, error) {
	g.mu.Lock()
	for !g.done {
		g.more.Wait()
	}
	defer g.mu.Unlock()
	return g.size, g.err
}

// waitFor blocks until n bytes are in the file or the writer has finished.
func (g *growingLayer) waitFor(n int64) {
	g.mu.Lock()
	for !g.done && !g.rewound && g.written < n {
		g.more.Wait()
	}
	g.mu.Unlock()
}

// wasRewound reports whether the writer discarded what it had written.
func (g *growingLayer) wasRewound() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.rewound
}

// onFile rebases a section of the finished layer onto its file, for those
// that need the file itself (the payload's path), and gives a section
// that ran to the layer's unknown end (openSize) its real length.
func (g *growingLayer) onFile(s *Section) {
	if s.R != io.ReaderAt(g) {
		return
	}
	s.R = g.f
	if s.N >= openSize/2 {
		s.N = max(g.size-s.Off, 0)
	}
}

// openSize is the length of a section that runs to the end of a layer
// still being written, whose size is known only at its end.
const openSize = 1 << 62
