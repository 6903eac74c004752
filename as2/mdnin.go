package as2

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/internal/limits"
	"github.com/edigateway/gateway/mdn"
	"github.com/edigateway/gateway/partners"
)

// DefaultMaxMDNBytes is the body limit of an asynchronous MDN when
// Config.MaxMDNBytes is zero. Real MDNs are a few KiB.
const DefaultMaxMDNBytes = 1 << 20

// mdnPeekBytes is how much of a multipart/signed body is looked at to find
// its first part's headers (an MDN's are within the first few hundred
// bytes). Only this much is buffered: a signed message is not slowed down.
const mdnPeekBytes = 8 << 10

// MDNReceiver takes the asynchronous MDNs partners post to the AS2 URL for
// messages the gateway sent (the outbound queue implements it). The
// endpoint calls it only for a known partner (AS2-From and AS2-To name its
// agreement) and a body of at most Config.MaxMDNBytes that parses as an MDN;
// header and body are the request's, exactly as received. The receiver
// verifies the signature against the partner's certificates, finds the
// message by Original-Message-ID, checks the MIC and settles the message.
type MDNReceiver interface {
	ReceiveMDN(ctx context.Context, partner *partners.Partner, header http.Header, body []byte) MDNVerdict
}

// MDNVerdict is the receiver's answer to the partner: Status 200 when the
// MDN was accepted (also a duplicate of one accepted before), a 4xx when it
// is refused for good (no such message, another partner's message, a bad
// signature, a MIC that matches no transmission), 503 when the store is
// unavailable (the endpoint adds Retry-After). Reason is a short sentence
// for the partner (no internal detail: it is sent as is, after a 4xx with
// an incident reference). Any other status is answered 503.
type MDNVerdict struct {
	Status int
	Reason string
}

// mdnKind is what a request's outer headers say about it.
type mdnKind int

const (
	notAnMDN mdnKind = iota
	// unsignedMDN: multipart/report; report-type=disposition-notification.
	unsignedMDN
	// maybeSignedMDN: multipart/signed, an MDN when its first part is a
	// multipart/report (firstPartIsReport).
	maybeSignedMDN
)

// mdnKindOf classifies a request by its headers alone. A request asking for
// an MDN (Disposition-Notification-To) is a message: an MDN never asks for
// one (RFC 3798). Only the outer Content-Type counts: MDNs are never
// encrypted or compressed, so an application/pkcs7-mime body is a message
// whatever it carries. boundary is multipart/signed's.
func mdnKindOf(h http.Header) (kind mdnKind, boundary string) {
	if strings.TrimSpace(h.Get("Disposition-Notification-To")) != "" {
		return notAnMDN, ""
	}
	mt, params := contentType(h.Get("Content-Type"))
	switch mt {
	case "multipart/report":
		if isDispositionReport(params) {
			return unsignedMDN, ""
		}
	case "multipart/signed":
		if b := params["boundary"]; b != "" {
			return maybeSignedMDN, b
		}
	}
	return notAnMDN, ""
}

// isDispositionReport: report-type is disposition-notification, or absent
// (some products leave it out; a delivery-status report is no MDN).
func isDispositionReport(params map[string]string) bool {
	rt, ok := params["report-type"]
	return !ok || strings.EqualFold(strings.TrimSpace(rt), "disposition-notification")
}

// contentType parses a Content-Type value into its lower-case media type
// and parameters. A value mime.ParseMediaType rejects (duplicate or broken
// parameters) keeps its media type, and its boundary when one can be read.
func contentType(v string) (string, map[string]string) {
	mt, params, err := mime.ParseMediaType(v)
	if err == nil {
		return mt, params
	}
	t, rest, _ := strings.Cut(v, ";")
	params = map[string]string{}
	if i := strings.Index(asciiLower(rest), "boundary="); i >= 0 {
		b := rest[i+len("boundary="):]
		if strings.HasPrefix(b, `"`) {
			if j := strings.IndexByte(b[1:], '"'); j >= 0 {
				params["boundary"] = b[1 : j+1]
			}
		} else if j := strings.IndexAny(b, "; \t"); j >= 0 {
			params["boundary"] = b[:j]
		} else {
			params["boundary"] = b
		}
	}
	return strings.ToLower(strings.TrimSpace(t)), params
}

// asciiLower lowers A-Z only, so that indexes stay those of s (ToLower
// changes the length of invalid UTF-8).
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// firstPartIsReport reports whether the first body part of a multipart body
// beginning with peek (the preamble, the first delimiter and the part's
// header block must all be in peek) has a multipart/report
// (disposition-notification) Content-Type.
func firstPartIsReport(peek []byte, boundary string) bool {
	delim := []byte("--" + boundary)
	rest := peek
	// The first delimiter line (after an optional preamble).
	for {
		line, after, ok := cutLine(rest)
		if !ok {
			return false
		}
		rest = after
		if bytes.Equal(bytes.TrimRight(line, " \t"), delim) {
			break
		}
	}
	// The part's header block, up to the empty line; folded lines continue
	// the field before them.
	var ct []byte
	inCT := false
	for {
		line, after, ok := cutLine(rest)
		if !ok {
			return false // the header block does not end within the peek
		}
		rest = after
		if len(line) == 0 {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			if inCT {
				ct = append(append(ct, ' '), bytes.TrimSpace(line)...)
			}
			continue
		}
		name, value, found := bytes.Cut(line, []byte(":"))
		inCT = found && strings.EqualFold(string(bytes.TrimSpace(name)), "Content-Type")
		if inCT {
			ct = append([]byte(nil), bytes.TrimSpace(value)...)
		}
	}
	mt, params := contentType(string(ct))
	return mt == "multipart/report" && isDispositionReport(params)
}

// cutLine returns the first line of b without its line end (CRLF or LF) and
// what follows it; ok is false when b holds no complete line.
func cutLine(b []byte) (line, rest []byte, ok bool) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return nil, b, false
	}
	return bytes.TrimSuffix(b[:i], []byte("\r")), b[i+1:], true
}

// looksLikeMDN decides from the headers and the first bytes of the body
// whether a request is an asynchronous MDN.
func looksLikeMDN(h http.Header, peek []byte) bool {
	switch kind, boundary := mdnKindOf(h); kind {
	case unsignedMDN:
		return true
	case maybeSignedMDN:
		return firstPartIsReport(peek, boundary)
	}
	return false
}

// peekedBody is a request body of which the first bytes were read: they
// come first, then the rest straight from the body (or the error that cut
// the peek short).
type peekedBody struct {
	io.Reader
	io.Closer
}

// errReader returns err on every read.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// isAsyncMDN decides whether the request is an asynchronous MDN: from its
// headers, and for multipart/signed from its first mdnPeekBytes (the body
// is replaced by one that yields them again, then reads the rest straight
// from the body: a signed message costs one 8 KiB read). A signed MDN over
// the MDN limit is still recognised, and refused with 413, not handed to
// the pipeline as a message.
func (rc *as2Receipt) isAsyncMDN() bool {
	r := rc.r
	kind, _ := mdnKindOf(r.Header)
	switch kind {
	case unsignedMDN:
		return true
	case notAnMDN:
		return false
	}
	peek := make([]byte, mdnPeekBytes)
	n := 0
	var err error
	for n < len(peek) && err == nil {
		var m int
		m, err = r.Body.Read(peek[n:])
		n += m
	}
	peek = peek[:n]
	var rest io.Reader = r.Body
	if err != nil {
		// The body's end, or what cut it short (a body shorter than its
		// Content-Length, too slow, too large): whoever reads the body
		// next gets it as the body gave it, and answers it.
		rest = errReader{err}
	}
	r.Body = peekedBody{io.MultiReader(bytes.NewReader(peek), rest), r.Body}
	return looksLikeMDN(r.Header, peek)
}

func (e *Endpoint) maxMDNBytes(partnerLimit int64) int64 {
	n := e.cfg.MaxMDNBytes
	if n <= 0 {
		n = DefaultMaxMDNBytes
	}
	return min(n, partnerLimit)
}

// mdnIn is one asynchronous MDN being received.
type mdnIn struct {
	rc *as2Receipt
	// original is the Original-Message-ID (normalised) and disposition the
	// MDN's disposition, once it parsed.
	original    string
	disposition string
}

// receiveMDN answers an asynchronous MDN for a message we sent: read
// (bounded), parsed, handed to Config.MDNs, answered with its verdict and
// audited. The business handler never runs for it.
func (rc *as2Receipt) receiveMDN() {
	e, r := rc.e, rc.r
	m := &mdnIn{rc: rc, original: dedup.NormalizeMessageID(rc.x.req.MessageID)}
	if e.cfg.MDNs == nil {
		rc.w.Header().Set("Connection", "close")
		m.answer(MDNVerdict{Status: http.StatusBadRequest,
			Reason: "this AS2 endpoint does not accept asynchronous MDNs (no outbound queue is configured)"}, nil)
		return
	}
	limit := e.maxMDNBytes(rc.limit)
	if r.ContentLength > limit {
		m.tooLarge(limit)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		m.unreadable(err)
		return
	}
	if int64(len(body)) > limit {
		m.tooLarge(limit)
		return
	}
	p, err := mdn.ParseHTTP(r.Header, body)
	if err != nil {
		m.answer(MDNVerdict{Status: http.StatusBadRequest, Reason: "the body is not a readable MDN"}, err)
		return
	}
	if id := dedup.NormalizeMessageID(clean(p.Report.OriginalMessageID)); id != "" && len(id) <= maxMessageIDLength {
		m.original = id
	}
	m.disposition = dispositionText(p.Report.Disposition)
	v := e.cfg.MDNs.ReceiveMDN(r.Context(), rc.partner, r.Header, body)
	m.answer(v, nil)
}

func (m *mdnIn) tooLarge(limit int64) {
	m.rc.w.Header().Set("Connection", "close")
	m.answer(MDNVerdict{Status: http.StatusRequestEntityTooLarge,
		Reason: fmt.Sprintf("an asynchronous MDN is accepted only up to %d bytes", limit)}, nil)
}

// unreadable answers a body that could not be read: the limits' own
// answers (413, 503, 408), else 400.
func (m *mdnIn) unreadable(err error) {
	switch st := limits.Status(err); st {
	case http.StatusRequestEntityTooLarge, http.StatusServiceUnavailable, http.StatusRequestTimeout:
		m.audit(MDNVerdict{Status: st, Reason: "the body could not be read"}, err, "")
		m.rc.lg.Warn("as2 async MDN refused while reading the body", "status", st, "err", err)
		limits.Refuse(m.rc.w, err)
	default:
		m.answer(MDNVerdict{Status: http.StatusBadRequest, Reason: "the request body could not be read"}, err)
	}
}

// answer sends the verdict to the partner, with an audit record and a log
// line; a refusal carries an incident reference in all three.
func (m *mdnIn) answer(v MDNVerdict, cause error) {
	rc := m.rc
	req := rc.x.req
	v = normalizeVerdict(v, rc)
	incident := ""
	if v.Status/100 != 2 {
		incident = exchange.NewIncident()
	}
	m.audit(v, cause, incident)
	lg := rc.lg.With("original_message_id", m.original, "disposition", m.disposition, "status", v.Status, "reason", v.Reason)
	if rc.partner != nil {
		lg = lg.With("partner", rc.partner.ID)
	}
	w := rc.w
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	switch {
	case v.Status/100 == 2:
		lg.Info("as2 async MDN accepted", "decision", "accepted")
		w.WriteHeader(v.Status)
		text := fmt.Sprintf("The MDN %s for message <%s> was accepted.", req.MessageID, m.original)
		if v.Reason != "" {
			text += " " + v.Reason
		}
		_, _ = io.WriteString(w, text+"\n")
	case v.Status == http.StatusServiceUnavailable:
		lg.Warn("as2 async MDN not processed; the partner is asked to send it again", "decision", "unavailable", "incident", incident, "err", cause)
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(v.Status)
		_, _ = fmt.Fprintf(w, "The MDN %s for message <%s> was not processed (%s); retry later.\nIncident %s: quote it when you ask us about this MDN.\n",
			req.MessageID, m.original, v.Reason, incident)
	default:
		lg.Warn("as2 async MDN refused", "decision", "rejected", "incident", incident, "err", cause)
		w.WriteHeader(v.Status)
		_, _ = fmt.Fprintf(w, "The MDN %s from %s to %s for message <%s> was not accepted: %s.\nIncident %s: quote it when you ask us about this MDN.\n",
			req.MessageID, req.From, req.To, m.original, strings.TrimSuffix(v.Reason, "."), incident)
	}
}

// normalizeVerdict keeps 2xx, 4xx and 503 and makes anything else a 503
// (a receiver's failure is never the partner's: no 500); the reason is
// made one short line.
func normalizeVerdict(v MDNVerdict, rc *as2Receipt) MDNVerdict {
	v.Reason = shortReason(v.Reason)
	switch {
	case v.Status/100 == 2, v.Status/100 == 4, v.Status == http.StatusServiceUnavailable:
	default:
		rc.lg.Error("the MDN receiver answered an unusable status; answering 503", "receiver_status", v.Status, "reason", v.Reason)
		v = MDNVerdict{Status: http.StatusServiceUnavailable, Reason: "the MDN could not be recorded"}
	}
	if v.Reason == "" && v.Status/100 != 2 {
		v.Reason = http.StatusText(v.Status)
	}
	return v
}

// maxReasonLength bounds the receiver's reason in the answer.
const maxReasonLength = 300

func shortReason(s string) string {
	s = strings.Join(strings.FieldsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f || r == ' ' }), " ")
	if len(s) > maxReasonLength {
		s = strings.ToValidUTF8(s[:maxReasonLength], "") + "…"
	}
	return s
}

// audit writes the MDN's record (StepMDN): under the Original-Message-ID
// (the message we sent) and the MDN's own transport key, with the decision
// from the status, the MDN's disposition and the reason.
func (m *mdnIn) audit(v MDNVerdict, cause error, incident string) {
	rc := m.rc
	a := rc.e.cfg.Pipeline.Audit
	if a == nil {
		return
	}
	decision := "rejected"
	switch {
	case v.Status/100 == 2:
		decision = "accepted"
	case v.Status == http.StatusServiceUnavailable:
		decision = "unavailable"
	}
	errText := ""
	if decision != "accepted" {
		errText = fmt.Sprintf("HTTP %d: %s", v.Status, v.Reason)
		if cause != nil {
			errText += ": " + cause.Error()
		}
	}
	partnerID := ""
	if rc.partner != nil {
		partnerID = rc.partner.ID
	}
	req := rc.x.req
	ctx, cancel := context.WithTimeout(context.WithoutCancel(rc.r.Context()), 10*time.Second)
	defer cancel()
	err := a.Write(ctx, audit.Record{Time: rc.e.now().UTC(), Step: audit.StepMDN, Partner: partnerID, Protocol: "as2",
		MessageID: m.original, Key: string(dedup.TransportKey("as2", "as2", req.From, req.MessageID)),
		Decision: decision, Disposition: m.disposition, Error: errText, Incident: incident})
	if err != nil && !errors.Is(err, context.Canceled) {
		rc.lg.Error("audit write failed", "err", err)
	}
}
