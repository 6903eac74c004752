//go:build !unix

package connlimit

// NOFILE is 0: the descriptor limit is not known on this system.
func NOFILE() int { return 0 }
