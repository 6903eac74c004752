// Package partners loads the trading partner directory: one YAML file per
// partner, validated strictly (unknown fields are errors, every error names
// the file and the field).
package partners

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/internal/certs"
	"github.com/edigateway/gateway/internal/trust"
	"github.com/edigateway/gateway/internal/yamlkeys"
	"github.com/edigateway/gateway/outbound"
)

// Duration is a time.Duration written in YAML as "168h", "30m", "7d" or "0".
type Duration time.Duration

// UnmarshalYAML accepts Go duration strings plus a "d" (24h) suffix.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseDuration(n.Value)
	if err != nil {
		// A TypeError lets the decoder go on, so that the file's other
		// problems are reported with it.
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", n.Line, err)}}
	}
	*d = Duration(v)
	return nil
}

// ParseDuration parses Go durations plus whole days ("7d").
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "0" || s == "" {
		return 0, nil
	}
	if strings.HasSuffix(s, "d") {
		var days int
		if _, err := fmt.Sscanf(s, "%dd", &days); err != nil || fmt.Sprintf("%dd", days) != s || days < 0 {
			return 0, fmt.Errorf("invalid duration %q", s)
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("invalid duration %q", s)
	}
	return v, nil
}

// Std returns the standard library duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// Partner is one trading partner.
type Partner struct {
	// ID is the operator's name for the partner: lowercase letters, digits,
	// '.', '_' and '-'. It names the inbox directory and appears in audit.
	ID   string `yaml:"id"`
	Name string `yaml:"name"`
	// OnDrift says what happens to a retransmitted key or interchange whose
	// payload changed: reject (default), quarantine or accept.
	OnDrift string `yaml:"on_drift"`
	// MaxBodyBytes, when set, replaces limits.max_body_bytes for this
	// partner's messages (AS2 and AS4), lower or higher: an AS2 body is
	// refused with 413 before it is read (AS2-From names the partner), an
	// AS4 message as soon as it passes the limit once its SOAP envelope
	// (eb:From) is read. Bodies are streamed to spool files: the limit is
	// disk, not memory. 0: the global limit.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	AS2          *AS2  `yaml:"as2"`
	AS4          *AS4  `yaml:"as4"`

	// File is the YAML file the partner was loaded from.
	File string `yaml:"-"`
}

// AS2 is a partner's AS2 agreement.
type AS2 struct {
	// ID is the AS2-From the partner sends (case-sensitive).
	ID string `yaml:"as2_id"`
	// OurID is the AS2-To the partner addresses; empty means the gateway's
	// identity as2_id.
	OurID string `yaml:"our_as2_id"`
	// Certificates are the partner's signing/encryption certificates (PEM,
	// DER or PKCS#12 files relative to the partners directory); several
	// for rollover.
	Certificates []string `yaml:"certificates"`
	// RequireSignature refuses unsigned messages (default true: without a
	// signature anyone who writes the partner's AS2-From could send as
	// it). RequireEncryption refuses unencrypted ones (default true).
	// false is an explicit opt-out for partners that really send plain
	// messages; partners check and the start-up log warn about it.
	RequireSignature  bool `yaml:"require_signature"`
	RequireEncryption bool `yaml:"require_encryption"`
	RequireSignedMDN  bool `yaml:"require_signed_mdn"`
	// AllowWeakKeys accepts RSA certificates of 1024 to 2047 bits from
	// this partner (legacy peers); logged at WARN when loaded.
	AllowWeakKeys bool `yaml:"allow_weak_keys"`
	// CertificatePasswordEnv / CertificatePasswordFile give the password
	// of PKCS#12 certificate files (an environment variable, or a file
	// relative to the partners directory); never inline.
	CertificatePasswordEnv  string `yaml:"certificate_password_env"`
	CertificatePasswordFile string `yaml:"certificate_password_file"`
	// AllowedDigests for signatures and MICs; empty allows sha1, sha224,
	// sha256, sha384 and sha512 (never md5 unless listed).
	AllowedDigests []string `yaml:"allowed_digests"`
	// AllowedCiphers for encryption; empty allows every supported cipher.
	AllowedCiphers []string `yaml:"allowed_ciphers"`
	// DuplicateDisposition: "warning" (processed/warning: duplicate-document,
	// default) or "processed" for partners that resend on warnings.
	DuplicateDisposition string `yaml:"duplicate_disposition"`
	// MICCompressed is how the MIC of a compressed, unsigned, unencrypted
	// message is taken: "rfc5402" (default: the decompressed entity with
	// all its MIME headers, RFC 5402 §4) or "content" (the content only,
	// for senders that digest that).
	MICCompressed string `yaml:"mic_compressed"`
	// DedupWindow is how long a Message-ID or interchange counts as a
	// duplicate (default 7d).
	DedupWindow Duration `yaml:"dedup_window"`
	// RetryWindow is how long the partner's product keeps retransmitting;
	// `partners check` warns when it exceeds DedupWindow.
	RetryWindow Duration `yaml:"retry_window"`
	// AsyncMDNURLs are the URL patterns (see URLPattern) a
	// Receipt-Delivery-Option must match to get an asynchronous MDN. Without
	// them only messages signed by the partner get one, and only to public
	// addresses.
	AsyncMDNURLs []string `yaml:"async_mdn_urls"`
	// AsyncMDNPrivateNetworks are non-public networks (CIDR) that hosts of
	// matched name patterns may resolve to; public addresses need no entry.
	AsyncMDNPrivateNetworks []string `yaml:"async_mdn_private_networks"`
	// Trust is the trust model of the partner's signatures (trust: pinned
	// or ca; see Trust).
	Trust `yaml:",inline"`
	// Send is how we send to the partner (nil: we only receive from it).
	Send *AS2Send `yaml:"send"`

	asyncPatterns []*URLPattern
	privateNets   []netip.Prefix
}

// AS4 is a partner's AS4 agreement.
type AS4 struct {
	// PartyID and PartyType identify the partner as eb:From/eb:PartyId.
	PartyID   string `yaml:"party_id"`
	PartyType string `yaml:"party_type"`
	// Certificates are the partner's signing certificates (rollover:
	// several), PEM, DER or PKCS#12.
	Certificates []string `yaml:"certificates"`
	// RequireEncryption refuses messages whose payloads are not encrypted
	// (default true; false is an explicit opt-out that partners check and
	// the start-up log warn about). Signatures are always required.
	RequireEncryption bool `yaml:"require_encryption"`
	// AllowWeakKeys accepts RSA certificates of 1024 to 2047 bits from
	// this partner (legacy peers); logged at WARN when loaded.
	AllowWeakKeys bool `yaml:"allow_weak_keys"`
	// CertificatePasswordEnv / CertificatePasswordFile: as for AS2.
	CertificatePasswordEnv  string `yaml:"certificate_password_env"`
	CertificatePasswordFile string `yaml:"certificate_password_file"`
	// TLSCertificates are the partner's TLS client certificates; when set,
	// a message must come over a TLS connection authenticated with one of
	// them (directly, or forwarded by a trusted proxy: as4.client_cert_header).
	TLSCertificates []string `yaml:"tls_certificates"`
	// ClockSkew tolerated on wsu:Timestamp (default 5m).
	ClockSkew   Duration `yaml:"clock_skew"`
	DedupWindow Duration `yaml:"dedup_window"`
	RetryWindow Duration `yaml:"retry_window"`
	PModes      []PMode  `yaml:"pmodes"`
	// Trust is the trust model of the partner's signatures.
	Trust `yaml:",inline"`
	// Profile "bdew" applies the BDEW AS4 profile (see bdew.go): a security
	// floor the file cannot relax and the profile's defaults.
	Profile string `yaml:"profile"`
	// Send is how we send to the partner (nil: we only receive from it).
	Send *AS4Send `yaml:"send"`

	set map[string]bool // keys present in the file's as4 section
}

// PMode is one processing mode agreed with the partner; empty fields match
// anything.
type PMode struct {
	ID          string `yaml:"id"`
	Agreement   string `yaml:"agreement"`
	Service     string `yaml:"service"`
	ServiceType string `yaml:"service_type"`
	Action      string `yaml:"action"`
	ToPartyID   string `yaml:"to_party_id"`
	ToPartyType string `yaml:"to_party_type"`
}

// Default dedup windows.
const (
	DefaultAS2Window = 7 * 24 * time.Hour
	DefaultAS4Window = 30 * 24 * time.Hour
)

var idPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

var knownDigests = map[string]bool{"md5": true, "sha1": true, "sha224": true, "sha256": true, "sha384": true, "sha512": true}
var knownCiphers = map[string]bool{"3des": true, "aes128-cbc": true, "aes192-cbc": true, "aes256-cbc": true, "aes128-gcm": true, "aes256-gcm": true}

// FieldError is a validation error naming the file and the field.
type FieldError struct {
	File, Field, Msg string
}

func (e *FieldError) Error() string { return fmt.Sprintf("%s: %s: %s", e.File, e.Field, e.Msg) }

// Directory is the loaded set of partners with the lookups the protocols need.
type Directory struct {
	Dir      string
	Partners []*Partner
	// Warnings are non-fatal findings (e.g. a dedup window shorter than the
	// partner's retry window).
	Warnings []string

	byAS2 map[string]*Partner
	byAS4 map[string]*Partner
	certs map[string][]*x509.Certificate
	// policies are the trust: ca policies by protocol and partner id.
	policies map[string]*trust.CAPolicy
}

// ErrNoPartnerFiles is the error of RequirePartners for a directory
// without partner files.
var ErrNoPartnerFiles = errors.New("no partner files")

// RequirePartners fails when the directory held no partner file: a
// mistyped partners setting (or ./partners being some other folder) would
// otherwise leave a gateway that refuses every message and a partners
// check that passes.
func (d *Directory) RequirePartners() error {
	if len(d.Partners) > 0 {
		return nil
	}
	dir, err := filepath.Abs(d.Dir)
	if err != nil {
		dir = d.Dir
	}
	return fmt.Errorf("partners: %w in %s (*.yaml or *.yml); allow_no_partners: true allows a gateway without partners", ErrNoPartnerFiles, dir)
}

// Load reads every *.yaml / *.yml file in dir. Every problem of every file
// is reported (joined), not only the first.
func Load(dir string) (*Directory, error) {
	d, err := LoadAll(dir)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// LoadAll is Load that also returns, with the error, the directory of the
// partner files that are valid (nil only when dir cannot be read), so that
// partners check can go on to their certificates and report every problem
// in one run.
func LoadAll(dir string) (*Directory, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("partners: %w", err)
	}
	d := &Directory{Dir: dir, byAS2: map[string]*Partner{}, byAS4: map[string]*Partner{}, certs: map[string][]*x509.Certificate{}, policies: map[string]*trust.CAPolicy{}}
	var errs []error
	ids := map[string]string{}
	var names []string
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !(strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
			continue
		}
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		path := filepath.Join(dir, n)
		p, err := loadFile(path)
		if err != nil {
			errs = append(errs, err)
			if p != nil {
				// The certificate files of a broken partner file are
				// read too, for their problems; nothing is kept.
				if p.AS2 != nil {
					errs = append(errs, d.loadAS2(path, p)...)
				}
				if p.AS4 != nil {
					errs = append(errs, d.loadAS4(path, p)...)
				}
				d.forget(p)
			}
			continue
		}
		if prev, ok := ids[p.ID]; ok {
			errs = append(errs, &FieldError{path, "id", fmt.Sprintf("%q is also the id of %s", p.ID, prev)})
			continue
		}
		var ferrs []error
		if p.AS2 != nil {
			ferrs = append(ferrs, d.loadAS2(path, p)...)
		}
		if p.AS4 != nil {
			ferrs = append(ferrs, d.loadAS4(path, p)...)
		}
		if len(ferrs) > 0 {
			d.forget(p)
			errs = append(errs, ferrs...)
			continue
		}
		ids[p.ID] = path
		d.Partners = append(d.Partners, p)
	}
	return d, errors.Join(errs...)
}

// loadAS2 registers p's AS2 agreement and reads its certificates; it
// returns every problem.
func (d *Directory) loadAS2(path string, p *Partner) []error {
	k := p.AS2.ID + "\x00" + p.AS2.OurID
	if prev, ok := d.byAS2[k]; ok {
		return []error{&FieldError{path, "as2.as2_id", fmt.Sprintf("%q is also used by %s", p.AS2.ID, prev.File)}}
	}
	d.byAS2[k] = p
	var errs []error
	certs, err := d.loadCerts(path, "as2.certificates", p.AS2.Certificates, d.password(p.AS2.CertificatePasswordEnv, p.AS2.CertificatePasswordFile))
	if err != nil {
		errs = append(errs, err)
	}
	d.certs["as2\x00"+p.ID] = certs
	if d.policies["as2\x00"+p.ID], err = d.loadTrust(path, "as2", &p.AS2.Trust, p.AS2.AllowWeakKeys); err != nil {
		errs = append(errs, err)
	}
	if p.AS2.Send != nil {
		errs = append(errs, d.loadSend(path, p, outbound.AS2, d.password(p.AS2.CertificatePasswordEnv, p.AS2.CertificatePasswordFile))...)
	}
	if len(errs) > 0 {
		return errs
	}
	d.warnWeak(path, "as2", p.AS2.AllowWeakKeys, certs)
	d.warnOptOuts(path, p)
	if p.AS2.RetryWindow > p.AS2.DedupWindow {
		d.Warnings = append(d.Warnings, fmt.Sprintf("%s: as2.dedup_window %s is shorter than as2.retry_window %s: a late retransmission would be processed as new",
			path, p.AS2.DedupWindow.Std(), p.AS2.RetryWindow.Std()))
	}
	return nil
}

// loadAS4 registers p's AS4 agreement and reads its certificates; it
// returns every problem.
func (d *Directory) loadAS4(path string, p *Partner) []error {
	k := p.AS4.PartyType + "\x00" + p.AS4.PartyID
	if prev, ok := d.byAS4[k]; ok {
		return []error{&FieldError{path, "as4.party_id", fmt.Sprintf("%q is also used by %s", p.AS4.PartyID, prev.File)}}
	}
	d.byAS4[k] = p
	var errs []error
	pw := d.password(p.AS4.CertificatePasswordEnv, p.AS4.CertificatePasswordFile)
	certs, err := d.loadCerts(path, "as4.certificates", p.AS4.Certificates, pw)
	if err != nil {
		errs = append(errs, err)
	} else if err := p.AS4.checkProfileCertificates(certs); err != nil {
		errs = append(errs, &FieldError{path, "as4.certificates", err.Error()})
	}
	d.certs["as4\x00"+p.ID] = certs
	if d.policies["as4\x00"+p.ID], err = d.loadTrust(path, "as4", &p.AS4.Trust, p.AS4.AllowWeakKeys); err != nil {
		errs = append(errs, err)
	}
	if len(p.AS4.TLSCertificates) > 0 {
		tls, err := d.loadCerts(path, "as4.tls_certificates", p.AS4.TLSCertificates, pw)
		if err != nil {
			errs = append(errs, err)
		}
		d.certs["as4tls\x00"+p.ID] = tls
	}
	if p.AS4.Send != nil {
		errs = append(errs, d.loadSend(path, p, outbound.AS4, pw)...)
	}
	if len(errs) > 0 {
		return errs
	}
	d.warnWeak(path, "as4", p.AS4.AllowWeakKeys, certs)
	if !p.AS4.RequireEncryption {
		d.Warnings = append(d.Warnings, fmt.Sprintf("%s: as4.require_encryption: false accepts messages from party %q whose payloads are not encrypted (readable on the way unless TLS protects every hop)",
			path, p.AS4.PartyID))
	}
	if p.AS4.RetryWindow > p.AS4.DedupWindow {
		d.Warnings = append(d.Warnings, fmt.Sprintf("%s: as4.dedup_window %s is shorter than as4.retry_window %s: a late retransmission would be processed as new",
			path, p.AS4.DedupWindow.Std(), p.AS4.RetryWindow.Std()))
	}
	return nil
}

// forget removes what loadAS2 and loadAS4 registered of a partner whose
// file has problems.
func (d *Directory) forget(p *Partner) {
	for k, q := range d.byAS2 {
		if q == p {
			delete(d.byAS2, k)
		}
	}
	for k, q := range d.byAS4 {
		if q == p {
			delete(d.byAS4, k)
		}
	}
	for _, use := range []string{"as2", "as4", "as4tls", "as2send", "as4send"} {
		delete(d.certs, use+"\x00"+p.ID)
		delete(d.policies, use+"\x00"+p.ID)
	}
}

// loadCerts reads the certificate files of field; every file that cannot
// be read is reported.
func (d *Directory) loadCerts(file, field string, paths []string, pw config.Password) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	var errs []error
	for i, p := range paths {
		if !filepath.IsAbs(p) {
			p = filepath.Join(d.Dir, p)
		}
		found, err := certs.Certificates(p, pw)
		if err != nil {
			errs = append(errs, &FieldError{file, fmt.Sprintf("%s[%d]", field, i), err.Error()})
			continue
		}
		out = append(out, found...)
	}
	return out, errors.Join(errs...)
}

// warnOptOuts records a warning for each security default of the AS2
// section the file turns off.
func (d *Directory) warnOptOuts(file string, p *Partner) {
	if !p.AS2.RequireSignature {
		d.Warnings = append(d.Warnings, fmt.Sprintf("%s: as2.require_signature: false accepts unsigned messages: anyone who sends AS2-From %q is taken for this partner",
			file, p.AS2.ID))
	}
	if !p.AS2.RequireEncryption {
		d.Warnings = append(d.Warnings, fmt.Sprintf("%s: as2.require_encryption: false accepts unencrypted messages from AS2-From %q (readable on the way unless TLS protects every hop)",
			file, p.AS2.ID))
	}
}

// warnWeak records a warning for every certificate of a section that is
// only accepted because the section sets allow_weak_keys.
func (d *Directory) warnWeak(file, section string, allow bool, certs []*x509.Certificate) {
	if !allow {
		return
	}
	for _, c := range certs {
		if weak, _ := trust.CheckKeySize(c, trust.Policy{AllowWeakKeys: true}); weak {
			d.Warnings = append(d.Warnings, fmt.Sprintf("%s: %s.allow_weak_keys accepts certificate %q (serial %s) with a %d-bit RSA key",
				file, section, c.Subject.String(), trust.Serial(c), trust.KeyBits(c)))
		}
	}
}

// ReadCertificates reads every certificate of a PEM file, one DER
// certificate, or the certificates of a PKCS#12 file without a password.
func ReadCertificates(path string) ([]*x509.Certificate, error) {
	return certs.Certificates(path, config.Password{})
}

// password is the password source of a section's PKCS#12 certificates.
func (d *Directory) password(env, file string) config.Password {
	if file != "" && !filepath.IsAbs(file) {
		file = filepath.Join(d.Dir, file)
	}
	return config.Password{Env: env, File: file}
}

// CertificatePassword is the password source of the PKCS#12 certificate
// files of p's section use ("as2" or "as4").
func (d *Directory) CertificatePassword(p *Partner, use string) config.Password {
	if use == "as2" && p.AS2 != nil {
		return d.password(p.AS2.CertificatePasswordEnv, p.AS2.CertificatePasswordFile)
	}
	if use == "as4" && p.AS4 != nil {
		return d.password(p.AS4.CertificatePasswordEnv, p.AS4.CertificatePasswordFile)
	}
	return config.Password{}
}

// EachCertificate calls fn for every certificate the directory's partner
// files name, in partner order: the partner id, the use ("as2" or "as4";
// for a send block's certificates not among the section's:
// "as2-send"/"as4-send", the encryption certificate, and
// "as2-tls-client"/"as4-tls-client", our TLS client certificate),
// the file it was read from ("" when a loaded certificate cannot be mapped
// back to a file, e.g. the file changed since the directory was loaded),
// the partner file and field that name it ("partners/acme.yaml
// as2.certificates[0]"), and whether the section sets allow_weak_keys.
// `gateway partners check` and the certificate checks at start, reload and
// every 24 h judge what it lists.
func (d *Directory) EachCertificate(fn func(partner, use, file, field string, cert *x509.Certificate, allowWeakKeys bool)) {
	for _, p := range d.Partners {
		if p.AS2 != nil {
			d.eachCertificate(p, "as2", p.AS2.Certificates, d.AS2Certificates(p), p.AS2.AllowWeakKeys, fn)
			if s := p.AS2.Send; s != nil {
				d.eachSendCertificate(p, "as2", s.EncryptionCertificate, s.TLS, p.AS2.AllowWeakKeys, fn)
			}
		}
		if p.AS4 != nil {
			d.eachCertificate(p, "as4", p.AS4.Certificates, d.AS4Certificates(p), p.AS4.AllowWeakKeys, fn)
			if s := p.AS4.Send; s != nil {
				d.eachSendCertificate(p, "as4", s.EncryptionCertificate, s.TLS, p.AS4.AllowWeakKeys, fn)
			}
		}
	}
}

// eachCertificate maps the loaded certificates back to the files the
// partner file names (a file may hold several certificates).
func (d *Directory) eachCertificate(p *Partner, use string, files []string, loaded []*x509.Certificate, allowWeak bool,
	fn func(partner, use, file, field string, cert *x509.Certificate, allowWeakKeys bool)) {
	i := 0
	for fi, f := range files {
		path := f
		if !filepath.IsAbs(path) {
			path = filepath.Join(d.Dir, path)
		}
		found, err := certs.Certificates(path, d.CertificatePassword(p, use))
		if err != nil {
			continue // changed since the directory was loaded; judged by what was loaded
		}
		for _, c := range found {
			if i < len(loaded) && loaded[i].Equal(c) {
				fn(p.ID, use, path, fmt.Sprintf("%s %s.certificates[%d]", p.File, use, fi), loaded[i], allowWeak)
				i++
			}
		}
	}
	for ; i < len(loaded); i++ {
		fn(p.ID, use, "", fmt.Sprintf("%s %s.certificates", p.File, use), loaded[i], allowWeak)
	}
}

// LoadFile reads and validates one partner file.
func LoadFile(path string) (*Partner, error) {
	p, err := loadFile(path)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// loadFile is LoadFile that returns, with its problems, the partner as far
// as the file could be decoded (nil when it is not YAML), so that Load can
// report the problems of its certificate files too.
func loadFile(path string) (*Partner, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("partners: %w", err)
	}
	// Every problem of the file is reported: unknown keys, values of the
	// wrong type, then what validate finds in the rest.
	var errs []error
	for _, u := range yamlkeys.Check(b, reflect.TypeFor[Partner](), "yaml") {
		errs = append(errs, fmt.Errorf("%s:%d: %s", path, u.Line, u))
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(len(errs) == 0) // unknown keys are reported above
	var p Partner
	if err := dec.Decode(&p); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", path, err))
		var te *yaml.TypeError
		if !errors.As(err, &te) { // not YAML: nothing more to check
			return nil, errors.Join(errs...)
		}
	}
	p.File = path
	// The secure settings are the defaults: a key left out is true, so
	// that only an explicit false (warned about by Load) weakens them.
	if p.AS2 != nil {
		set := presentKeys(b, "as2")
		p.AS2.RequireSignature = p.AS2.RequireSignature || !set["require_signature"]
		p.AS2.RequireEncryption = p.AS2.RequireEncryption || !set["require_encryption"]
		if set["send"] && p.AS2.Send == nil {
			p.AS2.Send = &AS2Send{} // "send:" alone: an error (no url), not silently receive-only
		}
		if p.AS2.Send != nil {
			p.AS2.Send.applyDefaults(presentKeys(b, "as2", "send"), presentKeys(b, "as2", "send", "retry"))
		}
	}
	if p.AS4 != nil {
		p.AS4.set = presentKeys(b, "as4")
		p.AS4.RequireEncryption = p.AS4.RequireEncryption || !p.AS4.set["require_encryption"]
		if p.AS4.set["send"] && p.AS4.Send == nil {
			p.AS4.Send = &AS4Send{}
		}
		if p.AS4.Send != nil {
			p.AS4.Send.applyDefaults(presentKeys(b, "as4", "send"), presentKeys(b, "as4", "send", "retry"))
		}
	}
	if err := p.validate(); err != nil {
		errs = append(errs, err)
	}
	return &p, errors.Join(errs...)
}

func (p *Partner) validate() error {
	// Every problem of the file is reported, not only the first: an
	// operator adding a partner fixes them in one round.
	var errs []error
	f := func(field, format string, a ...any) error {
		return &FieldError{p.File, field, fmt.Sprintf(format, a...)}
	}
	bad := func(field, format string, a ...any) { errs = append(errs, f(field, format, a...)) }
	if !idPattern.MatchString(p.ID) {
		bad("id", "%q must be 1-64 of a-z 0-9 . _ - starting with a letter or digit", p.ID)
	}
	switch p.OnDrift {
	case "":
		p.OnDrift = "reject"
	case "reject", "quarantine", "accept":
	default:
		bad("on_drift", "%q is not one of reject, quarantine, accept", p.OnDrift)
	}
	if p.MaxBodyBytes < 0 {
		bad("max_body_bytes", "%d must not be negative (0 or absent: limits.max_body_bytes)", p.MaxBodyBytes)
	}
	if p.AS2 == nil && p.AS4 == nil {
		bad("as2", "a partner needs an as2 or an as4 section")
	}
	if a := p.AS2; a != nil {
		if err := checkAS2Name(a.ID); err != nil {
			bad("as2.as2_id", "%v", err)
		}
		if a.OurID != "" {
			if err := checkAS2Name(a.OurID); err != nil {
				bad("as2.our_as2_id", "%v", err)
			}
		}
		if err := a.Trust.validate("as2", f); err != nil {
			errs = append(errs, err)
		}
		if len(a.Certificates) == 0 && a.RequireSignature && !a.CA() {
			bad("as2.certificates", "at least one certificate is needed to verify the partner's signatures (or trust: ca; require_signature: false accepts unsigned messages)")
		}
		for i, d := range a.AllowedDigests {
			d = NormalizeDigest(d)
			if !knownDigests[d] {
				bad(fmt.Sprintf("as2.allowed_digests[%d]", i), "%q is not one of md5, sha1, sha224, sha256, sha384, sha512", a.AllowedDigests[i])
				continue
			}
			a.AllowedDigests[i] = d
		}
		for i, c := range a.AllowedCiphers {
			if !knownCiphers[c] {
				bad(fmt.Sprintf("as2.allowed_ciphers[%d]", i), "%q is not one of 3des, aes128-cbc, aes192-cbc, aes256-cbc, aes128-gcm, aes256-gcm", c)
			}
		}
		switch a.DuplicateDisposition {
		case "":
			a.DuplicateDisposition = "warning"
		case "warning", "processed":
		default:
			bad("as2.duplicate_disposition", "%q is not one of warning, processed", a.DuplicateDisposition)
		}
		switch a.MICCompressed {
		case "":
			a.MICCompressed = "rfc5402"
		case "rfc5402", "content":
		default:
			bad("as2.mic_compressed", "%q is not one of rfc5402, content", a.MICCompressed)
		}
		if a.DedupWindow == 0 {
			a.DedupWindow = Duration(DefaultAS2Window)
		}
		for i, raw := range a.AsyncMDNURLs {
			pat, err := ParseURLPattern(raw)
			if err != nil {
				bad(fmt.Sprintf("as2.async_mdn_urls[%d]", i), "%v", err)
				continue
			}
			a.asyncPatterns = append(a.asyncPatterns, pat)
		}
		if len(a.AsyncMDNPrivateNetworks) > 0 && len(a.AsyncMDNURLs) == 0 {
			bad("as2.async_mdn_private_networks", "needs as2.async_mdn_urls: without a list, async MDNs go to public addresses only")
		}
		for i, raw := range a.AsyncMDNPrivateNetworks {
			n, err := parsePrivateNetwork(raw)
			if err != nil {
				bad(fmt.Sprintf("as2.async_mdn_private_networks[%d]", i), "%v", err)
				continue
			}
			a.privateNets = append(a.privateNets, n)
		}
		if a.Send != nil {
			a.Send.validate(a, bad)
		}
	}
	if a := p.AS4; a != nil {
		if strings.TrimSpace(a.PartyID) == "" {
			bad("as4.party_id", "required")
		}
		if err := a.Trust.validate("as4", f); err != nil {
			errs = append(errs, err)
		}
		if len(a.Certificates) == 0 && !a.CA() {
			bad("as4.certificates", "at least one signing certificate is required (or trust: ca)")
		}
		if len(a.PModes) == 0 {
			bad("as4.pmodes", "at least one pmode is required")
		}
		seen := map[string]bool{}
		for i, pm := range a.PModes {
			switch {
			case pm.ID == "":
				bad(fmt.Sprintf("as4.pmodes[%d].id", i), "required")
			case seen[pm.ID]:
				bad(fmt.Sprintf("as4.pmodes[%d].id", i), "%q is used twice", pm.ID)
			}
			seen[pm.ID] = true
		}
		if err := a.applyProfile(f); err != nil {
			errs = append(errs, err)
		}
		if a.Send != nil {
			a.Send.validate(a, bad)
		}
		if a.ClockSkew == 0 {
			a.ClockSkew = Duration(5 * time.Minute)
		}
		if a.DedupWindow == 0 {
			a.DedupWindow = Duration(DefaultAS4Window)
		}
	}
	return errors.Join(errs...)
}

// checkAS2Name applies RFC 4130 §6.2: 1-128 printable ASCII characters.
func checkAS2Name(s string) error {
	if s == "" {
		return errors.New("required")
	}
	if len(s) > 128 {
		return fmt.Errorf("%q is longer than 128 characters (RFC 4130 §6.2)", s)
	}
	for _, c := range []byte(s) {
		if c < 0x20 || c > 0x7e {
			return fmt.Errorf("%q has a character outside printable ASCII (RFC 4130 §6.2)", s)
		}
	}
	return nil
}

// NormalizeDigest maps spellings such as "SHA-256" and "sha256" to "sha256".
func NormalizeDigest(d string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimSpace(d)), "-", "")
}

// ByAS2 finds the partner sending as from and addressing to. ourID is the
// gateway's own AS2 id, used for partners without our_as2_id.
func (d *Directory) ByAS2(from, to, ourID string) (*Partner, bool) {
	if p, ok := d.byAS2[from+"\x00"+to]; ok {
		return p, true
	}
	if to == ourID {
		p, ok := d.byAS2[from+"\x00"]
		return p, ok
	}
	return nil, false
}

// BodyLimit is the body size limit of p's messages: its max_body_bytes,
// else global.
func BodyLimit(p *Partner, global int64) int64 {
	if p != nil && p.MaxBodyBytes > 0 {
		return p.MaxBodyBytes
	}
	return global
}

// MaxBodyLimit is the largest body limit of any partner (global for those
// without max_body_bytes): the cap before the partner is known.
func (d *Directory) MaxBodyLimit(global int64) int64 {
	m := global
	for _, p := range d.Partners {
		m = max(m, BodyLimit(p, global))
	}
	return m
}

// ByAS4 finds the partner by eb:From PartyId and its type.
func (d *Directory) ByAS4(partyType, partyID string) (*Partner, bool) {
	p, ok := d.byAS4[partyType+"\x00"+partyID]
	return p, ok
}

// AS2Certificates are the partner's configured AS2 certificates.
func (d *Directory) AS2Certificates(p *Partner) []*x509.Certificate { return d.certs["as2\x00"+p.ID] }

// AS4Certificates are the partner's configured AS4 certificates.
func (d *Directory) AS4Certificates(p *Partner) []*x509.Certificate { return d.certs["as4\x00"+p.ID] }

// AS4TLSCertificates are the partner's configured TLS client certificates (none: not checked).
func (d *Directory) AS4TLSCertificates(p *Partner) []*x509.Certificate {
	return d.certs["as4tls\x00"+p.ID]
}
