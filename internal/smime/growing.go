package smime

import (
	"errors"
	"io"
	"math"
	"os"
	"sync"
	"sync/atomic"
)

// passedLayers counts the layers passed through memory (tests).
var passedLayers atomic.Int64

// errLayerAborted stops the writer of a growing layer whose reader gave up
// (the layer after it is malformed): the rest would be inflated for nothing.
var errLayerAborted = errors.New("smime: the next layer stopped reading")

// errLayerRewound is what readers of a growing layer get once its writer
// has discarded what it wrote (a decryption attempt with one of several
// keys failed and the next is tried): what they read may not be the
// layer's content.
var errLayerRewound = errors.New("smime: the layer was written again")

// errLayerDropped is what a reader of a passed-through layer gets for bytes
// it has already read past (see growingLayer.passThrough).
var errLayerDropped = errors.New("smime: the layer's earlier bytes were not kept")

// The writer's bytes are copied into chunks of layerChunk bytes (a write
// fills the last chunk before it starts another). Kept in the file, at most
// layerQueue bytes wait for it (write-behind: a goroutine of the layer
// appends the full chunks, so that the writer spends its core on its own
// work, not on the file system). A layer whose keeping is undecided holds
// up to layerWindow bytes in memory before it starts writing them to the
// file after all. Memory is bounded whatever the layer's size.
//
// The chunks are large and the goroutines are woken only when what they
// wait for is there (a reader: the bytes it asked for; the flusher: a full
// chunk): on a machine with two cores a goroutine woken costs the core it
// is woken on a wait far longer than a memory copy, and the writer and
// the readers of a layer would otherwise wake each other for every few
// KiB.
const (
	layerChunk  = 256 << 10
	layerQueue  = 1 << 20
	layerWindow = 4 << 20
)

// noWaiter is growingLayer.wake while no reader waits for bytes.
const noWaiter = math.MaxInt64

// Whether a layer's bytes go to its file.
const (
	layerKept      = iota // appended to the file (the default)
	layerUndecided        // held in memory until passThrough or keep
	layerPassed           // never written: dropped once the one reader is past them
	layerDiscarded        // the reader has ended: the writer's bytes are dropped at once
)

// growingLayer is a layer that one goroutine writes (the inflater or the
// decrypter) while another reads it (the next layer's parser and
// inflater, the multipart/signed split and its hashes), so that the layers
// run on both cores instead of one after the other. ReadAt blocks until
// the bytes asked for are written or the writer has finished; it then
// behaves as os.File's ReadAt on the finished file. Bytes of a kept layer
// live in its file; memory holds only the chunks not yet appended to it.
//
// A layer made undecided (newPassableLayer) is not written to its file
// until the reader decides: passThrough when the one sequential reader is
// all that will ever read it (a decrypted layer that only the inflater
// reads: its bytes never touch the disk); it is kept otherwise, once
// layerWindow chunks wait or the writer finishes.
type growingLayer struct {
	f       *os.File
	mu      sync.Mutex
	more    *sync.Cond // readers: the bytes they wait for, done, or Truncate
	work    *sync.Cond // the flusher: a full chunk to write, the mode changed, a drain, or the writer finished
	room    *sync.Cond // the writer: the queue has room
	drained *sync.Cond // drain and finish: the flusher wrote a chunk or ended

	mode     int
	queue    [][]byte // chunks not in the file (kept) or not yet read past (passed), in order
	base     int64    // offset of queue[0]
	free     [][]byte
	writing  bool  // the flusher is writing queue[0] (outside mu)
	draining int   // drain calls waiting: the flusher writes a chunk that is not full too
	wake     int64 // the fewest bytes a waiting reader waits for (noWaiter: none)
	accepted int64 // bytes Write took since the last Truncate
	ferr     error // the first file write error
	closing  bool  // finish was called: the flusher drains and ends
	flushed  bool  // the flusher has ended
	dropped  bool  // a reader asked for bytes no longer kept
	want     int64 // the end of the bytes a reader waits for

	done    bool
	err     error // the writer's error (or the file's), once done
	size    int64 // the layer's size, once done
	stopped bool
	rewound bool
}

func newGrowingLayer(f *os.File) *growingLayer {
	g := &growingLayer{f: f, wake: noWaiter}
	g.more = sync.NewCond(&g.mu)
	g.work = sync.NewCond(&g.mu)
	g.room = sync.NewCond(&g.mu)
	g.drained = sync.NewCond(&g.mu)
	go g.flush()
	return g
}

// newPassableLayer is a growing layer whose bytes stay in memory until the
// reader calls passThrough, or layerWindow chunks wait, or the writer
// finishes (then it is kept).
func newPassableLayer(f *os.File) *growingLayer {
	g := newGrowingLayer(f)
	g.mode = layerUndecided
	return g
}

// Write takes p and returns; it waits only while the queue is full.
func (g *growingLayer) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for len(p) > 0 {
		for {
			if g.stopped || g.ferr != nil || g.mode == layerDiscarded {
				break
			}
			if g.mode == layerUndecided && g.accepted-g.base >= layerWindow {
				// Nobody has decided in time: the layer is kept.
				g.mode = layerKept
				g.work.Signal()
			}
			if g.accepted-g.base < layerQueue || g.mode == layerUndecided || g.mode == layerPassed && g.accepted < g.want {
				// (A reader waits for bytes beyond the queue: it gets them
				// rather than both waiting for each other.)
				break
			}
			g.room.Wait()
		}
		switch {
		case g.stopped:
			return n, errLayerAborted
		case g.ferr != nil:
			return n, g.ferr
		}
		k := min(len(p), layerChunk)
		if g.mode == layerDiscarded {
			g.base += int64(k)
		} else {
			last := len(g.queue) - 1
			if last >= 0 && len(g.queue[last]) < cap(g.queue[last]) && !(last == 0 && g.writing) {
				// The last chunk has room (and the flusher is not writing it).
				c := g.queue[last]
				k = min(len(p), cap(c)-len(c))
				g.queue[last] = append(c, p[:k]...)
			} else {
				var c []byte
				if f := len(g.free); f > 0 {
					c, g.free = g.free[f-1][:0], g.free[:f-1]
				} else {
					c = make([]byte, 0, layerChunk)
				}
				g.queue = append(g.queue, append(c, p[:k]...))
			}
			if g.flushable() {
				g.work.Signal()
			}
		}
		p, n, g.accepted = p[k:], n+k, g.accepted+int64(k)
		if g.accepted >= g.wake {
			g.wakeReaders()
		}
	}
	return n, nil
}

// wakeReaders wakes, with mu held, every reader waiting on more; those
// still short of bytes say again how many they wait for.
func (g *growingLayer) wakeReaders() {
	g.wake = noWaiter
	g.more.Broadcast()
}

// flushable reports, with mu held, whether the flusher has a chunk to
// write: a full one, or any once the writer has finished or a drain waits.
func (g *growingLayer) flushable() bool {
	if len(g.queue) == 0 || g.mode != layerKept || g.ferr != nil {
		return false
	}
	return len(g.queue) > 1 || len(g.queue[0]) == cap(g.queue[0]) || g.closing || g.draining > 0
}

// flush appends the queued chunks of a kept layer to the file until the
// writer finishes and the queue is empty.
func (g *growingLayer) flush() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for {
		for !g.flushable() && !g.closing {
			g.work.Wait()
		}
		if !g.flushable() {
			g.flushed = true
			g.drained.Broadcast()
			return
		}
		c := g.queue[0]
		g.writing = true
		g.mu.Unlock()
		k, err := g.f.Write(c)
		g.mu.Lock()
		g.writing = false
		if err != nil && g.ferr == nil {
			// The file is short from here on: nothing more is appended.
			g.ferr = err
		}
		if k == len(c) {
			g.pop()
		}
		g.room.Signal()
		if g.draining > 0 {
			g.drained.Broadcast()
		}
	}
}

// pop drops queue[0], with mu held.
func (g *growingLayer) pop() {
	c := g.queue[0]
	g.base += int64(len(c))
	g.queue = append(g.queue[:0], g.queue[1:]...)
	g.free = append(g.free, c)
}

// passThrough makes an undecided layer one that is never written to its
// file: its one reader reads it sequentially from memory, and what it has
// read past is dropped. It reports false when the layer is already kept.
func (g *growingLayer) passThrough() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mode == layerUndecided {
		g.mode = layerPassed
		g.work.Signal() // the flusher has nothing to do: it ends at finish
		passedLayers.Add(1)
		return true
	}
	return g.mode == layerPassed
}

// release tells a passed-through layer that its reader has ended: the
// writer's further bytes are dropped (it runs to its end without waiting,
// so that its own outcome is known).
func (g *growingLayer) release() {
	g.mu.Lock()
	if g.mode == layerPassed {
		g.mode = layerDiscarded
		for len(g.queue) > 0 {
			g.pop()
		}
		g.room.Broadcast()
	}
	g.mu.Unlock()
}

// drain waits, with mu held, until the flusher has written every queued
// chunk of a kept layer.
func (g *growingLayer) drain() {
	g.draining++
	defer func() { g.draining-- }()
	for g.mode == layerKept && g.ferr == nil && (len(g.queue) > 0 || g.writing) && !g.flushed {
		g.work.Signal()
		g.drained.Wait()
	}
}

// finish records the writer's end once every byte it wrote to a kept layer
// is in the file: its error (nil: the layer is complete) or the file's. An
// undecided layer is kept then.
func (g *growingLayer) finish(err error) {
	g.mu.Lock()
	if g.mode == layerUndecided {
		g.mode = layerKept
	}
	g.closing = true
	g.work.Signal()
	for !g.flushed {
		g.drained.Wait()
	}
	if err == nil {
		err = g.ferr
	}
	g.done, g.err, g.size = true, err, g.accepted
	g.wakeReaders()
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
// discarded bytes); the layer is written again from its start.
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
	for len(g.queue) > 0 {
		g.pop()
	}
	g.accepted, g.base = 0, 0
	g.wakeReaders()
	g.room.Broadcast()
	return g.f.Truncate(0)
}

func (g *growingLayer) Seek(offset int64, whence int) (int64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.drain()
	return g.f.Seek(offset, whence)
}

// ReadAt waits for off+len(p) bytes or the writer's end.
func (g *growingLayer) ReadAt(p []byte, off int64) (int, error) {
	end := off + int64(len(p))
	g.mu.Lock()
	defer g.mu.Unlock()
	g.passed(off)
	for !g.done && !g.rewound && g.accepted < end {
		g.want = max(g.want, end)
		g.wake = min(g.wake, end)
		g.room.Signal()
		g.more.Wait()
	}
	switch {
	case g.rewound:
		return 0, errLayerRewound
	case g.done && g.err != nil && g.accepted < end:
		return 0, g.err
	case off >= g.accepted:
		return 0, io.EOF
	}
	n := 0
	if off < g.base {
		if g.mode != layerKept {
			g.dropped = true
			return 0, errLayerDropped
		}
		// In the file already.
		k := int(min(end, g.base) - off)
		g.mu.Unlock()
		m, err := g.f.ReadAt(p[:k], off)
		g.mu.Lock()
		if m < k {
			return m, err
		}
		n = k
	}
	// The rest from the chunks in memory (a kept layer's may have been
	// written and dropped meanwhile: read the file for those).
	for n < len(p) && off+int64(n) < g.accepted {
		at := off + int64(n)
		if at < g.base {
			g.mu.Unlock()
			m, err := g.f.ReadAt(p[n:n+int(min(end, g.base)-at)], at)
			g.mu.Lock()
			n += m
			if err != nil && !errors.Is(err, io.EOF) {
				return n, err
			}
			continue
		}
		rel := at - g.base
		for _, c := range g.queue {
			if rel < int64(len(c)) {
				n += copy(p[n:], c[rel:])
				break
			}
			rel -= int64(len(c))
		}
	}
	g.passed(off)
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// passed drops, with mu held, the chunks of a passed-through layer that
// its one reader, now at off, has read past.
func (g *growingLayer) passed(off int64) {
	if g.mode != layerPassed {
		return
	}
	for len(g.queue) > 0 && g.base+int64(len(g.queue[0])) <= off {
		g.pop()
		g.room.Signal()
	}
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

// waitFor blocks until n bytes are written or the writer has finished.
func (g *growingLayer) waitFor(n int64) {
	g.mu.Lock()
	for !g.done && !g.rewound && g.accepted < n {
		g.wake = min(g.wake, n)
		g.more.Wait()
	}
	g.mu.Unlock()
}

// wasRewound reports whether the writer discarded what it had written, and
// wasDropped whether a reader asked for bytes a passed-through layer no
// longer had: in both cases what was read from the layer is not to be used.
func (g *growingLayer) wasRewound() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.rewound
}

func (g *growingLayer) wasDropped() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.dropped
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
