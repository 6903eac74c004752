package certs

import (
	"crypto/rsa"
	"crypto/x509"
	"fmt"
	"sort"
	"time"

	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/internal/trust"
)

// DefaultWarning is how long before expiry a certificate is warned about
// when the configuration does not say (config key cert_warning).
const DefaultWarning = 30 * 24 * time.Hour

// MinRSABits is the smallest RSA modulus that is not warned about.
const MinRSABits = 2048

// Severity of a finding.
type Severity int

const (
	// Warning: the gateway works, but an operator should act (expiry ahead,
	// weak key, not yet valid).
	Warning Severity = iota
	// Error: the certificate is expired or has an RSA key below 2048 bits
	// that allow_weak_keys does not admit, or an identity key does not
	// belong to its certificate.
	Error
)

func (s Severity) String() string {
	if s == Error {
		return "error"
	}
	return "warning"
}

// Cert is one certificate the gateway uses, with where it is configured.
type Cert struct {
	// Owner is "partner ID" or "identity".
	Owner string
	// Partner is the partner id ("" for our own keys).
	Partner string
	// Use is "as2", "as4" or "identity"; for the certificates of a
	// partner's send block not among its section's: "as2-send"/"as4-send"
	// (the certificate we encrypt for) and "as2-tls-client"/
	// "as4-tls-client" (our TLS client certificate).
	Use string
	// File is the PEM/DER file the certificate was read from.
	File string
	// Config is the file and field that names File (a partner file's
	// as2.certificates[i], or identity.keys[i].cert).
	Config string
	Cert   *x509.Certificate
	// AllowWeakKeys: the partner section (or our identity) sets
	// allow_weak_keys, so a short RSA key is accepted (warned about) rather
	// than refused (an error).
	AllowWeakKeys bool
}

// Finding is one problem found.
type Finding struct {
	Severity Severity
	// Cert is the certificate concerned; for a key that does not match its
	// certificate, Cert.File is the certificate and KeyFile the key.
	Cert    Cert
	KeyFile string
	// Msg says what is wrong, for an operator.
	Msg string
}

func (f Finding) String() string {
	s := fmt.Sprintf("%s: %s", f.where(), f.Msg)
	return s
}

func (f Finding) where() string {
	w := f.Cert.Owner
	if f.Cert.Config != "" {
		w += " (" + f.Cert.Config + ")"
	}
	if f.Cert.File != "" {
		w += " " + f.Cert.File
	}
	if f.KeyFile != "" {
		w += " with key " + f.KeyFile
	}
	return w
}

// Directory is what the checks read of a partner directory
// (*partners.Directory implements it): every certificate its partner files
// name, with the file it came from. It is an interface so that this package
// does not import package partners, which reads its certificate files with
// this package.
type Directory interface {
	// EachCertificate calls fn for every certificate of every partner:
	// partner id, use ("as2" or "as4", or a send block's: see Cert.Use),
	// the certificate file (absolute or
	// relative to the directory; "" when the certificate cannot be mapped
	// back to one file), the partner file and field that name it, and
	// whether the section sets allow_weak_keys.
	EachCertificate(fn func(partner, use, file, field string, cert *x509.Certificate, allowWeakKeys bool))
}

// PartnerCerts lists every certificate of the directory, with the file it
// came from.
func PartnerCerts(d Directory) []Cert {
	var out []Cert
	d.EachCertificate(func(partner, use, file, field string, cert *x509.Certificate, allowWeakKeys bool) {
		out = append(out, Cert{Owner: "partner " + partner, Partner: partner, Use: use, File: file,
			Config: field, Cert: cert, AllowWeakKeys: allowWeakKeys})
	})
	return out
}

// IdentityCerts reads our identity key pairs (PEM, DER or PKCS#12): their
// certificates, plus an Error finding for a key that cannot be read (wrong
// password, no key in the file, unknown format) or does not belong to its
// certificate, naming the file.
func IdentityCerts(keys []config.KeyPair) ([]Cert, []Finding) {
	var out []Cert
	var bad []Finding
	for i, k := range keys {
		c := Cert{Owner: "identity", Use: "identity", File: k.Cert, Config: fmt.Sprintf("identity.keys[%d]", i)}
		if k.Field != "" {
			c.Config = k.Field // identities[j].keys[i]
		}
		c.AllowWeakKeys = k.AllowWeakKey
		keyFile := k.Key
		if k.Cert == "" || k.Cert == k.Key {
			c.File, keyFile = k.Key, "" // one PKCS#12 file
		}
		cert, _, err := KeyPair(k.Cert, k.Key, k.Password())
		if err != nil {
			if k.Cert != "" {
				if certs, rerr := Certificates(k.Cert, k.Password()); rerr == nil {
					c.Cert = certs[0]
					out = append(out, c)
				}
			}
			bad = append(bad, Finding{Severity: Error, Cert: c, KeyFile: keyFile, Msg: err.Error()})
			continue
		}
		c.Cert = cert
		out = append(out, c)
	}
	return out, bad
}

// Check judges certs at now: expired or not yet valid certificates, expiry
// within warnAhead, RSA keys below MinRSABits (an error unless the
// partner allows weak keys). Findings are ordered errors
// first, then by expiry.
func Check(certs []Cert, now time.Time, warnAhead time.Duration) []Finding {
	var out []Finding
	for _, c := range certs {
		x := c.Cert
		if x == nil {
			continue
		}
		name := x.Subject.String()
		if name == "" {
			name = "serial " + trust.Serial(x)
		}
		switch left := x.NotAfter.Sub(now); {
		case left <= 0:
			out = append(out, Finding{Severity: Error, Cert: c,
				Msg: fmt.Sprintf("certificate %s expired on %s", name, x.NotAfter.UTC().Format(time.RFC3339))})
		case left <= warnAhead:
			out = append(out, Finding{Severity: Warning, Cert: c,
				Msg: fmt.Sprintf("certificate %s expires on %s (in %s)", name, x.NotAfter.UTC().Format(time.RFC3339), days(left))})
		}
		if now.Before(x.NotBefore) {
			out = append(out, Finding{Severity: Warning, Cert: c,
				Msg: fmt.Sprintf("certificate %s is not valid before %s", name, x.NotBefore.UTC().Format(time.RFC3339))})
		}
		if pub, ok := x.PublicKey.(*rsa.PublicKey); ok && pub.N.BitLen() < MinRSABits {
			// Refused where it is used (package trust) unless allowed.
			sev, what := Error, "refused; allow_weak_keys accepts it from a legacy peer"
			if c.AllowWeakKeys {
				sev, what = Warning, "accepted because allow_weak_keys is set"
			}
			out = append(out, Finding{Severity: sev, Cert: c,
				Msg: fmt.Sprintf("certificate %s has a %d-bit RSA key (below %d bits): %s", name, pub.N.BitLen(), MinRSABits, what)})
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Severity != out[j].Severity {
			return out[i].Severity > out[j].Severity
		}
		return out[i].Cert.Cert.NotAfter.Before(out[j].Cert.Cert.NotAfter)
	})
	return out
}

// days renders a duration as whole days, or hours below a day.
func days(d time.Duration) string {
	if d < 24*time.Hour {
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	n := int(d / (24 * time.Hour))
	if n == 1 {
		return "1 day"
	}
	return fmt.Sprintf("%d days", n)
}

// All runs every check over a partner directory and our identity keys:
// Check, and CheckCAPolicies when d has trust: ca policies.
func All(d Directory, keys []config.KeyPair, now time.Time, warnAhead time.Duration) (certs []Cert, findings []Finding) {
	ids, bad := IdentityCerts(keys)
	certs = append(ids, PartnerCerts(d)...)
	findings = append(bad, Check(certs, now, warnAhead)...)
	if p, ok := d.(CAPolicies); ok {
		findings = append(findings, CheckCAPolicies(p, certs, now)...)
	}
	sort.SliceStable(findings, func(i, j int) bool { return findings[i].Severity > findings[j].Severity })
	return certs, findings
}

// Errors counts the Error findings.
func Errors(fs []Finding) int {
	n := 0
	for _, f := range fs {
		if f.Severity == Error {
			n++
		}
	}
	return n
}
