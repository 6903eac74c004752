// Package bufpool keeps large byte buffers between the exchanges that use
// them (read-ahead and pipe chunks of 256 KiB, the first 64 KiB of an
// attachment): a message of a few KiB then does not allocate, and the
// runtime does not clear, a MiB of buffers it barely uses.
package bufpool

import "sync"

// pools holds one pool per buffer size.
var pools sync.Map // int → *sync.Pool

func pool(size int) *sync.Pool {
	if p, ok := pools.Load(size); ok {
		return p.(*sync.Pool)
	}
	p, _ := pools.LoadOrStore(size, &sync.Pool{New: func() any { b := make([]byte, size); return &b }})
	return p.(*sync.Pool)
}

// Get returns a buffer of size bytes (its contents are not cleared).
func Get(size int) []byte { return *pool(size).Get().(*[]byte) }

// Put gives b back to the pool of its capacity; the caller must not use
// it (nor any slice of it) afterwards.
func Put(b []byte) {
	if cap(b) == 0 {
		return
	}
	b = b[:cap(b)]
	pool(cap(b)).Put(&b)
}
