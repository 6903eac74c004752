package server

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// A stop drains the node before it stops accepting connections, so that a
// load balancer health-checking /readyz takes it out of rotation while it
// still answers everything it is sent (a rolling restart loses no
// request):
//
//  1. draining: /readyz answers 503 at once ("draining"); /healthz stays
//     200; the partner listener keeps accepting and serving for
//     drain_period, and every reply closes its connection ("Connection:
//     close"), so a partner's keep-alive connection ends after its current
//     exchange and its next one goes, through the balancer, to another node.
//     Idle connections are not cut while draining: a request a partner
//     sends on one at that moment would get no answer.
//  2. stopping: the listener closes, idle connections are closed, and the
//     exchanges in flight get shutdown_timeout to finish (ServeListeners).
//
// A second SIGTERM or SIGINT (SkipDrain) ends the drain at once.

// Phases of a stop, as /readyz reports them.
const (
	phaseServing int32 = iota
	phaseDraining
	phaseStopping
)

// drainState is the stop's progress.
type drainState struct {
	phase    atomic.Int32
	skipOnce sync.Once
	skip     chan struct{}
}

func newDrainState() drainState { return drainState{skip: make(chan struct{})} }

// SkipDrain ends the drain period at once (the command calls it on a
// second SIGTERM or SIGINT): the listener stops accepting and the
// exchanges in flight get shutdown_timeout to finish. It does nothing
// before the stop and may be called more than once.
func (s *Server) SkipDrain() {
	s.drain.skipOnce.Do(func() { close(s.drain.skip) })
}

// Draining reports whether a stop has begun (the drain period or after).
func (s *Server) Draining() bool { return s.drain.phase.Load() != phaseServing }

// notServing is the /readyz detail of a stopping server ("" while
// serving).
func (s *Server) notServing() string {
	switch s.drain.phase.Load() {
	case phaseDraining:
		return "draining"
	case phaseStopping:
		return "shutting down"
	}
	return ""
}

// warnNoDrain warns at start that drain_period 0 turns the drain off.
func (s *Server) warnNoDrain() {
	if s.Config.DrainPeriod <= 0 {
		s.Log.Warn("drain_period is 0: a stop closes the partner listener at once; behind a load balancer, requests sent before it notices get no answer")
	}
}

// drainPartners runs the drain period: /readyz fails from now on and
// replies close their connections, until drain_period has passed or
// SkipDrain is called.
func (s *Server) drainPartners() {
	d := s.Config.DrainPeriod
	if d <= 0 {
		s.drain.phase.Store(phaseStopping)
		s.Log.Info("stop: no drain period (drain_period 0); no longer accepting connections")
		return
	}
	s.drain.phase.Store(phaseDraining)
	s.Log.Info("stop: draining; /readyz answers 503, partner connections are still served and closed after each reply",
		"drain_period", d)
	start := time.Now()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		s.Log.Info("stop: drain period over; no longer accepting connections", "drained", time.Since(start).Round(time.Millisecond))
	case <-s.drain.skip:
		s.Log.Warn("stop: drain ended early by a second signal; no longer accepting connections",
			"drained", time.Since(start).Round(time.Millisecond), "drain_period", d)
	}
	s.drain.phase.Store(phaseStopping)
}

// closeWhenDraining makes every reply next writes once a stop has begun
// close its connection: a keep-alive partner then sends its next message
// on a new connection, which the load balancer gives to a node in
// rotation. The check is made when the reply's head is written, so that an
// exchange already running when the drain starts closes its connection
// too.
func (s *Server) closeWhenDraining(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(&drainWriter{ResponseWriter: w, s: s}, r)
	})
}

// drainWriter adds "Connection: close" to a reply whose head is written
// while the server drains.
type drainWriter struct {
	http.ResponseWriter
	s     *Server
	wrote bool
}

func (w *drainWriter) head() {
	if w.wrote {
		return
	}
	w.wrote = true
	if w.s.Draining() {
		w.ResponseWriter.Header().Set("Connection", "close")
	}
}

func (w *drainWriter) WriteHeader(code int) {
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		w.ResponseWriter.WriteHeader(code) // an interim reply: the head comes later
		return
	}
	w.head()
	w.ResponseWriter.WriteHeader(code)
}

func (w *drainWriter) Write(b []byte) (int, error) {
	w.head()
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (deadlines,
// flushing).
func (w *drainWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *drainWriter) Flush() {
	w.head()
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
