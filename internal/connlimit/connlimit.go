// Package connlimit bounds the connections a listener keeps open, so that
// idle connections cannot take every file descriptor of the process: a
// total limit, a limit per source address, and, when the total is reached,
// the connection idle the longest closed to make room for a new one (a
// connection that is answering a request is never closed). Above a
// high-water mark the listener is under pressure: connections idle longer
// than IdleUnderPressure are closed, and OnPressure lets the HTTP server
// stop keep-alive until the pressure ends.
//
// The listener learns which connections are idle from the HTTP server's
// ConnState hook (Listener.ConnState).
package connlimit

import (
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Listener.
type Options struct {
	// Name names the listener in log lines ("partner", "admin").
	Name string
	// Max is the most connections open at once (at least 1).
	Max int
	// PerAddress is the most connections open at once from one source IP
	// address (0: Max).
	PerAddress int
	// HighWater is the number of open connections from which the listener
	// is under pressure (0: three quarters of Max); the pressure ends
	// when no more than LowWater are open (0: half of Max).
	HighWater, LowWater int
	// IdleUnderPressure: under pressure, a connection idle (between
	// requests, or silent since it was accepted) this long is closed
	// (0: 5 s).
	IdleUnderPressure time.Duration
	// NewGrace is how long a connection that has not yet sent a request
	// is spared when the limit is reached (0: 1 s), so that a partner
	// still in its TLS handshake is not closed for an idle one.
	NewGrace time.Duration
	// OnPressure, when set, is called with true when the pressure begins
	// and false when it ends (one call at a time, from the listener's
	// goroutine).
	OnPressure func(on bool)
	// Log receives the refusals (at most one line per 10 s) and the
	// pressure changes; nil: no log.
	Log *slog.Logger
}

// Stats are a listener's counters.
type Stats struct {
	// Open connections now, and the most open at once.
	Open, Peak int
	// Refused were closed at once on accept (a limit reached, no idle
	// connection to close); Evicted were idle connections closed to make
	// room or under pressure.
	Refused, Evicted int64
	// Pressure: the listener is above its high-water mark.
	Pressure bool
}

// Listener is a net.Listener that bounds its open connections.
type Listener struct {
	net.Listener
	opt Options

	mu       sync.Mutex
	conns    map[*Conn]struct{}
	perAddr  map[netip.Addr]int
	peak     int
	pressure bool

	refused, evicted atomic.Int64
	wake             chan struct{}
	done             chan struct{}
	closeOnce        sync.Once

	// refusal log, at most one line per logEvery
	logMu     sync.Mutex
	lastLog   time.Time
	unlogged  int64
	lastCause string
}

const logEvery = 10 * time.Second

// New wraps ln. Close the Listener to stop its goroutine.
func New(ln net.Listener, opt Options) *Listener {
	if opt.Max < 1 {
		opt.Max = 1
	}
	if opt.PerAddress <= 0 || opt.PerAddress > opt.Max {
		opt.PerAddress = opt.Max
	}
	if opt.HighWater <= 0 || opt.HighWater > opt.Max {
		opt.HighWater = max(1, opt.Max*3/4)
	}
	if opt.LowWater <= 0 || opt.LowWater >= opt.HighWater {
		opt.LowWater = max(0, min(opt.Max/2, opt.HighWater-1))
	}
	if opt.IdleUnderPressure <= 0 {
		opt.IdleUnderPressure = 5 * time.Second
	}
	if opt.NewGrace <= 0 {
		opt.NewGrace = time.Second
	}
	l := &Listener{Listener: ln, opt: opt, conns: map[*Conn]struct{}{}, perAddr: map[netip.Addr]int{},
		wake: make(chan struct{}, 1), done: make(chan struct{})}
	go l.run()
	return l
}

// Options returns the options in force (defaults filled in).
func (l *Listener) Options() Options { return l.opt }

// Accept returns the next connection within the limits. A connection over
// a limit is closed at once, without a reply, and Accept waits for the
// next one. At a limit, the longest idle connection (of that address, for
// the per-address limit) is closed instead, if there is one.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if lc, cause := l.admit(c); lc != nil {
			return lc, nil
		} else {
			c.Close()
			l.refused.Add(1)
			l.logRefusal(cause, c.RemoteAddr())
		}
	}
}

// admit registers c, closing the longest idle connection when the total
// is reached; nil and the reason when c is refused.
func (l *Listener) admit(c net.Conn) (*Conn, string) {
	addr := remoteIP(c)
	now := time.Now()
	var victim, victim2 *Conn
	l.mu.Lock()
	if addr.IsValid() && l.perAddr[addr] >= l.opt.PerAddress {
		// The address's own idlest connection makes room, if any.
		victim = l.idlest(now, addr)
		if victim == nil {
			l.mu.Unlock()
			return nil, "per-address limit"
		}
		l.forgetLocked(victim)
	}
	if len(l.conns) >= l.opt.Max {
		victim2 = l.idlest(now, netip.Addr{})
		if victim2 == nil {
			l.mu.Unlock()
			if victim != nil {
				victim.closeConn()
				l.evicted.Add(1)
			}
			return nil, "connection limit"
		}
		l.forgetLocked(victim2)
	}
	lc := &Conn{Conn: c, l: l, addr: addr}
	lc.idle.Store(true)
	lc.since.Store(now.UnixNano())
	lc.fresh.Store(true)
	l.conns[lc] = struct{}{}
	if addr.IsValid() {
		l.perAddr[addr]++
	}
	l.peak = max(l.peak, len(l.conns))
	changed := l.updatePressureLocked()
	l.mu.Unlock()
	for _, v := range []*Conn{victim, victim2} {
		if v != nil {
			v.closeConn()
			l.evicted.Add(1)
		}
	}
	if changed {
		l.signal()
	}
	return lc, ""
}

// idlest is the connection idle the longest (from addr, if valid): first
// those between requests, then those that sent nothing for NewGrace.
// Called with mu held.
func (l *Listener) idlest(now time.Time, addr netip.Addr) *Conn {
	var best, bestNew *Conn
	var bestAt, bestNewAt int64
	limit := now.UnixNano()
	graceLimit := now.Add(-l.opt.NewGrace).UnixNano()
	for c := range l.conns {
		if !c.idle.Load() || (addr.IsValid() && c.addr != addr) {
			continue
		}
		at := c.since.Load()
		if c.fresh.Load() {
			if at <= graceLimit && (bestNew == nil || at < bestNewAt) {
				bestNew, bestNewAt = c, at
			}
			continue
		}
		if at <= limit && (best == nil || at < bestAt) {
			best, bestAt = c, at
		}
	}
	if best != nil {
		return best
	}
	return bestNew
}

// forgetLocked removes c from the counts (once).
func (l *Listener) forgetLocked(c *Conn) bool {
	if _, ok := l.conns[c]; !ok {
		return false
	}
	delete(l.conns, c)
	if c.addr.IsValid() {
		if l.perAddr[c.addr]--; l.perAddr[c.addr] <= 0 {
			delete(l.perAddr, c.addr)
		}
	}
	return true
}

// updatePressureLocked reports whether the pressure changed.
func (l *Listener) updatePressureLocked() bool {
	n := len(l.conns)
	switch {
	case !l.pressure && n >= l.opt.HighWater:
		l.pressure = true
		return true
	case l.pressure && n <= l.opt.LowWater:
		l.pressure = false
		return true
	}
	return false
}

func (l *Listener) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// run reports pressure changes and, under pressure, closes connections
// idle longer than IdleUnderPressure.
func (l *Listener) run() {
	tick := time.NewTicker(max(l.opt.IdleUnderPressure/4, 50*time.Millisecond))
	defer tick.Stop()
	reported := false
	for {
		select {
		case <-l.done:
			if reported && l.opt.OnPressure != nil {
				l.opt.OnPressure(false)
			}
			return
		case <-l.wake:
		case <-tick.C:
		}
		l.mu.Lock()
		on := l.pressure
		var victims []*Conn
		if on {
			now := time.Now()
			cut := now.Add(-l.opt.IdleUnderPressure).UnixNano()
			for c := range l.conns {
				if c.idle.Load() && c.since.Load() <= cut {
					victims = append(victims, c)
				}
			}
			for _, c := range victims {
				l.forgetLocked(c)
			}
			if len(victims) > 0 && l.updatePressureLocked() {
				on = l.pressure
			}
		}
		open := len(l.conns)
		l.mu.Unlock()
		for _, c := range victims {
			c.closeConn()
		}
		l.evicted.Add(int64(len(victims)))
		if on != reported {
			reported = on
			if l.opt.Log != nil {
				if on {
					l.opt.Log.Warn("connections above the high-water mark: keep-alive off, idle connections closed after a short idle time",
						"listener", l.opt.Name, "open", open, "high_water", l.opt.HighWater, "max", l.opt.Max, "idle_under_pressure", l.opt.IdleUnderPressure)
				} else {
					l.opt.Log.Info("connections back below the low-water mark: keep-alive on", "listener", l.opt.Name, "open", open, "low_water", l.opt.LowWater)
				}
			}
			if l.opt.OnPressure != nil {
				l.opt.OnPressure(on)
			}
		}
	}
}

// Close closes the listener; open connections stay open.
func (l *Listener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

// Stats returns the listener's counters.
func (l *Listener) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{Open: len(l.conns), Peak: l.peak, Refused: l.refused.Load(), Evicted: l.evicted.Load(), Pressure: l.pressure}
}

// ConnState is the http.Server ConnState hook that tells the listener
// which of its connections are idle. c may wrap a connection of this
// listener (a *tls.Conn, anything with a NetConn method).
func (l *Listener) ConnState(c net.Conn, st http.ConnState) {
	lc := l.find(c)
	if lc == nil {
		return
	}
	switch st {
	case http.StateActive:
		lc.fresh.Store(false)
		lc.idle.Store(false)
	case http.StateIdle:
		lc.fresh.Store(false)
		lc.since.Store(time.Now().UnixNano())
		lc.idle.Store(true)
	}
}

// find unwraps c down to a connection of this listener.
func (l *Listener) find(c net.Conn) *Conn {
	for i := 0; c != nil && i < 8; i++ {
		if lc, ok := c.(*Conn); ok {
			if lc.l == l {
				return lc
			}
			return nil
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		c = u.NetConn()
	}
	return nil
}

func (l *Listener) release(c *Conn) {
	l.mu.Lock()
	changed := l.forgetLocked(c) && l.updatePressureLocked()
	l.mu.Unlock()
	if changed {
		l.signal()
	}
}

func (l *Listener) logRefusal(cause string, addr net.Addr) {
	if l.opt.Log == nil {
		return
	}
	l.logMu.Lock()
	now := time.Now()
	l.unlogged++
	if now.Sub(l.lastLog) < logEvery && cause == l.lastCause {
		l.logMu.Unlock()
		return
	}
	n := l.unlogged
	l.unlogged, l.lastLog, l.lastCause = 0, now, cause
	l.logMu.Unlock()
	st := l.Stats()
	l.opt.Log.Warn("connection refused: "+cause+" reached (closed without a reply)", "listener", l.opt.Name, "remote", addr.String(),
		"refused", n, "open", st.Open, "max", l.opt.Max, "per_address", l.opt.PerAddress)
}

// Conn is a connection the Listener counts until it is closed.
type Conn struct {
	net.Conn
	l    *Listener
	addr netip.Addr
	// idle: between requests or not yet sent one (fresh), since then.
	idle, fresh atomic.Bool
	since       atomic.Int64
	once        sync.Once
	err         error
}

// NetConn returns the accepted connection.
func (c *Conn) NetConn() net.Conn { return c.Conn }

// Close closes the connection and frees its place.
func (c *Conn) Close() error {
	c.l.release(c)
	return c.closeConn()
}

func (c *Conn) closeConn() error {
	c.once.Do(func() { c.err = c.Conn.Close() })
	return c.err
}

func remoteIP(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}
