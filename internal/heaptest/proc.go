package heaptest

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ProcStatus returns a kB field of /proc/<pid>/status (VmRSS, VmHWM, …) in
// bytes, for the tests that bound a process's resident memory; pid 0 is
// this process. It returns 0 where /proc is not there or has no such field.
func ProcStatus(pid int, field string) uint64 {
	path := "/proc/self/status"
	if pid != 0 {
		path = fmt.Sprintf("/proc/%d/status", pid)
	}
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n << 10
		}
	}
	return 0
}
