package deliver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/edigateway/gateway/exchange"
)

// HTTPConfig configures an HTTP handler.
type HTTPConfig struct {
	// Name names the handler in errors and logs.
	Name string
	// URL receives one POST per payload (http or https).
	URL string
	// Timeout bounds each POST, response included (default 30s).
	Timeout time.Duration
	// AuthHeaderEnv names the environment variable whose value is sent as
	// the AuthHeader header (for example "Bearer …"); the secret never sits
	// in the configuration file. Empty: no auth header.
	AuthHeaderEnv string
	// AuthHeader is the header name for the secret (default Authorization).
	AuthHeader string
	// CAFile is a PEM bundle of the CAs trusted for the server's certificate
	// instead of the system pool.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and key (mutual TLS).
	CertFile, KeyFile string
	// MaxResponseBytes bounds how much of a response body is read (default
	// 64 KiB); the start of it is logged when the POST fails.
	MaxResponseBytes int64
}

// HTTP posts every payload to a URL: the payload streamed as the body with
// its own Content-Type, the metadata as X-Gateway-… headers (Fields) and
// Idempotency-Key, the payload's idempotency key. A 2xx status is success;
// any other status (redirects are not followed), a transport error or the
// timeout fails the message, so that the partner gets a negative reply and
// retransmits.
type HTTP struct {
	name, url        string
	redactedURL      string
	timeout          time.Duration
	authName, auth   string
	maxResponseBytes int64
	client           *http.Client
}

// NewHTTP checks c and builds the handler; the auth secret is read from the
// environment now, so that a missing one stops the start.
func NewHTTP(c HTTPConfig) (*HTTP, error) {
	h := &HTTP{name: c.Name, url: c.URL, timeout: c.Timeout, authName: c.AuthHeader, maxResponseBytes: c.MaxResponseBytes}
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("deliver: http %s: url %q is not an http:// or https:// URL", c.Name, redact(c.URL))
	}
	// Errors name the URL without a password or query (which may hold a
	// token).
	shown := *u
	if shown.RawQuery != "" {
		shown.RawQuery = "…"
	}
	h.redactedURL = shown.Redacted()
	if h.timeout <= 0 {
		h.timeout = 30 * time.Second
	}
	if h.authName == "" {
		h.authName = "Authorization"
	}
	if h.maxResponseBytes <= 0 {
		h.maxResponseBytes = 64 << 10
	}
	if c.AuthHeaderEnv != "" {
		h.auth = os.Getenv(c.AuthHeaderEnv)
		if h.auth == "" {
			return nil, fmt.Errorf("deliver: http %s: environment variable %s (auth_header_env) is not set", c.Name, c.AuthHeaderEnv)
		}
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pemBytes, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("deliver: http %s: ca_file: %w", c.Name, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pemBytes) {
			return nil, fmt.Errorf("deliver: http %s: ca_file %s holds no PEM certificate", c.Name, c.CAFile)
		}
		tc.RootCAs = pool
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, fmt.Errorf("deliver: http %s: cert_file and key_file must be set together", c.Name)
	}
	if c.CertFile != "" {
		pair, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("deliver: http %s: client certificate: %w", c.Name, err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tc
	h.client = &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return h, nil
}

// Handle implements exchange.Handler: the payloads are posted in order; the
// first failure fails the message.
func (h *HTTP) Handle(ctx context.Context, m *exchange.Message) error {
	for i := range m.Payloads {
		if err := h.post(ctx, m, i); err != nil {
			return fmt.Errorf("deliver: http %s: payload %d of %d: POST %s: %w", h.name, i+1, len(m.Payloads), h.redactedURL, err)
		}
	}
	return nil
}

func (h *HTTP) post(ctx context.Context, m *exchange.Message, i int) error {
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	p := m.Payloads[i]
	body, err := p.Open()
	if err != nil {
		return fmt.Errorf("open payload: %w", err)
	}
	defer body.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, body)
	if err != nil {
		return err
	}
	if p.Size > 0 {
		req.ContentLength = p.Size
	}
	for _, f := range Fields(m, i) {
		req.Header.Set(f.Header, f.Value)
	}
	ct := "application/octet-stream"
	if _, _, err := mime.ParseMediaType(p.ContentType); err == nil && Escape(p.ContentType) == p.ContentType {
		ct = p.ContentType
	}
	req.Header.Set("Content-Type", ct)
	if h.auth != "" {
		req.Header.Set(h.authName, h.auth)
	}
	start := time.Now()
	resp, err := h.client.Do(req)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("no response within %s: %w", h.timeout, err)
		}
		return err
	}
	defer resp.Body.Close()
	// Bounded: the start is kept for the log, the rest of the allowance
	// drained so that the connection can be reused.
	head := make([]byte, 512)
	n, _ := io.ReadFull(io.LimitReader(resp.Body, h.maxResponseBytes), head)
	// A 2xx status is final: a body that is slow or cut after it does not
	// undo the delivery.
	rest, _ := io.Copy(io.Discard, io.LimitReader(resp.Body, h.maxResponseBytes-int64(n)))
	if resp.StatusCode/100 == 2 {
		return nil
	}
	total := int64(n) + rest
	what := ""
	if resp.StatusCode/100 == 3 {
		what = " (redirects are not followed)"
	}
	return fmt.Errorf("status %d%s after %s; response: %s", resp.StatusCode, what, time.Since(start).Round(time.Millisecond),
		printable(head[:n], 512, total))
}

// redact hides a password in a URL that did not parse as one.
func redact(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return "(unparsable)"
}
