package trust

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"golang.org/x/crypto/ocsp"
)

// maxClockSkew tolerates a responder clock slightly ahead of ours.
const maxClockSkew = 5 * time.Minute

type ocspResult struct {
	source  string // the responder that answered
	status  string
	revoked time.Time
	reason  int
}

type crlResult struct {
	revoked map[string]time.Time // serial (hex) → revocation time
	issuer  []byte               // raw issuer name
}

// unreachable marks a failure to obtain a revocation source that a later
// attempt may not meet: the responder or CRL server is down, timed out,
// answered 5xx, 408 or 429, or its answer is stale (see temporary).
type unreachable struct{ err error }

func (u *unreachable) Error() string { return u.err.Error() }
func (u *unreachable) Unwrap() error { return u.err }

// temporary reports whether err (one source's failure or several joined)
// includes a source that could not be reached right now: the status may
// be had by asking again later.
func temporary(err error) bool {
	var u *unreachable
	return errors.As(err, &u)
}

// temporaryStatus reports whether an HTTP status of a responder or CRL
// server says to come back later.
func temporaryStatus(code int) bool {
	return code >= 500 || code == http.StatusRequestTimeout || code == http.StatusTooManyRequests
}

// fetch GETs (body nil) or POSTs a URL from CA-signed data, bounded in time
// and size. Transport failures and temporary HTTP statuses are
// *unreachable.
func (c *Checker) fetch(ctx context.Context, rawURL, contentType string, body []byte) ([]byte, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%q is not an http(s) URL", rawURL)
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	method := http.MethodGet
	var rd io.Reader
	if body != nil {
		method, rd = http.MethodPost, bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	c.mu.Lock()
	c.fetches++
	c.mu.Unlock()
	resp, err := c.client.Do(req)
	if err != nil {
		err = fmt.Errorf("%s %s: %w", method, u.Redacted(), err)
		if errors.Is(err, errRedirect) {
			return nil, err // where the server sends us is not an outage
		}
		return nil, &unreachable{err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		err := fmt.Errorf("%s %s: HTTP %d", method, u.Redacted(), resp.StatusCode)
		if temporaryStatus(resp.StatusCode) {
			return nil, &unreachable{err}
		}
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, c.MaxResponseBytes+1))
	if err != nil {
		return nil, &unreachable{fmt.Errorf("%s %s: %w", method, u.Redacted(), err)}
	}
	if int64(len(b)) > c.MaxResponseBytes {
		return nil, fmt.Errorf("%s %s: response larger than %d bytes", method, u.Redacted(), c.MaxResponseBytes)
	}
	return b, nil
}

func certKey(kind string, leaf, issuer *x509.Certificate) string {
	h := sha256.Sum256(issuer.RawSubjectPublicKeyInfo)
	return kind + "\x00" + hex.EncodeToString(h[:]) + "\x00" + leaf.SerialNumber.Text(16)
}

func (c *Checker) checkOCSP(ctx context.Context, r Revocation, leaf, issuer *x509.Certificate, now time.Time) (status, source, detail string, err error) {
	responder := r.OCSPResponder
	if responder == "" {
		if len(leaf.OCSPServer) == 0 {
			return StatusUndetermined, "", "", errors.New("ocsp: the certificate names no OCSP responder and none is configured")
		}
		responder = leaf.OCSPServer[0]
	}
	source = "ocsp " + responder
	key := certKey("ocsp", leaf, issuer)
	// The cache is keyed by issuer and serial, not by responder: a current
	// response signed for the issuer is evidence whoever asked.
	if e, ok := c.cached(key, now); ok {
		return ocspOutcome(e.ocsp, e.ocsp.source+" (cached)")
	}
	req, err := ocsp.CreateRequest(leaf, issuer, nil)
	if err != nil {
		return StatusUndetermined, source, "", fmt.Errorf("ocsp: request: %w", err)
	}
	raw, err := c.fetch(ctx, responder, "application/ocsp-request", req)
	if err != nil {
		return StatusUndetermined, source, "", fmt.Errorf("ocsp: %w", err)
	}
	res, next, err := parseOCSP(raw, leaf, issuer, now)
	if err != nil {
		return StatusUndetermined, source, "", fmt.Errorf("ocsp: response from %s: %w", responder, err)
	}
	res.source = source
	// Cached until nextUpdate; a response without one is not cached
	// (RFC 6960 §4.2.2.1: newer information is always available).
	if res.status != StatusUndetermined && !next.IsZero() {
		c.store(key, cacheEntry{until: next, ocsp: res}, now)
	}
	return ocspOutcome(res, source)
}

// parseOCSP checks a responder's bytes: a basic response for leaf's
// serial, signed by issuer or its delegated responder, current at now.
func parseOCSP(raw []byte, leaf, issuer *x509.Certificate, now time.Time) (*ocspResult, time.Time, error) {
	// Parsed without the issuer: the ocsp package would demand that an
	// embedded responder certificate be issued by it, which refuses the
	// common response that embeds the issuer itself; checkResponder checks
	// the signature for each case.
	resp, err := ocsp.ParseResponseForCert(raw, leaf, nil)
	if err != nil {
		return nil, time.Time{}, err
	}
	if err := checkResponder(resp, issuer, now); err != nil {
		return nil, time.Time{}, err
	}
	if resp.ThisUpdate.After(now.Add(maxClockSkew)) {
		return nil, time.Time{}, fmt.Errorf("thisUpdate %s is in the future", resp.ThisUpdate.UTC().Format(time.RFC3339))
	}
	if !resp.NextUpdate.IsZero() && resp.NextUpdate.Before(now) {
		return nil, time.Time{}, &unreachable{fmt.Errorf("stale, nextUpdate %s", resp.NextUpdate.UTC().Format(time.RFC3339))}
	}
	res := &ocspResult{revoked: resp.RevokedAt, reason: resp.RevocationReason}
	switch resp.Status {
	case ocsp.Good:
		res.status = StatusGood
	case ocsp.Revoked:
		res.status = StatusRevoked
	default:
		res.status = StatusUndetermined
	}
	return res, resp.NextUpdate, nil
}

func ocspOutcome(r *ocspResult, source string) (string, string, string, error) {
	switch r.status {
	case StatusGood:
		return StatusGood, source, "", nil
	case StatusRevoked:
		return StatusRevoked, source, fmt.Sprintf("%s: revoked at %s, reason %d", source, r.revoked.UTC().Format(time.RFC3339), r.reason), nil
	}
	return StatusUndetermined, source, "", fmt.Errorf("%s: status unknown to the responder", source)
}

// checkResponder accepts a response signed by the issuer itself or by a
// delegated responder: a certificate the issuer signed, carrying
// id-kp-OCSPSigning, valid now. (With an embedded certificate the ocsp
// package already checked that it signed the response.)
func checkResponder(resp *ocsp.Response, issuer *x509.Certificate, now time.Time) error {
	rc := resp.Certificate
	if rc == nil {
		if err := resp.CheckSignatureFrom(issuer); err != nil {
			return fmt.Errorf("not signed by the issuer %q: %w", issuer.Subject.String(), err)
		}
		return nil
	}
	if rc.Equal(issuer) {
		return nil
	}
	if err := rc.CheckSignatureFrom(issuer); err != nil {
		return fmt.Errorf("delegated responder %q was not issued by %q: %w", rc.Subject.String(), issuer.Subject.String(), err)
	}
	hasEKU := false
	for _, u := range rc.ExtKeyUsage {
		if u == x509.ExtKeyUsageOCSPSigning {
			hasEKU = true
		}
	}
	if !hasEKU {
		return fmt.Errorf("delegated responder %q lacks the OCSPSigning extended key usage", rc.Subject.String())
	}
	if now.Before(rc.NotBefore) || now.After(rc.NotAfter) {
		return fmt.Errorf("delegated responder %q is not valid at %s", rc.Subject.String(), now.UTC().Format(time.RFC3339))
	}
	return nil
}

func (c *Checker) checkCRL(ctx context.Context, r Revocation, leaf, issuer *x509.Certificate, now time.Time) (status, source, detail string, err error) {
	urls := r.CRLURLs
	if len(urls) == 0 {
		urls = leaf.CRLDistributionPoints
	}
	if len(urls) == 0 {
		return StatusUndetermined, "", "", errors.New("crl: the certificate names no CRL distribution point and none is configured")
	}
	var errs []error
	for _, u := range urls {
		crl, src, err := c.crl(ctx, u, issuer, now)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if at, ok := crl.revoked[leaf.SerialNumber.Text(16)]; ok {
			return StatusRevoked, src, fmt.Sprintf("%s: revoked at %s", src, at.UTC().Format(time.RFC3339)), nil
		}
		return StatusGood, src, "", nil
	}
	return StatusUndetermined, "crl " + urls[0], "", errors.Join(errs...)
}

// crl returns the CRL at u, fetched or cached, signed by issuer and current.
func (c *Checker) crl(ctx context.Context, u string, issuer *x509.Certificate, now time.Time) (*crlResult, string, error) {
	source := "crl " + u
	h := sha256.Sum256(issuer.RawSubjectPublicKeyInfo)
	key := "crl\x00" + hex.EncodeToString(h[:]) + "\x00" + u
	if e, ok := c.cached(key, now); ok {
		return e.crl, source + " (cached)", nil
	}
	raw, err := c.fetch(ctx, u, "", nil)
	if err != nil {
		return nil, source, fmt.Errorf("crl: %w", err)
	}
	res, next, err := parseCRL(raw, issuer, now)
	if err != nil {
		return nil, source, fmt.Errorf("crl: %s: %w", u, err)
	}
	if !next.IsZero() {
		c.store(key, cacheEntry{until: next, crl: res}, now)
	}
	return res, source, nil
}

// parseCRL checks a CRL's bytes (DER or PEM): signed by issuer, current at
// now.
func parseCRL(raw []byte, issuer *x509.Certificate, now time.Time) (*crlResult, time.Time, error) {
	if der, ok := pemCRL(raw); ok {
		raw = der
	}
	rl, err := x509.ParseRevocationList(raw)
	if err != nil {
		return nil, time.Time{}, err
	}
	if err := checkCRLSignature(rl, issuer); err != nil {
		return nil, time.Time{}, fmt.Errorf("not signed by %q: %w", issuer.Subject.String(), err)
	}
	if rl.ThisUpdate.After(now.Add(maxClockSkew)) {
		return nil, time.Time{}, fmt.Errorf("thisUpdate %s is in the future", rl.ThisUpdate.UTC().Format(time.RFC3339))
	}
	if !rl.NextUpdate.IsZero() && rl.NextUpdate.Before(now) {
		return nil, time.Time{}, &unreachable{fmt.Errorf("stale, nextUpdate %s", rl.NextUpdate.UTC().Format(time.RFC3339))}
	}
	res := &crlResult{revoked: map[string]time.Time{}, issuer: rl.RawIssuer}
	for _, e := range rl.RevokedCertificateEntries {
		res.revoked[e.SerialNumber.Text(16)] = e.RevocationTime
	}
	return res, rl.NextUpdate, nil
}

func pemCRL(b []byte) ([]byte, bool) {
	const begin = "-----BEGIN X509 CRL-----"
	i := bytes.Index(b, []byte(begin))
	if i < 0 {
		return nil, false
	}
	blk, _ := pem.Decode(b[i:])
	if blk == nil {
		return nil, false
	}
	return blk.Bytes, true
}
