// CA trust: whether a signer certificate is trusted under a partner's
// trust: ca model. It chains to configured roots (through configured
// intermediates or ones the message carried), its key usage allows
// signing, its subject matches the partner's pattern, and, when asked, it
// is not revoked (OCSP and CRL, responses cached by their validity).
//
// The protocol packages call it through a small callback after the
// signature verified with the certificate's key (cms, wssec), so that
// revocation lookups, which go to URLs taken from the certificate, are made
// only for certificates that already chained to a configured CA and signed
// the message.

package trust

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
	"time"
)

// Revocation modes and policies.
const (
	ModeOff  = "off"
	ModeCRL  = "crl"
	ModeOCSP = "ocsp"
	// ModeBoth asks OCSP first and the CRL when OCSP cannot tell; a
	// revocation found by either refuses.
	ModeBoth = "both"

	PolicyHard = "hard" // refuse when the status cannot be determined
	PolicySoft = "soft" // accept, log and audit when it cannot
)

// Revocation statuses reported in Decision.Status and Error.Status.
const (
	StatusNotChecked   = "not-checked"
	StatusGood         = "good"
	StatusRevoked      = "revoked"
	StatusUndetermined = "undetermined"
)

// Errors wrapped by *Error.
var (
	// ErrUntrusted: the certificate does not chain to a configured root, its
	// key usage does not allow signing, or its subject is not the partner's.
	ErrUntrusted = errors.New("certificate not trusted")
	// ErrRevoked: a signed OCSP response or CRL says it is revoked.
	ErrRevoked = errors.New("certificate revoked")
	// ErrUndetermined: the revocation status could not be established and
	// the policy is hard (no responder or CRL named, the responder does not
	// know the certificate, an answer that is not valid): permanent.
	ErrUndetermined = errors.New("certificate revocation status undetermined")
	// ErrUnavailable: the revocation status could not be had right now and
	// the policy is hard: no OCSP responder or CRL could be reached (down,
	// timeout, HTTP 5xx, 408 or 429) or the answer is stale. It is
	// temporary: the protocols answer 503 with Retry-After (no MDN, no
	// eb:Error) so that the sender retries, instead of a refusal that AS4
	// senders never retry.
	ErrUnavailable = errors.New("certificate revocation status unavailable")
)

// Revocation configures revocation checking of the signer certificate.
type Revocation struct {
	Mode   string // off (or ""), crl, ocsp, both
	Policy string // hard (or ""), soft
	// OCSPResponder replaces the certificate's AIA OCSP URL.
	OCSPResponder string
	// CRLURLs replace the certificate's CRL distribution points.
	CRLURLs []string
}

// CAPolicy is the CA trust a partner is given (trust: ca).
type CAPolicy struct {
	Roots         []*x509.Certificate
	Intermediates []*x509.Certificate
	// Subject is a pattern the signer must match (see MatchSubject); empty
	// matches any subject.
	Subject string
	// ExtKeyUsages the signer may carry; empty accepts any (and none).
	ExtKeyUsages []x509.ExtKeyUsage
	Revocation   Revocation
	// Keys is the key size policy (the section's allow_weak_keys): a
	// signer with a key it refuses is refused by Check, before any
	// verdict, like an expired one.
	Keys Policy
}

// Decision is the outcome of a successful Check.
type Decision struct {
	Chain []*x509.Certificate
	// Status is the revocation status: not-checked, good, or undetermined
	// (accepted under a soft policy).
	Status string
	// Source names what answered: "ocsp <url>", "crl <url>", plus
	// "(cached)".
	Source string
	// Detail explains an undetermined status accepted under soft.
	Detail string
}

// Error is a refusal; it wraps ErrUntrusted, ErrRevoked, ErrUndetermined,
// ErrUnavailable (temporary) or, for a certificate expired, not yet valid
// or with too short a key, the *CertError of CheckSigner (ErrExpired,
// ErrNotYetValid, ErrWeakKey).
type Error struct {
	Cert   *x509.Certificate
	Status string // revocation status at refusal (not-checked for chain errors)
	Reason string // for the partner: short, names the certificate
	Err    error  // sentinel (or *CertError)
	Cause  error  // detail for the log
}

func (e *Error) Error() string {
	s := e.Reason
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// PartnerReason is the reason without the cause, for the partner.
func (e *Error) PartnerReason() string { return e.Reason }

// Describe names a certificate for reasons and logs: its subject, serial
// and issuer.
func Describe(c *x509.Certificate) string {
	return fmt.Sprintf("%q (serial %s, issuer %q)", c.Subject.String(), Serial(c), c.Issuer.String())
}

// RetryAfter is the Retry-After both protocols send with the 503 that
// answers a message whose signer's revocation status is unavailable
// (ErrUnavailable): long enough for a responder restart, short enough not
// to delay the message much.
const RetryAfter = 60 * time.Second

// Defaults of a Checker.
const (
	DefaultTimeout          = 5 * time.Second
	DefaultMaxResponseBytes = 10 << 20
	DefaultMaxCacheEntries  = 10000
)

// Checker checks certificates; one Checker is shared by all partners and
// both protocols so that its cache is. The zero value is usable.
type Checker struct {
	// Client makes the OCSP and CRL requests; nil means a client with
	// Timeout that follows at most three redirects, only to http(s).
	Client *http.Client
	// Timeout bounds each fetch (default 5s).
	Timeout time.Duration
	// MaxResponseBytes bounds each OCSP response and CRL (default 10 MiB).
	MaxResponseBytes int64
	// MaxCacheEntries bounds the cache (default 10000).
	MaxCacheEntries int
	Log             *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time

	once   sync.Once
	client *http.Client
	mu     sync.Mutex
	cache  map[string]cacheEntry
	// Fetches counts network fetches (tests and metrics).
	fetches int
}

type cacheEntry struct {
	until time.Time
	ocsp  *ocspResult
	crl   *crlResult
}

func (c *Checker) init() {
	c.once.Do(func() {
		if c.Timeout <= 0 {
			c.Timeout = DefaultTimeout
		}
		if c.MaxResponseBytes <= 0 {
			c.MaxResponseBytes = DefaultMaxResponseBytes
		}
		if c.MaxCacheEntries <= 0 {
			c.MaxCacheEntries = DefaultMaxCacheEntries
		}
		if c.Log == nil {
			c.Log = slog.Default()
		}
		c.client = c.Client
		if c.client == nil {
			c.client = &http.Client{Timeout: c.Timeout, CheckRedirect: checkRedirect}
		}
		c.cache = map[string]cacheEntry{}
	})
}

// errRedirect is a redirect the Checker does not follow.
var errRedirect = errors.New("redirect not followed")

func checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= 3 {
		return fmt.Errorf("%w: more than 3 redirects", errRedirect)
	}
	if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
		return fmt.Errorf("%w: redirect to %s: only http and https are followed", errRedirect, req.URL.Scheme)
	}
	return nil
}

func (c *Checker) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// Fetches returns the number of network fetches made so far.
func (c *Checker) Fetches() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fetches
}

// Check verifies leaf under p. presented are certificates the message
// carried (CMS certificates, WS-Security tokens): used as intermediates
// only, never as roots.
func (c *Checker) Check(ctx context.Context, p *CAPolicy, leaf *x509.Certificate, presented []*x509.Certificate) (*Decision, error) {
	c.init()
	now := c.now()
	refuse := func(format string, a ...any) error {
		return &Error{Cert: leaf, Status: StatusNotChecked, Err: ErrUntrusted,
			Reason: fmt.Sprintf("the signer's certificate %s ", Describe(leaf)) + fmt.Sprintf(format, a...)}
	}
	// Dates and key size first, in CheckSigner's words (those of pinned
	// certificates and of both protocols), so that no verdict is given
	// (or audited) for a certificate refused for either.
	if err := CheckSigner(leaf, now, p.Keys); err != nil {
		return nil, &Error{Cert: leaf, Status: StatusNotChecked, Err: err, Reason: "the signer's " + err.Error()}
	}
	if len(p.Roots) == 0 {
		return nil, refuse("cannot be checked: no CA certificate is configured")
	}
	roots := x509.NewCertPool()
	for _, r := range p.Roots {
		roots.AddCert(r)
	}
	inter := x509.NewCertPool()
	for _, i := range p.Intermediates {
		inter.AddCert(i)
	}
	for _, i := range presented {
		if i != nil && !i.Equal(leaf) {
			inter.AddCert(i)
		}
	}
	ekus := p.ExtKeyUsages
	if len(ekus) == 0 {
		ekus = []x509.ExtKeyUsage{x509.ExtKeyUsageAny}
	}
	var chains [][]*x509.Certificate
	var err error
	if hasBrainpoolIssuer(p.Roots, p.Intermediates, presented) {
		// crypto/x509 cannot check brainpoolP256r1 signatures (BDEW).
		others := append(slices.Clone(p.Intermediates), slices.DeleteFunc(slices.Clone(presented), func(c *x509.Certificate) bool { return c == nil || c.Equal(leaf) })...)
		chains, err = brainpoolChains(leaf, p.Roots, others, now, ekus)
	} else {
		chains, err = leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now, KeyUsages: ekus})
	}
	if err != nil {
		var inv x509.CertificateInvalidError
		var ua x509.UnknownAuthorityError
		switch {
		case errors.As(err, &ua):
			return nil, refuse("does not chain to a configured CA")
		case errors.As(err, &inv) && inv.Reason == x509.Expired:
			return nil, refuse("or its chain is not valid at %s (certificate valid %s to %s)", now.UTC().Format(time.RFC3339),
				leaf.NotBefore.UTC().Format(time.RFC3339), leaf.NotAfter.UTC().Format(time.RFC3339))
		case errors.As(err, &inv) && inv.Reason == x509.IncompatibleUsage:
			return nil, refuse("has an extended key usage not accepted for signing")
		}
		return nil, refuse("is not trusted: %v", err)
	}
	if leaf.KeyUsage != 0 && leaf.KeyUsage&(x509.KeyUsageDigitalSignature|x509.KeyUsageContentCommitment) == 0 {
		return nil, refuse("has a key usage without digitalSignature")
	}
	if p.Subject != "" && !MatchSubject(p.Subject, leaf) {
		return nil, refuse("does not match the partner's certificate subject %q", p.Subject)
	}
	chain := chains[0]
	d := &Decision{Chain: chain, Status: StatusNotChecked}
	mode := p.Revocation.Mode
	if mode == "" || mode == ModeOff {
		return d, nil
	}
	if len(chain) < 2 {
		// The signer is itself a configured root: nothing issued it.
		d.Detail = "the certificate is a configured CA certificate"
		return d, nil
	}
	issuer := chain[1]
	st, src, detail, err := c.revocation(ctx, p.Revocation, leaf, issuer, now)
	switch st {
	case StatusRevoked:
		return nil, &Error{Cert: leaf, Status: StatusRevoked, Err: ErrRevoked, Cause: err,
			Reason: fmt.Sprintf("the signer's certificate %s is revoked (%s)", Describe(leaf), detail)}
	case StatusGood:
		d.Status, d.Source = StatusGood, src
		return d, nil
	}
	if p.Revocation.Policy == PolicySoft {
		c.Log.Warn("trust: revocation status undetermined; accepted under soft policy",
			"subject", leaf.Subject.String(), "serial", Serial(leaf), "err", err)
		d.Status, d.Source, d.Detail = StatusUndetermined, src, errText(err)
		return d, nil
	}
	if temporary(err) {
		return nil, &Error{Cert: leaf, Status: StatusUndetermined, Err: ErrUnavailable, Cause: err,
			Reason: fmt.Sprintf("the revocation status of the signer's certificate %s cannot be checked right now", Describe(leaf))}
	}
	return nil, &Error{Cert: leaf, Status: StatusUndetermined, Err: ErrUndetermined, Cause: err,
		Reason: fmt.Sprintf("the revocation status of the signer's certificate %s could not be determined", Describe(leaf))}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// revocation returns the status of leaf, what answered, a detail for a
// revocation and, for an undetermined status, why.
func (c *Checker) revocation(ctx context.Context, r Revocation, leaf, issuer *x509.Certificate, now time.Time) (status, source, detail string, err error) {
	var errs []error
	if r.Mode == ModeOCSP || r.Mode == ModeBoth {
		st, src, det, err := c.checkOCSP(ctx, r, leaf, issuer, now)
		if st != StatusUndetermined {
			return st, src, det, err
		}
		errs = append(errs, err)
	}
	if r.Mode == ModeCRL || r.Mode == ModeBoth {
		st, src, det, err := c.checkCRL(ctx, r, leaf, issuer, now)
		if st != StatusUndetermined {
			return st, src, det, err
		}
		errs = append(errs, err)
	}
	return StatusUndetermined, "", "", errors.Join(errs...)
}

func (c *Checker) cached(key string, now time.Time) (cacheEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.cache[key]
	if !ok {
		return e, false
	}
	if !now.Before(e.until) {
		delete(c.cache, key)
		return e, false
	}
	return e, true
}

func (c *Checker) store(key string, e cacheEntry, now time.Time) {
	if !e.until.After(now) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.cache) >= c.MaxCacheEntries {
		for k, v := range c.cache {
			if !now.Before(v.until) {
				delete(c.cache, k)
			}
		}
		for k := range c.cache {
			if len(c.cache) < c.MaxCacheEntries {
				break
			}
			delete(c.cache, k)
		}
	}
	c.cache[key] = e
}

// MatchSubject reports whether the certificate matches pattern. A pattern
// with '=' is a distinguished name pattern: comma-separated ATTR=value
// pairs (CN, O, OU, C, L, ST, SERIALNUMBER, E), each of which must equal the
// certificate's attribute of that type, '*' matching any run of characters
// (path.Match syntax); order and attributes not named do not matter. A
// pattern "SAN:<pattern>" must match one of the DNS names, e-mail addresses
// or URIs of the subject alternative name. Any other pattern must equal the
// common name exactly.
func MatchSubject(pattern string, c *x509.Certificate) bool {
	pattern = strings.TrimSpace(pattern)
	if rest, ok := strings.CutPrefix(pattern, "SAN:"); ok {
		var names []string
		names = append(names, c.DNSNames...)
		names = append(names, c.EmailAddresses...)
		for _, u := range c.URIs {
			names = append(names, u.String())
		}
		for _, n := range names {
			if ok, _ := path.Match(rest, n); ok {
				return true
			}
		}
		return false
	}
	if !strings.Contains(pattern, "=") {
		return c.Subject.CommonName == pattern
	}
	attrs, err := ParseSubjectPattern(pattern)
	if err != nil {
		return false
	}
	for _, a := range attrs {
		vals := subjectValues(c, a[0])
		matched := false
		for _, v := range vals {
			if ok, _ := path.Match(a[1], v); ok {
				matched = true
				break
			}
		}
		if !matched {
			return false
		}
	}
	return true
}

// ParseSubjectPattern splits a DN pattern into [type, value] pairs and
// checks the types and value patterns.
func ParseSubjectPattern(pattern string) ([][2]string, error) {
	var out [][2]string
	for part := range strings.SplitSeq(pattern, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("%q is not ATTR=value", part)
		}
		k = strings.ToUpper(strings.TrimSpace(k))
		if _, known := attrTypes[k]; !known {
			return nil, fmt.Errorf("attribute %q is not one of CN, O, OU, C, L, ST, SERIALNUMBER, E", k)
		}
		v = strings.TrimSpace(v)
		if _, err := path.Match(v, ""); err != nil {
			return nil, fmt.Errorf("value pattern %q: %v", v, err)
		}
		out = append(out, [2]string{k, v})
	}
	return out, nil
}

var attrTypes = map[string]bool{"CN": true, "O": true, "OU": true, "C": true, "L": true, "ST": true, "SERIALNUMBER": true, "E": true}

func subjectValues(c *x509.Certificate, typ string) []string {
	s := c.Subject
	switch typ {
	case "CN":
		return []string{s.CommonName}
	case "O":
		return s.Organization
	case "OU":
		return s.OrganizationalUnit
	case "C":
		return s.Country
	case "L":
		return s.Locality
	case "ST":
		return s.Province
	case "SERIALNUMBER":
		return []string{s.SerialNumber}
	case "E":
		var out []string
		for _, n := range s.Names {
			if n.Type.String() == "1.2.840.113549.1.9.1" {
				if v, ok := n.Value.(string); ok {
					out = append(out, v)
				}
			}
		}
		return out
	}
	return nil
}

// AuditDecision is the audit record Decision and detail of a check of cert:
// "trusted/<status>" with the revocation source, "refused/<reason>"
// (expired, not-yet-valid, weak-key, untrusted, revoked, undetermined)
// with the reason and cause, or "unavailable/undetermined" when the
// revocation status could not be had right now (ErrUnavailable: the
// message is answered 503 and retried).
func AuditDecision(cert *x509.Certificate, d *Decision, err error) (decision, detail string) {
	if err != nil {
		var te *Error
		if errors.Is(err, ErrUnavailable) {
			if errors.As(err, &te) {
				return "unavailable/" + StatusUndetermined, te.Error()
			}
			return "unavailable/" + StatusUndetermined, err.Error()
		}
		kind := "error"
		switch {
		case errors.Is(err, ErrExpired):
			kind = "expired"
		case errors.Is(err, ErrNotYetValid):
			kind = "not-yet-valid"
		case errors.Is(err, ErrWeakKey):
			kind = "weak-key"
		case errors.Is(err, ErrRevoked):
			kind = "revoked"
		case errors.Is(err, ErrUndetermined):
			kind = "undetermined"
		case errors.Is(err, ErrUntrusted):
			kind = "untrusted"
		}
		if errors.As(err, &te) {
			return "refused/" + kind, te.Error()
		}
		return "refused/" + kind, err.Error()
	}
	detail = "certificate " + Describe(cert)
	if d.Source != "" {
		detail += "; revocation " + d.Status + " from " + d.Source
	}
	if d.Status == StatusUndetermined {
		detail += "; accepted under soft policy: " + d.Detail
		return "trusted/undetermined-soft", detail
	}
	return "trusted/" + d.Status, detail
}
