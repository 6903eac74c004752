// Package audit records the evidence of every exchange step: what arrived,
// what the dedup core decided, what the handler did, what was answered.
package audit

import (
	"context"
	"time"
)

// Step names a point of an exchange.
type Step string

const (
	StepReceived Step = "received"
	StepDecision Step = "decision"
	StepHandler  Step = "handler"
	StepReply    Step = "reply"
	// StepDelivery is the fate of a reply sent on the gateway's own
	// connection (an async MDN), when it is refused.
	StepDelivery Step = "delivery"
	// StepTrust is the CA trust decision on a signer certificate (chain,
	// name, revocation) of a trust: ca partner.
	StepTrust Step = "trust"
	// StepOperator is an action an operator took in the console (release
	// or discard of a quarantined payload, an outbox retry); Actor names
	// who.
	StepOperator Step = "operator"
	// StepMDN is an asynchronous MDN a partner posted for a message the
	// gateway sent: MessageID is its Original-Message-ID, Key the MDN's own
	// transport key, Disposition the MDN's disposition, Decision accepted,
	// rejected or unavailable (the HTTP status the partner got).
	StepMDN Step = "mdn"
	// StepSubmit is a message submitted for sending (package outbound):
	// Decision "queued", or "duplicate" when its idempotency key was
	// already queued for the partner (the first message is kept).
	StepSubmit Step = "submit"
	// StepSend is one attempt at sending a queued message: Decision
	// delivered, refused, retry, awaiting (an asynchronous MDN) or gave-up;
	// Disposition what the partner answered; Error the reason.
	StepSend Step = "send"
)

// Record is one audited step of one exchange.
type Record struct {
	Time      time.Time `json:"time"`
	Step      Step      `json:"step"`
	Partner   string    `json:"partner"`
	Protocol  string    `json:"protocol"`
	MessageID string    `json:"message_id"`
	// Key is the transport dedup key.
	Key string `json:"key,omitempty"`
	// InterchangeKey is the business key, when the payload had one.
	InterchangeKey string `json:"interchange_key,omitempty"`
	// Reference is the business interchange reference (UNB 0020, ISA13, …).
	Reference string `json:"reference,omitempty"`
	// Decision: new, duplicate, in-flight, reused, drift, rejected, unavailable,
	// accepted, abandoned, ok, error; async-mdn-refused (the MDN went on the
	// response instead), refused (an async MDN delivery); for sending
	// (StepSubmit, StepSend): queued, duplicate, delivered, refused, retry,
	// awaiting, gave-up.
	Decision      string `json:"decision,omitempty"`
	PayloadSHA256 string `json:"payload_sha256,omitempty"`
	// Disposition is the reply sent: an MDN disposition, "receipt", an ebMS
	// error code, or an HTTP status.
	Disposition string `json:"disposition,omitempty"`
	// Error is the detail of a refusal or failure; it stays inside (the
	// partner gets a short reason and the Incident).
	Error string `json:"error,omitempty"`
	// Incident is the reference quoted in the negative reply to the partner
	// ("GW-7K3QX9"); the log line of the refusal carries it too.
	Incident string `json:"incident,omitempty"`
	// Actor is who took an operator action (StepOperator): the admin token
	// or the subject of the client certificate.
	Actor string `json:"actor,omitempty"`
}

// Sink receives audit records. A durable sink's Write error fails the
// exchange (no positive reply, the claim is abandoned); wrap a sink with
// BestEffort to log and count failures instead.
type Sink interface {
	Write(ctx context.Context, r Record) error
}

// Query selects audit records for evidence export; empty fields match
// anything.
type Query struct {
	Partner   string
	MessageID string
	// Key is a transport dedup key.
	Key string
	// Reference is a business interchange reference (UNB 0020, ISA13, …).
	Reference string
	// Incident is the reference quoted in a negative reply.
	Incident string
	From, To time.Time
	// Limit caps the records returned (default 10000).
	Limit int
	// Newest returns the most recent records first (the last Limit
	// records written) instead of the oldest first.
	Newest bool
}

// DefaultQueryLimit is used when Query.Limit is zero.
const DefaultQueryLimit = 10000

// Matches reports whether r is selected by q.
func (q Query) Matches(r Record) bool {
	return (q.Partner == "" || r.Partner == q.Partner) &&
		(q.MessageID == "" || r.MessageID == q.MessageID) &&
		(q.Key == "" || r.Key == q.Key) &&
		(q.Reference == "" || r.Reference == q.Reference) &&
		(q.Incident == "" || r.Incident == q.Incident) &&
		(q.From.IsZero() || !r.Time.Before(q.From)) &&
		(q.To.IsZero() || r.Time.Before(q.To))
}

// Reader is implemented by sinks that can be read back.
type Reader interface {
	Query(ctx context.Context, q Query) ([]Record, error)
}
