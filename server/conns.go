package server

import (
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/internal/connlimit"
	"github.com/edigateway/gateway/internal/httpframe"
)

// defaultAdminConnections is admin.max_connections when a configuration
// built in code leaves it zero.
const defaultAdminConnections = 32

// connLimits are the listeners' connection limits in force.
type connLimits struct {
	nofile, reserve     int
	partner, perAddress int
	admin               int
	configuredMax       int // limits.max_connections as configured (0: auto)
	lowered, perAddrOff bool
	idleUnderPressure   time.Duration
}

// connectionLimits derives the limits from the configuration and the
// process's descriptor limit (RLIMIT_NOFILE): the admin listener has its
// own budget (admin.max_connections), a quarter of the descriptors (at
// least 64) stay for the store, spool and inbox files and outgoing
// connections, and partners get the rest, at most 4096, unless
// limits.max_connections says less.
func (s *Server) connectionLimits() connLimits {
	c := s.Config
	cl := connLimits{nofile: connlimit.NOFILE(), admin: c.Admin.MaxConnections, configuredMax: c.Limits.MaxConnections}
	if cl.admin <= 0 {
		cl.admin = defaultAdminConnections
	}
	b := connlimit.SplitNOFILE(cl.nofile, cl.admin)
	cl.reserve, cl.partner = b.Reserve, b.Partner
	if m := c.Limits.MaxConnections; m > 0 {
		cl.partner = m
		if ceil := connlimit.Ceiling(cl.nofile, cl.admin); m > ceil {
			cl.partner, cl.lowered = ceil, true
		}
	}
	cl.perAddress = c.Limits.MaxConnectionsPerAddress
	switch {
	case cl.perAddress == 0:
		cl.perAddress = max(4, cl.partner/8)
	case cl.perAddress >= cl.partner:
		cl.perAddress, cl.perAddrOff = cl.partner, true
	}
	cl.perAddress = min(cl.perAddress, cl.partner)
	cl.idleUnderPressure = 5 * time.Second
	if d := c.Limits.IdleTimeout; d > 0 && d < cl.idleUnderPressure {
		cl.idleUnderPressure = d
	}
	return cl
}

// logConnectionLimits states the limits at start, and warns about a
// configured limit the descriptors do not allow and a per-address limit
// turned off.
func (s *Server) logConnectionLimits(cl connLimits) {
	s.Log.Info("connection limits", "max_connections", cl.partner, "max_connections_per_address", cl.perAddress,
		"admin_max_connections", cl.admin, "rlimit_nofile", cl.nofile, "reserved_descriptors", cl.reserve,
		"auto", cl.configuredMax == 0, "idle_under_pressure", cl.idleUnderPressure)
	if cl.lowered {
		s.Log.Warn("limits.max_connections is more than the descriptor limit allows; lowered, so that the admin listener, the store and spool files keep their descriptors",
			"configured", cl.configuredMax, "max_connections", cl.partner, "rlimit_nofile", cl.nofile)
	}
	if cl.perAddrOff {
		s.Log.Warn("limits.max_connections_per_address is not below limits.max_connections: one source address may hold every partner connection",
			"max_connections_per_address", s.Config.Limits.MaxConnectionsPerAddress, "max_connections", cl.partner)
	}
}

// limitListener bounds ln's connections for hs: hs's ConnState tells the
// limiter which connections are idle, and under pressure hs stops
// keep-alive (its idle connections are closed at once, and every reply
// closes its connection) until the pressure ends.
func (s *Server) limitListener(ln net.Listener, hs *http.Server, name string, max, perAddress int, idle time.Duration) *connlimit.Listener {
	l := connlimit.New(ln, connlimit.Options{Name: name, Max: max, PerAddress: perAddress, IdleUnderPressure: idle, Log: s.Log,
		OnPressure: func(on bool) { hs.SetKeepAlivesEnabled(!on) }})
	s.conns.listen(name, l)
	prev := hs.ConnState
	hs.ConnState = func(c net.Conn, st http.ConnState) {
		l.ConnState(c, st)
		if prev != nil {
			prev(c, st)
		}
	}
	return l
}

// guardRequests answers, in place of next, the request a guarded
// connection (httpframe) delivers for a refused head: Content-Length with
// Transfer-Encoding, duplicate Content-Length, obs-fold and the other
// shapes a proxy in front could frame differently (request smuggling). The
// partner gets the status, a short reason and an incident reference, and
// the connection is closed (RFC 9112 §6.1); the log has the details. Other
// requests get their connection's TLS state (the guard terminates TLS).
func (s *Server) guardRequests(listener string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fc := httpframe.FromContext(r.Context())
		if fc == nil {
			next.ServeHTTP(w, r)
			return
		}
		if ref := fc.Refused(r); ref != nil {
			s.conns.refusedFraming(listener)
			incident := exchange.NewIncident()
			s.Log.Warn("request refused before the endpoint: its framing could be read differently by a proxy (request smuggling); connection closed",
				"listener", listener, "remote", r.RemoteAddr, "status", ref.Status, "reason", ref.Reason, "incident", incident)
			w.Header().Set("Connection", "close")
			http.Error(w, fmt.Sprintf("%s: %s; the connection is closed (%s)", http.StatusText(ref.Status), ref.Reason, exchange.IncidentNote(incident)), ref.Status)
			return
		}
		if st := fc.TLS(); st != nil {
			r.TLS = st
		}
		next.ServeHTTP(w, r)
	})
}

// connMetrics are the listeners' connection counters on /metrics.
type connMetrics struct {
	mu        sync.Mutex
	listeners map[string]*connlimit.Listener
	framing   map[string]float64
}

var (
	connOpenDesc = prometheus.NewDesc("gateway_connections_open",
		"Connections open now, by listener (partner, admin).", []string{"listener"}, nil)
	connMaxDesc = prometheus.NewDesc("gateway_connections_max",
		"The listener's connection limit (limits.max_connections, admin.max_connections).", []string{"listener"}, nil)
	connPressureDesc = prometheus.NewDesc("gateway_connections_pressure",
		"1 while the listener holds more connections than its high-water mark (three quarters of the limit): keep-alive is off and idle connections are closed after 5 s.", []string{"listener"}, nil)
	connRefusedDesc = prometheus.NewDesc("gateway_connections_refused_total",
		"Connections closed at once on accept: a limit was reached and no idle connection could make room.", []string{"listener"}, nil)
	connIdleClosedDesc = prometheus.NewDesc("gateway_connections_idle_closed_total",
		"Idle connections closed to make room for a new one or under pressure.", []string{"listener"}, nil)
	framingDesc = prometheus.NewDesc("gateway_requests_refused_framing_total",
		"Requests refused (400, connection closed) before any endpoint because their framing could be read differently by a proxy (request smuggling).", []string{"listener"}, nil)
)

func (m *connMetrics) listen(name string, l *connlimit.Listener) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.listeners == nil {
		m.listeners = map[string]*connlimit.Listener{}
	}
	m.listeners[name] = l
}

func (m *connMetrics) refusedFraming(listener string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.framing == nil {
		m.framing = map[string]float64{}
	}
	m.framing[listener]++
}

func (m *connMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{connOpenDesc, connMaxDesc, connPressureDesc, connRefusedDesc, connIdleClosedDesc, framingDesc} {
		ch <- d
	}
}

func (m *connMetrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, l := range m.listeners {
		st := l.Stats()
		pressure := 0.0
		if st.Pressure {
			pressure = 1
		}
		ch <- prometheus.MustNewConstMetric(connOpenDesc, prometheus.GaugeValue, float64(st.Open), name)
		ch <- prometheus.MustNewConstMetric(connMaxDesc, prometheus.GaugeValue, float64(l.Options().Max), name)
		ch <- prometheus.MustNewConstMetric(connPressureDesc, prometheus.GaugeValue, pressure, name)
		ch <- prometheus.MustNewConstMetric(connRefusedDesc, prometheus.CounterValue, float64(st.Refused), name)
		ch <- prometheus.MustNewConstMetric(connIdleClosedDesc, prometheus.CounterValue, float64(st.Evicted), name)
		ch <- prometheus.MustNewConstMetric(framingDesc, prometheus.CounterValue, m.framing[name], name)
	}
}
