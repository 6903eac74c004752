package dedup

import (
	"context"
	"errors"
	"time"
)

// Interchange identifies a business interchange in the ledger: the fields of
// its EDI envelope that make up the business key, as extracted from the
// payload (package envelope).
type Interchange struct {
	Key       Key
	Partner   string
	Standard  string
	Sender    string
	Recipient string
	Reference string
	Date      string
	Type      string
}

// InterchangeClaim asks the ledger to claim an interchange for one delivery.
type InterchangeClaim struct {
	Interchange
	PayloadSHA256 string
	// TransportKey and MessageID name the delivery that carries it.
	TransportKey Key
	MessageID    string
	// Window: an accepted interchange first seen more than Window ago is
	// claimed anew (reuse of the reference). Zero: unique forever (PEPPOL).
	// The window recorded with an accepted row counts too: the claim is
	// decided with LongerWindow(recorded, Window), so a resend over a
	// protocol with a shorter window is still a duplicate. A new row records
	// Window.
	Window time.Duration
	// Supersede takes over an accepted row whatever its window (a drifted
	// payload accepted as new under on_drift: accept); the answer is
	// Claimed with Reused set unless the row is in flight.
	Supersede bool
}

// LongerWindow is the window an accepted interchange is judged by: the
// longer of the one recorded when it was claimed and the one a new delivery
// asks for, zero (forever) when either is.
func LongerWindow(recorded, requested time.Duration) time.Duration {
	if recorded <= 0 || requested <= 0 {
		return 0
	}
	return max(recorded, requested)
}

// InterchangeRecord is the ledger's evidence for one interchange.
type InterchangeRecord struct {
	Interchange
	State         string // claimed, accepted, abandoned
	PayloadSHA256 string
	FirstSeen     time.Time
	LastSeen      time.Time
	// Retries counts deliveries answered as duplicates (or drift) after the first.
	Retries int
	// MessageIDs are the transport ids that carried it, oldest first (at most
	// MaxLedgerMessageIDs are kept).
	MessageIDs []string
	// Window the interchange was accepted with (0 = forever).
	Window time.Duration
	// Replaced is set on rows of ReplacedInterchanges: when the claim that
	// replaced this accepted row took the interchange.
	Replaced time.Time
}

// MaxLedgerMessageIDs bounds the transport ids kept per interchange.
const MaxLedgerMessageIDs = 64

// InterchangeQuery selects ledger rows for evidence export; empty fields
// match anything.
type InterchangeQuery struct {
	Partner   string
	Reference string
	MessageID string
	From, To  time.Time // on LastSeen
	Limit     int
}

// ErrNotFound is returned for an unknown ledger key.
var ErrNotFound = errors.New("dedup: not found")

// Ledger is the business-level dedup contract, kept in the same database as
// the Store. Its claim follows the Store's rules (lease, token
// compare-and-set, window reuse); in addition a Duplicate (or InFlight-free
// drift) answer records the delivery: LastSeen = now, Retries + 1, and the
// message id appended to MessageIDs when new.
type Ledger interface {
	ClaimInterchange(ctx context.Context, c InterchangeClaim) (Decision, error)
	AcceptInterchange(ctx context.Context, key Key, token Token) error
	AbandonInterchange(ctx context.Context, key Key, token Token) error
	// Interchange returns one record or ErrNotFound.
	Interchange(ctx context.Context, key Key) (InterchangeRecord, error)
	FindInterchanges(ctx context.Context, q InterchangeQuery) ([]InterchangeRecord, error)
	// ExpiredInterchanges lists accepted rows whose window has passed and
	// which were last seen before the given time; never rows with a zero
	// (forever) window, never claims in progress.
	ExpiredInterchanges(ctx context.Context, before time.Time, limit int) ([]InterchangeRecord, error)
	// DeleteInterchanges removes the given rows, each only if it is still
	// the same row (same FirstSeen) so that a reuse claimed meanwhile stays.
	DeleteInterchanges(ctx context.Context, recs []InterchangeRecord) (int64, error)
	// ReplacedInterchanges lists accepted rows that a later claim replaced
	// (reuse after the window, Supersede), each with Replaced set. The
	// ledger keeps the replaced row atomically with the replacing claim, so
	// that no evidence is lost, until DeleteReplaced (the purge archives
	// them first). q filters as for FindInterchanges; rows come ordered by
	// Replaced, then key.
	ReplacedInterchanges(ctx context.Context, q InterchangeQuery) ([]InterchangeRecord, error)
	// DeleteReplaced removes the given replaced rows (matched by key,
	// FirstSeen and Replaced) and returns how many it removed.
	DeleteReplaced(ctx context.Context, recs []InterchangeRecord) (int64, error)
}
