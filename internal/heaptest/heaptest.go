// Package heaptest measures what a piece of code allocates, for the tests
// that bound it.
package heaptest

import "runtime"

// Allocated returns the bytes f allocated on the heap (runtime.MemStats
// TotalAlloc before and after; other goroutines' allocations count too).
func Allocated(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}
