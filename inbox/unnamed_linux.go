package inbox

import (
	"errors"
	"os"
	"strconv"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// emptyPathOff is set once linking a descriptor (AT_EMPTY_PATH) was refused
// while /proc/self/fd worked.
var emptyPathOff atomic.Bool

// openUnnamed opens a new file in dir that has no name (O_TMPFILE): nothing
// in dir changes until linkUnnamed gives it its name, so there is no
// temporary name to create and remove, and a crash before the link leaves
// nothing visible (the file system frees it). It returns (nil, nil) where
// the file system cannot (EOPNOTSUPP, or EISDIR / EINVAL from kernels that
// do not know the flag): the caller uses a named temporary file then.
func openUnnamed(dir string) (*os.File, error) {
	if unnamedOff.Load() {
		return nil, nil
	}
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
	if err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EINVAL) {
			return nil, nil
		}
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	return os.NewFile(uintptr(fd), dir), nil
}

// linkUnnamed gives f, opened by openUnnamed, the name final; it fails with
// an error wrapping os.ErrExist when final exists. It links the descriptor
// itself (AT_EMPTY_PATH) where the process may (CAP_DAC_READ_SEARCH, as
// root), else through /proc/self/fd, which costs a lookup in /proc per
// file; errNoLink means neither can work here (no /proc), and unnamed files
// are not used again by this process.
func linkUnnamed(f *os.File, final string) error {
	tried := false
	if !emptyPathOff.Load() {
		err := unix.Linkat(int(f.Fd()), "", unix.AT_FDCWD, final, unix.AT_EMPTY_PATH)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, unix.EEXIST):
			return &os.LinkError{Op: "link", Old: f.Name(), New: final, Err: err}
		}
		tried = true // refused (ENOENT without the capability): /proc then
	}
	err := unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(int(f.Fd())), unix.AT_FDCWD, final, unix.AT_SYMLINK_FOLLOW)
	if err == nil {
		if tried {
			emptyPathOff.Store(true) // /proc works where the descriptor did not
		}
		return nil
	}
	if errors.Is(err, unix.EEXIST) {
		return &os.LinkError{Op: "link", Old: f.Name(), New: final, Err: err}
	}
	if _, serr := os.Stat("/proc/self/fd"); serr != nil {
		unnamedOff.Store(true)
		return errNoLink
	}
	return &os.LinkError{Op: "link", Old: f.Name(), New: final, Err: err}
}
