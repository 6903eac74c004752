// Package config reads the gateway's own YAML file, with GATEWAY_*
// environment variables overriding any setting (dots become underscores:
// GATEWAY_STORE, GATEWAY_TLS_CERT, GATEWAY_HANDLER_INBOX, …).
package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"

	"github.com/edigateway/gateway/internal/yamlkeys"
)

// Config is the gateway's configuration.
type Config struct {
	// Listen is the HTTP(S) listen address.
	Listen string `mapstructure:"listen"`
	TLS    TLS    `mapstructure:"tls"`
	// PublicURL is the base URL partners reach the gateway at, as they see
	// it through a proxy, load balancer or DNS name
	// ("https://edi.example.com"); the AS2 and AS4 paths are added to it.
	// Empty: derived from listen and tls (fine for a test, rarely what a
	// partner dials). `gateway partners profile` prints it.
	PublicURL string `mapstructure:"public_url"`
	// Store is memory:, sqlite:PATH or postgres://….
	Store string `mapstructure:"store"`
	// Lease is how long a claim holds a message before another delivery may
	// take it over, unless its holder renews it: a live gateway renews the
	// claims of every exchange it runs each LeaseHeartbeat, so the lease
	// only says how soon a dead gateway's messages are processed elsewhere.
	Lease time.Duration `mapstructure:"lease"`
	// LeaseHeartbeat is how often the claims of a running exchange are
	// renewed (0: a third of the lease).
	LeaseHeartbeat time.Duration `mapstructure:"lease_heartbeat"`
	// InFlightRetryAfter is the Retry-After sent to a delivery whose message
	// another delivery is processing: "auto" (an estimate from recent
	// handler times) or a duration; never more than the lease left.
	InFlightRetryAfter string `mapstructure:"in_flight_retry_after"`
	// Retention is how long accepted keys are kept (never less than the
	// longest partner dedup window).
	Retention time.Duration `mapstructure:"retention"`
	// PurgeInterval is how often serve removes rows past retention.
	PurgeInterval time.Duration `mapstructure:"purge_interval"`
	Partners      string        `mapstructure:"partners"`
	// AllowNoPartners lets serve and partners check accept a partner
	// directory without partner files (default false: "no partner files
	// in …" is an error, unless peppol.enabled, whose senders need none).
	AllowNoPartners bool     `mapstructure:"allow_no_partners"`
	Identity        Identity `mapstructure:"identity"`
	Handler         Handler  `mapstructure:"handler"`
	// Handlers are the routes: the first whose match selects a message
	// handles it; the last must be a catch-all (no match). Empty: the single
	// Handler above.
	Handlers []Route  `mapstructure:"handlers"`
	Audit    Audit    `mapstructure:"audit"`
	AS2      Endpoint `mapstructure:"as2"`
	AS4      Endpoint `mapstructure:"as4"`
	Limits   Limits   `mapstructure:"limits"`
	// QuarantineDir keeps payloads refused under on_drift: quarantine.
	QuarantineDir string `mapstructure:"quarantine_dir"`
	// ArchiveDir receives the gzipped JSON lines of purged ledger rows.
	ArchiveDir string `mapstructure:"archive_dir"`
	// SpoolDir holds large payloads while they are processed (default: the
	// system temp directory).
	SpoolDir string `mapstructure:"spool_dir"`
	// ShutdownTimeout bounds how long serve waits for in-flight exchanges.
	ShutdownTimeout time.Duration `mapstructure:"shutdown_timeout"`
	// DrainPeriod is how long serve keeps serving partners after SIGTERM
	// or SIGINT with /readyz answering 503, so that a load balancer takes
	// the node out before it stops accepting connections; every reply in
	// the period closes its connection. 0: no drain.
	DrainPeriod time.Duration `mapstructure:"drain_period"`
	// LogLevel: debug, info, warn, error.
	LogLevel string `mapstructure:"log_level"`
	// Admin is the operators' listener (metrics, health, readiness).
	Admin Admin `mapstructure:"admin"`
	// CertWarning is how long before expiry a partner or identity
	// certificate is warned about (partners check, serve).
	CertWarning time.Duration `mapstructure:"cert_warning"`
	// ReloadOnChange reloads the partner directory and identity keys when
	// their files change (SIGHUP always reloads).
	ReloadOnChange bool `mapstructure:"reload_on_change"`
	// Peppol turns on the receiving Peppol access point (AS4).
	Peppol Peppol `mapstructure:"peppol"`
	// Outbox tunes the queue of replies the gateway posts itself (AS2
	// asynchronous MDNs): its leases and their heartbeat (outbox.go).
	Outbox Outbox `mapstructure:"outbox"`
	// Outbound configures sending to partners: the queue's workers and
	// leases, the submission API's payload limit, the pickup directories
	// (outbound.go).
	Outbound Outbound `mapstructure:"outbound"`
	// Identities are further local identities (AS2 names, ebMS parties),
	// each with its own keys; Identity, when set, is the first.
	Identities []Identity `mapstructure:"identities"`

	// File is the configuration file that was read ("" when none).
	File string `mapstructure:"-"`
	// legacyHandler: handler.* was set in the file or the environment.
	legacyHandler bool
	// overrides are the values set by Override (command-line flags), by
	// key, which Reload applies again.
	overrides map[string]string
}

// Override sets listen, admin.listen or log_level from the command line:
// the value replaces the file's and the environment's, in c and in every
// configuration Reload reads (so that a reload does not take the file's
// value for a change that needs a restart). Call Check afterwards.
func (c *Config) Override(key, value string) error {
	switch key {
	case "listen":
		c.Listen = value
	case "admin.listen":
		c.Admin.Listen = value
	case "log_level":
		c.LogLevel = value
	default:
		return fmt.Errorf("config: %s cannot be overridden", key)
	}
	if c.overrides == nil {
		c.overrides = map[string]string{}
	}
	c.overrides[key] = value
	return nil
}

// Reload reads c's file again (the environment too) and applies c's
// overrides to it; without a file it returns c.
func (c *Config) Reload() (*Config, error) {
	if c.File == "" {
		return c, nil
	}
	n, err := Load(c.File)
	if err != nil {
		return nil, err
	}
	for k, v := range c.overrides {
		if err := n.Override(k, v); err != nil {
			return nil, err
		}
	}
	if err := n.Check(); err != nil {
		return nil, err
	}
	return n, nil
}

// TLS enables HTTPS when Cert and Key are set.
type TLS struct {
	Cert string `mapstructure:"cert"`
	Key  string `mapstructure:"key"`
}

// DefaultAdminListen is admin.listen's default: loopback, on a port of
// its own. 9090 is Prometheus' own port (and 9091 to 9999 its
// exporters', pushgateway's and alertmanager's), so a gateway on a host
// that runs Prometheus or an exporter would not start with it; 8079 is
// beside the partner listener's 8080 and in no registry of well-known
// monitoring ports.
const DefaultAdminListen = "127.0.0.1:8079"

// Admin configures the admin listener: /metrics, /healthz, /readyz and,
// when enabled, /debug/pprof/. Partners never reach it.
type Admin struct {
	// Listen is the admin listen address; a non-loopback address needs
	// Token or TLS.ClientCA.
	Listen string `mapstructure:"listen"`
	// Token is the bearer token every admin request must carry. It is read
	// from GATEWAY_ADMIN_TOKEN or from TokenFile, never from the YAML file.
	Token     string   `mapstructure:"token"`
	TokenFile string   `mapstructure:"token_file"`
	TLS       AdminTLS `mapstructure:"tls"`
	// Pprof mounts net/http/pprof under /debug/pprof/.
	Pprof bool `mapstructure:"pprof"`
	// ReadyTimeout bounds each /readyz check (store, audit).
	ReadyTimeout time.Duration `mapstructure:"ready_timeout"`
	// MaxConnections bounds the admin listener's open connections, a
	// budget of its own that partner connections never take.
	MaxConnections int `mapstructure:"max_connections"`
}

// AdminTLS serves the admin listener over HTTPS; ClientCA, when set,
// requires a client certificate issued by it (mTLS).
type AdminTLS struct {
	Cert     string `mapstructure:"cert"`
	Key      string `mapstructure:"key"`
	ClientCA string `mapstructure:"client_ca"`
}

// Identity is the gateway's own names and keys.
type Identity struct {
	AS2ID     string `mapstructure:"as2_id"`
	PartyID   string `mapstructure:"party_id"`
	PartyType string `mapstructure:"party_type"`
	// Keys are our certificate/key pairs: the first signs MDNs and receipts;
	// all are tried for decryption (rollover).
	Keys []KeyPair `mapstructure:"keys"`
	// AllowWeakKeys accepts our own RSA keys of 1024 to 2047 bits (refused
	// by default at start and on reload).
	AllowWeakKeys bool `mapstructure:"allow_weak_keys"`
}

// KeyPair names one of our certificates and its private key. Key is a
// PEM, DER or PKCS#12 (.p12/.pfx) file; Cert a PEM, DER or PKCS#12 file, or
// empty when Key is a PKCS#12 file holding the certificate. The password of
// a PKCS#12 file comes from the environment variable KeyPasswordEnv or the
// first line of KeyPasswordFile, never from this file.
type KeyPair struct {
	Cert            string `mapstructure:"cert"`
	Key             string `mapstructure:"key"`
	KeyPasswordEnv  string `mapstructure:"key_password_env"`
	KeyPasswordFile string `mapstructure:"key_password_file"`
	// Field names the pair in the configuration ("identity.keys[0]",
	// "identities[1].keys[0]"), for messages.
	Field string `mapstructure:"-"`
	// AllowWeakKey is the allow_weak_keys of the pair's identity (for
	// certcheck).
	AllowWeakKey bool `mapstructure:"-"`
}

// AllIdentities are our identities in order: the identity block (when it
// has a name or keys), then identities.
func (c *Config) AllIdentities() []Identity {
	var out []Identity
	if id := c.Identity; id.AS2ID != "" || id.PartyID != "" || len(id.Keys) > 0 {
		out = append(out, id)
	}
	return append(out, c.Identities...)
}

// IdentityField names identity j of AllIdentities as the configuration
// file does: "identity" (the identity block) or "identities[i]".
func (c *Config) IdentityField(j int) string {
	if len(c.AllIdentities()) > len(c.Identities) { // the identity block comes first
		if j == 0 {
			return "identity"
		}
		j--
	}
	return fmt.Sprintf("identities[%d]", j)
}

// AllKeys are the key pairs of every identity, in order.
func (c *Config) AllKeys() []KeyPair {
	var out []KeyPair
	for _, id := range c.AllIdentities() {
		out = append(out, id.Keys...)
	}
	return out
}

// Password is where the key's password comes from.
func (k KeyPair) Password() Password {
	return Password{Env: k.KeyPasswordEnv, File: k.KeyPasswordFile}
}

// Password says where the password of a PKCS#12 file comes from: the
// environment variable Env or the file File (its first line, without the
// line end). Both empty: no password (an unencrypted or empty-password file).
type Password struct {
	Env, File string
}

// Get reads the password.
func (p Password) Get() (string, error) {
	switch {
	case p.Env != "" && p.File != "":
		return "", errors.New("password: set an environment variable or a file, not both")
	case p.Env != "":
		v, ok := os.LookupEnv(p.Env)
		if !ok {
			return "", fmt.Errorf("password: environment variable %s is not set", p.Env)
		}
		return v, nil
	case p.File != "":
		b, err := os.ReadFile(p.File)
		if err != nil {
			return "", fmt.Errorf("password: %w", err)
		}
		s, _, _ := strings.Cut(string(b), "\n")
		return strings.TrimSuffix(s, "\r"), nil
	}
	return "", nil
}

// Handler selects the business handler.
type Handler struct {
	// Type: "dir" (write payloads under Inbox/<partner>/) or "table" (a row
	// per payload in the gateway's database, in the accept transaction).
	Type  string `mapstructure:"type"`
	Inbox string `mapstructure:"inbox"`
}

// Route is one entry of handlers: a handler and the messages it takes.
type Route struct {
	Name  string     `mapstructure:"name"`
	Match RouteMatch `mapstructure:"match"`
	// Type: dir, http or exec; only its own block may be set.
	Type string      `mapstructure:"type"`
	Dir  DirHandler  `mapstructure:"dir"`
	HTTP HTTPHandler `mapstructure:"http"`
	Exec ExecHandler `mapstructure:"exec"`
}

// RouteMatch selects messages; every field is a glob (* and ?), empty
// matches anything.
type RouteMatch struct {
	Partner     string `mapstructure:"partner"`
	Protocol    string `mapstructure:"protocol"`
	Service     string `mapstructure:"service"`
	Action      string `mapstructure:"action"`
	ContentType string `mapstructure:"content_type"`
}

// DirHandler writes payloads under Inbox/<partner>/.
type DirHandler struct {
	Inbox string `mapstructure:"inbox"`
}

// HTTPHandler posts each payload to URL.
type HTTPHandler struct {
	URL     string        `mapstructure:"url"`
	Timeout time.Duration `mapstructure:"timeout"`
	// AuthHeaderEnv names the environment variable holding the value of
	// the AuthHeader header (default Authorization).
	AuthHeaderEnv    string `mapstructure:"auth_header_env"`
	AuthHeader       string `mapstructure:"auth_header"`
	CAFile           string `mapstructure:"ca_file"`
	CertFile         string `mapstructure:"cert_file"`
	KeyFile          string `mapstructure:"key_file"`
	MaxResponseBytes int64  `mapstructure:"max_response_bytes"`
}

// ExecHandler runs Command once per payload.
type ExecHandler struct {
	Command        []string      `mapstructure:"command"`
	Dir            string        `mapstructure:"dir"`
	Timeout        time.Duration `mapstructure:"timeout"`
	Env            []string      `mapstructure:"env"`
	MaxOutputBytes int64         `mapstructure:"max_output_bytes"`
}

// Routes returns the configured handler routes: handlers, or else the
// single handler as a catch-all named "default".
func (c *Config) Routes() []Route {
	if len(c.Handlers) > 0 {
		return c.Handlers
	}
	return []Route{{Name: "default", Type: c.Handler.Type, Dir: DirHandler{Inbox: c.Handler.Inbox}}}
}

// Audit configures audit sinks besides the store's own table.
type Audit struct {
	// File, when set, also appends JSON lines to this file.
	File string `mapstructure:"file"`
	// BestEffort makes audit failures log instead of failing the exchange.
	BestEffort bool `mapstructure:"best_effort"`
}

// Endpoint is a protocol's HTTP path.
type Endpoint struct {
	Path string `mapstructure:"path"`
	// ClientCertHeader (as4 only) names the request header in which a
	// TLS-terminating proxy forwards the verified client certificate
	// (URL-encoded PEM as nginx's $ssl_client_escaped_cert, or base64 DER).
	// It is read only from TrustedProxies (IP addresses or CIDR prefixes).
	ClientCertHeader string   `mapstructure:"client_cert_header"`
	TrustedProxies   []string `mapstructure:"trusted_proxies"`
}

// BodyLimit is the request body limit: max_body_bytes, or the former
// max_streamed_body_bytes when a configuration sets it higher.
func (l Limits) BodyLimit() int64 { return max(l.MaxBodyBytes, l.MaxStreamedBodyBytes) }

// Limits protect the server.
type Limits struct {
	// MaxBodyBytes caps a request body, AS2 and AS4 (default 4 GiB; a
	// partner's max_body_bytes replaces it for that partner). Bodies are
	// streamed through spool files: memory does not grow with them.
	MaxBodyBytes int64 `mapstructure:"max_body_bytes"`
	// MaxStreamedBodyBytes is the former cap of streamed AS2 bodies, still
	// read: when set, the body limit is the larger of it and MaxBodyBytes
	// (see BodyLimit).
	MaxStreamedBodyBytes int64         `mapstructure:"max_streamed_body_bytes"`
	ReadHeaderTimeout    time.Duration `mapstructure:"read_header_timeout"`
	ReadTimeout          time.Duration `mapstructure:"read_timeout"`
	WriteTimeout         time.Duration `mapstructure:"write_timeout"`
	IdleTimeout          time.Duration `mapstructure:"idle_timeout"`
	// MaxDecompressedBytes caps what one message inflates to (each AS2
	// compressed layer and all together; each AS4 payload and all together).
	MaxDecompressedBytes int64 `mapstructure:"max_decompressed_bytes"`
	// MaxCompressionRatio caps inflated ÷ compressed bytes once the output
	// passes 1 MiB (0: no ratio cap).
	MaxCompressionRatio float64 `mapstructure:"max_compression_ratio"`
	// MaxEnvelopeBytes caps the AS4 SOAP envelope part.
	MaxEnvelopeBytes int64 `mapstructure:"max_envelope_bytes"`
	// MemoryBudget is the bytes all requests together may hold in memory
	// (0: unlimited).
	MemoryBudget int64 `mapstructure:"memory_budget"`
	// MemorySharePerSource is the most of MemoryBudget, in percent, that
	// the requests from one source address may hold at once (default and
	// 0: 50; 100: no cap, warned about at start).
	MemorySharePerSource int `mapstructure:"memory_share_per_source"`
	// MemorySharePerPartner is the most of MemoryBudget, in percent, that
	// the requests naming one partner (AS2-From, before it is
	// authenticated) may hold at once (default and 0: 50; 100: no cap,
	// warned about at start).
	MemorySharePerPartner int `mapstructure:"memory_share_per_partner"`
	// MinBodyRate is the slowest accepted body in bytes/s after
	// MinBodyRateGrace (0: no minimum).
	MinBodyRate      int64         `mapstructure:"min_body_rate"`
	MinBodyRateGrace time.Duration `mapstructure:"min_body_rate_grace"`
	// MaxConnections bounds the partner listener's open connections (0:
	// derived from the process's descriptor limit RLIMIT_NOFILE, keeping a
	// quarter of it and admin.max_connections in reserve, at most 4096).
	// A larger value is lowered to what the descriptor limit allows.
	// At the limit the longest idle connection is closed for a new one;
	// with none idle, the new connection is closed at once.
	MaxConnections int `mapstructure:"max_connections"`
	// MaxConnectionsPerAddress bounds the partner connections open from
	// one source IP address (0: an eighth of max_connections, at least 4).
	// A value of max_connections or more turns the per-address limit off.
	MaxConnectionsPerAddress int `mapstructure:"max_connections_per_address"`
}

var defaults = map[string]any{
	"listen":                         "127.0.0.1:8080",
	"public_url":                     "",
	"tls.cert":                       "",
	"tls.key":                        "",
	"store":                          "sqlite:var/gateway.db",
	"lease":                          30 * time.Second,
	"lease_heartbeat":                time.Duration(0),
	"in_flight_retry_after":          "auto",
	"retention":                      90 * 24 * time.Hour,
	"purge_interval":                 time.Hour,
	"partners":                       "partners",
	"allow_no_partners":              false,
	"identity.as2_id":                "",
	"identity.party_id":              "",
	"identity.party_type":            "",
	"identity.keys":                  []map[string]any{},
	"identity.allow_weak_keys":       false,
	"identities":                     []map[string]any{},
	"handler.type":                   "dir",
	"handler.inbox":                  "var/inbox",
	"audit.file":                     "",
	"audit.best_effort":              false,
	"as2.path":                       "/as2",
	"as4.path":                       "/as4",
	"as4.client_cert_header":         "",
	"as4.trusted_proxies":            []string{},
	"limits.max_body_bytes":          int64(4 << 30),
	"limits.max_streamed_body_bytes": int64(0),
	"limits.read_header_timeout":     10 * time.Second,
	"limits.read_timeout":            5 * time.Minute,
	"limits.write_timeout":           5 * time.Minute,
	"limits.idle_timeout":            2 * time.Minute,
	"spool_dir":                      "",
	"quarantine_dir":                 "var/quarantine",
	"archive_dir":                    "var/archive",
	"shutdown_timeout":               30 * time.Second,
	"drain_period":                   5 * time.Second,
	"log_level":                      "info",
	"admin.listen":                   DefaultAdminListen,
	"admin.token":                    "",
	"admin.token_file":               "",
	"admin.tls.cert":                 "",
	"admin.tls.key":                  "",
	"admin.tls.client_ca":            "",
	"admin.pprof":                    false,
	"admin.ready_timeout":            2 * time.Second,
	"cert_warning":                   30 * 24 * time.Hour,
	"reload_on_change":               true,
}

// limitDefaults are the defaults of the limits that bound hostile input
// (kept apart so that the table above stays as it is).
var limitDefaults = map[string]any{
	"limits.max_decompressed_bytes":   int64(4 << 30),
	"limits.max_compression_ratio":    200.0,
	"limits.max_envelope_bytes":       int64(4 << 20),
	"limits.memory_budget":            int64(1 << 30),
	"limits.memory_share_per_source":  50,
	"limits.memory_share_per_partner": 50,
	"limits.min_body_rate":            int64(4096),
	"limits.min_body_rate_grace":      10 * time.Second,
	// Connections: 0 derives the limits from RLIMIT_NOFILE (server).
	"limits.max_connections":             0,
	"limits.max_connections_per_address": 0,
	"admin.max_connections":              32,
}

func init() {
	for k, v := range limitDefaults {
		defaults[k] = v
	}
}

// Load reads path (may be "" for defaults and environment only). Relative
// paths inside the file are resolved against the file's directory.
func Load(path string) (*Config, error) {
	v := viper.New()
	for k, d := range defaults {
		v.SetDefault(k, d)
	}
	v.SetEnvPrefix("GATEWAY")
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	v.AutomaticEnv()
	var keyErr error
	if path != "" {
		v.SetConfigFile(path)
		v.SetConfigType("yaml")
		if err := v.ReadInConfig(); err != nil {
			return nil, fmt.Errorf("config: read %s: %w", path, err)
		}
		keyErr = checkFileKeys(path)
	}
	var c Config
	// With unknown keys (reported with their line and nearest key), the
	// rest of the file is still read and validated, so that one run names
	// every problem.
	unmarshal := v.UnmarshalExact
	if keyErr != nil {
		unmarshal = v.Unmarshal
	}
	err := unmarshal(&c, viper.DecodeHook(mapstructure.ComposeDecodeHookFunc(
		mapstructure.StringToTimeDurationHookFunc(), mapstructure.StringToSliceHookFunc(","))))
	if err != nil {
		return nil, errors.Join(keyErr, fmt.Errorf("config: %s: %w", displayName(path), err))
	}
	c.File = path
	for i := range c.Identity.Keys {
		c.Identity.Keys[i].Field = fmt.Sprintf("identity.keys[%d]", i)
		c.Identity.Keys[i].AllowWeakKey = c.Identity.AllowWeakKeys
	}
	for j := range c.Identities {
		for i := range c.Identities[j].Keys {
			c.Identities[j].Keys[i].Field = fmt.Sprintf("identities[%d].keys[%d]", j, i)
			c.Identities[j].Keys[i].AllowWeakKey = c.Identities[j].AllowWeakKeys
		}
	}
	if c.Store == "memory" { // YAML users may drop the colon of "memory:"
		c.Store = "memory:"
	}
	if path != "" {
		// Paths written in the file are relative to the file; defaults and
		// environment values stay relative to the working directory.
		base := filepath.Dir(path)
		for key, p := range map[string]*string{"tls.cert": &c.TLS.Cert, "tls.key": &c.TLS.Key, "partners": &c.Partners,
			"handler.inbox": &c.Handler.Inbox, "audit.file": &c.Audit.File, "spool_dir": &c.SpoolDir,
			"quarantine_dir": &c.QuarantineDir, "archive_dir": &c.ArchiveDir, "admin.token_file": &c.Admin.TokenFile,
			"admin.tls.cert": &c.Admin.TLS.Cert, "admin.tls.key": &c.Admin.TLS.Key, "admin.tls.client_ca": &c.Admin.TLS.ClientCA,
			"outbound.pickup_dir": &c.Outbound.PickupDir} {
			if fromFile(v, key) {
				*p = resolve(base, *p)
			}
		}
		for i := range c.Handlers {
			h := &c.Handlers[i]
			for _, p := range []*string{&h.Dir.Inbox, &h.HTTP.CAFile, &h.HTTP.CertFile, &h.HTTP.KeyFile, &h.Exec.Dir} {
				*p = resolve(base, *p)
			}
			// A program named by a path is relative to the file; a bare
			// name is looked up in PATH.
			if len(h.Exec.Command) > 0 && strings.ContainsRune(h.Exec.Command[0], '/') {
				h.Exec.Command[0] = resolve(base, h.Exec.Command[0])
			}
		}
		if fromFile(v, "identity.keys") {
			resolveKeys(base, c.Identity.Keys)
		}
		if fromFile(v, "identities") {
			for j := range c.Identities {
				resolveKeys(base, c.Identities[j].Keys)
			}
		}
		c.Peppol.resolvePaths(v, base)
		if rest, ok := strings.CutPrefix(c.Store, "sqlite:"); ok && rest != "" && fromFile(v, "store") && !strings.HasPrefix(rest, "//") {
			c.Store = "sqlite:" + resolve(base, rest)
		}
	}
	if path != "" && fromFile(v, "admin.token") {
		return nil, fmt.Errorf("config: %s: admin.token: keep the token out of the file; set GATEWAY_ADMIN_TOKEN or admin.token_file", path)
	}
	if c.Admin.Token == "" && c.Admin.TokenFile != "" {
		b, err := os.ReadFile(c.Admin.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("config: %s: admin.token_file: %w", displayName(path), err)
		}
		if c.Admin.Token = strings.TrimSpace(string(b)); c.Admin.Token == "" {
			return nil, fmt.Errorf("config: %s: admin.token_file: %s is empty", displayName(path), c.Admin.TokenFile)
		}
	}
	for _, k := range []string{"handler.type", "handler.inbox"} {
		c.legacyHandler = c.legacyHandler || fromFile(v, k)
		if _, env := os.LookupEnv("GATEWAY_" + strings.ToUpper(strings.ReplaceAll(k, ".", "_"))); env {
			c.legacyHandler = true
		}
	}
	if err := c.validate(); err != nil {
		return nil, errors.Join(keyErr, fmt.Errorf("config: %s: %w", displayName(path), err))
	}
	if keyErr != nil {
		return nil, keyErr
	}
	return &c, nil
}

// checkFileKeys refuses keys of the file the configuration does not have,
// naming the file, the line and the nearest valid key.
func checkFileKeys(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: read %s: %w", path, err)
	}
	var errs []error
	for _, u := range yamlkeys.Check(b, reflect.TypeFor[Config](), "mapstructure") {
		errs = append(errs, fmt.Errorf("config: %s:%d: %s", path, u.Line, u))
	}
	return errors.Join(errs...)
}

// fromFile reports whether key's value comes from the configuration file
// rather than a default or the environment.
func fromFile(v *viper.Viper, key string) bool {
	if _, env := os.LookupEnv("GATEWAY_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))); env {
		return false
	}
	return v.InConfig(key)
}

func displayName(path string) string {
	if path == "" {
		return "(defaults and environment)"
	}
	return path
}

func resolveKeys(base string, keys []KeyPair) {
	for i := range keys {
		keys[i].Cert = resolve(base, keys[i].Cert)
		keys[i].Key = resolve(base, keys[i].Key)
		keys[i].KeyPasswordFile = resolve(base, keys[i].KeyPasswordFile)
	}
}

func resolve(base, p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(base, p)
}

// PartnersOptional reports whether a partner directory without partner
// files is allowed: allow_no_partners, or a Peppol access point (whose
// senders are Peppol participants, not partner files).
func (c *Config) PartnersOptional() bool { return c.AllowNoPartners || c.Peppol.Enabled }

// Check validates c again, after a program changed it (command-line flags).
func (c *Config) Check() error {
	if err := c.validate(); err != nil {
		return fmt.Errorf("config: %s: %w", displayName(c.File), err)
	}
	return nil
}

func (c *Config) validate() error {
	var errs []error
	if c.Listen == "" {
		errs = append(errs, errors.New("listen: required"))
	}
	if (c.TLS.Cert == "") != (c.TLS.Key == "") {
		errs = append(errs, errors.New("tls: cert and key must be set together"))
	}
	if c.PublicURL != "" {
		if u, err := url.Parse(c.PublicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			errs = append(errs, fmt.Errorf("public_url: %q is not an http:// or https:// base URL (scheme, host, optional port and path; no query)", c.PublicURL))
		}
	}
	if !(c.Store == "memory:" || strings.HasPrefix(c.Store, "sqlite:") || strings.HasPrefix(c.Store, "postgres://") || strings.HasPrefix(c.Store, "postgresql://")) {
		errs = append(errs, fmt.Errorf("store: %q is not memory:, sqlite:PATH or postgres://…", redactURL(c.Store)))
	}
	if c.Lease < time.Second {
		errs = append(errs, fmt.Errorf("lease: %s is shorter than 1s", c.Lease))
	}
	if hb := c.LeaseHeartbeat; hb != 0 && (hb < 100*time.Millisecond || hb > c.Lease/2) {
		errs = append(errs, fmt.Errorf("lease_heartbeat: %s is not between 100ms and half the lease (%s), so that a renewal that fails is retried before the lease runs out (0: a third of the lease)", hb, c.Lease/2))
	}
	if _, err := c.InFlightRetryAfterFixed(); err != nil {
		errs = append(errs, err)
	}
	if c.Retention < time.Hour {
		errs = append(errs, fmt.Errorf("retention: %s is shorter than 1h", c.Retention))
	}
	if len(c.Handlers) == 0 {
		if c.Handler.Type != "dir" && c.Handler.Type != "table" {
			errs = append(errs, fmt.Errorf("handler.type: %q is not one of: dir, table (use handlers for http and exec)", c.Handler.Type))
		}
		if c.Handler.Type == "dir" && c.Handler.Inbox == "" {
			errs = append(errs, errors.New("handler.inbox: required for the dir handler"))
		}
	} else {
		if c.legacyHandler {
			errs = append(errs, errors.New("handler and handlers are both set: move the handler into handlers (a last entry without match)"))
		}
		errs = append(errs, validateRoutes(c.Handlers, c.Limits.WriteTimeout)...)
	}
	errs = append(errs, checkKeys("identity.keys", c.Identity.Keys)...)
	as2IDs, parties := map[string]bool{}, map[string]bool{}
	first := len(c.AllIdentities()) > len(c.Identities) // the identity block comes first
	for j, id := range c.AllIdentities() {
		name := "identity"
		if first {
			j--
		}
		if j >= 0 {
			name = fmt.Sprintf("identities[%d]", j)
			errs = append(errs, checkKeys(name+".keys", id.Keys)...)
			if id.AS2ID == "" && id.PartyID == "" {
				errs = append(errs, fmt.Errorf("%s: as2_id or party_id required", name))
			}
		}
		if id.AS2ID != "" {
			if as2IDs[id.AS2ID] {
				errs = append(errs, fmt.Errorf("%s.as2_id: %q is also another identity's", name, id.AS2ID))
			}
			as2IDs[id.AS2ID] = true
		}
		if id.PartyID != "" {
			k := id.PartyType + "\x00" + id.PartyID
			if parties[k] {
				errs = append(errs, fmt.Errorf("%s.party_id: %q (type %q) is also another identity's", name, id.PartyID, id.PartyType))
			}
			parties[k] = true
		}
	}
	for _, e := range []struct{ name, path string }{{"as2.path", c.AS2.Path}, {"as4.path", c.AS4.Path}} {
		if !strings.HasPrefix(e.path, "/") {
			errs = append(errs, fmt.Errorf("%s: %q must start with /", e.name, e.path))
		}
	}
	if c.AS2.ClientCertHeader != "" || len(c.AS2.TrustedProxies) > 0 {
		errs = append(errs, errors.New("as2.client_cert_header, as2.trusted_proxies: only the as4 endpoint reads forwarded client certificates"))
	}
	if _, err := ParseProxies(c.AS4.TrustedProxies); err != nil {
		errs = append(errs, fmt.Errorf("as4.trusted_proxies: %w", err))
	}
	if c.AS4.ClientCertHeader != "" && len(c.AS4.TrustedProxies) == 0 {
		errs = append(errs, errors.New("as4.client_cert_header: needs as4.trusted_proxies (the header is trusted only from them)"))
	}
	if c.Limits.MaxBodyBytes <= 0 {
		errs = append(errs, errors.New("limits.max_body_bytes: must be positive"))
	}
	if c.Limits.MaxStreamedBodyBytes < 0 {
		errs = append(errs, errors.New("limits.max_streamed_body_bytes: must not be negative"))
	}
	if c.Limits.MaxDecompressedBytes <= 0 {
		errs = append(errs, errors.New("limits.max_decompressed_bytes: must be positive"))
	}
	if c.Limits.MaxEnvelopeBytes <= 0 {
		errs = append(errs, errors.New("limits.max_envelope_bytes: must be positive"))
	}
	for _, v := range []struct {
		name string
		neg  bool
	}{{"limits.max_compression_ratio", c.Limits.MaxCompressionRatio < 0}, {"limits.memory_budget", c.Limits.MemoryBudget < 0},
		{"limits.min_body_rate", c.Limits.MinBodyRate < 0}, {"limits.min_body_rate_grace", c.Limits.MinBodyRateGrace < 0},
		{"limits.max_connections", c.Limits.MaxConnections < 0}, {"limits.max_connections_per_address", c.Limits.MaxConnectionsPerAddress < 0}} {
		if v.neg {
			errs = append(errs, fmt.Errorf("%s: must not be negative", v.name))
		}
	}
	for _, v := range []struct {
		name  string
		share int
	}{{"limits.memory_share_per_source", c.Limits.MemorySharePerSource}, {"limits.memory_share_per_partner", c.Limits.MemorySharePerPartner}} {
		if v.share < 0 || v.share > 100 {
			errs = append(errs, fmt.Errorf("%s: %d is not a percentage of limits.memory_budget from 1 to 100 (0: the default)", v.name, v.share))
		}
	}
	errs = append(errs, c.Admin.validate()...)
	if c.CertWarning < 0 {
		errs = append(errs, errors.New("cert_warning: must not be negative"))
	}
	if c.DrainPeriod < 0 {
		errs = append(errs, errors.New("drain_period: must not be negative (0: no drain)"))
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("log_level: %q is not one of debug, info, warn, error", c.LogLevel))
	}
	errs = append(errs, c.Outbox.validate()...)
	errs = append(errs, c.Outbound.validate()...)
	if err := c.Peppol.validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// checkKeys validates key pairs: a key file, at most one password source.
func checkKeys(field string, keys []KeyPair) []error {
	var errs []error
	for i, k := range keys {
		if k.Key == "" {
			errs = append(errs, fmt.Errorf("%s[%d].key: required (a PEM, DER or PKCS#12 file; cert may be left out when it is PKCS#12)", field, i))
		}
		if k.KeyPasswordEnv != "" && k.KeyPasswordFile != "" {
			errs = append(errs, fmt.Errorf("%s[%d]: key_password_env and key_password_file are exclusive", field, i))
		}
	}
	return errs
}

func (a *Admin) validate() []error {
	var errs []error
	if a.Listen == "" {
		errs = append(errs, errors.New("admin.listen: required"))
	} else if !IsLoopback(a.Listen) && a.Token == "" && a.TLS.ClientCA == "" {
		errs = append(errs, fmt.Errorf("admin.listen: %s is not a loopback address: set an admin token (GATEWAY_ADMIN_TOKEN or admin.token_file) or admin.tls.client_ca", a.Listen))
	}
	if (a.TLS.Cert == "") != (a.TLS.Key == "") {
		errs = append(errs, errors.New("admin.tls: cert and key must be set together"))
	}
	if a.TLS.ClientCA != "" && a.TLS.Cert == "" {
		errs = append(errs, errors.New("admin.tls.client_ca: needs admin.tls.cert and admin.tls.key"))
	}
	if a.Token != "" && len(a.Token) < 16 {
		errs = append(errs, errors.New("admin token: shorter than 16 characters"))
	}
	if a.ReadyTimeout <= 0 {
		errs = append(errs, errors.New("admin.ready_timeout: must be positive"))
	}
	if a.MaxConnections <= 0 {
		errs = append(errs, errors.New("admin.max_connections: must be positive"))
	}
	return errs
}

var routeName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// validateRoutes checks the handler routes. A handler's timeout must be
// below limits.write_timeout (writeTimeout; any positive value when that is
// 0): the partner's reply is written after the handler finished, within
// that time of the request. The lease no longer bounds it: the claim is
// renewed while the handler runs.
func validateRoutes(routes []Route, writeTimeout time.Duration) []error {
	var errs []error
	seen := map[string]int{}
	catchAll := -1
	for i, r := range routes {
		at := fmt.Sprintf("handlers[%d]", i)
		if r.Name != "" {
			at += " (" + r.Name + ")"
		}
		bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(at+": "+format, a...)) }
		switch {
		case r.Name == "":
			bad("name: required")
		case !routeName.MatchString(r.Name):
			bad("name: %q is not 1-64 of a-z 0-9 . _ - (starting with a letter or digit)", r.Name)
		default:
			if j, dup := seen[r.Name]; dup {
				bad("name: also used by handlers[%d]", j)
			}
			seen[r.Name] = i
		}
		if catchAll >= 0 {
			bad("unreachable: handlers[%d] before it has no match and takes every message", catchAll)
		}
		m := r.Match
		if m == (RouteMatch{}) && catchAll < 0 {
			catchAll = i
		}
		switch m.Protocol {
		case "", "as2", "as4":
		default:
			bad("match.protocol: %q is not as2 or as4", m.Protocol)
		}
		if m.Protocol == "as2" && (m.Service != "" || m.Action != "") {
			bad("match.service and match.action are AS4 values; with protocol as2 the route never matches")
		}
		if m.ContentType != "" && !strings.Contains(m.ContentType, "/") && m.ContentType != "*" {
			bad("match.content_type: %q is not a media type pattern (type/subtype, e.g. application/edifact or application/*)", m.ContentType)
		}
		set := map[string]bool{"dir": r.Dir != (DirHandler{}), "http": r.HTTP != (HTTPHandler{}),
			"exec": len(r.Exec.Command) > 0 || r.Exec.Dir != "" || r.Exec.Timeout != 0 || len(r.Exec.Env) > 0 || r.Exec.MaxOutputBytes != 0}
		switch r.Type {
		case "dir", "http", "exec":
		case "":
			bad("type: required (dir, http or exec)")
		default:
			bad("type: %q is not one of: dir, http, exec", r.Type)
		}
		for _, k := range []string{"dir", "http", "exec"} {
			if set[k] && k != r.Type {
				bad("%s: set, but type is %q", k, r.Type)
			}
		}
		switch r.Type {
		case "dir":
			if r.Dir.Inbox == "" {
				bad("dir.inbox: required")
			}
		case "http":
			h := r.HTTP
			if u, err := url.Parse(h.URL); h.URL == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				bad("http.url: %q is not an http:// or https:// URL", redactURL(h.URL))
			} else if u.User != nil {
				if _, pw := u.User.Password(); pw {
					bad("http.url: holds a password; put the credential in the environment variable named by http.auth_header_env")
				}
			}
			if h.Timeout < 0 || writeTimeout > 0 && h.Timeout >= writeTimeout {
				bad("http.timeout: %s is not between 0 and limits.write_timeout (%s), within which the partner's reply is written after the handler", h.Timeout, writeTimeout)
			}
			if (h.CertFile == "") != (h.KeyFile == "") {
				bad("http.cert_file and http.key_file must be set together")
			}
			if h.AuthHeader != "" && h.AuthHeaderEnv == "" {
				bad("http.auth_header: set without http.auth_header_env")
			}
			if h.AuthHeaderEnv != "" && !envName.MatchString(h.AuthHeaderEnv) {
				bad("http.auth_header_env: not an environment variable name (value not shown: name the variable that holds the secret, never the secret itself)")
			}
			if h.MaxResponseBytes < 0 {
				bad("http.max_response_bytes: negative")
			}
		case "exec":
			e := r.Exec
			if len(e.Command) == 0 || e.Command[0] == "" {
				bad("exec.command: required (the program and its arguments as a list; no shell)")
			}
			if e.Timeout < 0 || writeTimeout > 0 && e.Timeout >= writeTimeout {
				bad("exec.timeout: %s is not between 0 and limits.write_timeout (%s), within which the partner's reply is written after the handler", e.Timeout, writeTimeout)
			}
			if e.MaxOutputBytes < 0 {
				bad("exec.max_output_bytes: negative")
			}
			for _, n := range e.Env {
				if !envName.MatchString(n) {
					bad("exec.env: %q is not an environment variable name", n)
				} else if strings.HasPrefix(strings.ToUpper(n), "GATEWAY_") {
					bad("exec.env: %s: GATEWAY_ names are the metadata and the gateway's own settings (which may hold secrets), never passed on", n)
				}
			}
		}
	}
	if catchAll < 0 {
		errs = append(errs, errors.New("handlers: the last entry must have no match (the catch-all), so that every message has a handler"))
	}
	return errs
}

// IsLoopback reports whether a listen address binds only the loopback
// interface (127.0.0.0/8, ::1 or localhost); ":8079" binds every interface.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// InFlightRetryAfterFixed is in_flight_retry_after as a duration: zero for
// "auto", else the configured value (at least 1s).
func (c *Config) InFlightRetryAfterFixed() (time.Duration, error) {
	if c.InFlightRetryAfter == "auto" || c.InFlightRetryAfter == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(c.InFlightRetryAfter)
	if err != nil || d < time.Second {
		return 0, fmt.Errorf("in_flight_retry_after: %q is neither auto nor a duration of at least 1s", c.InFlightRetryAfter)
	}
	return d, nil
}

// redactURL hides a password in a store URL for messages.
func redactURL(s string) string {
	if i := strings.Index(s, "://"); i >= 0 {
		rest := s[i+3:]
		if at := strings.Index(rest, "@"); at >= 0 {
			if colon := strings.Index(rest[:at], ":"); colon >= 0 {
				return s[:i+3] + rest[:colon] + ":***" + rest[at:]
			}
		}
	}
	return s
}

// Redacted returns the store URL with any password hidden, for logs.
func (c *Config) Redacted() string { return redactURL(c.Store) }

// ParseProxies parses as4.trusted_proxies: IP addresses or CIDR prefixes.
func ParseProxies(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range list {
		s = strings.TrimSpace(s)
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("%q is neither an IP address nor a CIDR prefix", s)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}
