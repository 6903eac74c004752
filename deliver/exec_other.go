//go:build !unix

package deliver

import (
	"log/slog"
	"os/exec"
)

// setProcessGroup: without process groups only the command itself is
// killed on timeout.
func setProcessGroup(cmd *exec.Cmd) {}

func killProcessGroup(cmd *exec.Cmd) {}

// superviseCommand: no supervisor on this system.
func superviseCommand(cmd *exec.Cmd, path string, args []string, log *slog.Logger) (started, done func()) {
	return func() {}, func() {}
}
