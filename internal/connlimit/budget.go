package connlimit

// Budget is how a process's file descriptors are shared: the admin
// listener's connections, the partner listener's, and a reserve for
// everything else (the store, spool and inbox files, logs, outgoing
// connections for asynchronous MDNs and handlers).
type Budget struct {
	// NOFILE is the descriptor limit (RLIMIT_NOFILE; 0: unknown).
	NOFILE int
	// Reserve is kept for everything but connections.
	Reserve int
	// Admin and Partner are the listeners' connection limits.
	Admin, Partner int
}

// MaxAutoConnections caps the partner limit derived from the descriptor
// limit: a gateway's partners rarely hold more than a few hundred
// connections, and each open connection costs memory outside the memory
// budget (buffers, a goroutine, TLS state).
const MaxAutoConnections = 4096

// SplitNOFILE derives the partner listener's limit from the descriptor
// limit: a quarter of it (at least 64) stays in reserve, admin goes to the
// admin listener, and the rest (at most MaxAutoConnections, at least 8)
// to partners. Without a known limit (nofile 0) partners get
// MaxAutoConnections.
func SplitNOFILE(nofile, admin int) Budget {
	b := Budget{NOFILE: nofile, Admin: admin, Partner: MaxAutoConnections}
	if nofile > 0 {
		b.Reserve = max(64, nofile/4)
		b.Partner = min(MaxAutoConnections, max(8, nofile-b.Reserve-admin))
	}
	return b
}

// Ceiling is the most partner connections the descriptor limit allows
// while keeping the reserve and the admin budget (nofile 0: no ceiling).
func Ceiling(nofile, admin int) int {
	if nofile <= 0 {
		return int(^uint(0) >> 1)
	}
	return max(8, nofile-max(64, nofile/4)-admin)
}
