// Package client (import path as2/client, the twin of as4/client) is an AS2 sender (RFC 4130) for partner onboarding and
// tests: it builds a message from a file with the chosen signing,
// encryption, compression and MDN options (package smime), posts it, and
// checks the MDN: its signature against the recipient's certificates, its
// Original-Message-ID, its disposition and its Received-Content-MIC.
//
// It is independent of the gateway's receive endpoint (package as2), so that
// the two check each other.
package client

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/edigateway/gateway/internal/cms"
	"github.com/edigateway/gateway/internal/retryafter"
	"github.com/edigateway/gateway/internal/sendspool"
	"github.com/edigateway/gateway/internal/smime"
	"github.com/edigateway/gateway/mdn"
)

// MDNMode says which MDN the sender asks for.
type MDNMode string

const (
	// MDNSync asks for the MDN on the HTTP response (the default).
	MDNSync MDNMode = "sync"
	// MDNAsync asks for the MDN to be posted to Client.AsyncURL.
	MDNAsync MDNMode = "async"
	// MDNNone asks for no MDN.
	MDNNone MDNMode = "none"
)

// maxResponse bounds the sync MDN read from a response.
const maxResponse = 8 << 20

// Client sends AS2 messages to one partner endpoint.
type Client struct {
	// URL is the partner's AS2 endpoint.
	URL string
	// From and To are AS2-From (us) and AS2-To (the partner).
	From, To string

	// SignCert and SignKey sign with SignDigest ("sha1", "sha256",
	// "sha512", ...; empty: unsigned); SignPSS selects RSASSA-PSS.
	SignCert   *x509.Certificate
	SignKey    crypto.Signer
	SignDigest string
	SignPSS    bool
	// SignChain are intermediates embedded in the signature after SignCert.
	SignChain []*x509.Certificate

	// RecipientCerts are the partner's certificates: the first encrypts,
	// all verify the MDN signature (unless MDNCerts is set). Cipher is a
	// cms cipher name ("3des", "aes128-cbc", "aes256-cbc", "aes128-gcm",
	// ...; empty: unencrypted); OAEP selects RSAES-OAEP key transport.
	RecipientCerts []*x509.Certificate
	Cipher         string
	OAEP           bool
	// Compression selects compress-then-sign or sign-then-compress.
	Compression Compression
	// TransferEncoding of the payload part: "binary" (default) or "base64".
	TransferEncoding string

	// MDN is the MDN asked for (default MDNSync); SignedMDN asks for it to
	// be signed. The signed-receipt-micalg asked for (the MDN's digest and
	// Received-Content-MIC algorithm) is SignDigest for a signed message and
	// MICAlg (default sha-256) for an unsigned one.
	MDN       MDNMode
	SignedMDN bool
	MICAlg    string
	// AsyncURL is the Receipt-Delivery-Option of MDNAsync.
	AsyncURL string
	// NotificationTo is the Disposition-Notification-To value (default:
	// the AS2-From).
	NotificationTo string
	// MDNCerts, when set, replace RecipientCerts for MDN verification.
	MDNCerts []*x509.Certificate
	// VerifySigner, when set, turns on CA trust for the MDN signature (a
	// partner under trust: ca): a certificate the MDN's CMS SignedData
	// carries may be the signer as well as MDNCerts or RecipientCerts, and
	// once the signature verified with its key, VerifySigner decides
	// whether that signer is trusted (presented: the certificates the
	// SignedData carried, chain material). Its refusal leaves the MDN
	// unverified, with the refusal in Problems.
	VerifySigner func(signer *x509.Certificate, presented []*x509.Certificate) error

	// Subject is the Subject header (default "AS2 message").
	Subject string
	// Header holds extra request headers.
	Header http.Header
	// HTTP posts the messages; nil means a client with a 5 minute timeout.
	HTTP *http.Client
	// Progress, when set, is called as the body is sent.
	Progress func(sent, total int64)
	// SpoolDir is where PrepareStream writes the message (default
	// os.TempDir()).
	SpoolDir string
	// Now is the clock for MDN certificate validity; nil means time.Now,
	// a zero time disables the validity check.
	Now func() time.Time
}

// Message is a prepared AS2 message; sending it twice sends identical bytes.
type Message struct {
	// ID is the Message-ID with angle brackets.
	ID string
	// Header holds every HTTP request header.
	Header http.Header
	// Body is the HTTP body of a message made by Prepare; a message made
	// by PrepareStream has its body in a spool file (Body is nil).
	Body []byte
	// MIC and MICAlg are what the MDN's Received-Content-MIC must carry.
	MIC, MICAlg string

	spool *sendspool.File
}

// Size is the HTTP body's length.
func (m *Message) Size() int64 { return sendspool.BodySize(m.spool, m.Body) }

// body reads the HTTP body from its start.
func (m *Message) body() io.Reader { return sendspool.BodyReader(m.spool, m.Body) }

// Close releases the spool file of a message made by PrepareStream.
func (m *Message) Close() error {
	err := m.spool.Close()
	m.spool = nil
	return err
}

// Prepare builds a message from a payload in memory.
func (c *Client) Prepare(payload []byte, contentType, filename string) (*Message, error) {
	opts, err := c.buildOptions()
	if err != nil {
		return nil, err
	}
	built, err := smime.Build(payload, contentType, filename, opts)
	if err != nil {
		return nil, fmt.Errorf("as2client: %w", err)
	}
	m := &Message{Body: built.Body}
	return m, c.describe(m, built)
}

// PrepareStream builds a message from the payload read from r, in one pass
// and in memory that does not depend on the payload's size
// (smime.BuildStream): the body goes to a spool file in SpoolDir, unlinked
// at once where the system allows it (so that nothing is left behind,
// whatever happens), read for every send and released by Message.Close.
// The disk needs room for the message (about the payload's size; less
// when compressed).
func (c *Client) PrepareStream(r io.Reader, contentType, filename string) (m *Message, err error) {
	opts, err := c.buildOptions()
	if err != nil {
		return nil, err
	}
	f, err := sendspool.Create(c.SpoolDir, "gateway-send-*.as2")
	if err != nil {
		return nil, fmt.Errorf("as2client: %w", err)
	}
	m = &Message{spool: f}
	defer func() {
		if err != nil {
			m.Close()
		}
	}()
	built, err := smime.BuildStream(f, r, contentType, filename, opts)
	if err != nil {
		return nil, fmt.Errorf("as2client: %w", err)
	}
	if err := f.Finish(); err != nil {
		return nil, fmt.Errorf("as2client: %w", err)
	}
	if err := c.describe(m, built); err != nil {
		return nil, err
	}
	return m, nil
}

func (c *Client) buildOptions() (smime.BuildOptions, error) {
	if c.From == "" || c.To == "" {
		return smime.BuildOptions{}, errors.New("as2client: From and To are required")
	}
	opts := smime.BuildOptions{
		SignDigest:       c.SignDigest,
		SignPSS:          c.SignPSS,
		Cipher:           c.Cipher,
		OAEP:             c.OAEP,
		Compression:      c.Compression,
		TransferEncoding: c.TransferEncoding,
		MICAlg:           c.micAlg(),
	}
	if c.SignDigest != "" {
		if c.SignCert == nil || c.SignKey == nil {
			return opts, errors.New("as2client: signing needs a certificate and its private key")
		}
		opts.SignCert, opts.SignKey, opts.SignChain = c.SignCert, c.SignKey, c.SignChain
	}
	if c.Cipher != "" {
		if len(c.RecipientCerts) == 0 {
			return opts, errors.New("as2client: encryption needs the recipient's certificate")
		}
		opts.EncryptCerts = c.RecipientCerts[:1]
	}
	if c.mode() == MDNAsync && c.AsyncURL == "" {
		return opts, errors.New("as2client: an async MDN needs AsyncURL")
	}
	switch c.mode() {
	case MDNNone, MDNAsync, MDNSync:
	default:
		return opts, fmt.Errorf("as2client: unknown MDN mode %q", c.MDN)
	}
	return opts, nil
}

// describe sets m's id, headers and MIC from the built message.
func (c *Client) describe(m *Message, built *smime.Built) error {
	id, err := NewMessageID(c.From)
	if err != nil {
		return err
	}
	h := http.Header{}
	for k, v := range c.Header {
		h[http.CanonicalHeaderKey(k)] = append([]string(nil), v...)
	}
	h.Set("AS2-Version", "1.2")
	h.Set("AS2-From", QuoteName(c.From))
	h.Set("AS2-To", QuoteName(c.To))
	h.Set("Message-Id", id)
	h.Set("Mime-Version", "1.0")
	h.Set("Date", time.Now().UTC().Format(time.RFC1123Z))
	subject := c.Subject
	if subject == "" {
		subject = "AS2 message"
	}
	h.Set("Subject", subject)
	for _, f := range built.Header {
		h.Set(f.Name, f.Value)
	}
	if c.mode() != MDNNone {
		to := c.NotificationTo
		if to == "" {
			to = c.From
		}
		h.Set("Disposition-Notification-To", to)
		if c.SignedMDN {
			h.Set("Disposition-Notification-Options", "signed-receipt-protocol=optional, pkcs7-signature; signed-receipt-micalg=optional, "+built.MICAlg)
		}
		if c.mode() == MDNAsync {
			h.Set("Receipt-Delivery-Option", c.AsyncURL)
		}
	}
	m.ID, m.Header, m.MIC, m.MICAlg = id, h, built.MIC, built.MICAlg
	return nil
}

func (c *Client) mode() MDNMode {
	if c.MDN == "" {
		return MDNSync
	}
	return c.MDN
}

func (c *Client) micAlg() string {
	switch {
	case c.MICAlg != "":
		return c.MICAlg
	case c.SignDigest != "":
		return c.SignDigest
	}
	return "sha-256"
}

// Result is the outcome of one send.
type Result struct {
	Message *Message
	// Status is the HTTP status of the response; RetryAfter is its
	// Retry-After in seconds (503: the message is being processed, or the
	// receiver is unavailable), zero when absent.
	Status     int
	RetryAfter time.Duration
	BytesSent  int64
	Elapsed    time.Duration
	// MDN is the check of the sync MDN; nil when none was asked for or the
	// MDN is asynchronous.
	MDN *MDNCheck
	// Problems lists why OK is false.
	Problems []string
}

// OK reports a message the partner accepted: HTTP 2xx and, for a sync MDN,
// a positive, verified MDN with the right MIC.
func (r *Result) OK() bool { return len(r.Problems) == 0 }

// Send posts m and checks the sync MDN, if one was asked for. The error is
// for failures to send or read; a negative answer is in Result.Problems.
func (c *Client) Send(ctx context.Context, m *Message) (*Result, error) {
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 5 * time.Minute}
	}
	res := &Result{Message: m}
	body := &progressReader{r: m.body(), total: m.Size(), fn: c.Progress}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, body)
	if err != nil {
		return nil, fmt.Errorf("as2client: %w", err)
	}
	req.ContentLength = m.Size()
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(m.body()), nil }
	req.Header = m.Header.Clone()
	start := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("as2client: post %s: %w", m.ID, err)
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	res.Elapsed = time.Since(start)
	res.BytesSent = body.sent.Load()
	res.Status = resp.StatusCode
	if err != nil {
		return res, fmt.Errorf("as2client: read response to %s: %w", m.ID, err)
	}
	res.RetryAfter = retryafter.Parse(resp.Header.Get("Retry-After"), time.Now())
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		res.Problems = append(res.Problems, fmt.Sprintf("HTTP %s: %s", resp.Status, strings.TrimSpace(truncate(string(rb), 300))))
		return res, nil
	}
	if c.mode() != MDNSync {
		return res, nil
	}
	res.MDN = c.CheckMDN(m, resp.Header, rb)
	res.Problems = append(res.Problems, res.MDN.Problems...)
	return res, nil
}

// MDNCheck is the verdict on one MDN.
type MDNCheck struct {
	MDN         *mdn.Parsed
	Disposition mdn.Disposition
	// Signed: the MDN is multipart/signed; Verified: its signature was made
	// by one of the recipient's certificates (Signer).
	Signed, Verified bool
	Signer           *x509.Certificate
	// MICMatched: Received-Content-MIC equals the message's MIC.
	MICMatched bool
	Problems   []string
}

// CheckMDN checks an MDN (the body and headers of a sync response or of an
// async MDN request) against the message it answers.
func (c *Client) CheckMDN(m *Message, h http.Header, body []byte) *MDNCheck {
	ch := &MDNCheck{}
	p, err := mdn.ParseHTTP(h, body)
	if err != nil {
		ch.Problems = append(ch.Problems, fmt.Sprintf("no valid MDN: %v", err))
		return ch
	}
	ch.MDN = p
	ch.Disposition = p.Report.Disposition
	ch.Signed = p.Signed
	if p.Signed {
		trusted := c.MDNCerts
		if len(trusted) == 0 {
			trusted = c.RecipientCerts
		}
		now := time.Now()
		if c.Now != nil {
			now = c.Now()
		}
		err := p.Verify(func(sig, content []byte) error {
			var s *cms.Signer
			var err error
			if c.VerifySigner != nil {
				s, err = cms.VerifyDetachedCheck(sig, content, trusted, now, c.VerifySigner)
			} else {
				s, err = cms.VerifyDetached(sig, content, trusted, now)
			}
			if err == nil {
				ch.Signer = s.Cert
			}
			return err
		})
		if err != nil {
			ch.Problems = append(ch.Problems, fmt.Sprintf("MDN signature: %v", err))
		} else {
			ch.Verified = true
		}
	} else if c.SignedMDN {
		ch.Problems = append(ch.Problems, "a signed MDN was asked for and the MDN is not signed")
	}
	if !mdn.SameMessageID(p.Report.OriginalMessageID, m.ID) {
		ch.Problems = append(ch.Problems, fmt.Sprintf("MDN answers Original-Message-ID %q, not %s", p.Report.OriginalMessageID, m.ID))
	}
	ch.MICMatched = p.Report.MICEquals(m.MIC, m.MICAlg)
	if !ch.Disposition.IsProcessed() {
		ch.Problems = append(ch.Problems, "disposition: "+ch.Disposition.String())
	} else if !ch.MICMatched {
		ch.Problems = append(ch.Problems, fmt.Sprintf("Received-Content-MIC %q, %s does not match the message's %s, %s",
			p.Report.MIC, p.Report.MICAlg, m.MIC, m.MICAlg))
	}
	return ch
}

// NewMessageID returns a fresh Message-ID with angle brackets.
func NewMessageID(from string) (string, error) {
	var r [12]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", fmt.Errorf("as2client: random: %w", err)
	}
	host := strings.Map(func(c rune) rune {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_' {
			return c
		}
		return -1
	}, from)
	if host == "" {
		host = "as2client"
	}
	return fmt.Sprintf("<%d.%s@%s>", time.Now().UnixMilli(), hex.EncodeToString(r[:]), host), nil
}

// QuoteName writes an AS2 name as RFC 4130 §6.2 wants it: bare when it is
// a token, otherwise as a quoted-string.
func QuoteName(n string) string {
	token := n != ""
	for i := 0; i < len(n); i++ {
		c := n[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`()<>@,;:\"/[]?={}`, c) >= 0 {
			token = false
			break
		}
	}
	if token {
		return n
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(n) + `"`
}

// progressReader counts the body bytes read. The transport reads the body
// in its own goroutine, which may still be at it when Do returns (a partner
// that answers before reading the whole body): sent is atomic.
type progressReader struct {
	r     io.Reader
	sent  atomic.Int64
	total int64
	fn    func(sent, total int64)
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	sent := p.sent.Add(int64(n))
	if p.fn != nil && (n > 0 || err == io.EOF) {
		p.fn(sent, p.total)
	}
	return n, err
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
