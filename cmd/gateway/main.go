// Command gateway is an AS2/AS4 receiving gateway with built-in duplicate
// detection.
//
//	gateway serve [-config FILE]             run the gateway
//	gateway partners check [-config FILE]    validate the partner directory
//	gateway partners list [-config FILE]     partners, ids, certificates, windows
//	gateway partners profile [-partner ID]   what a partner needs from us
//	gateway messages [-config FILE] ...      recent messages from the audit
//	gateway submit -partner ID -file PATH    queue a file to send through the running gateway
//	gateway version                          print the version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/internal/certs"
	"github.com/edigateway/gateway/outbound"
	"github.com/edigateway/gateway/partners"
	"github.com/edigateway/gateway/server"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = ""

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// errUsage marks command-line mistakes (exit code 2).
var errUsage = errors.New("usage")

func run(args []string, stdout, stderr io.Writer) int {
	err := dispatch(args, stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintln(stderr, err)
		usage(stderr)
		return 2
	case errors.Is(err, flag.ErrHelp):
		return 0
	default:
		fmt.Fprintln(stderr, "gateway:", err)
		return 1
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage:
  gateway serve [-config FILE] ...         run the gateway (-h for flags)
  gateway partners check [-config FILE]    validate the partner directory
  gateway partners list [-config FILE]     partners: protocols, ids, certificates with expiry, windows
  gateway partners profile [-config FILE] [-partner ID] [-json]
                                           what a partner needs from us to set up their side: our ids,
                                           URLs, certificates, accepted algorithms, MDN and receipt options
  gateway messages [-config FILE] [-partner ID] [-since 24h] [-decision D] [-limit 50]
                                           recent messages from the audit
  gateway version                          print the version
  gateway dedup purge [-config FILE]       archive and remove dedup state past its windows, and
                                           final outbound messages past outbound.retention
  gateway audit export [-config FILE] [-partner ID] [-message-id ID] [-reference REF] [-from T] [-to T]
                                           print the evidence of what was decided, as JSON
  gateway peppol report [-config FILE] [-month YYYY-MM] [-out DIR]
                                           write the month's OpenPeppol TSR and EUSR
  gateway send -file PATH [-url URL] ...   send an AS2 message and verify its MDN (-h for flags)
  gateway send-as4 -url URL ... FILE...    send an AS4 message and verify its receipt (-h for flags)
  gateway submit -partner ID -file PATH [-wait 2m] [-config FILE | -url URL -token-file F]
                                           queue PATH for the partner through the running gateway's
                                           submission API; -wait until delivered (0) or failed (1)
Every setting can be overridden by GATEWAY_* environment variables (see README).
`)
}

func dispatch(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: no command", errUsage)
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stdout, stderr)
	case "partners":
		if len(args) >= 2 && args[1] == "list" {
			return partnersList(args[2:], stdout)
		}
		if len(args) >= 2 && args[1] == "profile" {
			return partnersProfile(args[2:], stdout)
		}
		if len(args) < 2 || args[1] != "check" {
			return fmt.Errorf("%w: partners takes: check, list, profile", errUsage)
		}
		return partnersCheck(args[2:], stdout)
	case "messages":
		return messages(args[1:], stdout)
	case "dedup":
		if len(args) < 2 || args[1] != "purge" {
			return fmt.Errorf("%w: dedup takes: purge", errUsage)
		}
		return dedupPurge(args[2:], stdout)
	case "audit":
		if len(args) < 2 || args[1] != "export" {
			return fmt.Errorf("%w: audit takes: export", errUsage)
		}
		return auditExport(args[2:], stdout)
	case "peppol":
		if len(args) < 2 || args[1] != "report" {
			return fmt.Errorf("%w: peppol takes: report", errUsage)
		}
		return peppolReport(args[2:], stdout)
	case "send":
		return sendAS2(args[1:], stdout, stderr)
	case "send-as4":
		return sendAS4(args[1:], stdout, stderr)
	case "submit":
		return submit(args[1:], stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "gateway", versionString())
		return nil
	case "help", "-h", "--help":
		usage(stdout)
		return nil
	}
	return fmt.Errorf("%w: unknown command %q", errUsage, args[0])
}

func versionString() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		return versionFrom(bi)
	}
	return "dev"
}

// versionFrom names the build: the main module's version when the binary
// was built from a module version (go install MODULE@v1.2.3) or in a VCS
// checkout (go build stamps a pseudo-version with the revision), else
// "devel" with the VCS revision when stamped; then the Go version.
func versionFrom(bi *debug.BuildInfo) string {
	rev, dirty := "", ""
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	v := bi.Main.Version
	if v == "" || v == "(devel)" {
		v = "devel"
		if rev != "" {
			v += "-" + rev[:min(12, len(rev))] + dirty
		}
	}
	return v + " " + bi.GoVersion
}

func configFlag(fs *flag.FlagSet) *string {
	return fs.String("config", os.Getenv("GATEWAY_CONFIG"), "gateway YAML file (env GATEWAY_CONFIG)")
}

func newLogger(level string, w io.Writer) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}

func serve(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := configFlag(fs)
	listen := fs.String("listen", "", "partner listen address (overrides listen)")
	adminListen := fs.String("admin-listen", "", "admin listen address (overrides admin.listen)")
	logLevel := fs.String("log-level", "", "debug, info, warn or error (overrides log_level)")
	check := fs.Bool("check", false, "load the configuration, partners, keys and store, print a summary and exit")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: gateway serve [flags]

Runs the gateway: partners reach the AS2 and AS4 endpoints on listen, operators reach
/metrics, /healthz and /readyz on admin.listen. SIGINT and SIGTERM shut down gracefully:
/readyz answers 503 and partners are still served for drain_period, then in-flight
exchanges get shutdown_timeout; a second SIGINT or SIGTERM ends the drain at once.
SIGHUP reloads the partner directory and identity keys.
Every configuration setting can also be set by a GATEWAY_* environment variable (README).

flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: serve takes no arguments, got %q", errUsage, fs.Args())
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	// Overrides, so that a reload reads the file with them (their keys
	// are not changes that need a restart).
	for key, v := range map[string]string{"listen": *listen, "admin.listen": *adminListen, "log_level": *logLevel} {
		if v != "" {
			if err := cfg.Override(key, v); err != nil {
				return err
			}
		}
	}
	if err := cfg.Check(); err != nil {
		return err
	}
	log := newLogger(cfg.LogLevel, stderr)
	slog.SetDefault(log)
	tuneGC(cfg.Limits.MemoryBudget, os.Getenv, log)
	tuneProcs(os.Getenv, log)
	server.Version = versionString()
	if err := makeAuditDir(cfg.Audit.File); err != nil {
		return err
	}
	// SIGINT and SIGTERM stop the gateway: the first cancels ctx, which
	// starts the drain (server.ServeListeners); a second ends the drain at
	// once (server.SkipDrain).
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan struct{})
	defer close(done)
	var running atomic.Pointer[server.Server]
	stopSig := make(chan os.Signal, 2)
	signal.Notify(stopSig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(stopSig)
	go stopOnSignals(stopSig, done, stop, &running, log)
	// SIGHUP reloads the partner directory and identity keys, also while
	// draining; without this it would end the process without a graceful
	// shutdown.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	srv, err := server.New(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer srv.Close()
	if !cfg.PartnersOptional() {
		if err := srv.Directory().RequirePartners(); err != nil {
			return err
		}
	}
	running.Store(srv)
	if *check {
		fmt.Fprintf(stdout, "configuration ok: %d partners, store %s, listen %s, admin %s\n",
			len(srv.Directory().Partners), cfg.Redacted(), cfg.Listen, cfg.Admin.Listen)
		return nil
	}
	go func() {
		for {
			select {
			case <-done:
				return
			case <-hup:
				log.Info("SIGHUP: reloading partners and identity keys")
				_ = srv.ReloadOnSignal(context.Background()) // the outcome is logged and in ReloadStatus
			}
		}
	}()
	ln, err := bindListener(cfg, "listen", cfg.Listen)
	if err != nil {
		return err
	}
	admin, err := bindListener(cfg, "admin.listen", cfg.Admin.Listen)
	if err != nil {
		ln.Close()
		return err
	}
	return srv.ServeListeners(ctx, ln, admin)
}

// bindListener listens on addr, the value of the setting key; a failure
// says which setting holds the address and how to change it (the file, its
// GATEWAY_* variable or serve's flag), since the usual cause is another
// program on the port.
func bindListener(cfg *config.Config, key, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		return ln, nil
	}
	var se *os.SyscallError
	var oe *net.OpError
	switch {
	case errors.As(err, &se):
		err = se.Err // "address already in use", without "listen tcp …: bind:"
	case errors.As(err, &oe) && oe.Err != nil:
		err = oe.Err
	}
	file := "gateway.yaml"
	if cfg.File != "" {
		file = cfg.File
	}
	env := "GATEWAY_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
	flagName := "-" + strings.ReplaceAll(key, ".", "-")
	return nil, fmt.Errorf("%s %s: %w; set %s in %s (or %s), or run serve %s HOST:PORT", key, addr, err, key, file, env, flagName)
}

// makeAuditDir creates the directory of audit.file, as the SQLite store
// creates its database's, so that a fresh installation starts; a failure
// names the resolved directory once.
func makeAuditDir(file string) error {
	if file == "" {
		return nil
	}
	dir, err := filepath.Abs(filepath.Dir(file))
	if err != nil {
		return fmt.Errorf("audit.file: %w", err)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("audit.file: cannot create its directory %s: %w", dir, err)
	}
	return nil
}

// stopOnSignals turns SIGINT and SIGTERM into a stop: the first calls
// stop (the server drains, then shuts down), a second ends the drain at
// once; it returns when done is closed.
func stopOnSignals(sigs <-chan os.Signal, done <-chan struct{}, stop func(), running *atomic.Pointer[server.Server], log *slog.Logger) {
	select {
	case sig := <-sigs:
		log.Info("stop requested", "signal", sig.String())
		stop()
	case <-done:
		return
	}
	for {
		select {
		case sig := <-sigs:
			log.Warn("stop requested again: ending the drain now", "signal", sig.String())
			if srv := running.Load(); srv != nil {
				srv.SkipDrain()
			}
		case <-done:
			return
		}
	}
}

func partnersCheck(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("partners check", flag.ContinueOnError)
	cfgPath := configFlag(fs)
	dir := fs.String("dir", "", "partner directory (default: the config's partners setting)")
	allowEmpty := fs.Bool("allow-empty", false, "a directory without partner files passes (as allow_no_partners: true does)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	path := *dir
	var keys []config.KeyPair
	var cfg *config.Config
	warnAhead := certs.DefaultWarning
	if path == "" || *cfgPath != "" {
		// With a configuration, our identity keys are checked too.
		var err error
		cfg, err = config.Load(*cfgPath)
		if err != nil {
			return err
		}
		if path == "" {
			path = cfg.Partners
		}
		keys, warnAhead = cfg.AllKeys(), cfg.CertWarning
		*allowEmpty = *allowEmpty || cfg.PartnersOptional()
	}
	// Every problem in one run: the partner files' (all of them, every
	// field), then the certificates of the partners that loaded and our
	// identity keys.
	d, loadErr := partners.LoadAll(path)
	if d == nil {
		return loadErr
	}
	var fileErrs []error
	if loadErr != nil {
		fileErrs = flatten(loadErr)
	} else if !*allowEmpty {
		if err := d.RequirePartners(); err != nil {
			return err
		}
	}
	if cfg != nil {
		// The identities the partner files name must be ours (as at
		// start and reload).
		if err := d.CheckIdentities(cfg.AllIdentities()); err != nil {
			fileErrs = append(fileErrs, flatten(err)...)
		}
	}
	for _, p := range d.Partners {
		var protos []string
		if p.AS2 != nil {
			protos = append(protos, fmt.Sprintf("as2 %s (%d certificates, window %s)", p.AS2.ID, len(d.AS2Certificates(p)), p.AS2.DedupWindow.Std()))
		}
		if p.AS4 != nil {
			protos = append(protos, fmt.Sprintf("as4 %s (%d certificates, %d pmodes, window %s)", p.AS4.PartyID, len(d.AS4Certificates(p)), len(p.AS4.PModes), p.AS4.DedupWindow.Std()))
		}
		fmt.Fprintf(stdout, "ok %s: %v\n", p.ID, protos)
		if line := sendSetup(p, cfg); line != "" {
			fmt.Fprintf(stdout, "send %s: %s\n", p.ID, line)
		}
	}
	for _, w := range d.Warnings {
		fmt.Fprintln(stdout, "warning:", w)
	}
	_, findings := certs.All(d, keys, time.Now(), warnAhead)
	nerr := certs.Errors(findings)
	for _, f := range findings {
		fmt.Fprintf(stdout, "%s: %s\n", f.Severity, f)
	}
	for _, e := range fileErrs {
		fmt.Fprintln(stdout, "error:", e)
	}
	fmt.Fprintf(stdout, "%d partners, %d warnings, %d errors\n", len(d.Partners), len(d.Warnings)+len(findings)-nerr, nerr+len(fileErrs))
	switch {
	case len(fileErrs) > 0:
		return fmt.Errorf("%d problems in partner files and %d certificate errors (each on an error: line above)", len(fileErrs), nerr)
	case nerr > 0:
		return fmt.Errorf("%d certificate errors (expired certificates or identity keys that do not match their certificates)", nerr)
	}
	return nil
}

// sendSetup is how we send to p, in one line ("" when we only receive
// from it), with the identity we send as: its name and field in the
// configuration cfg (nil: partners check -dir without a configuration,
// the name the partner file gives, else "our first identity").
func sendSetup(p *partners.Partner, cfg *config.Config) string {
	as := func(proto outbound.Protocol, named string) string {
		if cfg == nil {
			if named == "" {
				return "our first identity"
			}
			return named
		}
		ids := cfg.AllIdentities()
		j := p.SendIdentity(proto, ids)
		switch {
		case j < 0 && named != "":
			return named + " (none of our identities)"
		case j < 0:
			return "none of our identities"
		case proto == outbound.AS2:
			return ids[j].AS2ID + " (" + cfg.IdentityField(j) + ")"
		}
		return ids[j].PartyID + " (" + cfg.IdentityField(j) + ")"
	}
	var parts []string
	if p.AS2 != nil && p.AS2.Send != nil {
		parts = append(parts, p.AS2.Send.String()+" as "+as(outbound.AS2, p.AS2.OurID))
	}
	if p.AS4 != nil && p.AS4.Send != nil {
		parts = append(parts, p.AS4.Send.String()+" as "+as(outbound.AS4, p.AS4.Send.FromPartyID))
	}
	return strings.Join(parts, "; ")
}

// flatten lists the errors an errors.Join tree holds, one per problem.
func flatten(err error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, flatten(e)...)
	}
	return out
}
