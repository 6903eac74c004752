// Package config reads the gateway's own YAML file, with GATEWAY_*
// environment variables overriding any setting (dots become underscores:
// GATEWAY_STORE, GATEWAY_TLS_CERT, GATEWAY_HANDLER_INBOX, …).
package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"

	"gateway/keyfile"
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
	// Identities are further local identities (AS2 names, ebMS parties),
	// each with its own keys; Identity, when set, is the first.
	Identities []Identity `mapstructure:"identities"`

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

// AllKeys are the key pairs of every identity, in order.
func (c *Config) AllKeys() []KeyPair {
	var out []KeyPair
	for _, id := range c.AllIdentities() {
		out = append(out, id.Keys...)
	}
	return out
}

// Password is where the key's password comes from.
func (k KeyPair) Password() keyfile.Password {
	return keyfile.Password{Env: k.KeyPasswordEnv, File: k.KeyPasswordFile}
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
	"identity.allow_weak_keys":   false,
	"identities":                 []map[string]any{},
	"handler.type":               "dir",
	"handler.inbox":              "var/inbox",
	"audit.file":                 "",
	"audit.best_effort":          false,
	"as2.path":                   "/as2",
	"as4.path":                   "/as4",
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
	for i := range c.Identity.Keys {
		c.Identity.Keys[i].Field = fmt.Sprintf("identity.keys[%d]", i)
	}
	for j := range c.Identities {
		for i := range c.Identities[j].Keys {
			c.Identities[j].Keys[i].Field = fmt.Sprintf("identities[%d].keys[%d]", j, i)
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
			"quarantine_dir": &c.QuarantineDir, "archive_dir": &c.ArchiveDir} {
			if fromFile(v, key) {
				*p = resolve(base, *p)
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
