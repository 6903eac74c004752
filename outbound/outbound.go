// Package outbound is the sending side of the gateway: the durable queue of
// messages we send to trading partners (AS2 and AS4), and the Sender that
// works it.
//
// A Submission (from the Go API, the HTTP submission API, a pickup directory
// or `gateway submit`) becomes one Message with one transport id (the AS2
// Message-ID or eb:MessageId), fixed when it is queued and kept on every
// attempt, so that the partner's own duplicate detection sees our retries as
// retries. A submission with an IdempotencyKey already queued for the partner
// returns the message queued first: it never creates a second one.
//
// A message is Delivered only on a positive MDN or receipt whose signature
// verifies against the partner's certificates and whose MIC or
// NonRepudiationInformation digests match a transmission we made of it; a
// negative MDN or ebMS error ends it as Failed with the partner's reason;
// a transport error, a 5xx or a timeout is retried on the partner's
// RetryPolicy until its give-up age.
//
// The queue lives in the gateway's store (memory for tests, SQLite,
// PostgreSQL). Workers lease messages with fencing tokens, as the outbox of
// asynchronous MDNs does, so that several gateways on one database share the
// queue and never work one message at the same time.
package outbound

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"io"
	"strings"
	"time"
)

// Protocol is the transport a message is sent with.
type Protocol string

const (
	AS2 Protocol = "as2"
	AS4 Protocol = "as4"
)

// State of a message in the queue.
type State string

const (
	// Queued: waiting for its first or next attempt (NextAttempt). A queued
	// message held by a worker (LeasedUntil in the future) is being sent.
	Queued State = "queued"
	// AwaitingMDN: posted, the partner answered 2xx, and the asynchronous
	// MDN has not arrived yet. If it has not arrived by NextAttempt the
	// message is sent again (same Message-ID), as OpenAS2 and mendelson do.
	AwaitingMDN State = "awaiting-mdn"
	// Delivered: a positive, verified MDN or receipt arrived (final).
	Delivered State = "delivered"
	// Failed: a negative MDN or ebMS error, or the give-up age passed
	// (final; Reason says which). An operator may Resend it.
	Failed State = "failed"
	// Cancelled by an operator (final; Reason says why).
	Cancelled State = "cancelled"
)

// Final reports whether no further attempt is made in state s.
func (s State) Final() bool { return s == Delivered || s == Failed || s == Cancelled }

// Errors of the Store.
var (
	// ErrNotFound: no such message.
	ErrNotFound = errors.New("outbound: no such message")
	// ErrLeaseLost: the token presented is not the message's current lease
	// (it ran out and another worker leased the message, or an operator
	// cancelled it, or an asynchronous MDN settled it meanwhile).
	ErrLeaseLost = errors.New("outbound: lease lost")
	// ErrFinal: the operation needs a message that is not final (Cancel) or
	// one that is (Resend).
	ErrFinal    = errors.New("outbound: message is in a final state")
	ErrNotFinal = errors.New("outbound: message is not in a final state")
)

// Submission is what a program, an operator or a pickup directory asks to
// send: one payload to one partner.
type Submission struct {
	// Partner is the partner's id in the partner directory.
	Partner string
	// Protocol picks AS2 or AS4 when the partner has both set up for
	// sending; empty: the one it has.
	Protocol Protocol
	// IdempotencyKey makes the submission idempotent: a second submission
	// with the same key for the same partner returns the first one's
	// message. Empty: every submission is new.
	IdempotencyKey string
	// Payload is read to its end when the submission is new (not read when
	// the key is known).
	Payload io.Reader
	// ContentType of the payload (empty: the partner's send.content_type,
	// else application/octet-stream) and its file name (Content-Disposition
	// for AS2, a part property for AS4; may be empty).
	ContentType string
	Filename    string
	// Subject is the AS2 Subject header (empty: the partner's default).
	Subject string
	// Service and Action override the AS4 P-Mode's for this message (empty:
	// the partner's send.pmode). ConversationID is the AS4
	// eb:ConversationId (empty: the profile's default).
	Service, Action, ConversationID string
	// Properties are AS4 part properties of the payload
	// (eb:PartProperties), sent in this order after the ones the sender
	// writes itself (MimeType, CompressionType). ValidateProperties says
	// what is allowed; an AS2 submission with properties is refused.
	Properties []Property
	// Source says where the submission came from, for the audit and the
	// console: "api", "http", "pickup", "cli".
	Source string
}

// Message is one queued message and everything known about it.
type Message struct {
	// ID is the queue's id of the message (status URLs, the console).
	ID       string
	Partner  string
	Protocol Protocol
	// MessageID is the AS2 Message-ID (with angle brackets) or the
	// eb:MessageId, fixed when queued.
	MessageID      string
	IdempotencyKey string
	Source         string
	ContentType    string
	Filename       string
	Subject        string
	Service        string
	Action         string
	ConversationID string
	// Properties are the AS4 part properties submitted (nil: none).
	Properties []Property
	// Size and SHA256 (hex) of the payload.
	Size   int64
	SHA256 string

	State State
	// Attempts counts the transmissions started (an attempt cut short by a
	// crash counts too).
	Attempts int
	// NextAttempt: when a queued message is due, or when an awaited
	// asynchronous MDN is given up on and the message sent again.
	NextAttempt time.Time
	// LastError is the reason the last attempt did not end the message.
	LastError string
	// Reason is the final outcome's reason: the partner's words of a
	// negative MDN or ebMS error, the give-up or the cancel reason.
	Reason  string
	Created time.Time
	Updated time.Time
	// Sent are the digests of every transmission made (Posting): the
	// MIC ("base64, sha-256") of an AS2 message, the signed references of
	// an AS4 one (encoded by the sender). An MDN or receipt must match one.
	Sent []string
	// Evidence is the final MDN or receipt (or error signal), as received.
	Evidence *Evidence

	// LeaseToken is the fencing token of the worker holding the message
	// (set by Lease); LeasedUntil when its lease runs out.
	LeaseToken  string
	LeasedUntil time.Time
}

// Sending reports whether a worker holds the message now.
func (m Message) Sending(now time.Time) bool {
	return m.State == Queued && m.LeaseToken != "" && now.Before(m.LeasedUntil)
}

// Evidence is what the partner answered with: an MDN, a receipt, or an ebMS
// error signal, kept byte for byte for non-repudiation.
type Evidence struct {
	// Kind: "mdn", "receipt" or "error".
	Kind string
	// ContentType and Body are the answer as received (for an AS2 MDN the
	// HTTP body, for AS4 the SOAP message).
	ContentType string
	Body        []byte
	// Disposition is the MDN disposition or "receipt" or the ebMS error
	// code; Signer names the certificate whose signature verified
	// (subject, serial).
	Disposition string
	Signer      string
	Received    time.Time
}

// Filter selects messages for List.
type Filter struct {
	Partner string
	States  []State
	// Before lists messages created before this time; zero: no bound.
	// With BeforeID it is a keyset cursor (paging: the Created and ID of
	// the last message of the previous page): messages with (Created, ID)
	// before (Before, BeforeID) in the list's order, that is created
	// before Before, or created at Before with an ID below BeforeID. Many
	// messages may share one Created (stores keep milliseconds or
	// microseconds, and a bulk of submissions lands many in one), so a
	// page bound by Before alone skips the rest of the last one's.
	Before time.Time
	// BeforeID is the ID of the last message of the previous page;
	// ignored when Before is zero; empty: Before alone.
	BeforeID string
	// Limit bounds the result (0: 100). Newest first (Created, then ID).
	Limit int
}

// admits reports whether a message created at created with id is within
// f's Before (and BeforeID) bound, in the list's order (Created, then ID,
// newest first).
func (f Filter) admits(created time.Time, id string) bool {
	switch {
	case f.Before.IsZero():
		return true
	case created.Before(f.Before):
		return true
	case created.Equal(f.Before):
		return f.BeforeID != "" && id < f.BeforeID
	}
	return false
}

// Stats are the queue's figures per partner, for metrics and the console.
type Stats struct {
	Partner  string
	Protocol Protocol
	// Queued counts queued messages (due or not, leased or not);
	// OldestQueued is the Created of the oldest of them (zero: none).
	Queued       int
	OldestQueued time.Time
	Awaiting     int
	Delivered    int
	Failed       int
	Cancelled    int
}

// Store is the durable queue. Implementations: Memory (tests, the memory:
// store), sqlitestore and pgstore; the conformance kit is
// outbound/outboundtest.Exercise.
type Store interface {
	// Submit queues m (its ID, MessageID, Partner and Protocol set by the
	// caller, State ignored: it becomes Queued and due now) with the
	// payload read from payload to its end, durably, before it returns.
	// When m.IdempotencyKey is not empty and a message with that key for
	// m.Partner exists, that message is returned with created false and
	// payload is not read. Either the message with its whole payload is
	// stored, or nothing is.
	Submit(ctx context.Context, m Message, payload io.Reader) (stored Message, created bool, err error)
	// OpenPayload reads a message's payload (streamed: memory does not
	// grow with its size).
	OpenPayload(ctx context.Context, id string) (io.ReadCloser, error)

	// Lease hands out up to limit messages that are due (Queued with
	// NextAttempt passed, or AwaitingMDN past its NextAttempt) and not
	// leased (or whose lease ran out), oldest NextAttempt first, each
	// held for lease under a fresh LeaseToken. Its cost must not grow
	// with the number of messages waiting.
	Lease(ctx context.Context, limit int, lease time.Duration) ([]Message, error)
	// Renew extends a lease (the worker's heartbeat) while token is still
	// the message's lease; ErrLeaseLost otherwise.
	Renew(ctx context.Context, id, token string, lease time.Duration) error
	// Release hands a leased message back without an attempt: due at once
	// for any worker.
	Release(ctx context.Context, id, token string) error

	// Posting records that a transmission starts: Attempts+1, digest
	// appended to Sent (when not already there), the lease kept. Called
	// before the message leaves, so that a crash during the POST is
	// counted and an asynchronous MDN of this transmission can be matched.
	Posting(ctx context.Context, id, token, digest string) error
	// Retry records an attempt that did not end the message: Queued, due
	// at next, lastErr kept, lease released.
	Retry(ctx context.Context, id, token string, next time.Time, lastErr string) error
	// Awaiting records a transmission the partner took (2xx) whose MDN
	// comes asynchronously: AwaitingMDN until an MDN settles it, or until
	// deadline, when it is due for another attempt; lease released.
	Awaiting(ctx context.Context, id, token string, deadline time.Time) error
	// Delivered and Failed end a leased message (final), with the evidence
	// (may be nil for Failed: give-up). Lease released.
	Delivered(ctx context.Context, id, token string, ev *Evidence) error
	Failed(ctx context.Context, id, token, reason string, ev *Evidence) error

	// Settle ends the message partner sent with messageID by an
	// asynchronous MDN (delivered or failed with reason) whatever its
	// lease, unless it is final already: then it is returned unchanged
	// with changed false (a duplicate MDN). ErrNotFound when the partner
	// has no such message.
	Settle(ctx context.Context, partner, messageID string, delivered bool, reason string, ev *Evidence) (m Message, changed bool, err error)

	// Get returns a message; FindByMessageID the partner's message with a
	// transport id.
	Get(ctx context.Context, id string) (Message, error)
	FindByMessageID(ctx context.Context, partner, messageID string) (Message, error)
	// List returns messages matching f, newest first: by Created, then
	// by ID (both descending), so that (Before, BeforeID) pages through
	// messages sharing one Created.
	List(ctx context.Context, f Filter) ([]Message, error)
	// Stats returns the figures of every partner with messages.
	Stats(ctx context.Context) ([]Stats, error)

	// Cancel ends a message that is not final (ErrFinal otherwise) with
	// reason, whatever its lease (the worker's outcome is then refused with
	// ErrLeaseLost). Resend makes a Failed or Cancelled message Queued and
	// due now under the same MessageID (ErrNotFinal for one that is not
	// final; a Delivered one is not resent: ErrFinal). A resent message is
	// queued anew: its Created becomes now, so that the partner's give-up
	// age (RetryPolicy.GiveUpAfter) starts again and it gets a whole
	// schedule of attempts; its Attempts, LastError and Sent stay.
	Cancel(ctx context.Context, id, reason string) error
	Resend(ctx context.Context, id string) error

	// Purge deletes up to limit messages in a final state (Delivered,
	// Failed, Cancelled) whose Updated is before before, with their
	// payloads and evidence, and returns how many it deleted. A Queued or
	// AwaitingMDN message is never purged, whatever its age. It is the
	// outbound.retention purge, run in batches by `serve`: each call is
	// one short transaction, and its cost grows with limit, not with the
	// number of messages kept (stores back it with an index). Once purged,
	// a message is gone: Get returns ErrNotFound, an MDN for it is no
	// longer matched, and a submission with its IdempotencyKey queues a
	// new message. The audit records of its transmissions stay.
	Purge(ctx context.Context, before time.Time, limit int) (n int, err error)
}

// RetryPolicy is a partner's schedule of attempts: the first retry First
// after the first failed attempt, each next one Factor times longer, at
// most Max apart, and no attempt once GiveUpAfter has passed since the
// message was queued (it fails with the last error).
type RetryPolicy struct {
	First       time.Duration
	Factor      float64
	Max         time.Duration
	GiveUpAfter time.Duration
}

// DefaultRetryPolicy: 1m, 2m, 4m, … at most 1h apart, for 3 days.
var DefaultRetryPolicy = RetryPolicy{First: time.Minute, Factor: 2, Max: time.Hour, GiveUpAfter: 72 * time.Hour}

// Delay is the wait after failed attempt n (1-based).
func (p RetryPolicy) Delay(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	d := float64(p.First)
	f := p.Factor
	if f < 1 {
		f = 1
	}
	for i := 1; i < n && d < float64(p.Max); i++ {
		d *= f
	}
	if p.Max > 0 && d > float64(p.Max) {
		d = float64(p.Max)
	}
	return time.Duration(d)
}

// Next returns when attempt n+1 is due after failed attempt n of a message
// created at created, given the partner's Retry-After (0: none), and false
// when the give-up age leaves no room for it.
func (p RetryPolicy) Next(now, created time.Time, n int, retryAfter time.Duration) (time.Time, bool) {
	d := p.Delay(n)
	if retryAfter > d {
		d = retryAfter
	}
	next := now.Add(d)
	if p.GiveUpAfter > 0 && next.After(created.Add(p.GiveUpAfter)) {
		return time.Time{}, false
	}
	return next, true
}

// NewID returns a fresh queue id: time-ordered (its first characters are
// the time in milliseconds) so that ids sort by submission, and random
// after that.
func NewID(now time.Time) string {
	var b [16]byte
	ms := uint64(now.UnixMilli())
	for i := 5; i >= 0; i-- {
		b[i] = byte(ms)
		ms >>= 8
	}
	_, _ = rand.Read(b[6:])
	return strings.ToLower(base32.HexEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

// NewLeaseToken returns a fresh random lease token (stores call it in
// Lease).
func NewLeaseToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return strings.ToLower(base32.HexEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}
