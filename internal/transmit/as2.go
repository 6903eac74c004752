package transmit

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"

	as2client "github.com/edigateway/gateway/as2/client"
	"github.com/edigateway/gateway/internal/cms"
	"github.com/edigateway/gateway/internal/smime"
	"github.com/edigateway/gateway/mdn"
	"github.com/edigateway/gateway/outbound"
)

// AS2Settings are a partner's AS2 sending settings.
type AS2Settings struct {
	// URL is the partner's AS2 endpoint; To its AS2 id (AS2-To); From our
	// AS2-From (empty: Identity.AS2ID).
	URL, To, From string
	// Digest signs the message: sha256 (default), sha1, sha384, sha512,
	// or "none" (unsigned).
	Digest string
	// Cipher encrypts it: a cms cipher name (aes256-cbc default,
	// aes128-cbc, aes192-cbc, 3des, aes128-gcm, aes256-gcm) or "none".
	Cipher string
	// Compression: "none" (default), "before-signing" or "after-signing".
	Compression string
	// MDN asked for: "sync" (default), "async" or "none"; SignedMDN asks
	// for a signed one and requires it; AsyncMDNURL is the
	// Receipt-Delivery-Option of an async MDN.
	MDN         string
	SignedMDN   bool
	AsyncMDNURL string
	// ContentType and Subject of messages that carry none (defaults
	// application/octet-stream and "AS2 message").
	ContentType, Subject string
	// PartnerCerts: the first encrypts, all may sign the partner's MDNs.
	PartnerCerts []*x509.Certificate
	// CA, for a partner under trust: ca, also accepts an MDN signer the
	// MDN carries that the partner's CA policy trusts (and judges a
	// listed one by that policy too): a signed MDN then needs no
	// PartnerCerts.
	CA *CATrust
	// AllowWeakKeys is the partner's allow_weak_keys (AS2 MDN signers are
	// checked by the cms package's own rules; kept for symmetry).
	AllowWeakKeys bool
	TLS           TLS
	// Timeout bounds the whole request (default DefaultTimeout);
	// MDNTimeout how long an async MDN is awaited (default
	// DefaultMDNTimeout) before the message is sent again.
	Timeout    time.Duration
	MDNTimeout time.Duration
}

// AS2 is the AS2 Transmitter (outbound.Transmitter).
type AS2 struct {
	id       func(partner string) (Identity, error)
	settings func(partner string) (*AS2Settings, error)
	spoolDir string
}

// NewAS2 returns the AS2 Transmitter: id is our identity towards a
// partner (the key that signs, the AS2-From), settings the partner's (both
// called at every attempt), spoolDir where messages are built (empty: the
// system's temporary directory).
func NewAS2(id func(partner string) (Identity, error), settings func(partner string) (*AS2Settings, error), spoolDir string) *AS2 {
	return &AS2{id: id, settings: settings, spoolDir: spoolDir}
}

var _ outbound.Transmitter = (*AS2)(nil)

// client is the as2/client Client of settings s.
func (t *AS2) client(s *AS2Settings, id Identity) (*as2client.Client, error) {
	c := &as2client.Client{URL: s.URL, From: s.From, To: s.To, Subject: s.Subject,
		RecipientCerts: s.PartnerCerts, SignedMDN: s.SignedMDN, AsyncURL: s.AsyncMDNURL, SpoolDir: t.spoolDir}
	if c.From == "" {
		c.From = id.AS2ID
	}
	switch d := strings.ToLower(s.Digest); d {
	case "none":
	case "":
		c.SignDigest = cms.DigestSHA256
	default:
		n, err := cms.NormalizeDigest(d)
		if err != nil {
			return nil, fmt.Errorf("transmit: digest %q: %w", s.Digest, err)
		}
		c.SignDigest = n
	}
	if c.SignDigest != "" {
		if id.Cert == nil || id.Key == nil {
			return nil, errors.New("transmit: signing needs our certificate and key")
		}
		c.SignCert, c.SignKey, c.SignChain = id.Cert, id.Key, id.Chain
	}
	switch enc := strings.ToLower(s.Cipher); enc {
	case "none":
	case "":
		c.Cipher = cms.CipherAES256CBC
	default:
		n, err := cms.NormalizeCipher(enc)
		if err != nil {
			return nil, fmt.Errorf("transmit: cipher %q: %w", s.Cipher, err)
		}
		c.Cipher = n
	}
	switch s.Compression {
	case "", "none":
	case "before-signing":
		c.Compression = smime.CompressThenSign
	case "after-signing":
		c.Compression = smime.SignThenCompress
	default:
		return nil, fmt.Errorf("transmit: compression %q is not none, before-signing or after-signing", s.Compression)
	}
	switch as2client.MDNMode(s.MDN) {
	case "":
		c.MDN = as2client.MDNSync
	case as2client.MDNSync, as2client.MDNAsync, as2client.MDNNone:
		c.MDN = as2client.MDNMode(s.MDN)
	default:
		return nil, fmt.Errorf("transmit: mdn %q is not sync, async or none", s.MDN)
	}
	if c.SignedMDN && c.MDN != as2client.MDNNone && len(s.PartnerCerts) == 0 && !s.CA.active() {
		return nil, errors.New("transmit: a signed MDN needs the partner's certificates or its trust: ca policy")
	}
	return c, nil
}

// Transmit makes one attempt at sending m (outbound.Transmitter).
func (t *AS2) Transmit(ctx context.Context, m outbound.Message, open func() (io.ReadCloser, error), posting func(digest string) error) outbound.Attempt {
	s, err := t.settings(m.Partner)
	if err != nil {
		return retry("not sent: the partner's AS2 settings: %v", err)
	}
	if s == nil {
		return retry("not sent: partner %q has no AS2 sending settings", m.Partner)
	}
	id, err := t.id(m.Partner)
	if err != nil {
		return retry("not sent: our identity for partner %q: %v", m.Partner, err)
	}
	c, err := t.client(s, id)
	if err != nil {
		return retry("not sent: %v", err)
	}
	hc, err := httpClient(s.TLS, s.Timeout)
	if err != nil {
		return retry("not sent: %v", err)
	}
	capture := &capturingTransport{base: hc.Transport}
	hc.Transport = capture
	c.HTTP = hc
	defer hc.CloseIdleConnections()

	msg, err := t.prepare(c, s, m, open)
	if err != nil {
		return retry("not sent: building the message: %v", err)
	}
	defer msg.Close()
	digest := msg.MIC + ", " + msg.MICAlg
	if err := posting(digest); err != nil {
		return retry("not sent: recording the transmission: %v", err)
	}
	res, err := c.Send(ctx, msg)
	if err != nil {
		a := transportRetry(err, hc.Timeout)
		if res != nil {
			a.Status = res.Status
		}
		return a
	}
	h, body := capture.response()
	a, ok := statusAttempt(res.Status, h, body)
	if !ok {
		return a
	}
	switch {
	case c.MDN == as2client.MDNNone:
		a.Outcome = outbound.Deliver
		a.Evidence = &outbound.Evidence{Kind: "status", Disposition: fmt.Sprintf("HTTP %d (no MDN asked for)", res.Status), Received: time.Now()}
		return a
	case c.MDN == as2client.MDNAsync && !isMDN(h):
		awaitFor := s.MDNTimeout
		if awaitFor <= 0 {
			awaitFor = DefaultMDNTimeout
		}
		a.Outcome, a.AwaitFor = outbound.Await, awaitFor
		return a
	}
	// A sync MDN, or one a partner sent on the response although async
	// was asked. The CA policy is set only now: Send's own check of the
	// MDN (against this transmission alone) is not used, and so the
	// policy, with its revocation lookups, runs once per MDN.
	run := &signerRun{}
	c.VerifySigner = s.CA.verifySigner(ctx, run)
	v := judgeMDN(c, run, m.MessageID, append(append([]string(nil), m.Sent...), digest), h, body)
	a.Evidence = v.ev
	switch {
	case v.problem != "":
		a.Outcome, a.Reason = outbound.Retry, "not delivered: "+v.problem
	case v.delivered:
		a.Outcome = outbound.Deliver
	default:
		a.Outcome, a.Reason = outbound.Refuse, v.reason
	}
	return a
}

// prepare builds m from its payload into a spool file under its fixed
// Message-ID.
func (t *AS2) prepare(c *as2client.Client, s *AS2Settings, m outbound.Message, open func() (io.ReadCloser, error)) (*as2client.Message, error) {
	ct := m.ContentType
	if ct == "" {
		ct = s.ContentType
	}
	if ct == "" {
		ct = "application/octet-stream"
	}
	if m.Subject != "" {
		c.Subject = m.Subject
	}
	rc, err := open()
	if err != nil {
		return nil, fmt.Errorf("payload: %w", err)
	}
	defer rc.Close()
	msg, err := c.PrepareStream(rc, ct, m.Filename)
	if err != nil {
		return nil, err
	}
	// The MIC covers the MIME entity, not the HTTP headers: the id is set
	// after the build, the same on every attempt.
	if m.MessageID != "" {
		msg.ID = m.MessageID
		msg.Header.Set("Message-Id", m.MessageID)
	}
	return msg, nil
}

// VerifyAsyncMDN judges an asynchronous MDN (the request's header and
// body) that answers m: its signature must verify against the partner's
// certificates or, under trust: ca, with a certificate its CA policy
// accepts (and it must be signed when a signed MDN is asked for),
// its Original-Message-ID must be m.MessageID and, when positive, its
// Received-Content-MIC one of m.Sent. delivered and reason are the
// partner's verdict; err is for an MDN that must not settle the message
// (bad or missing signature, another message, a MIC we never sent).
func (t *AS2) VerifyAsyncMDN(ctx context.Context, m outbound.Message, h http.Header, body []byte) (delivered bool, reason string, ev *outbound.Evidence, err error) {
	s, err := t.settings(m.Partner)
	if err != nil {
		return false, "", nil, fmt.Errorf("transmit: the partner's AS2 settings: %w", err)
	}
	if s == nil {
		return false, "", nil, fmt.Errorf("transmit: partner %q has no AS2 sending settings", m.Partner)
	}
	run := &signerRun{}
	c := &as2client.Client{RecipientCerts: s.PartnerCerts, SignedMDN: s.SignedMDN, VerifySigner: s.CA.verifySigner(ctx, run)}
	if s.SignedMDN && len(s.PartnerCerts) == 0 && !s.CA.active() {
		return false, "", nil, errors.New("transmit: a signed MDN is required and the partner has no certificate and no trust: ca policy")
	}
	v := judgeMDN(c, run, m.MessageID, m.Sent, h, body)
	if v.problem != "" {
		return false, "", v.ev, fmt.Errorf("transmit: async MDN for %s: %s", m.MessageID, v.problem)
	}
	return v.delivered, v.reason, v.ev, nil
}

// mdnVerdict is what an MDN says: delivered, or refused with reason, or
// a problem that keeps it from settling the message.
type mdnVerdict struct {
	delivered bool
	reason    string
	problem   string
	ev        *outbound.Evidence
}

// judgeMDN checks an MDN answering messageID against the transmissions
// made (sent: "MIC, alg" each); run is the CA trust check of its signer
// (trust: ca partners).
func judgeMDN(c *as2client.Client, run *signerRun, messageID string, sent []string, h http.Header, body []byte) mdnVerdict {
	ch := c.CheckMDN(&as2client.Message{ID: messageID}, h, body)
	var v mdnVerdict
	if ch.MDN == nil {
		v.problem = "the answer is no readable MDN: " + strings.Join(ch.Problems, "; ")
		return v
	}
	v.ev = &outbound.Evidence{Kind: "mdn", ContentType: h.Get("Content-Type"), Body: append([]byte(nil), body...),
		Disposition: ch.Disposition.String(), Signer: signerName(ch.Signer), Received: time.Now()}
	if ch.Verified {
		v.ev.Signer += run.note()
	}
	switch {
	case ch.Signed && !ch.Verified && run.refused():
		v.problem = "the MDN's signature verified, but " + run.refusal()
		v.ev.Signer = signerName(run.cert)
		return v
	case ch.Signed && !ch.Verified:
		v.problem = "the MDN's signature does not verify against the partner's certificates"
		for _, p := range ch.Problems {
			if strings.HasPrefix(p, "MDN signature:") {
				v.problem += " (" + strings.TrimSpace(strings.TrimPrefix(p, "MDN signature:")) + ")"
			}
		}
		return v
	case !ch.Signed && c.SignedMDN:
		v.problem = "the MDN is not signed and a signed MDN is required"
		return v
	case !mdn.SameMessageID(ch.MDN.Report.OriginalMessageID, messageID):
		v.problem = fmt.Sprintf("the MDN answers Original-Message-ID %q, not %s", snippet([]byte(ch.MDN.Report.OriginalMessageID)), messageID)
		return v
	case !ch.Disposition.IsProcessed():
		v.reason = ch.Disposition.String()
		if t := snippet([]byte(ch.MDN.Report.HumanText)); t != "" {
			v.reason += " — " + t
		}
		return v
	}
	for _, d := range sent {
		i := strings.LastIndex(d, ",")
		if i > 0 && ch.MDN.Report.MICEquals(strings.TrimSpace(d[:i]), strings.TrimSpace(d[i+1:])) {
			v.delivered = true
			return v
		}
	}
	v.problem = fmt.Sprintf("the MDN's Received-Content-MIC %q, %s matches no transmission of the message",
		snippet([]byte(ch.MDN.Report.MIC)), snippet([]byte(ch.MDN.Report.MICAlg)))
	return v
}

// isMDN reports whether a response's Content-Type is that of an MDN.
func isMDN(h http.Header) bool {
	mt, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	return mt == mdn.ReportType || mt == "multipart/signed"
}

// capturingTransport keeps the header and the body (up to the client's
// own bound) of the last response read through it, for the evidence.
type capturingTransport struct {
	base   http.RoundTripper
	mu     sync.Mutex
	header http.Header
	body   []byte
}

// maxCaptured bounds the response kept (as2/client reads 8 MiB at most).
const maxCaptured = 8 << 20

func (c *capturingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(r)
	if err != nil {
		return resp, err
	}
	c.mu.Lock()
	c.header, c.body = resp.Header.Clone(), nil
	c.mu.Unlock()
	resp.Body = capturedBody{resp.Body, c}
	return resp, nil
}

func (c *capturingTransport) CloseIdleConnections() {
	if ci, ok := c.base.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

func (c *capturingTransport) response() (http.Header, []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.header == nil {
		return http.Header{}, nil
	}
	return c.header, c.body
}

type capturedBody struct {
	io.ReadCloser
	c *capturingTransport
}

func (b capturedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.c.mu.Lock()
	if keep := min(n, maxCaptured-len(b.c.body)); keep > 0 {
		b.c.body = append(b.c.body, p[:keep]...)
	}
	b.c.mu.Unlock()
	return n, err
}
