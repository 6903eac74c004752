package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/edigateway/gateway/internal/console"
	"github.com/edigateway/gateway/internal/httpframe"
	"github.com/edigateway/gateway/internal/submitapi"
)

// The admin listener serves operators, never partners: /metrics,
// /healthz (the process is alive), /readyz (it can take messages) and,
// when admin.pprof is set, /debug/pprof/. With an admin token every
// request needs "Authorization: Bearer <token>"; with admin.tls.client_ca
// every connection needs a client certificate issued by that CA.

// ReadyCheck is one condition of /readyz; a non-nil error makes the
// gateway not ready and is shown in the detail.
type ReadyCheck struct {
	Name  string
	Check func(ctx context.Context) error
}

// adminState is what the admin endpoints need besides the Server.
type adminState struct {
	mu     sync.Mutex
	checks []ReadyCheck
	// releaseMu runs one quarantine release at a time in this process
	// (the store's claim covers a fleet).
	releaseMu sync.Mutex
}

// AddReadyCheck adds a condition to /readyz (for embedders, and for
// configuration reloads that want a failed reload to be visible).
func (s *Server) AddReadyCheck(name string, check func(ctx context.Context) error) {
	s.admin.mu.Lock()
	defer s.admin.mu.Unlock()
	s.admin.checks = append(s.admin.checks, ReadyCheck{Name: name, Check: check})
}

// AdminHandler is the HTTP handler of the admin endpoints, with the
// configured token check. Embedders that run their own listener mount it
// there; Serve runs it on admin.listen.
func (s *Server) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.Metrics.Handler())
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /readyz", s.readyz)
	if s.sending != nil {
		// The submission API of the outbound queue (docs/sending.md),
		// behind the same token or client certificate as /metrics.
		mux.Handle(submitapi.Prefix+"/", s.submissionAPI())
	}
	if s.Config.Admin.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	// The operator console authenticates its own requests: the bearer
	// token, or the session its login form sets from that token (a
	// browser cannot send the header); mTLS is the listener's.
	var con http.Handler
	throttle := console.NewLoginThrottle()
	if c, err := s.consoleHandler(); err != nil {
		s.Log.Error("operator console not available", "err", err)
	} else {
		con, throttle = c.Handler(), c.LoginThrottle()
		mux.Handle("/console/", con)
		mux.Handle("GET /{$}", http.RedirectHandler("/console/", http.StatusSeeOther))
	}
	token := s.Config.Admin.Token
	if token == "" {
		if s.Config.Admin.TLS.ClientCA != "" {
			return mux // the client certificate is the credential
		}
		// No credential at all (loopback only, refused elsewhere by
		// config): a web page the operator opens must not reach it
		// through DNS rebinding or a cross-site form.
		return loopbackOnly(mux)
	}
	want := sha256.Sum256([]byte(token))
	// Wrong tokens on /metrics, /healthz, /readyz and pprof count into the
	// console's login throttle: one source address gets
	// console.LoginFailures wrong tokens per console.LoginWindow in all.
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if con != nil && strings.HasPrefix(r.URL.Path, "/console/") {
			con.ServeHTTP(w, r)
			return
		}
		if con != nil && r.URL.Path == "/" && r.Method == http.MethodGet {
			http.Redirect(w, r, "/console/", http.StatusSeeOther)
			return
		}
		src, now := console.SourceOf(r), time.Now()
		if wait, blocked := throttle.Blocked(src, now); blocked {
			w.Header().Set("Retry-After", strconv.Itoa(int((wait+time.Second-1)/time.Second)))
			http.Error(w, "too many wrong admin tokens from this address; try again later", http.StatusTooManyRequests)
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		sum := sha256.Sum256([]byte(got))
		if !ok || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			if ok { // a token was tried; a request without one is no guess
				throttle.Failed(src, now)
				s.Log.Warn("admin: bearer token refused", "remote", r.RemoteAddr, "path", r.URL.Path)
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="gateway admin"`)
			http.Error(w, "admin token required", http.StatusUnauthorized)
			return
		}
		throttle.Succeeded(src)
		mux.ServeHTTP(w, r)
	})
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "ok")
}

// readiness is the /readyz answer.
type readiness struct {
	Ready  bool              `json:"ready"`
	Checks map[string]string `json:"checks"`
	// Reload is the last reload attempt. A failed reload does not make the
	// gateway unready: it keeps serving the configuration in force.
	Reload string `json:"reload"`
}

// Ready runs the readiness checks: the store answers within
// admin.ready_timeout, the durable audit file can be written, partners are
// loaded, the server is not shutting down, and every added check passes.
//
// Once a stop has begun (drain.go) the answer is not ready at once, with
// the phase ("draining", "shutting down") and without running the other
// checks: a load balancer must learn of the stop without waiting for a
// slow store.
func (s *Server) Ready(ctx context.Context) (ok bool, detail map[string]string) {
	if phase := s.notServing(); phase != "" {
		return false, map[string]string{"serving": "error: " + phase}
	}
	s.admin.mu.Lock()
	checks := append([]ReadyCheck{
		{"store", s.checkStore},
		{"audit", s.checkAudit},
		{"partners", s.checkPartners},
		{"serving", func(context.Context) error {
			if phase := s.notServing(); phase != "" {
				return errors.New(phase)
			}
			return nil
		}},
	}, s.admin.checks...)
	s.admin.mu.Unlock()
	type result struct {
		name string
		err  error
	}
	results := make(chan result, len(checks))
	for _, c := range checks {
		go func() {
			cctx, cancel := context.WithTimeout(ctx, s.Config.Admin.ReadyTimeout)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- c.Check(cctx) }()
			select {
			case err := <-done:
				results <- result{c.Name, err}
			case <-cctx.Done():
				results <- result{c.Name, fmt.Errorf("no answer within %s", s.Config.Admin.ReadyTimeout)}
			}
		}()
	}
	ok, detail = true, map[string]string{}
	for range checks {
		r := <-results
		if r.err != nil {
			ok = false
			detail[r.name] = "error: " + r.err.Error()
		} else {
			detail[r.name] = "ok"
		}
	}
	return ok, detail
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ok, detail := s.Ready(r.Context())
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if !ok {
		if !s.Draining() { // a stop logs its phases (drain.go)
			s.Log.Warn("not ready", "checks", detail)
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(readiness{Ready: ok, Checks: detail, Reload: s.ReloadStatus().String()})
}

// checkStore reaches the database: PostgreSQL answers a ping; SQLite
// takes its write lock (BEGIN IMMEDIATE, then ROLLBACK), which fails on a
// read-only or vanished file.
func (s *Server) checkStore(ctx context.Context) error {
	switch b := s.Backend.(type) {
	case interface{ Pool() *pgxpool.Pool }:
		return b.Pool().Ping(ctx)
	case interface{ DB() *sql.DB }:
		conn, err := b.DB().Conn(ctx)
		if err != nil {
			return err
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
			return err
		}
		_, err = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		return err
	}
	return nil // memory:
}

// checkAudit opens the durable audit file for appending; the store's audit
// table is covered by the store check. A best-effort audit never blocks.
func (s *Server) checkAudit(ctx context.Context) error {
	if s.Config.Audit.File == "" || s.Config.Audit.BestEffort {
		return nil
	}
	f, err := os.OpenFile(s.Config.Audit.File, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	return f.Close()
}

func (s *Server) checkPartners(ctx context.Context) error {
	if d := s.Directory(); d == nil || len(d.Partners) == 0 {
		return errors.New("no partners loaded")
	}
	return nil
}

// adminTLS is the admin listener's TLS configuration (nil: plain HTTP).
func adminTLS(cert, key, clientCA string) (*tls.Config, error) {
	if cert == "" {
		return nil, nil
	}
	kp, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("server: admin.tls: %w", err)
	}
	// HTTP/1.1 only: the connection is terminated by the framing guard
	// (httpframe), which reads the plaintext.
	c := &tls.Config{Certificates: []tls.Certificate{kp}, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
	if clientCA != "" {
		pem, err := os.ReadFile(clientCA)
		if err != nil {
			return nil, fmt.Errorf("server: admin.tls.client_ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("server: admin.tls.client_ca: %s holds no PEM certificate", clientCA)
		}
		c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return c, nil
}

// startAdmin serves the admin endpoints on ln until the returned stop is
// called; stop waits at most timeout for scrapes in progress. A nil ln
// serves nothing. The admin listener holds at most maxConns connections,
// and refuses request heads a proxy could frame differently (httpframe).
func (s *Server) startAdmin(ln net.Listener, errc chan<- error, maxConns int) (stop func(timeout time.Duration), err error) {
	if ln == nil {
		return func(time.Duration) {}, nil
	}
	a := s.Config.Admin
	tc, err := adminTLS(a.TLS.Cert, a.TLS.Key, a.TLS.ClientCA)
	if err != nil {
		return nil, err
	}
	hs := &http.Server{
		Handler:           s.guardRequests("admin", s.AdminHandler()),
		ConnContext:       httpframe.ConnContext,
		MaxHeaderBytes:    httpframe.DefaultMaxHead,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		TLSConfig:         tc,
		ErrorLog:          slog.NewLogLogger(s.Log.Handler(), slog.LevelWarn),
	}
	if !a.Pprof {
		// pprof's profile and trace stream for as long as asked.
		hs.WriteTimeout = time.Minute
	}
	ln = s.limitListener(ln, hs, "admin", maxConns, maxConns, 5*time.Second)
	ln = httpframe.NewListener(ln, httpframe.Options{TLS: tc, Log: s.Log})
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("server: admin listener: %w", err)
		}
	}()
	return func(timeout time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if hs.Shutdown(ctx) != nil {
			_ = hs.Close()
		}
	}, nil
}

// loopbackOnly guards an admin listener that needs no credential (a
// loopback address without token or client CA). The connection comes from
// this machine, but a browser on it can be made to send requests by any
// web page: with DNS rebinding (a name of the attacker's that resolves to
// 127.0.0.1) the page could read the console and its CSRF token, and a
// cross-site form could post an action. So the Host must name the loopback
// interface (localhost, 127.0.0.0/8, [::1]), and a request a browser marks
// as coming from another origin (Origin, Sec-Fetch-Site) is refused.
func loopbackOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loopbackHost(r.Host) {
			http.Error(w, "the admin listener answers only requests addressed to localhost or a loopback address", http.StatusMisdirectedRequest)
			return
		}
		if o := r.Header.Get("Origin"); o != "" && o != "null" {
			u, err := url.Parse(o)
			if err != nil || !loopbackHost(u.Host) {
				http.Error(w, "cross-origin request refused", http.StatusForbidden)
				return
			}
		}
		if r.Header.Get("Sec-Fetch-Site") == "cross-site" {
			http.Error(w, "cross-site request refused", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// loopbackHost reports whether a Host header value (host or host:port)
// names the loopback interface.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}
