//go:build unix && !linux

package deliver

import (
	"log/slog"
	"os/exec"
)

// superviseCommand: no supervisor on this system.
func superviseCommand(cmd *exec.Cmd, path string, args []string, log *slog.Logger) (started, done func()) {
	return func() {}, func() {}
}
