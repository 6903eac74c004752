//go:build linux

package deliver

import (
	"log/slog"
	"os/exec"
	"syscall"
)

// superviseCommand runs cmd (path with args) under the supervisor that
// kills its process group when the gateway dies (supervise_linux.go).
// Should that not be possible, the command itself at least dies with the
// gateway (Pdeathsig; the caller holds the forking thread for the
// command's life, see Exec.run), and what it started is killed at the
// next start (ReapLeftovers).
func superviseCommand(cmd *exec.Cmd, path string, args []string, log *slog.Logger) (started, done func()) {
	started, done, err := supervised(cmd, path, args)
	if err != nil {
		log.Warn("exec: command not supervised; if the gateway dies, what it started runs until the next start", "err", err)
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
		return func() {}, func() {}
	}
	return started, done
}
