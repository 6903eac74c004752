// Package config reads the gateway's own YAML file, with GATEWAY_*
// environment variables overriding any setting (dots become underscores:
// GATEWAY_STORE, GATEWAY_TLS_CERT, GATEWAY_HANDLER_INBOX, …).
package config

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
)

// Config is the gateway's configuration.
type Config struct {
	// Listen is the HTTP(S) listen address.
	Listen string `mapstructure:"listen"`
	TLS    TLS    `mapstructure:"tls"`
	// Store is memory:, sqlite:PATH or postgres://….
	Store string `mapstructure:"store"`
	// Lease is how long a claim holds a message before another delivery may
	// take it over; the handler must finish within it.
	Lease time.Duration `mapstructure:"lease"`
	// Retention is how long accepted keys are kept (never less than the
	// longest partner dedup window).
	Retention time.Duration `mapstructure:"retention"`
	// PurgeInterval is how often serve removes rows past retention.
	PurgeInterval time.Duration `mapstructure:"purge_interval"`
	Partners      string        `mapstructure:"partners"`
	Identity      Identity      `mapstructure:"identity"`
	Handler       Handler       `mapstructure:"handler"`
	Audit         Audit         `mapstructure:"audit"`
	AS2           Endpoint      `mapstructure:"as2"`
	AS4           Endpoint      `mapstructure:"as4"`
	Limits        Limits        `mapstructure:"limits"`
	// QuarantineDir keeps payloads refused under on_drift: quarantine.
	QuarantineDir string `mapstructure:"quarantine_dir"`
	// ArchiveDir receives the gzipped JSON lines of purged ledger rows.
	ArchiveDir string `mapstructure:"archive_dir"`
	// SpoolDir holds large payloads while they are processed (default: the
	// system temp directory).
	SpoolDir string `mapstructure:"spool_dir"`
	// ShutdownTimeout bounds how long serve waits for in-flight exchanges.
	ShutdownTimeout time.Duration `mapstructure:"shutdown_timeout"`
	// LogLevel: debug, info, warn, error.
	LogLevel string `mapstructure:"log_level"`
	// CertWarning is how long before expiry a partner or identity
	// certificate is warned about (partners check, serve).
	CertWarning time.Duration `mapstructure:"cert_warning"`
	// ReloadOnChange reloads the partner directory and identity keys when
	// their files change (SIGHUP always reloads).
	ReloadOnChange bool `mapstructure:"reload_on_change"`

	// File is the configuration file that was read ("" when none).
	File string `mapstructure:"-"`
}

// TLS enables HTTPS when Cert and Key are set.
type TLS struct {
	Cert string `mapstructure:"cert"`
	Key  string `mapstructure:"key"`
}

// Identity is the gateway's own names and keys.
type Identity struct {
	AS2ID     string `mapstructure:"as2_id"`
	PartyID   string `mapstructure:"party_id"`
	PartyType string `mapstructure:"party_type"`
	// Keys are our certificate/key pairs: the first signs MDNs and receipts;
	// all are tried for decryption (rollover).
	Keys []KeyPair `mapstructure:"keys"`
}

// KeyPair names a PEM certificate file and its PEM private key file.
type KeyPair struct {
	Cert string `mapstructure:"cert"`
	Key  string `mapstructure:"key"`
}

// Handler selects the business handler.
type Handler struct {
	// Type: "dir" (write payloads under Inbox/<partner>/).
	Type  string `mapstructure:"type"`
	Inbox string `mapstructure:"inbox"`
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

// Limits protect the server.
type Limits struct {
	MaxBodyBytes      int64         `mapstructure:"max_body_bytes"`
	ReadHeaderTimeout time.Duration `mapstructure:"read_header_timeout"`
	ReadTimeout       time.Duration `mapstructure:"read_timeout"`
	WriteTimeout      time.Duration `mapstructure:"write_timeout"`
	IdleTimeout       time.Duration `mapstructure:"idle_timeout"`
}

var defaults = map[string]any{
	"listen":                     "127.0.0.1:8080",
	"tls.cert":                   "",
	"tls.key":                    "",
	"store":                      "sqlite:var/gateway.db",
	"lease":                      5 * time.Minute,
	"retention":                  90 * 24 * time.Hour,
	"purge_interval":             time.Hour,
	"partners":                   "partners",
	"identity.as2_id":            "",
	"identity.party_id":          "",
	"identity.party_type":        "",
	"identity.keys":              []map[string]any{},
	"handler.type":               "dir",
	"handler.inbox":              "var/inbox",
	"audit.file":                 "",
	"audit.best_effort":          false,
	"as2.path":                   "/as2",
	"as4.path":                   "/as4",
	"as4.client_cert_header":     "",
	"as4.trusted_proxies":        []string{},
	"limits.max_body_bytes":      int64(100 << 20),
	"limits.read_header_timeout": 10 * time.Second,
	"limits.read_timeout":        5 * time.Minute,
	"limits.write_timeout":       5 * time.Minute,
	"limits.idle_timeout":        2 * time.Minute,
	"spool_dir":                  "",
	"quarantine_dir":             "var/quarantine",
	"archive_dir":                "var/archive",
	"shutdown_timeout":           30 * time.Second,
	"log_level":                  "info",
	"cert_warning":               30 * 24 * time.Hour,
	"reload_on_change":           true,
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
	if path != "" {
		v.SetConfigFile(path)
		v.SetConfigType("yaml")
		if err := v.ReadInConfig(); err != nil {
			return nil, fmt.Errorf("config: read %s: %w", path, err)
		}
	}
	var c Config
	err := v.UnmarshalExact(&c, viper.DecodeHook(mapstructure.ComposeDecodeHookFunc(
		mapstructure.StringToTimeDurationHookFunc(), mapstructure.StringToSliceHookFunc(","))))
	if err != nil {
		return nil, fmt.Errorf("config: %s: %w", displayName(path), err)
	}
	c.File = path
	if c.Store == "memory" { // YAML users may drop the colon of "memory:"
		c.Store = "memory:"
	}
	if path != "" {
		// Paths written in the file are relative to the file; defaults and
		// environment values stay relative to the working directory.
		base := filepath.Dir(path)
		for key, p := range map[string]*string{"tls.cert": &c.TLS.Cert, "tls.key": &c.TLS.Key, "partners": &c.Partners,
			"handler.inbox": &c.Handler.Inbox, "audit.file": &c.Audit.File, "spool_dir": &c.SpoolDir,
			"quarantine_dir": &c.QuarantineDir, "archive_dir": &c.ArchiveDir} {
			if fromFile(v, key) {
				*p = resolve(base, *p)
			}
		}
		if fromFile(v, "identity.keys") {
			for i := range c.Identity.Keys {
				c.Identity.Keys[i].Cert = resolve(base, c.Identity.Keys[i].Cert)
				c.Identity.Keys[i].Key = resolve(base, c.Identity.Keys[i].Key)
			}
		}
		if rest, ok := strings.CutPrefix(c.Store, "sqlite:"); ok && rest != "" && fromFile(v, "store") && !strings.HasPrefix(rest, "//") {
			c.Store = "sqlite:" + resolve(base, rest)
		}
	}
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("config: %s: %w", displayName(path), err)
	}
	return &c, nil
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

func resolve(base, p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(base, p)
}

func (c *Config) validate() error {
	var errs []error
	if c.Listen == "" {
		errs = append(errs, errors.New("listen: required"))
	}
	if (c.TLS.Cert == "") != (c.TLS.Key == "") {
		errs = append(errs, errors.New("tls: cert and key must be set together"))
	}
	if !(c.Store == "memory:" || strings.HasPrefix(c.Store, "sqlite:") || strings.HasPrefix(c.Store, "postgres://") || strings.HasPrefix(c.Store, "postgresql://")) {
		errs = append(errs, fmt.Errorf("store: %q is not memory:, sqlite:PATH or postgres://…", redactURL(c.Store)))
	}
	if c.Lease < time.Second {
		errs = append(errs, fmt.Errorf("lease: %s is shorter than 1s", c.Lease))
	}
	if c.Retention < time.Hour {
		errs = append(errs, fmt.Errorf("retention: %s is shorter than 1h", c.Retention))
	}
	if c.Handler.Type != "dir" {
		errs = append(errs, fmt.Errorf("handler.type: %q is not one of: dir", c.Handler.Type))
	}
	if c.Handler.Type == "dir" && c.Handler.Inbox == "" {
		errs = append(errs, errors.New("handler.inbox: required for the dir handler"))
	}
	for i, k := range c.Identity.Keys {
		if k.Cert == "" || k.Key == "" {
			errs = append(errs, fmt.Errorf("identity.keys[%d]: cert and key are both required", i))
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
	if c.CertWarning < 0 {
		errs = append(errs, errors.New("cert_warning: must not be negative"))
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("log_level: %q is not one of debug, info, warn, error", c.LogLevel))
	}
	return errors.Join(errs...)
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
