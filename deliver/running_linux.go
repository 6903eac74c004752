//go:build linux

package deliver

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// An exec command runs in a process group of its own. The direct child
// dies with the gateway (Pdeathsig, exec_linux.go); what it started does
// not, so every running command's group is recorded in a file of the run
// directory (ExecConfig.RunDir) while it runs, and ReapLeftovers, at the
// next start, kills the groups a gateway that died left behind: the
// partner's retransmission must not run the command beside an old copy.
//
// A record is named <pgid>.run and holds one line:
//
//	<host> <gateway pid> <gateway start> <leader start> <marker>
//
// where the start times are /proc/<pid>/stat's starttime (clock ticks since
// boot) and marker is the random GATEWAY_EXEC_RUN value in the command's
// environment. A group is killed only when its gateway is gone (no process
// with that pid and start time on this host) and the group is still the
// command's: its leader with the recorded start time, or a member whose
// environment carries the marker.

type runRecord struct {
	path   string
	marker string
}

// newRunMarker is a fresh GATEWAY_EXEC_RUN value.
func newRunMarker() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// recordRun writes the record of the group pgid (the command's pid) in
// dir; nil when dir is empty or the record cannot be written (then only
// Pdeathsig guards the group).
func recordRun(dir string, pgid int, marker string, log *slog.Logger) *runRecord {
	if dir == "" {
		return nil
	}
	self, err := procStart(os.Getpid())
	if err == nil {
		var leader uint64
		if leader, err = procStart(pgid); err == nil {
			host, _ := os.Hostname()
			line := fmt.Sprintf("%s %d %d %d %s\n", hostField(host), os.Getpid(), self, leader, marker)
			path := filepath.Join(dir, strconv.Itoa(pgid)+".run")
			if err = os.WriteFile(path, []byte(line), 0o600); err == nil {
				return &runRecord{path: path, marker: marker}
			}
		}
	}
	log.Warn("exec: running command not recorded; if the gateway dies, what it started is not killed at the next start", "pgid", pgid, "err", err)
	return nil
}

func (r *runRecord) done() {
	if r != nil {
		os.Remove(r.path)
	}
}

func hostField(h string) string {
	if h = strings.Join(strings.Fields(h), "_"); h == "" {
		return "-"
	}
	return h
}

// ReapLeftovers kills the process groups of exec commands that a gateway
// which is gone left running (records in dir), and removes their records.
// Records of a gateway that still runs (another one sharing dir) and of
// another host are left alone. It returns the number of groups killed.
func ReapLeftovers(dir string, log *slog.Logger) (int, error) {
	if dir == "" {
		return 0, nil
	}
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, fmt.Errorf("deliver: exec run directory: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("deliver: exec run directory: %w", err)
	}
	host, _ := os.Hostname()
	host = hostField(host)
	killed := 0
	var errs []error
	for _, e := range ents {
		name := e.Name()
		pgid, err := strconv.Atoi(strings.TrimSuffix(name, ".run"))
		if !strings.HasSuffix(name, ".run") || err != nil || pgid <= 1 {
			continue
		}
		path := filepath.Join(dir, name)
		b, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		f := strings.Fields(string(b))
		if len(f) != 5 {
			os.Remove(path)
			continue
		}
		ownerPid, _ := strconv.Atoi(f[1])
		ownerStart, _ := strconv.ParseUint(f[2], 10, 64)
		leaderStart, _ := strconv.ParseUint(f[3], 10, 64)
		if f[0] != host {
			continue
		}
		if st, err := procStart(ownerPid); err == nil && st == ownerStart {
			continue // its gateway runs (this one or another)
		}
		if groupIsOurs(pgid, leaderStart, f[4]) {
			if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("kill process group %d: %w", pgid, err))
				continue
			}
			killed++
			log.Warn("exec: killed the process group of a command that a gateway which is gone left running", "pgid", pgid, "gateway_pid", ownerPid)
		}
		os.Remove(path)
	}
	return killed, errors.Join(errs...)
}

// groupIsOurs says whether the live process group pgid is the recorded
// command's: its leader has the recorded start time, or a member carries
// the marker in its environment. A group with no live member is not.
func groupIsOurs(pgid int, leaderStart uint64, marker string) bool {
	if st, err := procStart(pgid); err == nil && st == leaderStart {
		if g, err := procGroup(pgid); err == nil && g == pgid {
			return true
		}
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	want := []byte("\x00" + envRunMarker + "=" + marker + "\x00")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		if g, err := procGroup(pid); err != nil || g != pgid {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", p.Name(), "environ"))
		if err == nil && bytes.Contains(append(append([]byte{0}, env...), 0), want) {
			return true
		}
	}
	return false
}

// procStat returns the fields of /proc/pid/stat after the command name:
// [0] is the state, [2] the process group, [19] the start time.
func procStat(pid int) ([]string, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return nil, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	if f[0] == "Z" || f[0] == "X" {
		return nil, fmt.Errorf("process %d: %w", pid, os.ErrNotExist)
	}
	return f, nil
}

// procStart is the start time of a live process.
func procStart(pid int) (uint64, error) {
	f, err := procStat(pid)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(f[19], 10, 64)
}

func procGroup(pid int) (int, error) {
	f, err := procStat(pid)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(f[2])
}
