//go:build !linux

package main

import "os"

// fileIsTerminal: a character device other than the null device (no
// terminal ioctl here; a progress bar on another character device is
// harmless).
func fileIsTerminal(f *os.File) bool {
	st, err := f.Stat()
	if err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	null, err := os.Stat(os.DevNull)
	return err != nil || !os.SameFile(st, null)
}
