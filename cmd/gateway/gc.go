package main

import (
	"log/slog"
	"runtime/debug"
)

// serveGCPercent is the collector's target for `gateway serve` when the
// environment sets neither GOGC nor GOMEMLIMIT. A message of the load test
// (10 KB, signed and encrypted) allocates a few hundred KiB of short-lived
// garbage on a small live heap, so at Go's default (100) the collector ran
// many times a second: 5–6 % of the CPU under AS4 load, 1.6 % at 400.
const serveGCPercent = 400

// serveGCLimitMargin is added to twice the memory budget for the soft
// memory limit that comes with serveGCPercent.
const serveGCLimitMargin = 256 << 20

// gcSettings decides the collector's settings for serve: with GOGC or
// GOMEMLIMIT in the environment, or without a memory budget (0: unlimited),
// Go's own (ok false). Otherwise serveGCPercent with a soft memory limit of
// twice the budget plus a margin: at Go's default the heap may grow to
// twice what is live, and what requests hold is bounded by the budget, so
// the limit keeps the heap where the default would have let it grow while
// the collector runs less often below it.
func gcSettings(budget int64, getenv func(string) string) (percent int, limit int64, ok bool) {
	if getenv("GOGC") != "" || getenv("GOMEMLIMIT") != "" || budget <= 0 {
		return 0, 0, false
	}
	return serveGCPercent, 2*budget + serveGCLimitMargin, true
}

// tuneGC applies gcSettings and logs what it chose.
func tuneGC(budget int64, getenv func(string) string, log *slog.Logger) {
	percent, limit, ok := gcSettings(budget, getenv)
	if !ok {
		return
	}
	debug.SetGCPercent(percent)
	debug.SetMemoryLimit(limit)
	log.Info("garbage collector tuned (GOGC or GOMEMLIMIT in the environment choose otherwise)",
		"gogc", percent, "memory_limit_bytes", limit)
}
