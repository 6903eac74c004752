// Package console is the operator console in the browser, served on the
// admin listener under /console/: a dashboard, message search and detail
// (audit trail, ledger, the reply sent, the payload), the quarantine with
// release and discard, partners, the async MDN outbox and the outbound
// queue of messages we send (with resend and cancel).
//
// Pages are rendered on the server with html/template from embedded files;
// nothing is loaded from outside the binary (Content-Security-Policy
// default-src 'self') and every page works without JavaScript (one small
// embedded script asks for confirmation before a discard). Every action is
// a POST carrying the session's CSRF token, and is audited with who took
// it.
package console

import (
	"context"
	"crypto/sha256"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/inbox"
	"github.com/edigateway/gateway/internal/certs"
	"github.com/edigateway/gateway/outbound"
	"github.com/edigateway/gateway/outbox"
	"github.com/edigateway/gateway/partners"
)

//go:embed templates/*.html static/*
var assets embed.FS

// Source is what the console reads and acts on; the server wires it.
type Source struct {
	// Audit reads the audit records (the store's table).
	Audit audit.Reader
	// Record writes the audit records of operator actions.
	Record func(ctx context.Context, r audit.Record) error
	// Ledger is the business interchange ledger (nil: none).
	Ledger dedup.Ledger
	// Claims reads transport keys' rows with the reply sent (nil: none).
	Claims dedup.ClaimReader
	// Outbox is the async MDN queue; its Operator and PendingCounter
	// methods are used when it has them.
	Outbox outbox.Store
	// Partners returns the directory and certificates in force and the
	// certificate warning period.
	Partners func() (*partners.Directory, []certs.Cert, time.Duration)
	// QuarantineDir is on_drift: quarantine's directory ("" = none).
	QuarantineDir string
	// InboxDirs are the roots of the dir handlers (payloads under
	// <root>/<partner>/).
	InboxDirs []string
	// Table is the built-in table handler's inbox_payloads (nil: none).
	Table TableReader
	// Release processes a quarantined payload once through the handler
	// (see server.ReleaseQuarantined).
	Release func(ctx context.Context, it QuarantineItem, actor string) (ReleaseResult, error)
	// WakeOutbox makes the async MDN dispatcher look for due deliveries at
	// once ("Retry now"; nil: it finds them at its next poll).
	WakeOutbox func()
	// Outbound is the queue of messages we send (nil: the outbound pages
	// are hidden).
	Outbound outbound.Store
	// Notify wakes the outbound Sender after an operator's Resend or
	// Cancel (nil: it finds the change at its next poll).
	Notify func()
}

// TableReader reads the table handler's rows back (inbox.Table).
type TableReader interface {
	Rows(ctx context.Context, messageKey string) ([]inbox.TableRow, error)
	Body(ctx context.Context, messageKey string, id int64) ([]byte, error)
}

// ReleaseResult is what a release did.
type ReleaseResult struct {
	// HandlerRan is false when the payload had been released before (the
	// pipeline answered it as a duplicate): nothing was processed again.
	HandlerRan bool
	// Key is the transport key the release was processed under.
	Key    string
	Detail string
}

// Console serves the pages.
type Console struct {
	src      Source
	tokenSum [32]byte
	sessions *sessions
	throttle *LoginThrottle
	tmpl     *template.Template
	static   http.Handler
	log      *slog.Logger
	now      func() time.Time
}

// New builds the console. token is the admin token ("" when the admin
// listener needs none: loopback, or mTLS).
func New(src Source, token string, log *slog.Logger) (*Console, error) {
	if log == nil {
		log = slog.Default()
	}
	c := &Console{src: src, sessions: newSessions(), throttle: NewLoginThrottle(), log: log, now: time.Now}
	if token != "" {
		c.tokenSum = sha256.Sum256([]byte(token))
	}
	t, err := template.New("").Funcs(funcs).ParseFS(assets, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("console: templates: %w", err)
	}
	c.tmpl = t
	st, _ := fs.Sub(assets, "static")
	c.static = http.StripPrefix("/console/static/", http.FileServer(http.FS(st)))
	return c, nil
}

// Handler serves /console/.
func (c *Console) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /console/static/", c.static)
	mux.HandleFunc("GET /console/login", c.loginPage)
	mux.HandleFunc("POST /console/login", c.login)
	mux.HandleFunc("POST /console/logout", c.authed(c.logout))
	mux.HandleFunc("GET /console/{$}", c.authed(c.dashboard))
	mux.HandleFunc("GET /console/messages", c.authed(c.messages))
	mux.HandleFunc("GET /console/message", c.authed(c.message))
	mux.HandleFunc("GET /console/message/reply", c.authed(c.reply))
	mux.HandleFunc("GET /console/message/payload", c.authed(c.payload))
	mux.HandleFunc("GET /console/quarantine", c.authed(c.quarantine))
	mux.HandleFunc("GET /console/quarantine/item", c.authed(c.quarantineItem))
	mux.HandleFunc("GET /console/quarantine/payload", c.authed(c.quarantinePayload))
	mux.HandleFunc("POST /console/quarantine/release", c.action(c.release))
	mux.HandleFunc("POST /console/quarantine/discard", c.action(c.discard))
	mux.HandleFunc("GET /console/partners", c.authed(c.partnersPage))
	mux.HandleFunc("GET /console/outbox", c.authed(c.outboxPage))
	mux.HandleFunc("POST /console/outbox/retry", c.action(c.retryNow))
	mux.HandleFunc("GET /console/outbound", c.authed(c.outboundList))
	mux.HandleFunc("GET /console/outbound/message", c.authed(c.outboundMessage))
	mux.HandleFunc("GET /console/outbound/evidence", c.authed(c.outboundEvidence))
	mux.HandleFunc("GET /console/outbound/payload", c.authed(c.outboundPayload))
	mux.HandleFunc("POST /console/outbound/resend", c.action(c.outboundResend))
	mux.HandleFunc("POST /console/outbound/cancel", c.action(c.outboundCancel))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		mux.ServeHTTP(w, r)
	})
}

type handler func(w http.ResponseWriter, r *http.Request, who caller)

// authed requires the admin authentication; a browser without it is sent
// to the login form.
func (c *Console) authed(h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		who, ok, wait := c.authenticate(w, r)
		if wait > 0 {
			c.tooManyFailures(w, r, wait)
			return
		}
		if !ok {
			if r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/html") {
				http.Redirect(w, r, "/console/login", http.StatusSeeOther)
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="gateway admin"`)
			http.Error(w, "admin authentication required", http.StatusUnauthorized)
			return
		}
		h(w, r, who)
	}
}

// action is authed plus the CSRF check: a cookie session must send its
// token in the form (browsers send cookies on their own; bearer headers
// they never send, so a bearer-authenticated request needs none).
func (c *Console) action(h handler) http.HandlerFunc {
	return c.authed(func(w http.ResponseWriter, r *http.Request, who caller) {
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if err := r.ParseForm(); err != nil {
			http.Error(w, "bad form", http.StatusBadRequest)
			return
		}
		if !who.bearer && !c.sessions.csrfOK(who.sessionID, r.PostForm.Get("csrf")) {
			c.log.Warn("console: action refused: CSRF token missing or wrong", "path", r.URL.Path, "who", who.who)
			http.Error(w, "CSRF token missing or wrong; reload the page and try again", http.StatusForbidden)
			return
		}
		h(w, r, who)
	})
}

// page is the data every page template gets.
type page struct {
	Title string
	Nav   string
	CSRF  string
	Who   string
	Flash string
	Error string
	// Outbound: the outbound pages are shown (an outbound store is set).
	Outbound bool
	Data     any
}

// flashes are the only messages a page shows from its URL (?flash=key,
// after an action redirected there): the server's own sentences, chosen
// by key. An unknown key shows nothing, so a link cannot make the console
// say what its author wants.
var flashes = map[string]string{
	"retry-now":       "The delivery is due now; the outbox was woken to send it.",
	"released":        "Released: the payload was processed by the handler.",
	"released-before": "Released: it had been processed before, so it was not processed again.",
	"discarded":       "Discarded: the payload was moved out of the quarantine.",
	"resent":          "Queued again under the same Message-ID; the sender was woken to send it.",
	"cancelled":       "Cancelled: no further attempt is made.",
}

// render writes a page with status 200 and the URL's flash, if any.
func (c *Console) render(w http.ResponseWriter, r *http.Request, who caller, name, title string, data any) {
	c.renderStatus(w, r, who, http.StatusOK, name, title, data, flashes[r.URL.Query().Get("flash")], "")
}

// renderStatus writes a page with the status and the messages given (the
// server's text, never the request's).
func (c *Console) renderStatus(w http.ResponseWriter, r *http.Request, who caller, status int, name, title string, data any, flash, errText string) {
	p := page{Title: title, Nav: name, Who: who.who, Data: data, Flash: flash, Error: errText, Outbound: c.src.Outbound != nil}
	if who.sessionID != "" {
		p.CSRF = c.sessions.csrf(who.sessionID)
	}
	var b strings.Builder
	if err := c.tmpl.ExecuteTemplate(&b, name, p); err != nil {
		c.log.Error("console: render", "page", name, "err", err)
		http.Error(w, "internal error rendering the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}

// notice is the page that answers an action directly: what happened (the
// server's words) and a link on.
type notice struct {
	Link, LinkText string
}

func (c *Console) notice(w http.ResponseWriter, r *http.Request, who caller, status int, flash, errText, link, linkText string) {
	c.renderStatus(w, r, who, status, "notice", "Console", notice{Link: link, LinkText: linkText}, flash, errText)
}

// tooManyFailures answers a source that used up its wrong tokens.
func (c *Console) tooManyFailures(w http.ResponseWriter, r *http.Request, wait time.Duration) {
	secs := int((wait + time.Second - 1) / time.Second)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	msg := fmt.Sprintf("Too many wrong admin tokens from your address; try again in %d seconds.", secs)
	if r.URL.Path == "/console/login" {
		c.renderStatus(w, r, caller{}, http.StatusTooManyRequests, "login", "Log in", nil, "", msg)
		return
	}
	http.Error(w, msg, http.StatusTooManyRequests)
}

func (c *Console) fail(w http.ResponseWriter, what string, err error) {
	c.log.Error("console: "+what, "err", err)
	status := http.StatusInternalServerError
	if errors.Is(err, dedup.ErrUnavailable) {
		status = http.StatusServiceUnavailable
	}
	http.Error(w, what+" failed; see the gateway log", status)
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	if c.tokenSum == ([32]byte{}) {
		http.Redirect(w, r, "/console/", http.StatusSeeOther)
		return
	}
	c.render(w, r, caller{}, "login", "Log in", nil)
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if c.tokenSum == ([32]byte{}) {
		http.Redirect(w, r, "/console/", http.StatusSeeOther)
		return
	}
	src, now := SourceOf(r), c.now()
	if wait, blocked := c.throttle.Blocked(src, now); blocked {
		c.log.Warn("console: login refused: too many wrong tokens", "remote", r.RemoteAddr, "retry_after", wait.String())
		c.tooManyFailures(w, r, wait)
		return
	}
	if err := r.ParseForm(); err != nil || !c.tokenOK(r.PostForm.Get("token")) {
		c.throttle.Failed(src, now)
		c.log.Warn("console: login refused", "remote", r.RemoteAddr)
		c.renderStatus(w, r, caller{}, http.StatusUnauthorized, "login", "Log in", nil, "", "Wrong token.")
		return
	}
	c.throttle.Succeeded(src)
	id := c.sessions.create(tokenWho(r), c.now())
	c.setCookie(w, r, id, int(sessionTTL/time.Second))
	c.log.Info("console: login", "who", tokenWho(r), "remote", r.RemoteAddr)
	http.Redirect(w, r, "/console/", http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request, who caller) {
	if who.sessionID != "" {
		if err := r.ParseForm(); err != nil || !c.sessions.csrfOK(who.sessionID, r.PostForm.Get("csrf")) {
			http.Error(w, "CSRF token missing or wrong", http.StatusForbidden)
			return
		}
		c.sessions.drop(who.sessionID)
	}
	c.setCookie(w, r, "", -1)
	http.Redirect(w, r, "/console/login", http.StatusSeeOther)
}

// audit records an operator action.
func (c *Console) audit(ctx context.Context, who caller, rec audit.Record) error {
	rec.Step, rec.Actor, rec.Time = audit.StepOperator, who.who, c.now().UTC()
	c.log.Info("console: operator action", "action", rec.Decision, "who", who.who, "partner", rec.Partner,
		"message_id", rec.MessageID)
	if c.src.Record == nil {
		return nil
	}
	return c.src.Record(ctx, rec)
}
