// Package submitapi is the HTTP submission API of the outbound queue,
// served as JSON under /api/v1/outbound on the admin listener (whose
// bearer token or client certificate guards it; this package does no
// authentication):
//
//	POST /api/v1/outbound/messages?partner=P[&protocol=as2|as4][&filename=F][&subject=S][&service=..&action=..&conversation_id=..][&property=NAME=VALUE…]
//	GET  /api/v1/outbound/messages?partner=&state=&before=&before_id=&limit=
//	GET  /api/v1/outbound/messages/{id}
//	GET  /api/v1/outbound/messages/{id}/evidence
//	POST /api/v1/outbound/messages/{id}/cancel   {"reason": "..."}
//	POST /api/v1/outbound/messages/{id}/resend
//
// A POST's body is the payload, streamed to the store (never held whole in
// memory) and bounded by Config.MaxPayload (413 beyond). Its
// Idempotency-Key header is recommended: without it every POST queues a
// new message, so a client that retries after a lost answer sends twice.
// The same key again answers 200 with the message queued first (header
// Idempotent-Replayed: true); the store does not read the payload of a
// known key, so the API reads and hashes the body itself and answers 409
// when its SHA-256 is not the one of the message queued under the key (or
// its AS4 part properties are not the message's).
// docs/sending.md is the reference.
package submitapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/outbound"
)

// Prefix is the path the API is served under.
const Prefix = "/api/v1/outbound"

// DefaultMaxPayload bounds a submitted payload when Config.MaxPayload is 0
// (outbound.max_payload_bytes' default).
const DefaultMaxPayload = int64(1 << 30)

// AnswerTimeout bounds writing a submission's answer once its payload is
// read.
const AnswerTimeout = time.Minute

// MaxIdempotencyKey bounds the Idempotency-Key header (bytes).
const MaxIdempotencyKey = 256

// Submitter queues a submission (outbound.Queue in the gateway): it
// validates the partner and protocol, fixes the message's ids and calls
// the store.
type Submitter interface {
	Submit(ctx context.Context, s outbound.Submission) (outbound.Message, bool, error)
}

// ErrorStatus maps an error the Submitter returns (matched with errors.Is)
// to the HTTP status the client gets.
type ErrorStatus struct {
	Err    error
	Status int
}

// Config configures the API.
type Config struct {
	Submitter Submitter
	// Store answers status, list, evidence, cancel and resend.
	Store outbound.Store
	Log   *slog.Logger
	// MaxPayload bounds one payload (0: DefaultMaxPayload).
	MaxPayload int64
	// Now is the clock ("sending" is a queued message leased now).
	Now func() time.Time
	// Errors maps the Submitter's errors to statuses: the gateway maps
	// outbound.ErrUnknownPartner to 404 and outbound.ErrNoSending to 422.
	// Other errors are 500.
	Errors []ErrorStatus
}

type api struct {
	Config
}

// New returns the API's handler; mount it at Prefix+"/" (it routes on the
// whole path).
func New(cfg Config) http.Handler {
	if cfg.MaxPayload <= 0 {
		cfg.MaxPayload = DefaultMaxPayload
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	a := &api{cfg}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+Prefix+"/messages", a.submit)
	mux.HandleFunc("GET "+Prefix+"/messages", a.list)
	mux.HandleFunc("GET "+Prefix+"/messages/{id}", a.status)
	mux.HandleFunc("GET "+Prefix+"/messages/{id}/evidence", a.evidence)
	mux.HandleFunc("POST "+Prefix+"/messages/{id}/cancel", a.cancel)
	mux.HandleFunc("POST "+Prefix+"/messages/{id}/resend", a.resend)
	mux.HandleFunc(Prefix+"/", func(w http.ResponseWriter, r *http.Request) {
		a.fail(w, r, http.StatusNotFound, "no such resource: see docs/sending.md", nil)
	})
	return mux
}

// StatusURL is the path of a message's status.
func StatusURL(id string) string { return Prefix + "/messages/" + url.PathEscape(id) }

// Submitted is the answer to a submission.
type Submitted struct {
	ID        string `json:"id"`
	MessageID string `json:"message_id"`
	Partner   string `json:"partner"`
	Protocol  string `json:"protocol"`
	State     string `json:"state"`
	StatusURL string `json:"status_url"`
}

// Status is a message's status.
type Status struct {
	Submitted
	IdempotencyKey string           `json:"idempotency_key,omitempty"`
	Source         string           `json:"source,omitempty"`
	ContentType    string           `json:"content_type,omitempty"`
	Filename       string           `json:"filename,omitempty"`
	Subject        string           `json:"subject,omitempty"`
	Service        string           `json:"service,omitempty"`
	Action         string           `json:"action,omitempty"`
	ConversationID string           `json:"conversation_id,omitempty"`
	Size           int64            `json:"size"`
	SHA256         string           `json:"sha256"`
	Attempts       int              `json:"attempts"`
	NextAttempt    *time.Time       `json:"next_attempt,omitempty"`
	LastError      string           `json:"last_error,omitempty"`
	Reason         string           `json:"reason,omitempty"`
	Created        time.Time        `json:"created"`
	Updated        time.Time        `json:"updated"`
	Final          bool             `json:"final"`
	Evidence       *EvidenceSummary `json:"evidence,omitempty"`

	// Properties are the AS4 part properties submitted, in their order.
	Properties []outbound.Property `json:"properties,omitempty"`
}

// EvidenceSummary describes the MDN, receipt or error signal received;
// its bytes are at URL.
type EvidenceSummary struct {
	Kind        string    `json:"kind"`
	Disposition string    `json:"disposition,omitempty"`
	Signer      string    `json:"signer,omitempty"`
	Received    time.Time `json:"received"`
	ContentType string    `json:"content_type,omitempty"`
	Size        int       `json:"size"`
	URL         string    `json:"url"`
}

// List is the answer to a list: newest first (by creation, then by id);
// NextBefore and NextBeforeID (when the page is full) are the before= and
// before_id= of the next page: the creation time and id of the page's last
// message. Both are needed: many messages may share one creation time (a
// bulk lands many in one millisecond), and before= alone lists only those
// created strictly before it.
type List struct {
	Messages     []Status   `json:"messages"`
	NextBefore   *time.Time `json:"next_before,omitempty"`
	NextBeforeID string     `json:"next_before_id,omitempty"`
}

// Error is every error's body: what went wrong and the incident reference
// the log line carries too.
type Error struct {
	Error    string `json:"error"`
	Incident string `json:"incident"`
	// ID is the message concerned, when there is one (a 409).
	ID string `json:"id,omitempty"`
}

// stateName is the state shown: "sending" for a queued message a worker
// holds now.
func stateName(m outbound.Message, now time.Time) string {
	if m.Sending(now) {
		return "sending"
	}
	return string(m.State)
}

func (a *api) submitted(m outbound.Message) Submitted {
	return Submitted{ID: m.ID, MessageID: m.MessageID, Partner: m.Partner, Protocol: string(m.Protocol),
		State: stateName(m, a.Now()), StatusURL: StatusURL(m.ID)}
}

func (a *api) statusOf(m outbound.Message) Status {
	s := Status{Submitted: a.submitted(m), IdempotencyKey: m.IdempotencyKey, Source: m.Source, ContentType: m.ContentType,
		Filename: m.Filename, Subject: m.Subject, Service: m.Service, Action: m.Action, ConversationID: m.ConversationID,
		Properties: m.Properties, Size: m.Size, SHA256: m.SHA256, Attempts: m.Attempts, LastError: m.LastError, Reason: m.Reason,
		Created: m.Created, Updated: m.Updated, Final: m.State.Final()}
	if !m.State.Final() && !m.NextAttempt.IsZero() {
		t := m.NextAttempt
		s.NextAttempt = &t
	}
	if ev := m.Evidence; ev != nil {
		s.Evidence = &EvidenceSummary{Kind: ev.Kind, Disposition: ev.Disposition, Signer: ev.Signer, Received: ev.Received,
			ContentType: ev.ContentType, Size: len(ev.Body), URL: StatusURL(m.ID) + "/evidence"}
	}
	return s
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // the client went away: nothing to do
}

// fail answers an error with an incident reference, logged with the
// detail (err, not shown to the client for a 500).
func (a *api) fail(w http.ResponseWriter, r *http.Request, status int, msg string, err error) {
	a.failID(w, r, status, msg, "", err)
}

func (a *api) failID(w http.ResponseWriter, r *http.Request, status int, msg, id string, err error) {
	inc := exchange.NewIncident()
	attrs := []any{"incident", inc, "method", r.Method, "path", r.URL.Path, "status", status, "error", msg}
	if err != nil {
		attrs = append(attrs, "detail", err.Error())
	}
	if status >= 500 {
		a.Log.Error("submission API: request failed", attrs...)
	} else {
		a.Log.Info("submission API: request refused", attrs...)
	}
	writeJSON(w, status, Error{Error: msg, Incident: inc, ID: id})
}

// storeError answers an error of the store's operations.
func (a *api) storeError(w http.ResponseWriter, r *http.Request, id string, err error) {
	switch {
	case errors.Is(err, outbound.ErrNotFound):
		a.fail(w, r, http.StatusNotFound, "no such message: "+id, err)
	case errors.Is(err, outbound.ErrFinal):
		a.failID(w, r, http.StatusConflict, "the message is in a final state", id, err)
	case errors.Is(err, outbound.ErrNotFinal):
		a.failID(w, r, http.StatusConflict, "the message is not in a final state (only failed or cancelled messages are resent)", id, err)
	case r.Context().Err() != nil:
		a.fail(w, r, http.StatusServiceUnavailable, "request cancelled", err)
	default:
		a.fail(w, r, http.StatusInternalServerError, "internal error: the log has the detail under the incident", err)
	}
}

// errTooLarge ends a payload longer than the limit.
var errTooLarge = errors.New("payload too large")

// body reads the request body to at most max bytes, hashing what it reads,
// and remembers whether the limit or the client cut it short.
type body struct {
	r        io.Reader
	h        hash.Hash
	n, max   int64
	tooLarge bool
	readErr  error
}

func (b *body) Read(p []byte) (int, error) {
	if b.tooLarge {
		return 0, errTooLarge
	}
	if rest := b.max + 1 - b.n; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := b.r.Read(p)
	b.n += int64(n)
	if b.n > b.max {
		b.tooLarge = true
		return 0, fmt.Errorf("more than %d bytes: %w", b.max, errTooLarge)
	}
	b.h.Write(p[:n])
	if err != nil && err != io.EOF {
		b.readErr = err
	}
	return n, err
}

func (b *body) sum() string { return hex.EncodeToString(b.h.Sum(nil)) }

// submission reads a POST's query into a Submission.
func submission(r *http.Request) (outbound.Submission, error) {
	q := r.URL.Query()
	for k, v := range q {
		switch k {
		case "partner", "protocol", "filename", "subject", "service", "action", "conversation_id":
			if len(v) > 1 {
				return outbound.Submission{}, fmt.Errorf("%s given %d times", k, len(v))
			}
		case "property": // repeated, in order
		default:
			return outbound.Submission{}, fmt.Errorf("unknown parameter %q (partner, protocol, filename, subject, service, action, conversation_id, property)", k)
		}
	}
	var props []outbound.Property
	for _, v := range q["property"] {
		p, err := outbound.ParseProperty(v)
		if err != nil {
			return outbound.Submission{}, err
		}
		props = append(props, p)
	}
	s := outbound.Submission{Partner: q.Get("partner"), Protocol: outbound.Protocol(q.Get("protocol")),
		IdempotencyKey: strings.TrimSpace(r.Header.Get("Idempotency-Key")), ContentType: r.Header.Get("Content-Type"),
		Filename: q.Get("filename"), Subject: q.Get("subject"), Service: q.Get("service"), Action: q.Get("action"),
		ConversationID: q.Get("conversation_id"), Properties: props, Source: "http"}
	switch {
	case s.Partner == "":
		return s, errors.New("partner is required")
	case s.Protocol != "" && s.Protocol != outbound.AS2 && s.Protocol != outbound.AS4:
		return s, fmt.Errorf("protocol %q is not as2 or as4", s.Protocol)
	case len(s.IdempotencyKey) > MaxIdempotencyKey:
		return s, fmt.Errorf("Idempotency-Key is longer than %d bytes", MaxIdempotencyKey)
	case strings.ContainsAny(s.Filename, "/\\\x00"):
		return s, errors.New("filename must not contain a path")
	case s.Protocol == outbound.AS2 && len(props) > 0:
		return s, errors.New("property: AS2 has no part properties (they are AS4's)")
	}
	if err := outbound.ValidateProperties(props); err != nil {
		return s, err
	}
	return s, nil
}

func (a *api) submit(w http.ResponseWriter, r *http.Request) {
	s, err := submission(r)
	if err != nil {
		a.fail(w, r, http.StatusBadRequest, err.Error(), nil)
		return
	}
	if r.ContentLength > a.MaxPayload {
		a.fail(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("payload of %d bytes is larger than outbound.max_payload_bytes %d", r.ContentLength, a.MaxPayload), nil)
		return
	}
	// A large payload takes longer than the server's WriteTimeout (the
	// admin listener's is a minute, counted from the request's header):
	// the answer's deadline starts when the payload has been read.
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{}) // not supported: the server's own deadline stays
	b := &body{r: r.Body, h: sha256.New(), max: a.MaxPayload}
	s.Payload = b
	m, created, err := a.Submitter.Submit(r.Context(), s)
	_ = rc.SetWriteDeadline(time.Now().Add(AnswerTimeout))
	switch {
	case b.tooLarge:
		a.fail(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("payload is larger than outbound.max_payload_bytes %d: nothing queued", a.MaxPayload), err)
		return
	case b.readErr != nil:
		a.fail(w, r, http.StatusBadRequest, "reading the payload: "+b.readErr.Error()+": nothing queued", err)
		return
	case err != nil:
		for _, es := range a.Errors {
			if errors.Is(err, es.Err) {
				a.fail(w, r, es.Status, err.Error(), err)
				return
			}
		}
		a.storeError(w, r, "", err)
		return
	}
	w.Header().Set("Location", StatusURL(m.ID))
	if created {
		a.Log.Info("submission API: message queued", "id", m.ID, "partner", m.Partner, "protocol", m.Protocol,
			"message_id", m.MessageID, "size", m.Size)
		writeJSON(w, http.StatusAccepted, a.submitted(m))
		return
	}
	a.replay(w, r, s, m, b)
}

// replay answers a submission whose idempotency key is known: the body the
// store did not read is hashed to its end and must be the payload queued
// under the key.
func (a *api) replay(w http.ResponseWriter, r *http.Request, s outbound.Submission, m outbound.Message, b *body) {
	if _, err := io.Copy(io.Discard, b); err != nil {
		if b.tooLarge {
			a.failID(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("payload is larger than outbound.max_payload_bytes %d", a.MaxPayload), m.ID, err)
			return
		}
		a.fail(w, r, http.StatusBadRequest, "reading the payload: "+err.Error(), err)
		return
	}
	if got := b.sum(); got != m.SHA256 || b.n != m.Size {
		a.failID(w, r, http.StatusConflict, fmt.Sprintf("Idempotency-Key %q was used for message %s with another payload (sha256 %s, %d bytes; this one sha256 %s, %d bytes)",
			s.IdempotencyKey, m.ID, m.SHA256, m.Size, got, b.n), m.ID, nil)
		return
	}
	if !outbound.EqualProperties(s.Properties, m.Properties) {
		a.failID(w, r, http.StatusConflict, fmt.Sprintf("Idempotency-Key %q was used for message %s with other properties (%d; this one %d)",
			s.IdempotencyKey, m.ID, len(m.Properties), len(s.Properties)), m.ID, nil)
		return
	}
	if s.Protocol != "" && s.Protocol != m.Protocol {
		a.failID(w, r, http.StatusConflict, fmt.Sprintf("Idempotency-Key %q was used for message %s sent with %s, not %s",
			s.IdempotencyKey, m.ID, m.Protocol, s.Protocol), m.ID, nil)
		return
	}
	w.Header().Set("Idempotent-Replayed", "true")
	writeJSON(w, http.StatusOK, a.submitted(m))
}

func (a *api) status(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	m, err := a.Store.Get(r.Context(), id)
	if err != nil {
		a.storeError(w, r, id, err)
		return
	}
	writeJSON(w, http.StatusOK, a.statusOf(m))
}

func (a *api) evidence(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	m, err := a.Store.Get(r.Context(), id)
	if err != nil {
		a.storeError(w, r, id, err)
		return
	}
	if m.Evidence == nil {
		a.failID(w, r, http.StatusNotFound, "no MDN or receipt received for this message (yet)", id, nil)
		return
	}
	ct := m.Evidence.ContentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Content-Length", strconv.Itoa(len(m.Evidence.Body)))
	w.Header().Set("X-Evidence-Kind", m.Evidence.Kind)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(m.Evidence.Body)
}

// MaxListLimit bounds limit= of a list.
const MaxListLimit = 1000

var states = map[string]bool{string(outbound.Queued): true, "sending": true, string(outbound.AwaitingMDN): true,
	string(outbound.Delivered): true, string(outbound.Failed): true, string(outbound.Cancelled): true}

// filter reads a list's query; sending asks for queued messages leased now
// (filtered after the store's query, so a page may hold fewer).
func filter(q url.Values) (f outbound.Filter, sending bool, err error) {
	for k := range q {
		switch k {
		case "partner", "state", "before", "before_id", "limit":
		default:
			return f, false, fmt.Errorf("unknown parameter %q (partner, state, before, before_id, limit)", k)
		}
	}
	f.Partner = q.Get("partner")
	f.Limit = 100
	for _, st := range q["state"] {
		for s := range strings.SplitSeq(st, ",") {
			if !states[s] {
				return f, false, fmt.Errorf("state %q is not one of queued, sending, awaiting-mdn, delivered, failed, cancelled", s)
			}
			if s == "sending" {
				sending, s = true, string(outbound.Queued)
			}
			f.States = append(f.States, outbound.State(s))
		}
	}
	if sending && len(f.States) > 1 {
		return f, false, errors.New("state=sending cannot be combined with other states")
	}
	if v := q.Get("before"); v != "" {
		if f.Before, err = time.Parse(time.RFC3339Nano, v); err != nil {
			return f, false, fmt.Errorf("before: %q is not an RFC 3339 time", v)
		}
	}
	if f.BeforeID = q.Get("before_id"); f.BeforeID != "" && f.Before.IsZero() {
		return f, false, errors.New("before_id needs before (next_before and next_before_id of the previous page)")
	}
	if v := q.Get("limit"); v != "" {
		if f.Limit, err = strconv.Atoi(v); err != nil || f.Limit < 1 || f.Limit > MaxListLimit {
			return f, false, fmt.Errorf("limit: %q is not between 1 and %d", v, MaxListLimit)
		}
	}
	return f, sending, nil
}

func (a *api) list(w http.ResponseWriter, r *http.Request) {
	f, sending, err := filter(r.URL.Query())
	if err != nil {
		a.fail(w, r, http.StatusBadRequest, err.Error(), nil)
		return
	}
	ms, err := a.Store.List(r.Context(), f)
	if err != nil {
		a.storeError(w, r, "", err)
		return
	}
	out := List{Messages: []Status{}}
	now := a.Now()
	for _, m := range ms {
		if !sending || m.Sending(now) {
			out.Messages = append(out.Messages, a.statusOf(m))
		}
	}
	if len(ms) == f.Limit && len(ms) > 0 {
		last := ms[len(ms)-1]
		out.NextBefore, out.NextBeforeID = &last.Created, last.ID
	}
	writeJSON(w, http.StatusOK, out)
}

// MaxCancelBody bounds a cancel request's JSON.
const MaxCancelBody = 64 << 10

func (a *api) cancel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req struct {
		Reason string `json:"reason"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxCancelBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil && err != io.EOF {
		a.fail(w, r, http.StatusBadRequest, "body: want JSON {\"reason\": \"...\"}: "+err.Error(), nil)
		return
	}
	if req.Reason = strings.TrimSpace(req.Reason); req.Reason == "" {
		req.Reason = "cancelled through the submission API"
	}
	if err := a.Store.Cancel(r.Context(), id, req.Reason); err != nil {
		a.storeError(w, r, id, err)
		return
	}
	a.Log.Info("submission API: message cancelled", "id", id, "reason", req.Reason)
	a.status(w, r)
}

func (a *api) resend(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := a.Store.Resend(r.Context(), id); err != nil {
		a.storeError(w, r, id, err)
		return
	}
	a.Log.Info("submission API: message resent", "id", id)
	a.status(w, r)
}
