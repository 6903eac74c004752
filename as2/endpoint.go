// Package as2 is the gateway's AS2 receive endpoint (RFC 4130): it reads the
// AS2 headers, finds the trading partner, removes the S/MIME layers in
// whatever order they come (package smime), applies the partner's security
// policy, hands the verified payload to the exchange pipeline (which accepts
// each Message-ID exactly once; see exchange.Handler for how often the
// handler runs) and answers with an MDN:
// synchronously on the HTTP response, or asynchronously through the durable
// outbox to the Receipt-Delivery-Option URL. A message the business handler
// failed on gets HTTP 503 with Retry-After instead, whatever MDN was asked
// for: a transient failure, which senders retry (they take a negative MDN
// as final).
//
// Every failure before the pipeline gets the negative disposition RFC 4130
// §7.5.3 names for it, and nothing reaches the handler. Requests that are
// not AS2 messages at all (no AS2-From, AS2-To or Message-ID) get HTTP 400;
// bodies over the limit get HTTP 413.
//
// Asynchronous MDNs partners post for messages the gateway sent come to the
// same URL; they are told from messages by their headers and first bytes
// (mdnin.go) and go to Config.MDNs, never to the pipeline.
package as2

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/internal/cms"
	"github.com/edigateway/gateway/internal/limits"
	"github.com/edigateway/gateway/internal/smime"
	"github.com/edigateway/gateway/internal/trust"
	"github.com/edigateway/gateway/mdn"
	"github.com/edigateway/gateway/outbox"
	"github.com/edigateway/gateway/partners"
)

// DefaultMaxBodyBytes is the body limit when Config.MaxBodyBytes is zero.
const DefaultMaxBodyBytes = 100 << 20

// DefaultStreamThreshold is the body size above which a message is
// unwrapped as a stream when Config.StreamThreshold is zero.
const DefaultStreamThreshold = 1 << 20

// DefaultReportingUA is the Reporting-UA of our MDNs when Config.ReportingUA
// is empty.
const DefaultReportingUA = "gateway AS2"

// Config configures an Endpoint.
type Config struct {
	// Partners is the trading partner directory (required).
	Partners *partners.Directory
	// OurID is the gateway's AS2 id (identity.as2_id), the AS2-To of
	// partners without our_as2_id.
	OurID string
	// Keys are our key pairs: all are tried for decryption (rollover);
	// Keys[0] signs MDNs. Without keys, signed MDNs are sent unsigned.
	Keys []KeyPair
	// Identities are our further AS2 names, each with its own keys (see
	// Identity); OurID and Keys are the first.
	Identities []Identity
	// Pipeline runs verified messages (required). Its Audit sink also gets a
	// "rejected" record for messages refused before the pipeline.
	Pipeline *exchange.Pipeline
	// Outbox queues asynchronous MDNs. Without it, an async MDN request is
	// answered synchronously.
	Outbox outbox.Store
	// Notify, when set, is called after an MDN was queued (for example
	// (*outbox.Dispatcher).Notify, so that it is sent at once).
	Notify func()
	// SpoolDir holds large payloads while the handler runs ("" = system
	// temporary directory).
	SpoolDir string
	// MaxBodyBytes limits the request body (default 100 MiB); larger
	// requests get HTTP 413. A partner's max_body_bytes replaces it for
	// that partner (AS2-From and AS2-To name it before the body is read).
	MaxBodyBytes int64
	// StreamThreshold: bodies larger than this are unwrapped as streams
	// from their spool file (smime.UnwrapStream), in memory bounded by
	// fixed buffers whatever their size (default DefaultStreamThreshold;
	// negative: never).
	StreamThreshold int64
	// MaxInMemoryBytes is the largest body unwrapped in memory when it
	// cannot be streamed (opaque signed-data, multipart payloads, base64
	// only the lenient decoder reads; default 100 MiB); a larger one of
	// those is refused.
	MaxInMemoryBytes int64
	// MaxDecompressedBytes limits a compressed layer's inflated size
	// (default smime.DefaultMaxSize).
	MaxDecompressedBytes int64
	// MaxCompressionRatio bounds decompressed ÷ compressed bytes once the
	// output passes 1 MiB (default limits.DefaultMaxCompressionRatio).
	MaxCompressionRatio float64
	Log                 *slog.Logger
	// Now is the clock for certificate validity and MDN ids; nil means
	// time.Now.
	Now func() time.Time
	// ReportingUA is the Reporting-UA of our MDNs.
	ReportingUA string
	// Trust checks the signers of trust: ca partners (chain, name,
	// revocation, with its cache); nil means a checker with defaults.
	Trust *trust.Checker
	// MDNs receives the asynchronous MDNs partners post for messages we
	// sent (see MDNReceiver); nil: they are refused with HTTP 400.
	MDNs MDNReceiver
	// MaxMDNBytes limits an asynchronous MDN's body (default
	// DefaultMaxMDNBytes, and never above the body limit); larger ones get
	// HTTP 413.
	MaxMDNBytes int64
}

// Endpoint is the AS2 receive endpoint; it implements http.Handler.
type Endpoint struct {
	cfg   Config
	log   *slog.Logger
	trust *trust.Checker
}

// NewEndpoint checks cfg and returns the endpoint.
func NewEndpoint(cfg Config) (*Endpoint, error) {
	if cfg.Partners == nil {
		return nil, errors.New("as2: config: Partners is required")
	}
	if cfg.Pipeline == nil {
		return nil, errors.New("as2: config: Pipeline is required")
	}
	for i, k := range cfg.Keys {
		if k.Cert == nil || k.Key == nil {
			return nil, fmt.Errorf("as2: config: Keys[%d] lacks its certificate or private key", i)
		}
	}
	if err := checkIdentities(cfg); err != nil {
		return nil, err
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.ReportingUA == "" {
		cfg.ReportingUA = DefaultReportingUA
	}
	if cfg.StreamThreshold == 0 {
		cfg.StreamThreshold = DefaultStreamThreshold
	}
	if cfg.MaxInMemoryBytes <= 0 {
		cfg.MaxInMemoryBytes = min(cfg.MaxBodyBytes, DefaultMaxBodyBytes)
	}
	e := &Endpoint{cfg: cfg, log: cfg.Log, trust: cfg.Trust}
	if e.log == nil {
		e.log = slog.Default()
	}
	if e.trust == nil {
		e.trust = &trust.Checker{Log: e.log, Now: cfg.Now}
	}
	return e, nil
}

func (e *Endpoint) now() time.Time {
	if e.cfg.Now != nil {
		return e.cfg.Now()
	}
	return time.Now()
}

// delivery says how the MDN of one message travels.
type delivery int

const (
	deliverNone  delivery = iota // no MDN requested
	deliverSync                  // on the HTTP response
	deliverAsync                 // through the outbox
)

// inbound is one message being processed.
type inbound struct {
	req      *Request
	partner  *partners.Partner // nil when unknown
	mode     delivery
	asyncURL string
	// asyncPending is a Receipt-Delivery-Option of a partner without
	// as2.async_mdn_urls: followed only once the message proved to be
	// signed by the partner (decideAsync); until then the MDN is sync.
	asyncPending string
	// signMDN and signDigest: whether and with which digest our MDN is signed.
	signMDN    bool
	signDigest string
	// signKeys are the keys of the identity the partner addressed
	// (AS2-To): signKeys[0] signs the MDN.
	signKeys []cms.KeyPair
	// mic is the Received-Content-MIC of the message ("" before unwrap).
	mic    string
	micAlg micAlg
	lg     *slog.Logger
}

// answeredWriter records whether an answer has been written, so that the
// exchange's spool files are removed after it has been sent.
type answeredWriter struct {
	http.ResponseWriter
	answered bool
}

func (a *answeredWriter) WriteHeader(code int) {
	a.answered = true
	a.ResponseWriter.WriteHeader(code)
}

func (a *answeredWriter) Write(b []byte) (int, error) {
	a.answered = true
	return a.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the server's writer.
func (a *answeredWriter) Unwrap() http.ResponseWriter { return a.ResponseWriter }

// send flushes an answer written so far to the partner (nothing when none
// is: a handler that panics must not answer 200 by accident).
func (a *answeredWriter) send() {
	if a.answered {
		http.NewResponseController(a.ResponseWriter).Flush()
	}
}

// ServeHTTP receives one AS2 message. Each step answers the partner itself
// when it refuses the message, and reports so; the exchange then ends.
func (e *Endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "AS2 messages are sent with POST", http.StatusMethodNotAllowed)
		return
	}
	rc := e.readAS2Headers(w, r)
	if rc == nil {
		return
	}
	if rc.partner == nil {
		rc.refuseUnknownPartner()
		return
	}
	if rc.isAsyncMDN() {
		rc.receiveMDN()
		return
	}
	defer rc.removeSpooledBody()
	if !rc.spoolBody() {
		return
	}
	rc.planReceipt()
	if d, why := mdnRequestRefusal(rc.x, rc.partner); why != "" {
		if rc.arrived() {
			e.reject(r.Context(), rc.w, rc.x, d, why, nil)
		}
		return
	}
	opts := rc.unwrapOptions()
	// Layer files of a streamed unwrap live until the exchange ends: the
	// payload the handler reads is one of them (or a section of the body).
	rc.layers = &layerFiles{dir: e.cfg.SpoolDir}
	defer rc.removeLayerFiles()
	if !rc.decryptAndVerify(opts) {
		return
	}
	if !rc.enforceSecurityPolicy() {
		return
	}
	if !rc.computeMIC() {
		return
	}
	rc.payloads = &exchange.Spool{Dir: e.cfg.SpoolDir}
	defer rc.removePayloadSpool()
	rc.runPipeline()
}

// as2Receipt is the state of one AS2 request while ServeHTTP's steps run.
type as2Receipt struct {
	e *Endpoint
	r *http.Request
	// w is aw once the request is known to be an AS2 message.
	w  http.ResponseWriter
	aw *answeredWriter
	x  *inbound
	// lg is the request's logger before the partner is known.
	lg *slog.Logger
	// partner is the agreement AS2-From and AS2-To name (nil: none).
	partner     *partners.Partner
	received    time.Time
	limit       int64
	decryptKeys []cms.KeyPair
	// bf is the spooled body; arriving is the spooling still running
	// while a large body is unwrapped as it arrives.
	bf       *limits.BodyFile
	arriving *limits.GrowingBody
	layers   *layerFiles
	payloads *exchange.Spool
	tr       *trustRun
	// res is the unwrapped message; sres its streamed form (nil when
	// unwrapped in memory); err the unwrap's failure.
	res  *smime.Result
	sres *smime.StreamResult
	err  error
}

// readAS2Headers reads the AS2 headers, finds the partner's agreement and
// refuses a body its Content-Length says is too large before reading a
// byte of it. It returns nil when it answered.
func (e *Endpoint) readAS2Headers(w http.ResponseWriter, r *http.Request) *as2Receipt {
	received := e.now()
	req, err := ParseHeaders(r.Header)
	if err != nil {
		e.log.Warn("as2 request refused", "protocol", "as2", "remote", r.RemoteAddr, "status", http.StatusBadRequest, "err", err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return nil
	}
	lg := e.log.With("protocol", "as2", "message_id", dedup.NormalizeMessageID(req.MessageID), "as2_from", req.From, "as2_to", req.To)
	p, ok := e.cfg.Partners.ByAS2(req.From, req.To, e.cfg.OurID)
	// The partner's own max_body_bytes, else the global limit.
	limit := e.cfg.MaxBodyBytes
	if ok {
		limit = partners.BodyLimit(p, limit)
	}
	if r.ContentLength > limit {
		// Refused before a byte of the body is read.
		lg.Warn("as2 message refused: body too large", "status", http.StatusRequestEntityTooLarge, "limit", limit, "content_length", r.ContentLength)
		w.Header().Set("Connection", "close")
		http.Error(w, fmt.Sprintf("message body exceeds the limit of %d bytes", limit), http.StatusRequestEntityTooLarge)
		return nil
	}

	// The spool files are removed once the answer is on its way (see
	// answeredWriter): a GiB of them takes tens of milliseconds.
	aw := &answeredWriter{ResponseWriter: w}
	rc := &as2Receipt{e: e, r: r, w: aw, aw: aw, lg: lg, received: received, limit: limit}
	rc.x = &inbound{req: req, lg: lg}
	rc.x.signKeys, rc.decryptKeys = e.identityKeys(req.To)
	if ok {
		rc.partner = p
	}
	return rc
}

// refuseUnknownPartner answers a message no agreement covers.
func (rc *as2Receipt) refuseUnknownPartner() {
	// The sender is not authenticated: its Receipt-Delivery-Option is
	// not followed; the unsigned MDN goes back on the response. The
	// body is not read, and the connection is closed after the answer
	// (net/http would otherwise wait to discard a short body first).
	req := rc.x.req
	rc.w.Header().Set("Connection", "close")
	if req.MDN.Requested {
		rc.x.mode = deliverSync
	}
	rc.e.reject(rc.r.Context(), rc.w, rc.x, mdn.DispUnknownTradingPartner,
		fmt.Sprintf("no trading partner agreement for AS2-From %q and AS2-To %q", req.From, req.To), nil)
}

// removeSpooledBody removes the body's spool file once the answer is sent.
func (rc *as2Receipt) removeSpooledBody() {
	if rc.arriving != nil {
		// Answered before the body's end (no path should): the
		// spooling still reads the request, which must end first.
		if b, err := rc.arriving.Wait(); err == nil {
			rc.bf = b
		}
	}
	rc.aw.send()
	if err := rc.bf.Remove(); err != nil {
		rc.lg.Warn("spool cleanup failed", "err", err)
	}
}

// spoolBody starts spooling the body: the body goes to a spool file as it
// arrives (a small one stays in memory), hashed on the way; the file is
// removed when the exchange ends
// (and, after a crash, at the next start: see limits.OpenSpoolArea). A body
// that will be unwrapped as a stream (its Content-Length says so) is
// unwrapped while it arrives (two cores); the spooling's outcome is awaited
// before anything is answered (arrived), and its failure is the answer. It
// reports false when it answered.
func (rc *as2Receipt) spoolBody() bool {
	e, r := rc.e, rc.r
	if e.cfg.StreamThreshold > 0 && r.ContentLength > e.cfg.StreamThreshold {
		rc.arriving = limits.SpoolBodyAsync(r.Body, e.cfg.SpoolDir, rc.limit)
		return true
	}
	// A small body (a typical message) is unwrapped in memory: it is kept
	// there from the start, without a spool file to write and read back.
	keep := int64(limits.SmallInMemory)
	if e.cfg.StreamThreshold > 0 {
		keep = min(keep, e.cfg.StreamThreshold)
	}
	var err error
	rc.bf, err = limits.SpoolBodyKeep(r.Body, e.cfg.SpoolDir, rc.limit, min(keep, e.cfg.MaxInMemoryBytes))
	return rc.spooled(err)
}

// arrived waits for a body still arriving (see spooled).
func (rc *as2Receipt) arrived() bool {
	if rc.arriving == nil {
		return true
	}
	var err error
	rc.bf, err = rc.arriving.Wait()
	rc.arriving = nil
	return rc.spooled(err)
}

// spooled answers the partner and reports false when the body could not
// be spooled.
func (rc *as2Receipt) spooled(err error) bool {
	w, lg, limit := rc.w, rc.lg, rc.limit
	if err == nil {
		lg.Debug("as2 body received", "bytes", rc.bf.Size, "sha256", rc.bf.SHA256)
		if rc.bf.Size > 0 {
			return true
		}
		lg.Warn("as2 message refused: empty body", "status", http.StatusBadRequest)
		http.Error(w, "as2: the request has no body", http.StatusBadRequest)
		return false
	}
	switch st := limits.Status(err); st {
	case http.StatusRequestEntityTooLarge:
		lg.Warn("as2 message refused: body too large", "status", st, "limit", limit, "err", err)
		w.Header().Set("Connection", "close")
		http.Error(w, fmt.Sprintf("message body exceeds the limit of %d bytes", limit), st)
	case 0:
		if errors.Is(err, limits.ErrSpool) {
			lg.Error("as2 message not processed: the body could not be spooled", "err", err)
			retryLater(w, "the message could not be stored temporarily")
			break
		}
		lg.Warn("as2 message refused: body could not be read", "status", http.StatusBadRequest, "err", err)
		http.Error(w, "the request body could not be read", http.StatusBadRequest)
	default:
		lg.Warn("as2 message refused while reading the body", "status", st, "err", err)
		limits.Refuse(w, err)
	}
	return false
}

// planReceipt ties the message to its partner and plans the MDN.
func (rc *as2Receipt) planReceipt() {
	rc.x.partner = rc.partner
	rc.x.lg = rc.x.lg.With("partner", rc.partner.ID)
	rc.e.planMDN(rc.x)
}

// unwrapOptions are the partner's keys, trust and limits for the unwrap.
func (rc *as2Receipt) unwrapOptions() smime.Options {
	e, r, p := rc.e, rc.r, rc.partner
	var check cms.SignerCheck
	if pol := e.cfg.Partners.AS2Trust(p); pol != nil {
		rc.tr = &trustRun{}
		check = e.signerCheck(r.Context(), pol, rc.tr)
	}
	return smime.Options{
		Keys:        rc.decryptKeys,
		Trusted:     e.cfg.Partners.AS2Certificates(p),
		CheckSigner: check,
		Now:         e.cfg.Now,
		MaxSize:     e.cfg.MaxDecompressedBytes, MaxRatio: e.cfg.MaxCompressionRatio,
		SpoolDir: e.cfg.SpoolDir, Reserve: limits.ReservationFrom(r.Context()).Grow,

		ContentOnlyCompressedMIC: p.AS2.MICCompressed == "content",
	}
}

// removeLayerFiles removes the streamed unwrap's layer files once the
// answer is sent.
func (rc *as2Receipt) removeLayerFiles() {
	rc.aw.send()
	if err := rc.layers.remove(); err != nil {
		rc.x.lg.Warn("spool cleanup failed", "err", err)
	}
}

// decryptAndVerify removes the S/MIME layers: as a stream when the body is
// large, else (or when its structure cannot be streamed) in memory. It
// reports false when it answered.
func (rc *as2Receipt) decryptAndVerify(opts smime.Options) bool {
	e := rc.e
	if rc.arriving != nil || e.cfg.StreamThreshold > 0 && rc.bf.Size > e.cfg.StreamThreshold {
		if !rc.unwrapStreamed(opts) {
			return false
		}
	}
	if rc.sres == nil && !rc.unwrapInMemory(opts) {
		return false
	}
	return rc.refuseFailedUnwrap()
}

// unwrapStreamed unwraps the body as a stream from its spool file (while it
// arrives, when it still does). A body that cannot be streamed leaves
// rc.sres nil for unwrapInMemory. It reports false when it answered.
func (rc *as2Receipt) unwrapStreamed(opts smime.Options) bool {
	e, r, w, x := rc.e, rc.r, rc.w, rc.x
	var body smime.Section
	if rc.arriving != nil {
		body = smime.Section{R: rc.arriving, N: r.ContentLength}
	} else {
		body = smime.Section{R: rc.bf, N: rc.bf.Size}
	}
	sres, err := smime.UnwrapStream(smime.EntityFromHTTP(r.Header, nil).Header, body,
		smime.StreamOptions{Options: opts, NewFile: rc.layers.create})
	rc.sres, rc.err = sres, err
	if !rc.arrived() {
		// The body's own failure (cut, too large, the disk) is the
		// answer, whatever the unwrap made of what had arrived.
		return false
	}
	if errors.Is(err, smime.ErrNotStreamable) && sres != nil && sres.PayloadReached {
		// Every layer was read as a stream; only the payload (a
		// multipart, lenient base64) needs memory. A message that the
		// agreement refuses anyway (unsigned, unencrypted) is refused
		// from the streamed result: an unsigned body is never held
		// whole in memory (issue 22 item 4: 99 MiB cost 230 MB).
		if why := policyViolation(rc.partner.AS2, &sres.Result); why != "" {
			answerOnResponse(x)
			e.reject(r.Context(), w, x, mdn.DispInsufficientMessageSecurity, why, nil)
			return false
		}
	}
	if !errors.Is(err, smime.ErrNotStreamable) {
		rc.res = &sres.Result
		return true
	}
	x.lg.Info("as2 message cannot be streamed; unwrapping it in memory", "bytes", rc.bf.Size, "reason", err)
	if rc.bf.Size > e.cfg.MaxInMemoryBytes {
		answerOnResponse(x)
		e.reject(r.Context(), w, x, mdn.DispUnexpectedProcessingError,
			fmt.Sprintf("a message of this structure is accepted only up to %d bytes", e.cfg.MaxInMemoryBytes), err)
		return false
	}
	rsv := limits.ReservationFrom(r.Context())
	if gerr := rsv.Grow(rc.bf.Size*limits.DefaultAmplification - rsv.Held()); gerr != nil {
		x.lg.Warn("as2 message not processed: memory budget", "status", limits.Status(gerr), "err", gerr)
		limits.Refuse(w, gerr)
		return false
	}
	rc.sres = nil
	return true
}

// unwrapInMemory unwraps the body read whole into memory. It reports false
// when it answered.
func (rc *as2Receipt) unwrapInMemory(opts smime.Options) bool {
	// One allocation of exactly the body's size.
	body, rerr := rc.bf.Bytes()
	if rerr != nil {
		rc.x.lg.Error("as2 message not processed: the spooled body could not be read", "err", rerr)
		retryLater(rc.w, "the message could not be stored temporarily")
		return false
	}
	rc.res, rc.err = smime.UnwrapEntity(smime.EntityFromHTTP(rc.r.Header, body), opts)
	return true
}

// refuseFailedUnwrap records the trust checks and answers a message that
// could not be decrypted or verified. It reports false when it answered.
func (rc *as2Receipt) refuseFailedUnwrap() bool {
	e, r, w, x, err := rc.e, rc.r, rc.w, rc.x, rc.err
	e.auditTrust(r.Context(), x, rc.tr)
	if limits.Status(err) == http.StatusServiceUnavailable {
		x.lg.Warn("as2 message not processed: memory budget exhausted while decompressing", "err", err)
		limits.Refuse(w, err)
		return false
	}
	if errors.Is(err, trust.ErrUnavailable) {
		e.trustUnavailable(r.Context(), w, x, err)
		return false
	}
	if err != nil {
		d, why := classify(rc.res, err, x.req.From)
		answerOnResponse(x)
		e.reject(r.Context(), w, x, d, why, err)
		return false
	}
	return true
}

// enforceSecurityPolicy refuses a weak signer key and a message the
// partner's agreement requires to be signed or encrypted (or both). It
// reports false when it answered.
func (rc *as2Receipt) enforceSecurityPolicy() bool {
	e, r, w, x, p, res := rc.e, rc.r, rc.w, rc.x, rc.partner, rc.res
	if res.Signed && res.Signer != nil {
		// Key size, judged like AS4 does (validity: cms, at e.cfg.Now). A
		// weak key allowed by as2.allow_weak_keys is logged when loaded.
		if _, err := trust.CheckKeySize(res.Signer.Cert, trust.Policy{AllowWeakKeys: p.AS2.AllowWeakKeys}); err != nil {
			answerOnResponse(x)
			e.reject(r.Context(), w, x, mdn.DispAuthenticationFailed, "the signer's "+err.Error(), nil)
			return false
		}
	}
	if why := policyViolation(p.AS2, res); why != "" {
		answerOnResponse(x)
		e.reject(r.Context(), w, x, mdn.DispInsufficientMessageSecurity, why, nil)
		return false
	}
	return true
}

// computeMIC settles the MDN's delivery now that the signer is known and
// computes the Received-Content-MIC. It reports false when it answered.
func (rc *as2Receipt) computeMIC() bool {
	e, x, res := rc.e, rc.x, rc.res
	e.decideAsync(x, res.Signed)
	x.micAlg = e.micAlgFor(x, res)
	var err error
	if rc.sres != nil {
		x.mic, err = rc.sres.MIC(x.micAlg.digest)
	} else {
		x.mic, err = res.MIC(x.micAlg.digest)
	}
	if err != nil {
		e.reject(rc.r.Context(), rc.w, x, mdn.DispUnexpectedProcessingError, "the MIC could not be computed", err)
		return false
	}
	x.lg.Debug("as2 message verified", "layers", strings.Join(res.Layers, ","), "signed", res.Signed,
		"encrypted", res.Encrypted, "compressed", res.Compressed, "cipher", res.Decryption.Cipher,
		"line_endings_repaired", res.LineEndingsRepaired, "mdn", x.mode.String(), "signed_mdn", x.signMDN)
	return true
}

// removePayloadSpool removes the payloads spooled for the handler once the
// answer is sent.
func (rc *as2Receipt) removePayloadSpool() {
	rc.aw.send()
	if err := rc.payloads.Cleanup(); err != nil {
		rc.x.lg.Warn("spool cleanup failed", "err", err)
	}
}

// runPipeline hands the verified message to the exchange pipeline and
// answers with its MDN.
func (rc *as2Receipt) runPipeline() {
	e, r, x := rc.e, rc.r, rc.x
	msg, err := e.message(x, rc.res, rc.sres, rc.payloads, rc.received)
	if err != nil {
		x.lg.Error("as2 message not processed: spooling failed", "err", err)
		retryLater(rc.w, "the message could not be stored temporarily")
		return
	}
	reply := e.cfg.Pipeline.Process(r.Context(), exchange.Inbound{
		Message: msg, Replies: &replies{e: e, x: x}, Window: rc.partner.AS2.DedupWindow.Std(), OnDrift: exchange.DriftPolicyOf(rc.partner.OnDrift),
	})
	e.send(r.Context(), rc.w, x, reply)
}

// answerOnResponse turns an asynchronous MDN into a synchronous one for a
// message that failed decryption, verification or the partner's security
// policy: its Receipt-Delivery-Option is not authenticated, and following it
// would let anyone who knows a partner's AS2-From make the gateway post to
// any address.
func answerOnResponse(x *inbound) {
	if x.mode == deliverAsync {
		x.mode, x.asyncURL = deliverSync, ""
	}
}

func (d delivery) String() string {
	switch d {
	case deliverSync:
		return "sync"
	case deliverAsync:
		return "async"
	}
	return "none"
}

// planMDN decides how the MDN is delivered and signed.
func (e *Endpoint) planMDN(x *inbound) {
	m := x.req.MDN
	switch {
	case !m.Requested:
		x.mode = deliverNone
	case m.AsyncURL != "":
		u, err := asyncURL(m.AsyncURL)
		switch {
		case err != nil:
			x.lg.Warn("async MDN requested to an unusable address; answering synchronously", "err", err)
			x.mode = deliverSync
		case e.cfg.Outbox == nil:
			x.lg.Warn("async MDN requested but no outbox is configured; answering synchronously")
			x.mode = deliverSync
		default:
			x.mode = deliverSync
			pu, _ := url.Parse(u)
			switch pol := x.partner.AS2.AsyncMDN(pu); {
			case !pol.Listed:
				x.asyncPending = u
			case pol.Pattern == nil:
				e.refuseAsync(x, u, "it matches none of the partner's as2.async_mdn_urls")
			default:
				x.mode, x.asyncURL = deliverAsync, u
			}
		}
	default:
		x.mode = deliverSync
	}
	x.signMDN = m.Requested && m.Signed() || x.partner.AS2.RequireSignedMDN
	if x.signMDN && len(x.signKeys) == 0 {
		x.lg.Warn("signed MDN requested but no key is configured; sending it unsigned")
		x.signMDN = false
	}
	x.signDigest = cms.DigestSHA256
	if a, ok := chooseMICAlg(m.MICAlgs, func(d string) bool { return digestAllowed(x.partner.AS2, d) && d != cms.DigestMD5 }); ok {
		x.signDigest = a.digest
	}
}

// mdnRequestRefusal returns the failed/failure disposition for an MDN
// request marked "required" that the gateway cannot honour (RFC 4130 §7.4.3).
func mdnRequestRefusal(x *inbound, p *partners.Partner) (mdn.Disposition, string) {
	m := x.req.MDN
	if !m.Requested {
		return mdn.Disposition{}, ""
	}
	if m.ProtocolRequired && len(m.Protocols) > 0 && !m.Signed() {
		x.signMDN = false
		return mdn.DispUnsupportedFormat, fmt.Sprintf("signed-receipt-protocol %q is required but only pkcs7-signature is supported", strings.Join(m.Protocols, ", "))
	}
	if m.MICAlgRequired && len(m.MICAlgs) > 0 {
		if _, ok := chooseMICAlg(m.MICAlgs, func(d string) bool { return digestAllowed(p.AS2, d) }); !ok {
			x.signMDN = false
			return mdn.DispUnsupportedMICAlgorithms, fmt.Sprintf("none of the required signed-receipt-micalg values %q is supported or allowed", strings.Join(m.MICAlgs, ", "))
		}
	}
	return mdn.Disposition{}, ""
}

// micAlgFor picks the MIC algorithm: the first requested one that is
// supported and allowed, else the signature's own digest, else SHA-256.
func (e *Endpoint) micAlgFor(x *inbound, res *smime.Result) micAlg {
	allow := func(d string) bool { return digestAllowed(x.partner.AS2, d) }
	if a, ok := chooseMICAlg(x.req.MDN.MICAlgs, allow); ok {
		return a
	}
	d := cms.DigestSHA256
	if res.Signed && res.Signer != nil && allow(res.Signer.DigestAlg) {
		d = res.Signer.DigestAlg
	}
	spelled, _ := smime.NormalizeMICAlg(d)
	return micAlg{digest: d, spelled: spelled}
}

// message builds the pipeline's message, spooling each payload.
func (e *Endpoint) message(x *inbound, res *smime.Result, sres *smime.StreamResult, spool *exchange.Spool, received time.Time) (*exchange.Message, error) {
	req := x.req
	h := textproto.MIMEHeader{}
	set := func(k, v string) {
		if v != "" {
			h.Set(k, v)
		}
	}
	set("AS2-From", req.From)
	set("AS2-To", req.To)
	set("Message-Id", req.MessageID)
	set("Subject", req.Subject)
	set("AS2-Version", req.Version)
	set("Content-Type", res.ContentType)

	type part struct {
		body                         []byte
		contentType, filename, conID string
	}
	var parts []part
	if res.Entity != nil && (res.MediaType == "multipart/related" || res.MediaType == "multipart/mixed") {
		// RFC 6362 multiple attachments: one payload per part.
		sub, err := res.Entity.Parts()
		if err == nil {
			for _, s := range sub {
				b, err := s.DecodedBody()
				if err != nil {
					parts = nil
					break
				}
				parts = append(parts, part{b, s.Header.Get("Content-Type"), s.Filename(),
					strings.Trim(strings.TrimSpace(s.Header.Get("Content-Id")), "<>")})
			}
		}
	}
	if len(parts) == 0 && sres == nil {
		parts = []part{{res.Payload, res.ContentType, res.Filename, ""}}
	}
	msg := &exchange.Message{
		Partner:      x.partner.ID,
		Protocol:     exchange.AS2,
		MessageID:    dedup.NormalizeMessageID(req.MessageID),
		Received:     received,
		Headers:      h,
		TransportKey: dedup.TransportKey("as2", "as2", req.From, req.MessageID),
	}
	if sres != nil {
		// The payload stays where the stream left it: a section of the
		// last layer's file (or of the body's spool file).
		body, size, sum, err := sectionBody(sres.Body, sres.BodySHA256())
		if err != nil {
			return nil, err
		}
		msg.Payloads = append(msg.Payloads, exchange.NewPayload(exchange.Payload{
			ContentType: res.ContentType, Filename: res.Filename, Size: size, SHA256: sum,
		}, body))
	}
	for _, pt := range parts {
		body, size, sum, err := spool.Bytes(pt.body)
		if err != nil {
			return nil, err
		}
		msg.Payloads = append(msg.Payloads, exchange.NewPayload(exchange.Payload{
			ContentID: pt.conID, ContentType: pt.contentType, Filename: pt.filename, Size: size, SHA256: sum,
		}, body))
	}
	return msg, nil
}

// reject answers a message refused before the pipeline: a negative MDN
// (or, when none was requested, an HTTP error), an audit record and a log
// line. Nothing reaches the handler. The partner is told why (our sentence)
// and an incident reference; the cause (a parser's or crypto error chain)
// goes only to the log line and audit record that carry the same incident.
func (e *Endpoint) reject(ctx context.Context, w http.ResponseWriter, x *inbound, d mdn.Disposition, why string, cause error) {
	partnerID := ""
	if x.partner != nil {
		partnerID = x.partner.ID
	}
	incident := exchange.NewIncident()
	text := fmt.Sprintf("The AS2 message %s from %s to %s was not processed: %s.\r\nIncident %s: quote it when you ask us about this message.",
		x.req.MessageID, x.req.From, x.req.To, why, incident)
	errText := why
	if cause != nil {
		errText += ": " + cause.Error()
	}
	if a := e.cfg.Pipeline.Audit; a != nil {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		werr := a.Write(actx, audit.Record{Time: e.now().UTC(), Step: audit.StepReply, Partner: partnerID, Protocol: "as2",
			MessageID: dedup.NormalizeMessageID(x.req.MessageID), Key: string(dedup.TransportKey("as2", "as2", x.req.From, x.req.MessageID)),
			Decision: "rejected", Disposition: dispositionText(d), Error: errText, Incident: incident})
		cancel()
		if werr != nil {
			x.lg.Error("audit write failed", "err", werr)
		}
	}
	x.lg.Warn("as2 message rejected", "decision", "rejected", "disposition", dispositionText(d), "reason", why, "incident", incident,
		"err", cause, "mdn", x.mode.String())
	if x.mode == deliverNone {
		status := http.StatusBadRequest
		if d.Description == mdn.DescUnexpectedProcessingError {
			status = http.StatusInternalServerError
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, strings.ReplaceAll(text, "\r\n", "\n")+"\n")
		return
	}
	reply, err := e.buildMDN(x, d, text, "", "")
	if err != nil {
		x.lg.Error("building the negative MDN failed", "incident", incident, "err", err)
		http.Error(w, "the message was not processed and the MDN could not be built ("+exchange.IncidentNote(incident)+")", http.StatusInternalServerError)
		return
	}
	e.send(ctx, w, x, reply)
}

// send delivers a reply: the replies that are no MDN (the pipeline's 503
// and 500, the 503 of a handler failure) and sync MDNs on the response, as
// they are; async MDNs through the outbox, answering the request with 200
// and an empty body.
func (e *Endpoint) send(ctx context.Context, w http.ResponseWriter, x *inbound, reply exchange.Reply) {
	if reply.Status != http.StatusOK || !isMDN(reply.Header.Get("Content-Type")) {
		reply.Write(w)
		return
	}
	switch x.mode {
	case deliverSync:
		reply.Write(w)
	case deliverNone:
		if !positive(reply.Disposition) {
			// No MDN was asked for: the status is the partner's only
			// signal that the message was not processed.
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusInternalServerError)
			msg := "the message was not processed (" + reply.Disposition + ")"
			if reply.Incident != "" {
				msg += "; " + exchange.IncidentNote(reply.Incident)
			}
			_, _ = io.WriteString(w, msg+"\n")
			return
		}
		w.WriteHeader(http.StatusOK)
	case deliverAsync:
		id, err := randomHex(16)
		if err == nil {
			err = e.cfg.Outbox.Enqueue(context.WithoutCancel(ctx), outbox.Delivery{
				ID: id, Partner: x.partner.ID, MessageID: dedup.NormalizeMessageID(x.req.MessageID),
				URL: x.asyncURL, Header: reply.Header, Body: reply.Body,
			})
		}
		if err != nil {
			// A retransmission is answered from the stored reply.
			x.lg.Error("async MDN could not be queued; asking the partner to retransmit", "err", err)
			retryLater(w, "the MDN could not be queued")
			return
		}
		x.lg.Debug("async MDN queued", "delivery", id, "url", redactURL(x.asyncURL), "disposition", reply.Disposition)
		if e.cfg.Notify != nil {
			e.cfg.Notify()
		}
		w.WriteHeader(http.StatusOK)
	}
}

func retryLater(w http.ResponseWriter, why string) {
	w.Header().Set("Retry-After", "30")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = io.WriteString(w, "message not processed ("+why+"); retry later\n")
}

// positive reports whether an MDN disposition (as dispositionText writes
// it) says the message was processed: "processed" or a processed/warning.
func positive(disposition string) bool {
	return disposition == "processed" || strings.HasPrefix(disposition, "processed/warning")
}

func isMDN(contentType string) bool {
	ct := strings.ToLower(strings.TrimSpace(contentType))
	return strings.HasPrefix(ct, "multipart/signed") || strings.HasPrefix(ct, "multipart/report")
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("as2: random: %w", err)
	}
	return hex.EncodeToString(b), nil
}
