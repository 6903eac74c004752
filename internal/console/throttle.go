package console

import (
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// Login throttling: every wrong admin token the console is shown (the
// login form's or a bearer header's) counts against the address it came
// from; after LoginFailures failures within LoginWindow that address gets
// 429 with Retry-After, without its token being compared, until the
// window of its first failure has passed. A right token clears the
// address's count. The table of addresses is bounded (maxThrottled):
// when it is full, entries whose window has passed go first, then the
// oldest.
const (
	// LoginFailures is how many wrong tokens one source address may try
	// per LoginWindow.
	LoginFailures = 5
	// LoginWindow is the period LoginFailures counts over.
	LoginWindow  = time.Minute
	maxThrottled = 4096
)

type throttleEntry struct {
	start time.Time // of the window
	fails int
}

// LoginThrottle is exported so that the admin listener's own bearer check
// (metrics, health, pprof) counts into the same table as the console's:
// one source gets LoginFailures wrong tokens per LoginWindow in all.
type LoginThrottle struct {
	mu sync.Mutex
	by map[string]throttleEntry
}

// NewLoginThrottle returns an empty throttle.
func NewLoginThrottle() *LoginThrottle { return &LoginThrottle{by: map[string]throttleEntry{}} }

// SourceOf is the throttled unit of a request: its remote IPv4 address,
// or the /64 of an IPv6 one (a single host usually holds the whole /64).
func SourceOf(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	a = a.Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

// Blocked reports whether src has used up its failures, and for how long
// it stays blocked.
func (t *LoginThrottle) Blocked(src string, now time.Time) (time.Duration, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.by[src]
	if !ok || !now.Before(e.start.Add(LoginWindow)) {
		return 0, false
	}
	if e.fails < LoginFailures {
		return 0, false
	}
	return e.start.Add(LoginWindow).Sub(now), true
}

// Failed counts a wrong token from src.
func (t *LoginThrottle) Failed(src string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.by[src]
	if !ok || !now.Before(e.start.Add(LoginWindow)) {
		e = throttleEntry{start: now}
	}
	e.fails++
	if !ok && len(t.by) >= maxThrottled {
		t.evict(now)
	}
	t.by[src] = e
}

// evict makes room for one entry. Called with t.mu held.
func (t *LoginThrottle) evict(now time.Time) {
	var oldest string
	var at time.Time
	for k, v := range t.by {
		if !now.Before(v.start.Add(LoginWindow)) {
			delete(t.by, k)
			continue
		}
		if oldest == "" || v.start.Before(at) {
			oldest, at = k, v.start
		}
	}
	if len(t.by) >= maxThrottled {
		delete(t.by, oldest)
	}
}

// Succeeded clears src's failures.
func (t *LoginThrottle) Succeeded(src string) {
	t.mu.Lock()
	delete(t.by, src)
	t.mu.Unlock()
}

func (t *LoginThrottle) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.by)
}

// LoginThrottle is the console's throttle of wrong admin tokens, for the
// admin listener's other token checks to share.
func (c *Console) LoginThrottle() *LoginThrottle { return c.throttle }
