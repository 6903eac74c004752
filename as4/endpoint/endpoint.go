// Package endpoint is the AS4 receiving endpoint (POST /as4): it reads an
// ebMS 3 user message (SOAP with attachments or a bare SOAP envelope),
// decrypts it with our keys, verifies its WS-Security signature against the
// sending partner's configured certificates, matches a P-Mode, resolves and
// decompresses the payloads and hands the message to the shared exchange
// pipeline, which decides on duplicates and runs the business handler once.
//
// Processing order (every step before the pipeline answers a signed eb:Error):
//
//  1. Read the MIME/SOAP message (EBMS:0007, EBMS:0009; a body over the
//     limit is answered 413, a body refused by the server's memory budget
//     503 and one below its minimum rate 408, without an ebMS signal). The
//     envelope part is held (up to Limits.MaxEnvelopeSize); attachments go
//     to spool files as they arrive. Once the envelope is parsed, its
//     unverified eb:From picks the partner whose max_body_bytes limits the
//     rest of the message (413 as soon as it is passed).
//  2. Refuse unknown mustUnderstand header blocks addressed to us (EBMS:0008).
//     Read the unverified eb:From to choose the partner whose certificates
//     the signature must verify against. Nothing else of the unverified
//     header is used. No partner → EBMS:0010 (see below).
//  3. Decrypt with our keys (EBMS:0102 FailedDecryption, EBMS:0103 when the
//     partner requires encryption and the message is not encrypted), each
//     attachment as a stream into a spool file (the GCM tag is checked at
//     its end, before anything of the message is used). AS4 senders sign,
//     then encrypt: the signature is verified over the decrypted, still
//     compressed attachments, digested from those files.
//  4. Verify the signature: signer among the partner's certificates,
//     eb:Messaging, soap:Body and every attachment covered, wsu:Timestamp
//     within the partner's clock skew (EBMS:0101, EBMS:0103). Only the
//     eb:Messaging element the signature digested is parsed from here on
//     (signature-wrapping defence).
//  5. Match a P-Mode of the partner (EBMS:0010), resolve the payloads
//     (EBMS:0011, EBMS:0003) and gunzip them as streams into the
//     exchange's spool (EBMS:0303); Payload.Open reads that final file.
//  6. Run the pipeline: a new message gets a signed receipt whose
//     ebbp:NonRepudiationInformation lists every ds:Reference of the
//     message; a duplicate gets the stored receipt byte for byte; a message
//     in flight elsewhere gets 503 with Retry-After; a handler failure gets
//     a signed EBMS:0004 error with HTTP 500 and a SOAP Receiver fault, so
//     that the partner retransmits and the retransmission is processed anew;
//     a damaged business envelope, drift and quarantined drift get a signed
//     EBMS:0004 with HTTP 200: permanent, the same bytes would be refused
//     again (see replies.Failed).
//
// Every eb:Error names an incident reference (exchange.NewIncident) that the
// log line and the audit record of the refusal carry with the detail; the
// partner gets our reason, never a parser's or crypto package's error text.
//
// Choices, with their reasons:
//
//   - Unknown sender party: EBMS:0010 ProcessingModeMismatch. In ebMS 3 the
//     P-Mode names the initiator party, so a From party we have no agreement
//     with has, by definition, no P-Mode (ebMS 3 Core §6.7.1: the header is
//     not compatible with any P-Mode of the MSH). EBMS:0101 would claim a
//     signature check we never made; EBMS:0003 describes values inconsistent
//     with each other, which these are not.
//   - Handler failure: EBMS:0004 Other, as phase4 answers a failing message
//     processor. EBMS:0202 DeliveryFailure belongs to the reliability module
//     of the sending MSH (ebMS 3 Core §6.7.3: assurance of delivery could not
//     be obtained in spite of resending efforts); it would tell the partner
//     that resending already failed, the opposite of "retransmit".
//   - HTTP status: an eb:Error signal is an ordinary SOAP message, not a
//     SOAP fault, so permanent errors (bad signature, P-Mode mismatch, ...)
//     are answered 200 like phase4 does, and retransmitting them is useless.
//     A handler failure is transient: it is answered 500 with a SOAP 1.2
//     env:Receiver fault in the signed body next to the eb:Error (SOAP 1.2
//     Part 2 §7.5.2.2 pairs 500 with a fault), which makes phase4, Domibus
//     and Holodeck senders retry.
//   - Decryption failures are reported without their cause (the cause goes
//     to the log), so that the answer is no decryption oracle.
//   - Receipts carry no wsu:Timestamp: a duplicate is answered with the
//     stored receipt byte for byte, and an expiring timestamp would make a
//     late replay unverifiable.
//   - ebMS test messages (§5.2.2.9) are acknowledged with a signed receipt
//     but never reach the pipeline or the business handler.
package endpoint

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"mime"
	"net/http"
	"net/netip"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/beevik/etree"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/internal/bufpipe"
	"github.com/edigateway/gateway/internal/limits"
	"github.com/edigateway/gateway/internal/peppol"
	"github.com/edigateway/gateway/internal/readahead"
	"github.com/edigateway/gateway/internal/trust"
	"github.com/edigateway/gateway/internal/wssec"
	"github.com/edigateway/gateway/internal/xmlenc"
	"github.com/edigateway/gateway/partners"
)

// Header names under which the endpoint passes ebMS values to the business
// handler in exchange.Message.Headers (canonical MIME header keys).
const (
	HeaderService        = "Service"
	HeaderServiceType    = "Service-Type"
	HeaderAction         = "Action"
	HeaderConversationID = "Conversation-Id"
	HeaderAgreementRef   = "Agreement-Ref"
	HeaderPMode          = "Pmode"
	HeaderFromPartyID    = "From-Party-Id"
	HeaderFromPartyType  = "From-Party-Type"
	HeaderToPartyID      = "To-Party-Id"
	HeaderToPartyType    = "To-Party-Type"
	HeaderRefToMessageID = "Ref-To-Message-Id"
	HeaderTimestamp      = "Message-Timestamp"
	// HeaderMessageProperty holds one "name=value" entry per
	// eb:MessageProperties/eb:Property, in order.
	HeaderMessageProperty = "Message-Property"
)

// SOAPContentType is the Content-Type of every signal the endpoint sends.
const SOAPContentType = "application/soap+xml; charset=UTF-8"

// Config configures an Endpoint.
type Config struct {
	// Partners is the partner directory. Messages are accepted only from
	// partners with an as4 section, signed by one of their certificates.
	Partners *partners.Directory
	// Keys are our certificate/key pairs. Keys[0] signs receipts and error
	// signals when it can: a crypto.Signer (RSA, ECDSA or Ed25519) whose
	// certificate's key usage allows signatures; otherwise the first key
	// that can (New fails when none can). Every key is tried for
	// decryption whose certificate's key usage allows it (keyEncipherment
	// for RSA-OAEP key transport, keyAgreement for X25519 (*ecdh.PrivateKey,
	// eDelivery AS4 2.0) and brainpoolP256r1 ECDH-ES (BDEW); a certificate
	// without the extension allows both); list old and new keys during a
	// rollover.
	Keys []KeyPair
	// Pipeline runs verified messages: dedup, handler, audit, reply.
	Pipeline *exchange.Pipeline
	// PartyID and PartyType are our own eb:To identity. A partner P-Mode
	// without to_party_id then only matches messages addressed to it.
	// Empty: eb:To is only checked by P-Modes that name a to_party_id.
	PartyID, PartyType string
	// Identities are our further parties, each with its own keys (see
	// Identity); PartyID, PartyType and Keys are the first. A P-Mode
	// without to_party_id matches messages addressed to any of them.
	Identities []Identity
	// Limits bound the request. MaxMessageSize is the body limit: a longer
	// body is answered 413. Zero fields take the as4 package defaults.
	Limits as4.Limits
	// MaxPayloadSize bounds each payload after decompression (default
	// as4.DefaultMaxMessageSize); beyond it the message fails with EBMS:0303.
	MaxPayloadSize int64
	// MaxCompressionRatio bounds decompressed ÷ compressed bytes of each
	// payload and of all together once the output passes 1 MiB (default
	// limits.DefaultMaxCompressionRatio; negative: no ratio cap). Beyond it
	// the message fails with EBMS:0303.
	MaxCompressionRatio float64
	// SpoolDir and SpoolThreshold: payloads larger than the threshold wait
	// for the handler in a temporary file in SpoolDir (defaults: the system
	// temporary directory, exchange.DefaultSpoolThreshold).
	SpoolDir       string
	SpoolThreshold int64
	// AllowedAlgorithms, when set, lists every encryption algorithm URI a
	// message may use (see xmlenc.Options.AllowedAlgorithms). AES-CBC
	// content encryption is refused with EBMS:0103 before anything is
	// decrypted unless it is listed here: a CBC padding check that fails
	// (EBMS:0102) or passes (EBMS:0101 digest mismatch) would make the
	// endpoint a padding oracle on captured messages. The AS4 profiles
	// prescribe AES-GCM.
	AllowedAlgorithms []string
	// Host is the domain part of the eb:MessageId of our signals (default
	// "gateway").
	Host string
	// Now is the clock for wsu:Timestamp checks, signal time stamps and
	// Message.Received (default time.Now). Tests pin it for recorded vectors.
	Now func() time.Time
	// Log receives one line per message the pipeline does not see (rejected
	// before it, or an ebMS test message); the pipeline logs the others.
	Log *slog.Logger
	// Trust checks the signers of trust: ca partners (chain, name,
	// revocation, with its cache); nil means a checker with defaults.
	Trust *trust.Checker
	// Peppol, when set, is the receiving Peppol access point: a sender
	// without a partner file whose eb:From PartyId has the Peppol AP type
	// is accepted if its signing certificate (a BinarySecurityToken) chains
	// to the AP CA, has that PartyId as CN, is not revoked, and the SBDH
	// agrees with the ebMS header (see package peppol).
	Peppol *peppol.AP
	// ClientCertHeader names the header in which a TLS-terminating proxy
	// forwards the verified client certificate; it is read only from
	// TrustedProxies. A partner with tls_certificates must present one of
	// them (directly over TLS or through the proxy), else EBMS:0101.
	ClientCertHeader string
	TrustedProxies   []netip.Prefix
}

// maxKeyOperationsPerMessage bounds the private-key operations (RSA unwraps,
// X25519 agreements) an unauthenticated message may cause, per configured key.
const maxKeyOperationsPerMessage = 8

// Endpoint is the AS4 receiving endpoint, an http.Handler.
type Endpoint struct {
	cfg Config
	// ids are our identities: ids[0] from PartyID, PartyType and Keys.
	ids   []*ownIdentity
	log   *slog.Logger
	trust *trust.Checker
}

// New checks cfg and returns the endpoint.
func New(cfg Config) (*Endpoint, error) {
	if cfg.Partners == nil {
		return nil, errors.New("as4 endpoint: no partner directory")
	}
	if cfg.Pipeline == nil {
		return nil, errors.New("as4 endpoint: no pipeline")
	}
	if len(cfg.Keys) == 0 || cfg.Keys[0].Cert == nil {
		return nil, errors.New("as4 endpoint: no key to sign receipts (Keys[0])")
	}
	first, err := newIdentity(Identity{PartyID: cfg.PartyID, PartyType: cfg.PartyType, Keys: cfg.Keys}, "identity")
	if err != nil {
		return nil, err
	}
	ids := []*ownIdentity{first}
	for i, id := range cfg.Identities {
		if id.PartyID == "" {
			return nil, fmt.Errorf("as4 endpoint: Identities[%d]: no PartyID", i)
		}
		for _, o := range ids {
			if o.PartyID == id.PartyID && o.PartyType == id.PartyType {
				return nil, fmt.Errorf("as4 endpoint: Identities[%d]: party %q (type %q) is used twice", i, id.PartyID, id.PartyType)
			}
		}
		oi, err := newIdentity(id, fmt.Sprintf("Identities[%d]", i))
		if err != nil {
			return nil, err
		}
		ids = append(ids, oi)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Host == "" {
		cfg.Host = "gateway"
	}
	if cfg.MaxPayloadSize <= 0 {
		cfg.MaxPayloadSize = as4.DefaultMaxMessageSize
	}
	switch {
	case cfg.MaxCompressionRatio == 0:
		cfg.MaxCompressionRatio = limits.DefaultMaxCompressionRatio
	case cfg.MaxCompressionRatio < 0:
		cfg.MaxCompressionRatio = 0
	}
	if cfg.Limits.MaxMessageSize <= 0 {
		cfg.Limits.MaxMessageSize = as4.DefaultMaxMessageSize
	}
	if cfg.Limits.SpoolDir == "" {
		cfg.Limits.SpoolDir = cfg.SpoolDir // attachments as they arrive
	}
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	tc := cfg.Trust
	if tc == nil {
		tc = &trust.Checker{Log: log, Now: cfg.Now}
	}
	return &Endpoint{cfg: cfg, ids: ids, log: log, trust: tc}, nil
}

// trace is what the endpoint logs and audits about one request.
type trace struct {
	partner, messageID string
	// key is the transport key, once the sender's party is known.
	key      dedup.Key
	err      *as4.Error
	incident string
	pipeline bool
	test     bool
	// unavailable: answered 503 because the signer's revocation status
	// could not be had right now (trustUnavailable); audited "unavailable".
	unavailable bool
	// id is the identity of ours that signs the answer.
	id   *ownIdentity
	bdew bool // the partner follows the BDEW AS4 profile
	// clientCert is the TLS client certificate (ours or forwarded by a
	// trusted proxy); clientCertErr an unreadable forwarded one.
	clientCert    *x509.Certificate
	clientCertErr error
	// readFailed answers a failure to read the body (the rest of a message
	// whose attachment was decrypted while it arrived, see receive), with
	// large > 0 for an over-limit body; large is its outcome.
	readFailed func(err error) (reply exchange.Reply, large int64)
	large      int64
	// afterReply removes the exchange's spool files once the reply is
	// sent (removing a file of a GiB takes tens of milliseconds that the
	// partner need not wait for).
	afterReply []func()
}

// cleanUp runs the afterReply steps, the last registered first.
func (tr *trace) cleanUp() {
	for i := len(tr.afterReply) - 1; i >= 0; i-- {
		tr.afterReply[i]()
	}
	tr.afterReply = nil
}

// ServeHTTP implements http.Handler.
func (e *Endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "AS4 messages are POSTed", http.StatusMethodNotAllowed)
		return
	}
	// Before the partner is known, the largest limit any partner has;
	// once the envelope names the partner, its own (see receive).
	limit := e.cfg.Partners.MaxBodyLimit(e.cfg.Limits.MaxMessageSize)
	if r.ContentLength > limit {
		e.tooLarge(w, r, start, limit)
		return
	}
	body := &countingReader{r: r.Body}
	var tr trace
	defer tr.cleanUp()
	var ignored string
	tr.clientCert, ignored, tr.clientCertErr = e.clientCertificate(r)
	if ignored != "" {
		e.log.Warn("as4 client certificate header ignored: not from a trusted proxy", "protocol", string(exchange.AS4), "remote", ignored, "header", e.cfg.ClientCertHeader)
	}
	if errors.Is(tr.clientCertErr, errTwoClientCerts) {
		// Whichever certificate the proxy verified, the other one may be
		// the client's own claim: refused for every partner, before the
		// body is read.
		incident := exchange.NewIncident()
		e.log.Warn("as4 message rejected", "partner", "", "protocol", string(exchange.AS4), "message_id", "",
			"status", http.StatusBadRequest, "incident", incident, "header", e.cfg.ClientCertHeader,
			"err", tr.clientCertErr.Error(), "duration_ms", time.Since(start).Milliseconds())
		w.Header().Set("Connection", "close")
		http.Error(w, fmt.Sprintf("the %s header appears more than once; the proxy must forward exactly one client certificate (%s)",
			e.cfg.ClientCertHeader, exchange.IncidentNote(incident)), http.StatusBadRequest)
		return
	}
	reply, large := e.receive(r.Context(), r.Header.Get("Content-Type"), body, limit, &tr)
	if large > 0 {
		if st := limits.Status(body.err); st != 0 && st != http.StatusRequestEntityTooLarge {
			// Memory budget (503) or too slow a body (408): logged by limits.
			limits.Refuse(w, body.err)
			return
		}
		e.tooLarge(w, r, start, large)
		return
	}
	reply.Write(w)
	// The reply is on its way before the spool files are removed.
	http.NewResponseController(w).Flush()
	tr.cleanUp()
	if tr.pipeline {
		return // the pipeline logged the message
	}
	attrs := []any{"partner", tr.partner, "protocol", string(exchange.AS4), "message_id", tr.messageID,
		"status", statusOf(reply), "disposition", reply.Disposition, "duration_ms", time.Since(start).Milliseconds()}
	if tr.incident != "" {
		attrs = append(attrs, "incident", tr.incident)
	}
	switch {
	case tr.err != nil:
		attrs = append(attrs, "error_code", tr.err.Code, "detail", tr.err.Detail)
		if tr.err.Err != nil {
			attrs = append(attrs, "err", tr.err.Err.Error())
		}
		if tr.unavailable {
			e.log.Warn("as4 message not processed: the signer's revocation status is unavailable; the sender is asked to retry",
				append(attrs, "decision", "unavailable")...)
		} else {
			e.log.Warn("as4 message rejected", attrs...)
		}
		e.auditRejected(r.Context(), &tr, reply)
	case tr.test:
		e.log.Info("as4 test message acknowledged", attrs...)
	default:
		e.log.Error("as4 reply failed", attrs...)
	}
}

// auditRejected records a message refused before the pipeline, with the
// detail the partner was not told and the incident it was.
func (e *Endpoint) auditRejected(ctx context.Context, tr *trace, reply exchange.Reply) {
	sink := e.cfg.Pipeline.Audit
	if sink == nil {
		return
	}
	detail := tr.err.Detail
	if tr.err.Err != nil {
		detail += ": " + tr.err.Err.Error()
	}
	decision := "rejected"
	if tr.unavailable {
		decision = "unavailable"
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err := sink.Write(actx, audit.Record{Time: e.cfg.Now().UTC(), Step: audit.StepReply, Partner: tr.partner,
		Protocol: string(exchange.AS4), MessageID: dedup.NormalizeMessageID(tr.messageID), Key: string(tr.key),
		Decision: decision, Disposition: reply.Disposition, Error: truncate(detail), Incident: tr.incident})
	if err != nil {
		e.log.Error("audit write failed", "partner", tr.partner, "protocol", string(exchange.AS4), "message_id", tr.messageID, "err", err)
	}
}

func statusOf(r exchange.Reply) int {
	if r.Status == 0 {
		return http.StatusOK
	}
	return r.Status
}

func (e *Endpoint) tooLarge(w http.ResponseWriter, r *http.Request, start time.Time, limit int64) {
	e.log.Warn("as4 message rejected", "partner", "", "protocol", string(exchange.AS4), "message_id", "",
		"status", http.StatusRequestEntityTooLarge, "content_length", r.ContentLength,
		"limit", limit, "duration_ms", time.Since(start).Milliseconds())
	w.Header().Set("Connection", "close")
	http.Error(w, fmt.Sprintf("message larger than %d bytes", limit), http.StatusRequestEntityTooLarge)
}

// countingReader counts the bytes read from the request body, so that a
// size-limit failure can be told apart from other limits, and keeps the
// first read error (a limits refusal: budget, rate, size).
type countingReader struct {
	r   io.Reader
	n   int64
	err error
}

func (c *countingReader) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	c.n += int64(k)
	if err != nil && err != io.EOF && c.err == nil {
		c.err = err
	}
	return k, err
}

// receive processes one request body and returns the reply; large, when
// positive, reports a body over that size limit.
func (e *Endpoint) receive(ctx context.Context, contentType string, body *countingReader, limit int64, tr *trace) (reply exchange.Reply, large int64) {
	defer func() {
		// Parsers of partner bytes return errors; this is the last line of
		// defence, so that a bug answers an error signal instead of
		// dropping the connection.
		if p := recover(); p != nil {
			e.log.Error("as4 endpoint panic", "partner", tr.partner, "protocol", string(exchange.AS4), "message_id", tr.messageID, "panic", fmt.Sprint(p))
			reply = e.reject(tr, as4.Other("internal error while processing the message", fmt.Errorf("panic: %v", p)), "")
			large = 0
		}
	}()
	lim := e.cfg.Limits
	lim.MaxMessageSize = limit
	// The envelope's parsed tree is charged to the request's memory
	// budget: it costs up to 73 times the envelope's bytes.
	rsv := limits.ReservationFrom(ctx)
	lim.ReserveXML, lim.ReleaseXML = rsv.Grow, rsv.Shrink
	var unknownSender *as4.Envelope
	// The one attachment the header names as the payload is decrypted
	// (and inflated) while it arrives: ReadMessage returns as it begins,
	// and process waits for the rest of the body (Envelope.Rest) once the
	// decryption has run, before anything else of the message is used.
	var payloadCID string
	lim.StreamAttachment = func(_ *as4.Envelope, cid string) bool { return payloadCID != "" && payloadCID == cid }
	lim.AfterEnvelope = func(env *as4.Envelope) (int64, error) {
		// The unverified eb:From names the partner whose size limit
		// applies from here on; the attachments follow the envelope (and
		// StreamAttachment is asked only after it).
		limit = e.cfg.Limits.MaxMessageSize
		um := unverifiedUserMessage(env)
		payloadCID = onlyAttachmentPayload(um)
		p, unknown := e.unverifiedPartner(um)
		if unknown {
			// No agreement with the sender: process refuses it
			// (EBMS:0010) without its attachments being read.
			unknownSender = env
			return 0, errUnknownSender
		}
		if p != nil {
			limit = partners.BodyLimit(p, limit)
			// From here on the request counts against the share of the
			// partner it names (not yet authenticated), as an AS2
			// request does from its AS2-From.
			if err := rsv.Claim(p.ID); err != nil {
				return 0, fmt.Errorf("as4: the memory budget's share of partner %s: %w", p.ID, err)
			}
		}
		return limit, nil
	}
	tr.readFailed = func(err error) (exchange.Reply, int64) {
		if errors.Is(err, as4.ErrMessageLimit) || body.n > limit || limits.Status(body.err) != 0 {
			return exchange.Reply{}, limit
		}
		if errors.Is(err, limits.ErrSpool) {
			tr.err = as4.Other("an attachment could not be spooled", err)
			return retryLater("the message could not be stored temporarily"), 0
		}
		if errors.Is(err, limits.ErrBusy) {
			// The envelope's parsed tree did not fit the memory budget
			// (or its sender's share of it) now.
			e.log.Warn("as4 message not processed: memory budget exhausted while parsing the envelope", "err", err)
			tr.err = as4.Other("memory budget exhausted", err)
			return retryLater("the gateway is busy with other messages"), 0
		}
		return e.reject(tr, as4.AsError(err), ""), 0
	}
	env, err := as4.ReadMessage(contentType, body, lim)
	if errors.Is(err, errUnknownSender) {
		env, err = unknownSender, nil
	}
	// The whole body is read before the reply (net/http would otherwise
	// discard what is left of it while an attachment is still being read);
	// its spool files are removed after it.
	defer env.Rest()
	tr.afterReply = append(tr.afterReply, func() {
		if err := env.Close(); err != nil {
			e.log.Warn("as4 spool cleanup failed", "partner", tr.partner, "message_id", tr.messageID, "err", err)
		}
	})
	if err != nil {
		return tr.readFailed(err)
	}
	if env.Arriving() {
		arrivingAttachments.Add(1)
	}
	reply = e.process(ctx, env, tr)
	if tr.large > 0 {
		return exchange.Reply{}, tr.large
	}
	return reply, 0
}

// onlyAttachmentPayload is the bare Content-ID of the attachment that the
// unverified header of env names as its only payload, or "".
func onlyAttachmentPayload(um *as4.UserMessage) string {
	if um == nil || len(um.PayloadInfo) != 1 {
		return ""
	}
	// As as4.ResolvePayloads matches it to a part.
	href := um.PayloadInfo[0].Href
	if !strings.HasPrefix(strings.ToLower(href), "cid:") {
		return ""
	}
	cid, err := url.PathUnescape(href[4:])
	if err != nil {
		return ""
	}
	return cid
}

// restOfBody waits for the rest of a message whose attachment arrived
// while it was decrypted; a failure is the answer (tr.large set for an
// over-limit body), whatever the decryption made of what had arrived.
func (e *Endpoint) restOfBody(env *as4.Envelope, tr *trace) (exchange.Reply, bool) {
	if err := env.Rest(); err != nil {
		reply, large := tr.readFailed(err)
		tr.large = large
		return reply, false
	}
	return exchange.Reply{}, true
}

// errUnknownSender stops reading a message whose unverified eb:From names
// no partner: it costs no more than its envelope.
var errUnknownSender = errors.New("as4: eb:From names no trading partner")

// unverifiedUserMessage is the user message of env's unverified header, nil
// when there is none or it does not parse (refused later with its own
// error).
func unverifiedUserMessage(env *as4.Envelope) *as4.UserMessage {
	mel, err := env.Messaging()
	if err != nil {
		return nil
	}
	m, err := as4.ParseMessaging(mel)
	if err != nil {
		return nil
	}
	return m.UserMessage
}

// unverifiedPartner is the partner the unverified eb:From of um names (nil
// for a Peppol access point without a partner file, or without a user
// message); unknown reports a user message whose eb:From names no partner,
// which process refuses with EBMS:0010 whatever follows the envelope.
func (e *Endpoint) unverifiedPartner(um *as4.UserMessage) (p *partners.Partner, unknown bool) {
	if um == nil {
		return nil, false
	}
	if p, _, ok := e.partnerFor(um.From); ok {
		return p, false
	}
	if _, _, ok := e.peppolPartner(um.From); ok {
		return nil, false
	}
	return nil, true
}

// retryLater answers 503 with Retry-After: our side could not keep the
// message (spool), the partner should send it again.
func retryLater(reason string) exchange.Reply {
	return exchange.Reply{Status: http.StatusServiceUnavailable, Disposition: "http-503",
		Header: http.Header{"Retry-After": {fmt.Sprint(int(limits.DefaultRetryAfter / time.Second))}, "Content-Type": {"text/plain; charset=utf-8"}},
		Body:   []byte(reason + "; retry later\n")}
}

// process runs the steps after reading: partner, decryption, signature,
// P-Mode, payloads, pipeline. Each step that refuses the message returns
// the reply to send and false.
func (e *Endpoint) process(ctx context.Context, env *as4.Envelope, tr *trace) exchange.Reply {
	rc := &as4Receipt{e: e, ctx: ctx, env: env, tr: tr}
	if reply, ok := rc.readUnverifiedHeader(); !ok {
		return reply
	}
	if reply, ok := rc.findPartner(); !ok {
		return reply
	}
	if ae := e.refuseCBC(env.Doc); ae != nil {
		return e.reject(tr, ae, rc.msgID)
	}
	rc.prepareSpools()
	defer rc.early.wait()
	// Decrypt first: AS4 senders sign, then encrypt, so the signature
	// covers the plaintext (still compressed) attachments.
	if reply, ok := rc.decryptAttachments(); !ok {
		return reply
	}
	if reply, ok := rc.verifySignature(); !ok {
		return reply
	}
	if reply, ok := rc.checkVerifiedHeader(); !ok {
		return reply
	}
	if reply, ok := rc.readPayloads(); !ok {
		return reply
	}
	if rc.um.IsTest() {
		return rc.replyToTestMessage()
	}
	return rc.runPipeline()
}

// as4Receipt is the state of one AS4 message while process's steps run.
type as4Receipt struct {
	e   *Endpoint
	ctx context.Context
	env *as4.Envelope
	tr  *trace
	// unverified is the user message as read before the signature is
	// verified; msgID its eb:MessageId.
	unverified *as4.UserMessage
	msgID      string
	partner    *partners.Partner
	pa         *partners.AS4
	from       as4.PartyID
	isPeppol   bool
	// allowed are the encryption algorithms accepted from this partner.
	allowed []string
	// spool holds the payloads; plain the decrypted attachments; early
	// the attachment inflated while it is decrypted.
	spool *exchange.Spool
	plain []*limits.Spooled
	early *earlyInflation
	// digests are the signature's digests of each decrypted attachment,
	// by Content-ID, computed on its way to the spool.
	digests  map[string]map[wssec.DigestKey][]byte
	dec      *xmlenc.Result
	res      *wssec.Result
	um       *as4.UserMessage
	pm       *as4.PMode
	payloads []exchange.Payload
	ptx      *peppol.Transaction
}

// readUnverifiedHeader reads the eb:Messaging header before the signature
// is verified: it names the message and the partner whose certificates
// must verify it.
func (rc *as4Receipt) readUnverifiedHeader() (exchange.Reply, bool) {
	e, env, tr := rc.e, rc.env, rc.tr
	mel, err := env.Messaging()
	if err != nil {
		return e.reject(tr, as4.AsError(err), ""), false
	}
	// Unverified: used only to pick the partner whose certificates must
	// verify the signature, and to name the message in an error.
	unverified, err := as4.ParseMessaging(mel)
	if err != nil {
		return e.reject(tr, as4.AsError(err), ""), false
	}
	if unverified.UserMessage == nil {
		return e.reject(tr, as4.FeatureNotSupportedInconsistency(
			"this endpoint accepts user messages only; signal messages (receipts, errors, pull requests) are not processed here", nil), ""), false
	}
	rc.unverified = unverified.UserMessage
	rc.msgID = rc.unverified.MessageInfo.MessageID
	tr.messageID = rc.msgID
	// Unverified too: which of our identities signs the error signals
	// until the signature is verified, and whose keys decrypt first.
	tr.id = e.identityFor(rc.unverified.To)
	if err := checkMustUnderstand(env); err != nil {
		return e.reject(tr, err, rc.msgID), false
	}
	return exchange.Reply{}, true
}

// findPartner finds the agreement (or Peppol access point) the unverified
// eb:From names, and refuses a message no agreement covers.
func (rc *as4Receipt) findPartner() (exchange.Reply, bool) {
	e, tr := rc.e, rc.tr
	partner, from, ok := e.partnerFor(rc.unverified.From)
	isPeppol := false
	if !ok {
		partner, from, ok = e.peppolPartner(rc.unverified.From)
		isPeppol = ok
	}
	if !ok {
		return e.reject(tr, as4.ProcessingModeMismatch(
			fmt.Sprintf("no trading partner agreement for eb:From PartyId %s", partyList(rc.unverified.From)), nil), rc.msgID), false
	}
	rc.partner, rc.from, rc.isPeppol = partner, from, isPeppol
	tr.partner = partner.ID
	tr.key = dedup.TransportKey(string(exchange.AS4), from.Type, from.Value, rc.msgID)
	rc.pa = partner.AS4
	tr.bdew = rc.pa.IsBDEW()
	rc.allowed = e.cfg.AllowedAlgorithms
	if tr.bdew {
		if _, err := e.signingKeyFor(tr.id, true); err != nil {
			// Our configuration, not the message: the sender retries.
			return e.internalError(tr, err), false
		}
		rc.allowed = BDEWEncryptionAlgorithms
	}
	return exchange.Reply{}, true
}

// prepareSpools sets up the spools of the payloads and of the decrypted
// attachments, both removed after the reply.
func (rc *as4Receipt) prepareSpools() {
	e, partner, msgID := rc.e, rc.partner, rc.msgID
	// The payloads' spool, removed after the reply; the attachment
	// inflated while it is decrypted (earlyInflation) goes there too, and
	// is waited for before process returns.
	spool := &exchange.Spool{Dir: e.cfg.SpoolDir, Threshold: e.cfg.SpoolThreshold}
	rc.spool = spool
	rc.tr.afterReply = append(rc.tr.afterReply, func() {
		if err := spool.Cleanup(); err != nil {
			e.log.Warn("as4 spool cleanup failed", "partner", partner.ID, "message_id", msgID, "err", err)
		}
	})
	rc.early = planEarlyInflation(rc.env, rc.unverified)
	// Decrypted attachments go to spool files (the GCM tag is checked at
	// the end of each; a failed message keeps nothing), removed when the
	// exchange ends (after the reply).
	rc.tr.afterReply = append(rc.tr.afterReply, func() {
		for _, f := range rc.plain {
			if err := f.Remove(); err != nil {
				e.log.Warn("as4 spool cleanup failed", "partner", partner.ID, "message_id", msgID, "err", err)
			}
		}
	})
}

// decryptAttachments decrypts the envelope and its attachments to spool
// files, waits for the rest of the body, and refuses a message the
// agreement requires to be encrypted that is not.
func (rc *as4Receipt) decryptAttachments() (exchange.Reply, bool) {
	e, env, tr, pa, msgID := rc.e, rc.env, rc.tr, rc.pa, rc.msgID
	atts := make([]xmlenc.Attachment, len(env.Attachments))
	for i, p := range env.Attachments {
		atts[i] = xmlenc.Attachment{ContentID: p.ContentID, Header: p.Header, Body: p.Body, Open: p.Content}
	}
	rc.digests = map[string]map[wssec.DigestKey][]byte{}
	keys := e.decryptionKeys(tr.id)
	dec, err := xmlenc.Decrypt(env.Doc, atts, keys, xmlenc.Options{
		Store:                       rc.storeDecryptedAttachment(attachmentDigests(env.Doc)),
		AllowedAlgorithms:           rc.allowed,
		RequireEncryptedAttachments: pa.RequireEncryption,
		// Senders that wrap the key once per attachment use one private-key
		// operation per EncryptedKey; allow a few, not an unbounded number
		// from an unauthenticated request.
		MaxPrivateKeyOperations: maxKeyOperationsPerMessage * max(1, len(keys)),
	})
	if reply, ok := e.restOfBody(env, tr); !ok {
		return reply, false
	}
	if errors.Is(err, limits.ErrSpool) {
		tr.err = as4.Other("a decrypted attachment could not be spooled", err)
		return retryLater("the message could not be stored temporarily"), false
	}
	if err != nil {
		return e.reject(tr, decryptError(err), msgID), false
	}
	if pa.RequireEncryption && len(dec.Parts) == 0 {
		return e.reject(tr, as4.PolicyNoncompliance("the agreement with this partner requires encrypted messages; this one is not encrypted", nil), msgID), false
	}
	if tr.bdew {
		if ae := checkBDEWKeyReference(dec.Keys); ae != nil {
			return e.reject(tr, ae, msgID), false
		}
	}
	rc.dec = dec
	return exchange.Reply{}, true
}

// storeDecryptedAttachment is xmlenc's Store: each decrypted attachment
// goes to a spool file, digested on its way as the signature asks (wanted,
// known from the envelope) so that it is not read again for the signature
// check, and inflated early when it is the one planned for that.
func (rc *as4Receipt) storeDecryptedAttachment(wanted map[string][]wssec.DigestKey) func(xmlenc.Attachment, io.Reader) (func() (io.ReadCloser, error), error) {
	e, early := rc.e, rc.early
	return func(a xmlenc.Attachment, r io.Reader) (func() (io.ReadCloser, error), error) {
		cid := strings.TrimSpace(a.ContentID)
		cid = strings.TrimSuffix(strings.TrimPrefix(cid, "<"), ">")
		var ws []io.Writer
		var keys []wssec.DigestKey
		var sums []func() ([]byte, error)
		for _, k := range wanted[cid] {
			w, sum, err := wssec.AttachmentDigester(a.Header, k, wssec.Limits{})
			if err != nil {
				continue // Verify reports it
			}
			ws, keys, sums = append(ws, w), append(keys, k), append(sums, sum)
		}
		if len(ws) > 0 {
			r = io.TeeReader(r, io.MultiWriter(ws...))
		}
		r, end := early.tee(cid, r, func(src io.Reader) storedPayload {
			return e.storePayload(rc.ctx, rc.spool, src, early.props, 0, 0)
		})
		f, err := limits.SpoolSmall(r, e.cfg.SpoolDir, 0, limits.SmallInMemory)
		end(err)
		if err != nil {
			return nil, err
		}
		rc.plain = append(rc.plain, f)
		if len(sums) > 0 {
			d := map[wssec.DigestKey][]byte{}
			for i, k := range keys {
				d[k], _ = sums[i]() // nil: could not be digested
			}
			rc.digests[cid] = d
		}
		return func() (io.ReadCloser, error) { return io.NopCloser(f.Reader()), nil }, nil
	}
}

// verifySignature verifies the WS-Security signature over the header and
// the decrypted attachments with the partner's certificates (or its trust
// policy), then the signer's validity and key size.
func (rc *as4Receipt) verifySignature() (exchange.Reply, bool) {
	e, tr, pa, partner, msgID := rc.e, rc.tr, rc.pa, rc.partner, rc.msgID
	watts := make([]wssec.Attachment, len(rc.dec.Attachments))
	for i, a := range rc.dec.Attachments {
		cid := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(a.ContentID), "<"), ">")
		watts[i] = wssec.Attachment{ContentID: a.ContentID, Header: a.Header, Body: a.Body, Open: a.Open, Digests: rc.digests[cid]}
	}
	vopts := wssec.VerifyOptions{
		Trusted:   e.cfg.Partners.AS4Certificates(partner),
		Now:       e.cfg.Now,
		ClockSkew: pa.ClockSkew.Std(),
		// Key size is judged by trust.CheckSigner below, like AS2 does;
		// wssec keeps the floor.
		MinRSABits: trust.WeakRSAFloor,
	}
	var run *trustRun
	pol := e.cfg.Partners.AS4Trust(partner)
	if rc.isPeppol {
		pol, vopts.Trusted = e.cfg.Peppol.Policy, nil
	}
	if pol != nil {
		run = &trustRun{}
		vopts.CheckSigner = e.signerCheck(rc.ctx, pol, &pa.Trust, rc.from, run, rc.isPeppol)
	}
	res, err := wssec.Verify(rc.env.Doc, watts, vopts)
	e.auditTrust(rc.ctx, tr, run)
	if errors.Is(err, trust.ErrUnavailable) {
		return trustUnavailable(tr, err), false
	}
	if err != nil {
		return e.reject(tr, securityError(err), msgID), false
	}
	// The signer's certificate must be valid now and its key long enough
	// (the same check and wording as AS2's authentication-failed).
	if err := trust.CheckSigner(res.Signer, e.cfg.Now(), trust.Policy{AllowWeakKeys: pa.AllowWeakKeys}); err != nil {
		return e.reject(tr, as4.FailedAuthentication(partnerDetail(as4.CodeFailedAuthentication, "the signer's "+err.Error()), err), msgID), false
	}
	if tr.bdew {
		if ae := checkBDEWSignature(res); ae != nil {
			return e.reject(tr, ae, msgID), false
		}
	}
	rc.res = res
	return exchange.Reply{}, true
}

// checkVerifiedHeader reads the signed eb:Messaging header, from here on
// the only one that counts: it must be the one read before, recent enough,
// from the partner's TLS client certificate, and match a P-Mode.
func (rc *as4Receipt) checkVerifiedHeader() (exchange.Reply, bool) {
	e, tr, pa, msgID := rc.e, rc.tr, rc.pa, rc.msgID
	verified, err := as4.ParseMessaging(rc.res.Messaging)
	if err != nil {
		return e.reject(tr, as4.AsError(err), msgID), false
	}
	um := verified.UserMessage
	if um == nil || um.MessageInfo.MessageID != msgID || !hasParty(um.From, rc.from) {
		return e.reject(tr, as4.FailedAuthentication("the signed eb:Messaging header is not the one that was read", nil), msgID), false
	}
	tr.id = e.identityFor(um.To) // the verified eb:To signs from here on
	if ae := checkMessageAge(um, rc.res.Timestamp, e.cfg.Now(), pa); ae != nil {
		return e.reject(tr, ae, msgID), false
	}
	if ae := checkClientCert(tr, e.cfg.Partners.AS4TLSCertificates(rc.partner)); ae != nil {
		return e.reject(tr, ae, msgID), false
	}
	pm, err := as4.Match(e.pmodes(pa), um)
	if err != nil {
		return e.reject(tr, as4.AsError(err), msgID), false
	}
	rc.um, rc.pm = um, pm
	return exchange.Reply{}, true
}

// readPayloads resolves the payloads the header names among the decrypted
// attachments, decompresses and spools them, and checks a Peppol
// business document.
func (rc *as4Receipt) readPayloads() (exchange.Reply, bool) {
	e, env, tr, um, msgID := rc.e, rc.env, rc.tr, rc.um, rc.msgID
	for i := range env.Attachments {
		a := rc.dec.Attachments[i]
		env.Attachments[i] = as4.Part{ContentID: env.Attachments[i].ContentID, Header: a.Header, Body: a.Body, Content: a.Open}
	}
	resolved, err := as4.ResolvePayloads(env, um)
	if err != nil {
		return e.reject(tr, as4.AsError(err), msgID), false
	}
	if tr.bdew {
		if ae := checkBDEWCompression(resolved); ae != nil {
			return e.reject(tr, ae, msgID), false
		}
	}
	payloads, err := e.payloads(rc.ctx, rc.spool, resolved, rc.early)
	if errors.Is(err, limits.ErrBusy) {
		e.log.Warn("as4 message not processed: memory budget exhausted while decompressing", "partner", rc.partner.ID, "message_id", msgID, "err", err)
		tr.err = as4.Other("memory budget exhausted", err)
		return retryLater("the gateway is busy with other messages"), false
	}
	if errors.Is(err, limits.ErrSpool) {
		tr.err = as4.Other("a payload could not be spooled", err)
		return retryLater("the message could not be stored temporarily"), false
	}
	if err != nil {
		return e.reject(tr, as4.AsError(err).WithRef(msgID), msgID), false
	}
	rc.payloads = payloads
	if rc.isPeppol && !um.IsTest() {
		var ae *as4.Error
		if rc.ptx, ae = e.peppolCheck(um, rc.from, payloads); ae != nil {
			return e.reject(tr, ae.WithRef(msgID), msgID), false
		}
	}
	return exchange.Reply{}, true
}

// replyToTestMessage answers a test message (the AS4 test service) with a
// receipt; it does not reach the pipeline.
func (rc *as4Receipt) replyToTestMessage() exchange.Reply {
	tr := rc.tr
	tr.test = true
	reply, err := rc.e.receiptReply(rc.um, receiptReferences(rc.res.References), tr.id, tr.bdew)
	if err != nil {
		return rc.e.internalError(tr, err)
	}
	return reply
}

// runPipeline hands the verified message to the exchange pipeline, whose
// reply is the receipt or error signal; a Peppol transaction is recorded
// for reporting once receipted.
func (rc *as4Receipt) runPipeline() exchange.Reply {
	e, tr, um, partner := rc.e, rc.tr, rc.um, rc.partner
	msg := &exchange.Message{
		Partner:      partner.ID,
		Protocol:     exchange.AS4,
		MessageID:    dedup.NormalizeMessageID(rc.msgID),
		Received:     e.cfg.Now(),
		Headers:      headers(um, rc.pm),
		Payloads:     rc.payloads,
		TransportKey: tr.key,
	}
	tr.pipeline = true
	reply := e.cfg.Pipeline.Process(rc.ctx, exchange.Inbound{
		Message: msg,
		Replies: &replies{e: e, um: um, refs: receiptReferences(rc.res.References), id: tr.id, bdew: tr.bdew},
		Window:  rc.pa.DedupWindow.Std(),
		OnDrift: exchange.DriftPolicyOf(partner.OnDrift),
	})
	if rc.ptx != nil && reply.Status == http.StatusOK && reply.Disposition == "receipt" {
		// A retransmission answered from the stored receipt is recorded
		// again; reports count each eb:MessageId once.
		if err := e.cfg.Peppol.Record(rc.ptx); err != nil {
			e.log.Error("peppol transaction not recorded for reporting", "partner", partner.ID, "message_id", rc.msgID, "err", err)
		}
	}
	return reply
}

// attachmentDigests lists, by Content-ID, the digests the signature of doc
// asks of each attachment (SwA transform and digest method of its cid:
// references); empty when the signature cannot be read yet (Verify will
// say why).
func attachmentDigests(doc *etree.Document) map[string][]wssec.DigestKey {
	sig, err := wssec.ParseSignature(doc, wssec.VerifyOptions{AllowSHA1: true})
	if err != nil {
		return nil
	}
	out := map[string][]wssec.DigestKey{}
	for _, r := range sig.References {
		cid, ok := r.ContentID()
		if !ok || len(r.Transforms) != 1 {
			continue
		}
		k := wssec.DigestKey{Transform: r.Transforms[0].Algorithm, DigestMethod: r.DigestMethod}
		if !slices.Contains(out[cid], k) {
			out[cid] = append(out[cid], k)
		}
	}
	return out
}

// cbcAlgorithms are the AES-CBC content encryption algorithms.
var cbcAlgorithms = map[string]bool{xmlenc.AlgAES128CBC: true, xmlenc.AlgAES192CBC: true, xmlenc.AlgAES256CBC: true}

// refuseCBC fails with EBMS:0103 when an xenc:EncryptionMethod of the
// envelope names AES-CBC and the configuration does not list it. It runs
// before decryption, so that the answer never depends on a CBC padding.
func (e *Endpoint) refuseCBC(doc *etree.Document) *as4.Error {
	var found string
	var walk func(el *etree.Element)
	walk = func(el *etree.Element) {
		for _, c := range el.ChildElements() {
			if found != "" {
				return
			}
			if as4.Is(c, xmlenc.NSXEnc, "EncryptionMethod") {
				if alg, _ := as4.Attr(c, "", "Algorithm"); cbcAlgorithms[alg] && !slices.Contains(e.cfg.AllowedAlgorithms, alg) {
					found = alg
					return
				}
			}
			walk(c)
		}
	}
	walk(doc.Root())
	if found == "" {
		return nil
	}
	return as4.PolicyNoncompliance(fmt.Sprintf("content encryption %s is not accepted; use AES-GCM", found), nil)
}

// SOAP roles that address a header block to us.
const (
	roleNext12     = "http://www.w3.org/2003/05/soap-envelope/role/next"
	roleUltimate12 = "http://www.w3.org/2003/05/soap-envelope/role/ultimateReceiver"
	actorNext11    = "http://schemas.xmlsoap.org/soap/actor/next"
)

// checkMustUnderstand applies SOAP's processing model: a header block
// addressed to us and marked mustUnderstand must be one we process
// (eb:Messaging, wsse:Security); anything else fails with EBMS:0008.
func checkMustUnderstand(env *as4.Envelope) *as4.Error {
	h := env.Header()
	if h == nil {
		return nil
	}
	ns := env.SOAPVersion.Namespace()
	roleAttr := "role"
	if env.SOAPVersion == as4.SOAP11 {
		roleAttr = "actor"
	}
	for _, c := range h.ChildElements() {
		mu, _ := as4.Attr(c, ns, "mustUnderstand")
		if mu != "true" && mu != "1" {
			continue
		}
		switch role, _ := as4.Attr(c, ns, roleAttr); role {
		case "", roleNext12, roleUltimate12, actorNext11:
		default:
			continue // addressed to another node
		}
		if as4.Is(c, as4.NSEbMS, "Messaging") || as4.Is(c, wssec.NamespaceWSSE, "Security") {
			continue
		}
		return as4.FeatureNotSupportedInconsistency(
			fmt.Sprintf("SOAP header block {%s}%s is marked mustUnderstand but is not supported", c.NamespaceURI(), c.Tag), nil)
	}
	return nil
}

// partnerFor finds the partner of the first eb:From PartyId that names one.
func (e *Endpoint) partnerFor(from as4.Party) (*partners.Partner, as4.PartyID, bool) {
	for _, pid := range from.PartyIDs {
		if p, ok := e.cfg.Partners.ByAS4(pid.Type, pid.Value); ok && p.AS4 != nil {
			return p, pid, true
		}
	}
	return nil, as4.PartyID{}, false
}

func hasParty(p as4.Party, want as4.PartyID) bool {
	for _, pid := range p.PartyIDs {
		if pid == want {
			return true
		}
	}
	return false
}

func partyList(p as4.Party) string {
	if len(p.PartyIDs) == 0 {
		return "(none)"
	}
	var s []string
	for _, pid := range p.PartyIDs {
		if pid.Type != "" {
			s = append(s, fmt.Sprintf("%q (type %q)", pid.Value, pid.Type))
		} else {
			s = append(s, fmt.Sprintf("%q (no type)", pid.Value))
		}
	}
	return strings.Join(s, ", ")
}

// pmodes turns the partner's P-Modes into as4 P-Modes: the initiator is the
// partner, the responder the P-Mode's to_party_id or else our identity.
func (e *Endpoint) pmodes(pa *partners.AS4) []as4.PMode {
	out := make([]as4.PMode, 0, len(pa.PModes))
	for _, pm := range pa.PModes {
		m := as4.PMode{
			ID: pm.ID, Agreement: pm.Agreement, Service: pm.Service, ServiceType: pm.ServiceType, Action: pm.Action,
			FromPartyID: pa.PartyID, FromPartyType: pa.PartyType,
			ToPartyID: pm.ToPartyID, ToPartyType: pm.ToPartyType,
		}
		if m.ToPartyID == "" && m.ToPartyType == "" {
			// Addressed to any of our identities: one P-Mode each.
			for _, id := range e.ids {
				m.ToPartyID, m.ToPartyType = id.PartyID, id.PartyType
				out = append(out, m)
			}
			continue
		}
		out = append(out, m)
	}
	return out
}

// payloads decompresses every resolved payload as a stream into the
// exchange's spool. The caps on decompressed size and expansion ratio apply
// to each payload and to all of them together; a payload kept in memory
// (up to the spool threshold) grows the request's memory reservation.
func (e *Endpoint) payloads(ctx context.Context, spool *exchange.Spool, resolved []as4.Payload, pre *earlyInflation) ([]exchange.Payload, error) {
	out := make([]exchange.Payload, 0, len(resolved))
	var inflated, compressed int64
	for i, p := range resolved {
		var src io.ReadCloser
		var ct, cid, filename string
		switch {
		case p.Part != nil:
			src, ct, cid = nil, p.Part.ContentType(), p.Part.ContentID
			filename = dispositionFilename(p.Part.Header)
		case p.Element != nil:
			b, err := elementBytes(p.Element)
			if err != nil {
				return nil, as4.Other(fmt.Sprintf("payload %d: SOAP body element could not be serialised", i+1), err)
			}
			src, ct = io.NopCloser(bytes.NewReader(b)), "application/xml"
		default:
			return nil, as4.ExternalPayloadError(fmt.Sprintf("payload %d resolves to nothing", i+1), nil)
		}
		props := p.PartInfo.PropertyMap()
		zipped := props[as4.PropCompressionType] != ""
		var st storedPayload
		if r, ok := pre.result(p, props, len(resolved)); ok {
			// Inflated while it was decrypted, under the same caps.
			st = r
		} else {
			if src == nil {
				rc, err := p.Part.Open()
				if err != nil {
					return nil, fmt.Errorf("payload %d: %w: %w", i+1, limits.ErrSpool, err)
				}
				src = rc
			}
			st = e.storePayload(ctx, spool, src, props, inflated, compressed)
			src.Close()
		}
		body, size, sum, err := st.body, st.size, st.sum, st.err
		if errors.Is(err, limits.ErrBusy) {
			return nil, err
		}
		if zipped {
			inflated += size
			compressed += st.compressed
		}
		var ae *as4.Error
		if errors.As(err, &ae) {
			ae.Detail = fmt.Sprintf("payload %s: %s", payloadName(p.PartInfo.Href, i), ae.Detail)
			return nil, ae
		}
		if err != nil {
			// Our disk, not the message: the sender should retry.
			return nil, fmt.Errorf("payload %d could not be stored: %w: %w", i+1, limits.ErrSpool, err)
		}
		if p.PartInfo.MimeType != "" {
			ct = p.PartInfo.MimeType
		}
		out = append(out, exchange.NewPayload(exchange.Payload{
			ContentID: cid, ContentType: ct, Filename: filename, Size: size, SHA256: sum, Properties: props,
		}, body))
	}
	return out, nil
}

// storedPayload is one payload as storePayload left it: in the exchange's
// spool, with its size, SHA-256 and compressed size (what was read of a
// compressed source).
type storedPayload struct {
	body       exchange.Body
	size       int64
	sum        string
	compressed int64
	err        error
}

// storePayload inflates src when props say it is compressed and stores it
// in the exchange's spool. The caps on decompressed size and expansion
// ratio apply to it and, with the totals of the payloads before it
// (inflatedBefore, compressedBefore), to all of them together; a payload
// kept in memory (up to the spool threshold) grows the request's memory
// reservation.
func (e *Endpoint) storePayload(ctx context.Context, spool *exchange.Spool, src io.Reader, props map[string]string, inflatedBefore, compressedBefore int64) storedPayload {
	res := limits.ReservationFrom(ctx)
	lim := limits.Inflation{MaxBytes: e.cfg.MaxPayloadSize, MaxRatio: e.cfg.MaxCompressionRatio, SpoolDir: e.cfg.SpoolDir}
	inMemory := e.cfg.SpoolThreshold
	if inMemory <= 0 {
		inMemory = exchange.DefaultSpoolThreshold
	}
	zipped := props[as4.PropCompressionType] != ""
	cr := &countingReader{r: src}
	var reserved int64
	r, err := as4.DecompressReader(cr, props, lim, func(n int64) error {
		if inflatedBefore+n > lim.MaxBytes {
			return fmt.Errorf("payloads inflate beyond %d bytes in total: %w", lim.MaxBytes, limits.ErrTooLarge)
		}
		if err := lim.CheckRatio(inflatedBefore+n, compressedBefore+cr.n); err != nil {
			return fmt.Errorf("payloads in total: %w", err)
		}
		if m := min(n, inMemory); m > reserved {
			if err := res.Grow(m - reserved); err != nil {
				return err
			}
			reserved = m
		}
		return nil
	})
	var st storedPayload
	if err == nil && zipped {
		// The payload is inflated a few buffers ahead in its own
		// goroutine while this one hashes and spools it: two cores.
		ra := readahead.New(r, 4, 256<<10)
		st.body, st.size, st.sum, err = spool.Store(ra)
		ra.Close()
	} else if err == nil {
		st.body, st.size, st.sum, err = spool.Store(r)
	}
	st.compressed, st.err = cr.n, err
	return st
}

// earlyInflation inflates the one compressed, encrypted attachment of a
// message while it is decrypted (two cores instead of decrypting, then
// inflating), into the exchange's spool. It goes by the unverified
// eb:PayloadInfo; its result is used only once the message has been
// decrypted (GCM tag checked), its signature verified and the verified
// eb:PayloadInfo resolves to the same attachment with the same properties
// (result); otherwise the payload is inflated afterwards, as for any other.
type earlyInflation struct {
	cid     string // bare Content-ID
	props   map[string]string
	started bool
	done    chan struct{}
	st      storedPayload
}

// planEarlyInflation picks the attachment to inflate while it is
// decrypted: the unverified header's only payload, a compressed attachment.
func planEarlyInflation(env *as4.Envelope, um *as4.UserMessage) *earlyInflation {
	if um == nil || len(um.PayloadInfo) != 1 {
		return nil
	}
	resolved, err := as4.ResolvePayloads(env, um)
	if err != nil || len(resolved) != 1 || resolved[0].Part == nil {
		return nil
	}
	props := resolved[0].PartInfo.PropertyMap()
	if props[as4.PropCompressionType] == "" {
		return nil
	}
	return &earlyInflation{cid: bareContentID(resolved[0].Part.ContentID), props: props}
}

func bareContentID(cid string) string {
	return strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(cid), "<"), ">")
}

// tee starts the inflation of attachment cid and returns r, which passes
// the decrypted bytes on to it as they are read; end must be called with
// the reading's outcome. For any other attachment it returns r as it is.
func (x *earlyInflation) tee(cid string, r io.Reader, start func(io.Reader) storedPayload) (io.Reader, func(error)) {
	if x == nil || x.started || bareContentID(cid) != x.cid {
		return r, func(error) {}
	}
	x.started = true
	// A buffered pipe: the decryption runs on while the inflation takes
	// the bytes, 256 KiB at a time (io.Pipe would make each wait for the
	// other at every read).
	pr := bufpipe.New(4, 256<<10)
	pw := pr
	x.done = make(chan struct{})
	go func() {
		defer close(x.done)
		x.st = start(pr)
		// The inflation may have stopped early (a cap, broken gzip): the
		// decryption still runs to its end, so that its outcome is known.
		io.Copy(io.Discard, pr)
	}()
	return io.TeeReader(r, pw), func(err error) { pw.CloseWithError(err) }
}

// wait waits for a started inflation to end (before the exchange's spool
// is cleaned up).
func (x *earlyInflation) wait() {
	if x != nil && x.started {
		<-x.done
	}
}

// result is the early inflation of payload p, when it inflated the same
// attachment with the same properties that the verified header gives, and
// p is the message's only payload.
func (x *earlyInflation) result(p as4.Payload, props map[string]string, payloads int) (storedPayload, bool) {
	if x == nil || !x.started || payloads != 1 || p.Part == nil || bareContentID(p.Part.ContentID) != x.cid || !maps.Equal(props, x.props) {
		return storedPayload{}, false
	}
	<-x.done
	earlyInflations.Add(1)
	return x.st, true
}

// earlyInflations counts the payloads inflated while they were decrypted
// and used (tests).
var earlyInflations atomic.Int64

// arrivingAttachments counts the messages whose payload attachment was
// still arriving when processing began (tests).
var arrivingAttachments atomic.Int64

func payloadName(href string, i int) string {
	if href != "" {
		return fmt.Sprintf("%q", href)
	}
	return fmt.Sprintf("%d (SOAP body)", i+1)
}

func dispositionFilename(h textproto.MIMEHeader) string {
	cd := h.Get("Content-Disposition")
	if cd == "" {
		return ""
	}
	_, params, err := mime.ParseMediaType(cd)
	if err != nil {
		return ""
	}
	return params["filename"]
}

// elementBytes serialises a SOAP body payload element as a standalone XML
// document: the namespaces it inherits are declared on the copy.
func elementBytes(el *etree.Element) ([]byte, error) {
	c := el.Copy()
	declared := map[string]bool{}
	for _, a := range c.Attr {
		switch {
		case a.Space == "xmlns":
			declared[a.Key] = true
		case a.Space == "" && a.Key == "xmlns":
			declared[""] = true
		}
	}
	for p := el.Parent(); p != nil; p = p.Parent() {
		for _, a := range p.Attr {
			switch {
			case a.Space == "xmlns" && !declared[a.Key]:
				declared[a.Key] = true
				c.CreateAttr("xmlns:"+a.Key, a.Value)
			case a.Space == "" && a.Key == "xmlns" && !declared[""]:
				declared[""] = true
				c.CreateAttr("xmlns", a.Value)
			}
		}
	}
	doc := etree.NewDocument()
	doc.CreateProcInst("xml", `version="1.0" encoding="UTF-8"`)
	doc.SetRoot(c)
	return doc.WriteToBytes()
}

// headers are the ebMS values the business handler sees.
func headers(um *as4.UserMessage, pm *as4.PMode) textproto.MIMEHeader {
	h := textproto.MIMEHeader{}
	set := func(k, v string) {
		if v != "" {
			h.Set(k, v)
		}
	}
	ci := um.CollaborationInfo
	set(HeaderService, ci.Service.Value)
	set(HeaderServiceType, ci.Service.Type)
	set(HeaderAction, ci.Action)
	set(HeaderConversationID, ci.ConversationID)
	set(HeaderAgreementRef, ci.AgreementRef.Value)
	set(HeaderPMode, pm.ID)
	if len(um.From.PartyIDs) > 0 {
		set(HeaderFromPartyID, um.From.PartyIDs[0].Value)
		set(HeaderFromPartyType, um.From.PartyIDs[0].Type)
	}
	if len(um.To.PartyIDs) > 0 {
		set(HeaderToPartyID, um.To.PartyIDs[0].Value)
		set(HeaderToPartyType, um.To.PartyIDs[0].Type)
	}
	set(HeaderRefToMessageID, um.MessageInfo.RefToMessageID)
	if !um.MessageInfo.Timestamp.IsZero() {
		h.Set(HeaderTimestamp, um.MessageInfo.Timestamp.UTC().Format(time.RFC3339Nano))
	}
	for _, p := range um.MessageProperties {
		h.Add(HeaderMessageProperty, p.Name+"="+p.Value)
	}
	return h
}

// decryptError maps an xmlenc error to an ebMS error. The cause of a
// decryption failure stays in the log: telling a sender why RSA-OAEP or
// a cipher failed would make the endpoint a decryption oracle.
func decryptError(err error) *as4.Error {
	switch xmlenc.Code(err) {
	case xmlenc.CodePolicyNoncompliance:
		return as4.PolicyNoncompliance(partnerDetail(as4.CodePolicyNoncompliance, err.Error()), err)
	default:
		return as4.FailedDecryption(stableReasons[as4.CodeFailedDecryption], err)
	}
}

// securityError maps a wssec error to an ebMS error; its text describes the
// message, not our keys, and is passed on without the text of foreign
// errors (base64, XML, crypto) behind it (wssec.Reason).
func securityError(err error) *as4.Error {
	reason := wssec.Reason(err)
	switch wssec.Code(err) {
	case wssec.CodePolicyNoncompliance:
		return as4.PolicyNoncompliance(partnerDetail(as4.CodePolicyNoncompliance, reason), err)
	case wssec.CodeInvalidHeader:
		return as4.InvalidHeader(partnerDetail(as4.CodeInvalidHeader, reason), err)
	default:
		return as4.FailedAuthentication(partnerDetail(as4.CodeFailedAuthentication, reason), err)
	}
}

func truncate(s string) string {
	const max = 400
	if len(s) > max {
		n := max
		for n > 0 && !utf8.RuneStart(s[n]) {
			n-- // never cut a character in half: the signal must stay UTF-8
		}
		return s[:n] + "…"
	}
	return s
}
