package main

import (
	"log/slog"
	"runtime"
)

// serveExtraProcs bounds the schedulers (Ps) that `gateway serve` adds to
// Go's default of one per CPU when the environment does not set GOMAXPROCS.
//
// Every exchange waits in fsync several times (the store's commit, the
// audit file, the inbox files and their directory), and a goroutine in a
// system call keeps its P until the runtime's monitor takes it back, after
// one of its ticks at least (20 µs, but up to 10 ms when it has been idle).
// With one P per core, a core sits idle while its P waits in fsync, even
// with messages ready to run: on the 2-core machine under AS2 load (c=8,
// SQLite) a runtime trace showed on average three goroutines ready to run
// and waiting for a P while the machine was 15–25 % idle, and the rate was
// about 78 % of what the measured CPU per message allows with both cores
// busy (gateway-load's cpu_bound_ratio). With 4 Ps: about 85 %, 343–358 →
// 375–381 msgs/s; 6 and 8 Ps gave no more (README, Performance). Ps beyond the cores cost little
// when every one is busy: the kernel shares the cores between their threads.
const serveExtraProcs = 8

// procsSettings decides serve's GOMAXPROCS: Go's default (defaultProcs, one
// per CPU the process may use) plus as many again, at most serveExtraProcs
// more; ok false when the environment sets GOMAXPROCS (then it applies).
func procsSettings(defaultProcs int, getenv func(string) string) (procs int, ok bool) {
	if getenv("GOMAXPROCS") != "" || defaultProcs < 1 {
		return 0, false
	}
	return defaultProcs + min(defaultProcs, serveExtraProcs), true
}

// tuneProcs applies procsSettings and logs what it chose. Setting
// GOMAXPROCS stops the runtime from following a container CPU limit that
// changes while the process runs; the next start counts again.
func tuneProcs(getenv func(string) string, log *slog.Logger) {
	def := runtime.GOMAXPROCS(0)
	procs, ok := procsSettings(def, getenv)
	if !ok {
		return
	}
	runtime.GOMAXPROCS(procs)
	log.Info("schedulers raised above the CPUs so that exchanges waiting in fsync do not idle a core (GOMAXPROCS in the environment chooses otherwise)",
		"gomaxprocs", procs, "cpus", def)
}
