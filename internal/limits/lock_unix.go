//go:build unix

package limits

import (
	"os"
	"syscall"
)

// tryLock takes an exclusive flock on f without waiting; the kernel drops
// it when the process ends, however it ends.
func tryLock(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}

// holdLock takes the lock of this process's own area.
func holdLock(f *os.File) error { return tryLock(f) }
