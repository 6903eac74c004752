package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/inbox"
	"github.com/edigateway/gateway/internal/httpframe"
	"github.com/edigateway/gateway/internal/limits"
	"github.com/edigateway/gateway/internal/metrics"
	"github.com/edigateway/gateway/internal/peppol"
	"github.com/edigateway/gateway/internal/retention"
	"github.com/edigateway/gateway/internal/trust"
	"github.com/edigateway/gateway/partners"
	"github.com/edigateway/gateway/store"
)

// Version is reported by the protocols (Reporting-UA, User-Agent); the
// command sets it from its build information.
var Version = "dev"

// Server is a configured gateway.
type Server struct {
	Config   *config.Config
	Backend  store.Backend
	Pipeline *exchange.Pipeline
	Log      *slog.Logger
	// Metrics are served on the admin listener's /metrics.
	Metrics *metrics.Metrics

	// reload holds the partner directory and identity keys in force
	// (Current, Directory, Reload: reload.go).
	reload reloadState
	notify func()
	// wakeSender wakes the outbound Sender (the console's Resend and
	// Cancel); nil: none runs.
	wakeSender func()
	// trust checks the signers of trust: ca partners on both protocols; one
	// for the server's life, so that its OCSP/CRL cache survives reloads.
	trust *trust.Checker
	// peppolRecords records accepted Peppol transactions (peppol.enabled).
	peppolRecords *peppol.Recorder

	mux   *http.ServeMux
	admin adminState
	// endpoints name the mounted protocol endpoints (for the start-up log).
	endpoints []string
	closers   []func() error
	// background workers (the async MDN dispatcher) run while serving.
	background []func(context.Context) error
	// base is the context of every exchange; cancelled when shutdown runs
	// out of time so that handlers stop and claims are abandoned.
	base       context.Context
	cancelBase context.CancelFunc
	fault      *faultKill // crash tests only (fault.go)
	spoolDir   string     // this process's area of spool_dir
	// table is the built-in table handler, when configured (the console
	// reads payloads back from it).
	table *inbox.Table
	// conns count the listeners' connections for /metrics (conns.go).
	conns connMetrics
	// drain is the progress of a stop (drain.go).
	drain drainState
	// sending is the outbound side: queue, Sender, transmitters
	// (sending.go).
	sending *sending
}

// New opens the store and loads partners and keys. The caller must Close it.
func New(ctx context.Context, cfg *config.Config, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.Default()
	}
	s := &Server{Config: cfg, Log: log, mux: http.NewServeMux(), Metrics: metrics.New(Version), drain: newDrainState()}
	s.base, s.cancelBase = context.WithCancel(context.Background())
	dir, err := partners.Load(cfg.Partners)
	if err != nil {
		return nil, err
	}
	be, err := store.Open(ctx, cfg.Store, dedup.Options{Lease: cfg.Lease})
	if err != nil {
		return nil, fmt.Errorf("server: open store %s: %w", cfg.Redacted(), err)
	}
	s.Backend = be
	s.closers = append(s.closers, be.Close)
	// Spool files go to this process's area of spool_dir; what a crashed
	// run left there is removed now.
	area, err := limits.OpenSpoolArea(cfg.SpoolDir, log)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("server: %w", err)
	}
	s.spoolDir = area.Dir
	s.closers = append(s.closers, area.Close)

	var sink audit.Sink = be.AuditSink()
	var other audit.Sink = audit.Multi{} // what the sink writes beside the store's table
	if cfg.Audit.File != "" {
		f, err := audit.OpenJSONFile(cfg.Audit.File)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.closers = append(s.closers, f.Close)
		sink = audit.Multi{sink, f}
		other = f
	}
	var parts *exchange.AuditParts
	if cfg.Audit.BestEffort {
		sink = audit.BestEffort(sink, log)
	} else {
		// The store writes its records inside its own transactions when
		// it can (exchange.AuditParts); outcomes are counted once, from
		// the other part.
		parts = &exchange.AuditParts{Store: be.AuditSink(), Other: metricsSink{Sink: other, m: s.Metrics}}
	}
	sink = metricsSink{Sink: sink, m: s.Metrics}
	var handler exchange.Handler
	var txHandler exchange.TxHandler
	if cfg.Handler.Type == "table" && len(cfg.Handlers) == 0 {
		// The built-in transactional handler (a row per payload in the
		// gateway's database, committed with the accept).
		s.table, err = inbox.OpenTable(ctx, be)
		txHandler = s.table
		if err != nil {
			err = fmt.Errorf("server: handler.type table: %w", err)
		}
	} else {
		handler, err = buildHandler(cfg, log)
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	// Fault injection for the crash tests, compiled in only with the
	// gatewayfault build tag (fault.go; fault_off.go in production).
	if handler, err = s.injectFaults(handler); err != nil {
		s.Close()
		return nil, err
	}
	if handler != nil {
		handler = timedHandler{h: s.fault.wrapHandler(handler), m: s.Metrics}
	}
	if txHandler != nil {
		txHandler = s.fault.wrapTxHandler(txHandler)
	}
	s.Pipeline = &exchange.Pipeline{Store: timeStore(be, s.Metrics), Audit: sink, Handler: handler, Log: log, Lease: cfg.Lease, Quarantine: cfg.QuarantineDir,
		TxHandler: txHandler, AuditParts: parts, LeaseHeartbeat: cfg.LeaseHeartbeat,
		// The reply is written after the handler, within the write timeout.
		HandlerTimeout: cfg.Limits.WriteTimeout}
	s.Pipeline.InFlightRetryAfter, _ = cfg.InFlightRetryAfterFixed() // validated by config.Load
	s.background = append(s.background, s.Pipeline.RetryAbandons)
	if err := s.Pipeline.CheckTxHandler(); err != nil {
		s.Close()
		return nil, fmt.Errorf("server: %w", err)
	}
	if err := checkWindows(dir, cfg.Retention); err != nil {
		s.Close()
		return nil, err
	}
	if err := checkIdentities(dir, cfg.AllIdentities()); err != nil {
		s.Close()
		return nil, err
	}
	for _, w := range dir.Warnings {
		log.Warn("partner configuration", "warning", w)
	}
	if err := s.mountProtocols(dir); err != nil {
		s.Close()
		return nil, err
	}
	s.startReloading()
	s.startMetrics()
	return s, nil
}

// SetHandler replaces the business handler (for embedding the gateway in a
// program with its own plug-in).
func (s *Server) SetHandler(h exchange.Handler) {
	s.Pipeline.Handler = timedHandler{h: h, m: s.Metrics}
}

// SetTxHandler makes h the business handler, run inside the store's accept
// transaction (see exchange.TxHandler), in place of any Handler. It fails,
// changing nothing, when the store cannot run it (memory:).
func (s *Server) SetTxHandler(h exchange.TxHandler) error {
	if _, ok := s.Pipeline.Store.(dedup.TxAcceptor); !ok {
		return fmt.Errorf("server: %w (store %s)", exchange.ErrNoTxAcceptor, s.Config.Redacted())
	}
	s.Pipeline.TxHandler = s.fault.wrapTxHandler(h)
	return nil
}

// PartnerHandler is the HTTP handler of the partner listener: the protocol
// endpoints (as2.path, as4.path) and nothing else.
func (s *Server) PartnerHandler() http.Handler { return s.mux }

// Handler is PartnerHandler (kept for embedders); the admin endpoints are
// AdminHandler.
func (s *Server) Handler() http.Handler { return s.PartnerHandler() }

// Close releases the store and sinks.
func (s *Server) Close() error {
	s.cancelBase()
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		errs = append(errs, s.closers[i]())
	}
	s.closers = nil
	return errors.Join(errs...)
}

// Serve serves partners on ln and operators on admin.listen until ctx is
// cancelled; see ServeListeners.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	admin, err := net.Listen("tcp", s.Config.Admin.Listen)
	if err != nil {
		ln.Close()
		return fmt.Errorf("server: admin listener %s: %w", s.Config.Admin.Listen, err)
	}
	return s.ServeListeners(ctx, ln, admin)
}

// ServeListeners serves the protocol endpoints on partner and the admin
// endpoints on admin (nil: none) until ctx is cancelled, then shuts down
// gracefully: /readyz turns 503 and partners are still served for
// DrainPeriod, each reply closing its connection (drain.go; SkipDrain ends
// the period early); then new partner connections are refused, in-flight
// exchanges get ShutdownTimeout to finish, after which their context is
// cancelled so that handlers stop and their claims are abandoned; the
// admin listener closes last.
func (s *Server) ServeListeners(ctx context.Context, ln, admin net.Listener) error {
	c := s.Config
	// inflight counts running requests, so that after a cancelling shutdown
	// Serve still waits for their claims to be abandoned or accepted: the
	// caller closes the store when Serve returns.
	var inflight sync.WaitGroup
	mux := s.closeWhenDraining(s.fault.wrapHTTP(s.mux))
	hs := &http.Server{
		// A request head a proxy could frame differently never reaches
		// the protocol endpoints: it is answered 400 and the connection
		// closed (httpframe, guardRequests).
		Handler: s.guardRequests("partner", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			inflight.Add(1)
			defer inflight.Done()
			mux.ServeHTTP(w, r)
		})),
		ConnContext:       httpframe.ConnContext,
		MaxHeaderBytes:    httpframe.DefaultMaxHead,
		ReadHeaderTimeout: c.Limits.ReadHeaderTimeout,
		ReadTimeout:       c.Limits.ReadTimeout,
		WriteTimeout:      c.Limits.WriteTimeout,
		IdleTimeout:       c.Limits.IdleTimeout,
		BaseContext:       func(net.Listener) context.Context { return s.base },
		ErrorLog:          slog.NewLogLogger(s.Log.Handler(), slog.LevelWarn),
	}
	// Connections are bounded on both listeners, so that idle ones never
	// take every descriptor: the admin listener keeps its own budget.
	cl := s.connectionLimits()
	s.logConnectionLimits(cl)
	ln = s.limitListener(ln, hs, "partner", cl.partner, cl.perAddress, cl.idleUnderPressure)
	// TLS is terminated under the framing guard, which reads the
	// plaintext; partners get HTTP/1.1 (AS2 and AS4 need nothing else).
	var tc *tls.Config
	if c.TLS.Cert != "" {
		kp, err := tls.LoadX509KeyPair(c.TLS.Cert, c.TLS.Key)
		if err != nil {
			ln.Close()
			if admin != nil {
				admin.Close()
			}
			return fmt.Errorf("server: tls: %w", err)
		}
		tc = &tls.Config{Certificates: []tls.Certificate{kp}, NextProtos: []string{"http/1.1"}}
	}
	ln = httpframe.NewListener(ln, httpframe.Options{TLS: tc, Log: s.Log})
	adminErr := make(chan error, 1)
	stopAdmin, err := s.startAdmin(admin, adminErr, cl.admin)
	if err != nil {
		ln.Close()
		if admin != nil {
			admin.Close()
		}
		return err
	}
	defer stopAdmin(5 * time.Second)
	s.servingPartners(ln)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	purgeDone := s.startPurge(ctx)
	s.logListening(ln, admin)
	s.warnNoDrain()
	select {
	case err := <-errc:
		purgeDone()
		return err
	case err = <-adminErr:
		s.Log.Error("admin listener failed; shutting down", "err", err)
	case <-ctx.Done():
	}
	s.drainPartners()
	s.Log.Info("shutting down; waiting for in-flight exchanges", "timeout", c.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), c.ShutdownTimeout)
	defer cancel()
	if errors.Is(hs.Shutdown(sctx), context.DeadlineExceeded) {
		s.Log.Warn("shutdown timeout: cancelling in-flight exchanges; their claims are abandoned")
		s.cancelBase()
		_ = hs.Close()
		finished := make(chan struct{})
		go func() { inflight.Wait(); close(finished) }()
		select {
		case <-finished:
		case <-time.After(cancelGrace):
			s.Log.Error("cancelled exchanges did not finish; their claims are released when their leases run out", "grace", cancelGrace)
		}
	}
	purgeDone()
	if err2 := <-errc; err2 != nil && !errors.Is(err2, http.ErrServerClosed) {
		return err2
	}
	return err // nil, or the admin listener's failure
}

// logListening names both listeners, the endpoints and the partner count.
func (s *Server) logListening(ln, admin net.Listener) {
	c := s.Config
	adminAddr := ""
	if admin != nil {
		adminAddr = admin.Addr().String()
	}
	s.Log.Info("gateway listening", "addr", ln.Addr().String(), "tls", c.TLS.Cert != "",
		"endpoints", s.endpoints, "admin", adminAddr, "admin_tls", c.Admin.TLS.Cert != "",
		"admin_auth", adminAuth(c.Admin), "store", c.Redacted(), "partners", len(s.Directory().Partners))
}

func adminAuth(a config.Admin) string {
	switch {
	case a.TLS.ClientCA != "" && a.Token != "":
		return "mtls+token"
	case a.TLS.ClientCA != "":
		return "mtls"
	case a.Token != "":
		return "token"
	}
	return "none (loopback)"
}

// cancelGrace bounds how long Serve waits, after cancelling the exchanges
// that outlived the shutdown timeout, for them to abandon or accept their
// claims (the pipeline gives each store call at most 30 seconds).
const cancelGrace = 45 * time.Second

// Purger returns the retention purger over this server's store.
func (s *Server) Purger() *retention.Purger {
	return &retention.Purger{Store: s.Backend, Ledger: s.Backend, ArchiveDir: s.Config.ArchiveDir, Retention: s.Config.Retention,
		Outbound: s.outboundStore(), OutboundRetention: s.Config.Outbound.Retention}
}

// startPurge runs the retention purge every PurgeInterval, and the
// background workers, until stop is called.
func (s *Server) startPurge(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, run := range s.background {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(ctx); err != nil && ctx.Err() == nil {
				s.Log.Error("background worker stopped", "err", err)
			}
		}()
	}
	purger := s.Purger()
	if purger.Outbound != nil && purger.OutboundRetention == 0 {
		s.Log.Warn("outbound.retention is 0: delivered, failed and cancelled outbound messages and their payloads are kept forever; the store grows without bound")
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(s.Config.PurgeInterval)
		defer t.Stop()
		for {
			rep, err := purger.Run(ctx)
			if err != nil {
				if ctx.Err() == nil {
					s.Log.Error("purge failed", "err", err)
				}
			} else if rep.TransportKeys > 0 || rep.Interchanges > 0 {
				s.Log.Info("purged dedup state past retention", "transport_keys", rep.TransportKeys,
					"interchanges", rep.Interchanges, "archives", rep.Archives)
			}
			if rep.OutboundMessages > 0 {
				s.Log.Info("purged final outbound messages past outbound.retention", "messages", rep.OutboundMessages,
					"retention", s.Config.Outbound.Retention)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() { cancel(); wg.Wait() }
}
