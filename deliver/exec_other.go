//go:build !unix

package deliver

import "os/exec"

// setProcessGroup: without process groups only the command itself is
// killed on timeout.
func setProcessGroup(cmd *exec.Cmd) {}

func killProcessGroup(cmd *exec.Cmd) {}
