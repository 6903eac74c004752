package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// fileIsTerminal asks the terminal driver (TCGETS succeeds only on a tty;
// /dev/null, pipes and files fail it).
func fileIsTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
