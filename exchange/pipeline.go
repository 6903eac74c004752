package exchange

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
)

// Replies builds one protocol's replies for one inbound message. The
// pipeline decides which reply is due; the protocol knows how it looks (an
// MDN, an ebMS receipt or error).
type Replies interface {
	// Accepted is the positive reply for a message the handler took. It is
	// stored, so that a retransmission can be answered from it.
	Accepted(ctx context.Context) (Reply, error)
	// Duplicate is the positive reply to a retransmission of an accepted
	// message; stored is the reply sent the first time.
	Duplicate(ctx context.Context, stored Reply, d dedup.Decision) (Reply, error)
	// Failed is the reply to a message that was not processed: negative
	// (a negative MDN, an ebMS error) for the permanent kinds, one the
	// partner's sender retries for HandlerFailed (AS2: HTTP 503 with
	// Retry-After; AS4: EBMS:0004 with HTTP 500). It is never stored.
	Failed(ctx context.Context, f *Failure) (Reply, error)
}

// FailureKind says why a message was not processed.
type FailureKind int

const (
	// HandlerFailed: the business handler returned an error or panicked; the
	// partner should retransmit, and its reply says so in the protocol's
	// retryable form (not a negative MDN, which senders take as final).
	HandlerFailed FailureKind = iota + 1
	// Drift: the key was accepted before with a different payload.
	Drift
	// Quarantined: drift under the quarantine policy; the payload was kept
	// for an operator.
	Quarantined
	// Damaged: a payload's business envelope (EDIFACT, X12, UBL, SBDH) is
	// incomplete or inconsistent, a payload that is XML does not parse, or
	// the message carries one interchange twice with different bytes.
	Damaged

	// failureKindEnd follows the last kind: new kinds go above it, so that
	// FailureKinds (and the tests of every protocol's mapping) include them.
	failureKindEnd
)

// FailureKinds lists every FailureKind, for tests that check that each
// protocol answers every kind.
func FailureKinds() []FailureKind {
	var out []FailureKind
	for k := HandlerFailed; k < failureKindEnd; k++ {
		out = append(out, k)
	}
	return out
}

func (k FailureKind) String() string {
	switch k {
	case HandlerFailed:
		return "handler-failed"
	case Drift:
		return "drift"
	case Quarantined:
		return "quarantined"
	case Damaged:
		return "damaged"
	}
	return fmt.Sprintf("FailureKind(%d)", int(k))
}

// Failure describes a negative outcome for Replies.Failed.
type Failure struct {
	Kind FailureKind
	// Err is the detail for the log and audit; it is never sent to the
	// partner (it may hold a parser's or the handler's error chain).
	Err error
	// Reason is what the partner is told, a sentence without Go error
	// text: the damaged envelope (standard and problem) or the drift
	// (standard, reference, both hashes; DriftReason). Empty for
	// HandlerFailed, whose cause stays inside.
	Reason string
	// Incident is the reference of this refusal (NewIncident) that the
	// reply quotes and the log and audit records carry.
	Incident string
	// For Drift: the hash stored with the first delivery and this one's.
	StoredSHA256, PayloadSHA256 string
	FirstSeen                   time.Time
	// Reference is the interchange reference for business-level drift.
	Reference string
}

func (f *Failure) Error() string { return f.Err.Error() }

// DriftPolicy says what happens when a duplicate key carries a different
// payload.
type DriftPolicy string

const (
	// DriftReject answers negatively, naming both hashes (default).
	DriftReject DriftPolicy = "reject"
	// DriftAccept processes the message as new.
	DriftAccept DriftPolicy = "accept"
	// DriftQuarantine keeps the payload in the quarantine directory for an
	// operator and answers negatively.
	DriftQuarantine DriftPolicy = "quarantine"
)

// DriftPolicyOf maps a partner file's on_drift value to its policy; an
// empty or unknown value (the partner loader refuses unknown ones) is
// DriftReject. Both protocols use it, so that they behave alike.
func DriftPolicyOf(onDrift string) DriftPolicy {
	switch p := DriftPolicy(onDrift); p {
	case DriftAccept, DriftQuarantine:
		return p
	}
	return DriftReject
}

// Inbound is one verified message handed to the pipeline by a protocol.
type Inbound struct {
	Message *Message
	Replies Replies
	// Window limits how long an accepted transport key or interchange counts
	// as a duplicate (0: as long as the store keeps it). PEPPOL instance
	// identifiers are unique forever whatever the window.
	Window  time.Duration
	OnDrift DriftPolicy
}

// Stats counts pipeline events; safe for concurrent use.
type Stats struct {
	Claimed, Duplicates, InFlight, HandlerErrors, Drift, Unavailable atomic.Int64
}

// Pipeline runs every inbound message through the claim → handler → audit →
// accept → reply sequence: the states and transitions of states.go, in the
// steps of delivery.go. It is the only place that talks to the store.
type Pipeline struct {
	Store dedup.Store
	// Ledger, when set, adds business-level dedup on the payloads' EDI
	// envelopes (package envelope).
	Ledger dedup.Ledger
	// Quarantine is the directory for payloads under on_drift: quarantine.
	Quarantine string
	Audit      audit.Sink
	Handler    Handler
	Log        *slog.Logger
	// Lease is the store's lease (dedup.DefaultLease when zero). While an
	// exchange runs, its claims are renewed every LeaseHeartbeat (a third of
	// the lease when zero) if the store is a dedup.Renewer, so the handler
	// may run longer than the lease; when a renewal finds a claim taken over,
	// the exchange's context ends (ErrClaimLost).
	Lease          time.Duration
	LeaseHeartbeat time.Duration
	// HandlerTimeout, when positive, bounds a Handler's run (a route's own
	// timeout may end it sooner).
	HandlerTimeout time.Duration
	// UnavailableRetryAfter is sent with 503 when the store cannot be reached.
	UnavailableRetryAfter time.Duration
	Now                   func() time.Time
	Stats                 Stats

	// InFlightRetryAfter, when positive, is the Retry-After sent to a
	// delivery whose message another delivery is processing; zero (auto)
	// estimates it from HandlerTimes. Never more than the holder's lease left.
	InFlightRetryAfter time.Duration
	// HandlerTimes are the recent handler durations behind the estimate.
	HandlerTimes HandlerTimes
	// MaxPendingAbandons bounds the failed abandons kept for retry
	// (DefaultMaxPendingAbandons when zero); see RetryAbandons.
	MaxPendingAbandons int
	pendingAbandons    pendingAbandons

	// TxHandler, when set, is run instead of Handler, inside the store's
	// accept transaction (see TxHandler); the store must be a
	// dedup.TxAcceptor (CheckTxHandler).
	TxHandler TxHandler

	// AuditParts, when set, splits Audit into the store's own table and
	// the rest; with a store that is a dedup.Atomic, the store's records
	// are then written inside the claim's and the accept's transactions
	// (see atomic.go).
	AuditParts *AuditParts
}
