//go:build unix

package connlimit

import "syscall"

// NOFILE is the process's current descriptor limit (RLIMIT_NOFILE, soft),
// 0 when unknown or above 2^30 (unlimited). Go raises the soft limit to the hard one at start.
func NOFILE() int {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur > 1<<30 {
		return 0
	}
	return int(r.Cur)
}
