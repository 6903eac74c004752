package server

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/deliver"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/inbox"
)

// buildHandler builds the business handler from the configuration: one
// handler per route, behind a deliver.Router when there are several. Every
// route is checked now (inbox created, program found, CA and client
// certificate loaded, auth secret present), so that a broken route stops
// the start instead of failing messages.
func buildHandler(cfg *config.Config, log *slog.Logger) (exchange.Handler, error) {
	routes := cfg.Routes()
	runDir := ""
	for _, r := range routes {
		if r.Type == "exec" && runDir == "" {
			// exec commands that a gateway which died left running are
			// killed before any message can run one again.
			runDir = execRunDir(cfg)
			if n, err := deliver.ReapLeftovers(runDir, log); err != nil {
				log.Warn("exec: leftovers of an earlier run could not all be killed", "dir", runDir, "killed", n, "err", err)
			}
			if st, err := os.Stat(runDir); err != nil || !st.IsDir() {
				runDir = "" // not usable: the supervisor alone guards the commands
			}
		}
	}
	var out []deliver.Route
	for _, r := range routes {
		h, err := routeHandler(r, runDir, log)
		if err != nil {
			return nil, fmt.Errorf("server: handler %s: %w", r.Name, err)
		}
		out = append(out, deliver.Route{Name: r.Name, Handler: h, Match: deliver.Match{Partner: r.Match.Partner,
			Protocol: r.Match.Protocol, Service: r.Match.Service, Action: r.Match.Action, ContentType: r.Match.ContentType}})
	}
	if len(out) == 1 && out[0].Match.CatchAll() {
		return out[0].Handler, nil
	}
	return &deliver.Router{Routes: out, Log: log}, nil
}

// execRunDir is where running exec commands are recorded: beside the spool
// areas in spool_dir (default: the system's temporary directory).
func execRunDir(cfg *config.Config) string {
	parent := cfg.SpoolDir
	if parent == "" {
		parent = os.TempDir()
	}
	return filepath.Join(parent, "gateway-exec-running")
}

func routeHandler(r config.Route, runDir string, log *slog.Logger) (exchange.Handler, error) {
	switch r.Type {
	case "dir":
		if err := os.MkdirAll(r.Dir.Inbox, 0o750); err != nil {
			return nil, fmt.Errorf("inbox: %w", err)
		}
		return inbox.Dir{Root: r.Dir.Inbox}, nil
	case "http":
		h := r.HTTP
		return deliver.NewHTTP(deliver.HTTPConfig{Name: r.Name, URL: h.URL, Timeout: h.Timeout, AuthHeaderEnv: h.AuthHeaderEnv,
			AuthHeader: h.AuthHeader, CAFile: h.CAFile, CertFile: h.CertFile, KeyFile: h.KeyFile, MaxResponseBytes: h.MaxResponseBytes})
	case "exec":
		e := r.Exec
		return deliver.NewExec(deliver.ExecConfig{Name: r.Name, Command: e.Command, Dir: e.Dir, Timeout: e.Timeout, Env: e.Env,
			MaxOutputBytes: e.MaxOutputBytes, RunDir: runDir, Log: log})
	}
	return nil, fmt.Errorf("unknown handler type %q", r.Type)
}
