// Package transmit holds the gateway's two outbound.Transmitters: AS2 (as2/client)
// and AS4 (as4/client). Each makes one attempt at sending a queued message
// to a partner: it builds the message from the payload stream into a spool
// file (memory does not grow with the payload), under the message's fixed
// Message-ID or eb:MessageId, reports the transmission's digest (the AS2
// MIC, the AS4 signed references) before anything leaves, posts it and
// judges the answer: Deliver only on a positive MDN or receipt whose
// signature verifies against the partner's certificates (or, for a partner
// under trust: ca, with a certificate the answer carries that its CA
// policy accepts: CATrust) and that matches a transmission of the message; Refuse on the partner's verified refusal;
// Retry on anything that is not the partner's verdict; Await an
// asynchronous MDN.
//
// The partner's settings are plain structs (AS2Settings, AS4Settings) that
// the wiring fills from the partner directory; they are looked up at every
// attempt, so that a reload applies to the next attempt.
package transmit

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	as2client "github.com/edigateway/gateway/as2/client"
	"github.com/edigateway/gateway/internal/retryafter"
	"github.com/edigateway/gateway/internal/trust"
	"github.com/edigateway/gateway/outbound"
)

// Identity is who we are towards a partner: our AS2 id, our AS4 party and
// the key pair our messages are signed with (Chain: intermediates sent
// after Cert).
type Identity struct {
	AS2ID, PartyID, PartyType string
	Cert                      *x509.Certificate
	Key                       crypto.Signer
	Chain                     []*x509.Certificate
}

// TLS says how the partner's HTTPS endpoint is trusted and how we
// authenticate to it. Every field names a PEM file; all empty: the
// system's roots, no client certificate.
type TLS struct {
	// CAFile replaces the system roots with these CA certificates.
	CAFile string
	// PinnedCertificate: the server's certificate must be this one (its
	// chain is then not checked against any root).
	PinnedCertificate string
	// ClientCertificate and ClientKey: our TLS client certificate.
	ClientCertificate, ClientKey string
}

// CATrust is the trust: ca policy of a partner for the signer of its MDNs,
// receipts and error signals, checked as on receiving: the certificate the
// answer carries (CMS certificates of an AS2 MDN, BinarySecurityTokens of
// an AS4 signal), or one of the partner's listed certificates, whose key
// verified the signature must chain to Policy's roots, match its subject
// pattern and key usages and, when asked, not be revoked (Checker.Check).
// A signer it refuses leaves the answer unverified: the attempt is retried
// with a reason naming the certificate and the decision; a revocation
// status that is unavailable under a soft policy is accepted.
type CATrust struct {
	Policy *trust.CAPolicy
	// Checker is the gateway's shared checker (its revocation cache);
	// nil: a checker of the attempt's own.
	Checker *trust.Checker
}

// active reports a CA policy to check signers with.
func (ct *CATrust) active() bool { return ct != nil && ct.Policy != nil }

// signerRun is the outcome of the CA trust check of one answer's signer.
type signerRun struct {
	ran      bool
	cert     *x509.Certificate
	decision *trust.Decision
	err      error
}

// verifySigner is the clients' signer callback of ct (nil without a
// policy: the listed certificates alone are trusted), recording its
// outcome in run.
func (ct *CATrust) verifySigner(ctx context.Context, run *signerRun) func(*x509.Certificate, []*x509.Certificate) error {
	if ct == nil || ct.Policy == nil {
		return nil
	}
	chk := ct.Checker
	if chk == nil {
		chk = &trust.Checker{}
	}
	return func(signer *x509.Certificate, presented []*x509.Certificate) error {
		d, err := chk.Check(ctx, ct.Policy, signer, presented)
		run.ran, run.cert, run.decision, run.err = true, signer, d, err
		return err
	}
}

// refused reports a signer the policy refused.
func (r *signerRun) refused() bool { return r != nil && r.ran && r.err != nil }

// refusal is the reason of a refused signer: the certificate and the
// policy's decision (refused/untrusted, refused/revoked,
// unavailable/undetermined, ...).
func (r *signerRun) refusal() string {
	decision, detail := trust.AuditDecision(r.cert, r.decision, r.err)
	return fmt.Sprintf("the partner's trust: ca policy does not accept the signer (%s): %s", decision, detail)
}

// note is what Evidence.Signer adds for a signer the policy accepted:
// the decision and the revocation source.
func (r *signerRun) note() string {
	if r == nil || !r.ran || r.err != nil || r.decision == nil {
		return ""
	}
	decision, _ := trust.AuditDecision(r.cert, r.decision, nil)
	n := "; trust: ca " + decision
	if r.decision.Source != "" {
		n += " from " + r.decision.Source
	}
	if r.decision.Detail != "" {
		n += " (" + r.decision.Detail + ")"
	}
	return n
}

// Defaults of the settings.
const (
	DefaultTimeout    = 5 * time.Minute
	DefaultMDNTimeout = time.Hour
	// maxErrorText bounds the partner's words kept in a reason.
	maxErrorText = 300
)

// NewMessageID returns a fresh transport id for a message queued for
// protocol p: an AS2 Message-ID with angle brackets (as2/client's form,
// from our AS2 id), or an eb:MessageId "uuid@host" (host from our party
// id).
func NewMessageID(p outbound.Protocol, id Identity) (string, error) {
	switch p {
	case outbound.AS2:
		mid, err := as2client.NewMessageID(id.AS2ID)
		if err != nil {
			return "", fmt.Errorf("transmit: %w", err)
		}
		return mid, nil
	case outbound.AS4:
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", fmt.Errorf("transmit: random id: %w", err)
		}
		b[6] = b[6]&0x0f | 0x40
		b[8] = b[8]&0x3f | 0x80
		h := hex.EncodeToString(b[:])
		host := strings.Map(func(c rune) rune {
			if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' {
				return c
			}
			return -1
		}, id.PartyID)
		if host == "" {
			host = "gateway"
		}
		return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:] + "@" + host, nil
	}
	return "", fmt.Errorf("transmit: unknown protocol %q", p)
}

// httpClient is the client of one attempt: timeout for the whole request,
// TLS as configured, no proxy, no redirects (a redirected POST would
// become a GET whose 2xx means nothing), no connection kept.
func httpClient(t TLS, timeout time.Duration) (*http.Client, error) {
	cfg, err := tlsConfig(t)
	if err != nil {
		return nil, err
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:                  http.ProxyFromEnvironment,
			TLSClientConfig:        cfg,
			DisableKeepAlives:      true,
			TLSHandshakeTimeout:    30 * time.Second,
			MaxResponseHeaderBytes: 64 << 10,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}, nil
}

func tlsConfig(t TLS) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		data, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("transmit: TLS CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(data) {
			return nil, fmt.Errorf("transmit: TLS CA file %s holds no PEM certificate", t.CAFile)
		}
		cfg.RootCAs = pool
	}
	if t.PinnedCertificate != "" {
		pinned, err := readCertificate(t.PinnedCertificate)
		if err != nil {
			return nil, fmt.Errorf("transmit: TLS pinned certificate: %w", err)
		}
		// The chain is not checked: the pinned certificate is the trust.
		cfg.InsecureSkipVerify = true
		cfg.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 || !pinned.Equal(mustParse(raw[0])) {
				return errors.New("transmit: the server's TLS certificate is not the pinned one")
			}
			return nil
		}
	}
	if t.ClientCertificate != "" || t.ClientKey != "" {
		pair, err := tls.LoadX509KeyPair(t.ClientCertificate, t.ClientKey)
		if err != nil {
			return nil, fmt.Errorf("transmit: TLS client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

func readCertificate(path string) (*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return nil, fmt.Errorf("%s holds no PEM certificate", path)
		}
		if block.Type == "CERTIFICATE" {
			return x509.ParseCertificate(block.Bytes)
		}
	}
}

func mustParse(der []byte) *x509.Certificate {
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return &x509.Certificate{}
	}
	return c
}

// statusAttempt judges an HTTP status that carries no verdict of its own
// (no MDN, no signal): 408, 429, 5xx and 3xx are retried, other 4xx
// refused; ok reports a 2xx, left to the caller.
func statusAttempt(status int, h http.Header, body []byte) (a outbound.Attempt, ok bool) {
	a = outbound.Attempt{Status: status, RetryAfter: retryafter.Parse(h.Get("Retry-After"), time.Now())}
	text := fmt.Sprintf("HTTP %d %s", status, http.StatusText(status))
	if s := snippet(body); s != "" {
		text += ": " + s
	}
	switch {
	case status >= 200 && status <= 299:
		return a, true
	case status == http.StatusRequestTimeout || status == http.StatusTooManyRequests || status >= 500 || status < 200:
		a.Outcome, a.Reason = outbound.Retry, text
	case status >= 300 && status <= 399:
		a.Outcome, a.Reason = outbound.Retry, text+" (redirect to "+snippet([]byte(h.Get("Location")))+" not followed: check the partner's URL)"
	default:
		a.Outcome, a.Reason = outbound.Refuse, text
	}
	return a, false
}

// snippet is the start of a partner's text, on one line, fit for a reason.
func snippet(b []byte) string {
	s := strings.Join(strings.Fields(strings.ToValidUTF8(string(b[:min(len(b), 4*maxErrorText)]), "?")), " ")
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, s)
	if len(s) > maxErrorText {
		s = strings.ToValidUTF8(s[:maxErrorText], "") + "…"
	}
	return s
}

// transportRetry is the Retry of a request that got no (whole) answer.
func transportRetry(err error, timeout time.Duration) outbound.Attempt {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		return retry("no answer within the timeout (%s): %v", timeout, err)
	}
	return retry("no answer: %v", err)
}

// retry is a Retry attempt with reason.
func retry(format string, args ...any) outbound.Attempt {
	return outbound.Attempt{Outcome: outbound.Retry, Reason: fmt.Sprintf(format, args...)}
}

// signerName names a certificate for Evidence.Signer.
func signerName(c *x509.Certificate) string {
	if c == nil {
		return ""
	}
	return fmt.Sprintf("%s (serial %s)", c.Subject, c.SerialNumber)
}
