package deliver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"strings"

	"github.com/edigateway/gateway/exchange"
)

// Match selects messages for a route. Every field is a glob (* any run of
// characters, / included; ? one character; everything else literal); an
// empty field matches anything, an all-empty Match every message (a
// catch-all).
type Match struct {
	// Partner is the partner id.
	Partner string
	// Protocol is as2 or as4.
	Protocol string
	// Service and Action are the AS4 CollaborationInfo values; a route that
	// sets them never matches an AS2 message.
	Service, Action string
	// ContentType is matched, case-insensitively and without parameters,
	// against every payload's media type: a message matches only when all
	// its payloads do (a message without payloads does not).
	ContentType string
}

// CatchAll reports whether the match takes every message.
func (mt Match) CatchAll() bool { return mt == Match{} }

// Matches reports whether m is selected.
func (mt Match) Matches(m *exchange.Message) bool {
	if !field(mt.Partner, m.Partner) || !field(mt.Protocol, string(m.Protocol)) {
		return false
	}
	if mt.Service != "" || mt.Action != "" {
		if m.Protocol != exchange.AS4 || !field(mt.Service, m.Headers.Get("Service")) || !field(mt.Action, m.Headers.Get("Action")) {
			return false
		}
	}
	if mt.ContentType != "" {
		if len(m.Payloads) == 0 {
			return false
		}
		pat := strings.ToLower(mt.ContentType)
		for _, p := range m.Payloads {
			mt, _, err := mime.ParseMediaType(p.ContentType)
			if err != nil {
				mt, _, _ = strings.Cut(strings.ToLower(strings.TrimSpace(p.ContentType)), ";")
				mt = strings.TrimSpace(mt)
			}
			if !Glob(pat, mt) {
				return false
			}
		}
	}
	return true
}

func field(pat, s string) bool { return pat == "" || Glob(pat, s) }

// Glob reports whether s matches pattern (* any run, ? one character).
func Glob(pattern, s string) bool {
	p, t := []rune(pattern), []rune(s)
	// Iterative matching with one backtrack point: linear in practice,
	// never exponential.
	pi, ti, star, mark := 0, 0, -1, 0
	for ti < len(t) {
		switch {
		case pi < len(p) && p[pi] == '*':
			star, mark = pi, ti
			pi++
		case pi < len(p) && (p[pi] == '?' || p[pi] == t[ti]):
			pi++
			ti++
		case star >= 0:
			pi = star + 1
			mark++
			ti = mark
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

// Route is one configured handler and the messages it takes.
type Route struct {
	Name    string
	Match   Match
	Handler exchange.Handler
}

// Router runs the first route whose Match selects the message. The whole
// message goes to one handler: the handler interface is per message and a
// message is accepted or refused as a whole, so splitting its payloads over
// several handlers would leave a partner's retransmission re-running the
// ones that had succeeded.
type Router struct {
	Routes []Route
	Log    *slog.Logger
}

// ErrNoRoute is returned (and the message refused) when no route matches;
// the configuration loader refuses to start without a catch-all, so that
// it happens only with a Router built in code.
var ErrNoRoute = errors.New("no handler route matches the message")

// Handle implements exchange.Handler.
func (r *Router) Handle(ctx context.Context, m *exchange.Message) error {
	for _, rt := range r.Routes {
		if rt.Match.Matches(m) {
			r.log().Debug("handler route", "route", rt.Name, "partner", m.Partner, "message_id", m.MessageID)
			if err := rt.Handler.Handle(ctx, m); err != nil {
				return fmt.Errorf("route %s: %w", rt.Name, err)
			}
			return nil
		}
	}
	var cts []string
	for _, p := range m.Payloads {
		cts = append(cts, p.ContentType)
	}
	r.log().Error("no handler route matches; message refused", "partner", m.Partner, "protocol", string(m.Protocol),
		"message_id", m.MessageID, "service", m.Headers.Get("Service"), "action", m.Headers.Get("Action"), "content_types", cts)
	return ErrNoRoute
}

func (r *Router) log() *slog.Logger {
	if r.Log != nil {
		return r.Log
	}
	return slog.Default()
}
