package server

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/deliver"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/inbox"
)

// A route that cannot work stops the start, naming the route.
func TestNewRefusesBrokenHandlerRoutes(t *testing.T) {
	for _, tc := range []struct {
		route config.Route
		want  string
	}{
		{config.Route{Name: "erp", Type: "http", HTTP: config.HTTPHandler{URL: "https://erp.example/in", AuthHeaderEnv: "GATEWAY_TEST_NO_SUCH_VAR"}},
			"handler erp: deliver: http erp: environment variable GATEWAY_TEST_NO_SUCH_VAR (auth_header_env) is not set"},
		{config.Route{Name: "tls", Type: "http", HTTP: config.HTTPHandler{URL: "https://erp.example/in", CAFile: "/nonexistent/ca.pem"}},
			"handler tls: deliver: http tls: ca_file"},
		{config.Route{Name: "map", Type: "exec", Exec: config.ExecHandler{Command: []string{"/nonexistent/map"}}},
			"handler map: deliver: exec map: command"},
	} {
		cfg := demoConfig(t)
		cfg.Handlers = []config.Route{{Name: "x", Match: config.RouteMatch{Partner: "x"}, Type: "dir", Dir: config.DirHandler{Inbox: cfg.Handler.Inbox}}, tc.route}
		s, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
		if err == nil {
			s.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.route.Name, err, tc.want)
		}
	}
}

func TestNewBuildsRouterForHandlers(t *testing.T) {
	cfg := demoConfig(t)
	in := filepath.Join(t.TempDir(), "other")
	cfg.Handlers = []config.Route{
		{Name: "acme", Match: config.RouteMatch{Partner: "acme", ContentType: "application/*"}, Type: "exec", Exec: config.ExecHandler{Command: []string{"true"}}},
		{Name: "default", Type: "dir", Dir: config.DirHandler{Inbox: in}},
	}
	s, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, ok := businessHandler(s).(*deliver.Router)
	if !ok || len(r.Routes) != 2 || r.Routes[0].Match.ContentType != "application/*" || r.Routes[1].Handler != (inbox.Dir{Root: in}) {
		t.Fatalf("handler %#v", s.Pipeline.Handler)
	}
	cfg = demoConfig(t)
	s2, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if businessHandler(s2) != (inbox.Dir{Root: cfg.Handler.Inbox}) {
		t.Fatalf("legacy handler %#v", s2.Pipeline.Handler)
	}
}

// Handler routes are built at start: a reload names a changed route list
// as needing a restart instead of silently keeping the old one.
func TestChangedHandlersNeedARestart(t *testing.T) {
	a := demoConfig(t)
	b := *a
	b.Handlers = []config.Route{{Name: "default", Type: "dir", Dir: config.DirHandler{Inbox: "elsewhere"}}}
	if got := needsRestart(a, &b); strings.Join(got, ",") != "handlers" {
		t.Fatalf("needsRestart = %v", got)
	}
}

// businessHandler is the configured handler inside the latency metric's
// wrapper.
func businessHandler(s *Server) exchange.Handler {
	if t, ok := s.Pipeline.Handler.(timedHandler); ok {
		return t.h
	}
	return s.Pipeline.Handler
}
