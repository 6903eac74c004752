//go:build !linux

package deliver

import "log/slog"

// Without /proc and Pdeathsig, running commands are not recorded: a
// command outlives a gateway that dies until its timeout never comes.

type runRecord struct{}

func newRunMarker() string { return "" }

func recordRun(dir string, pgid int, marker string, log *slog.Logger) *runRecord { return nil }

func (r *runRecord) done() {}

// ReapLeftovers does nothing on this system (see running_linux.go).
func ReapLeftovers(dir string, log *slog.Logger) (int, error) { return 0, nil }
