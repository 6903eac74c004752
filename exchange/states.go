package exchange

import "fmt"

// state is where one inbound message (a delivery) stands in the pipeline.
// delivery.go moves it from stateReceived to a final state, one step per
// transition, in the order of this table; each step returns the state it
// reached, and a final state carries the answer.
//
// The transitions, with what is recorded in the audit trail (step:decision)
// and what the partner is answered:
//
//	from                  event                                           to                       recorded; answered
//	received              business envelope damaged                       refused                  decision:rejected; negative (Damaged)
//	received              store or audit down (claim not taken)           unavailable              reply:unavailable; 503 Retry-After
//	received              a payload cannot be read back                   failed                   reply:error; 500 with incident
//	received              key held by another delivery                    in-flight                decision:in-flight; 503 Retry-After (lease left at most)
//	received              key accepted before, same payload               duplicate                decision:duplicate; the stored reply again
//	received              key accepted before, other payload (reject)     drift                    decision:drift; negative (Drift, both hashes)
//	received              key accepted before, other payload (quarantine) quarantined              decision:quarantined; payloads kept; negative (Quarantined)
//	received              key accepted before, other payload (accept)     drift-accepted           decision:drift-accepted
//	received              key claimed (new, or its window ran out)        claimed                  decision:new | decision:reused
//	drift-accepted        key claimed again                               claimed                  (nothing more)
//	drift-accepted        key held by another delivery                    in-flight                (nothing); 503 Retry-After
//	drift-accepted        store down                                      unavailable              reply:unavailable; 503
//	claimed               claim decision not recorded                     unavailable              reply:unavailable; 503, claim released
//	claimed               every interchange claimed or seen before        interchanges-claimed     decision:new-interchange | reused-interchange | duplicate-interchange | drift-accepted, one per interchange
//	claimed               an interchange held by another delivery         in-flight                decision:in-flight-interchange; 503, claims released
//	claimed               an interchange accepted with other content      drift | quarantined      as for the key; the interchange's payload only
//	claimed               one interchange twice with different content    refused                  decision:rejected; negative (Damaged)
//	claimed               ledger down                                     unavailable              reply:unavailable; 503, claims released
//	claimed               a negative reply cannot be built                failed                   reply:error; 500 with incident, claims released
//	interchanges-claimed  every payload an interchange accepted before    duplicate-interchange    reply:duplicate-interchange; positive (duplicate-document), no handler
//	interchanges-claimed  handler returned nil                            handled                  (recorded by accept)
//	interchanges-claimed  handler failed or panicked                      abandoned                handler:error; retryable (HandlerFailed: AS2 503, AS4 500), claims released
//	interchanges-claimed  claim lost while the handler ran                claim-lost               reply:unavailable; 503, claims released
//	interchanges-claimed  TxHandler committed with the accept             accepted                 handler:ok, reply:accepted in the accept's transaction
//	interchanges-claimed  TxHandler failed                                abandoned                handler:error; retryable (HandlerFailed: AS2 503, AS4 500), writes rolled back
//	interchanges-claimed  accept transaction failed or found stale        unavailable              reply:unavailable; 503
//	interchanges-claimed  positive reply cannot be built                  failed                   reply:error; 500 with incident, claims released
//	handled               interchanges, then key accepted with the reply  accepted                 handler:ok, reply:accepted; the positive reply
//	handled               audit or store down, or claim found stale       unavailable              reply:unavailable; 503, never a positive reply
//	handled               positive reply cannot be built                  failed                   reply:error; 500 with incident, claims released
//
// A decision that ends a delivery (duplicate, drift, quarantined,
// rejected) is recorded before its answer is built: when that answer cannot
// be built (or the quarantine cannot be written) the delivery ends in failed
// (or unavailable) instead, after the decision's record. A negative or
// duplicate reply's own record is reply:"" with its disposition. The final states are those without a row that leaves them.
// transitions holds this table as data; states_test.go checks that the
// pipeline follows it.
type state int

const (
	stateNone state = iota // no state: a step goes on
	// stateReceived: a verified message handed over by a protocol.
	stateReceived
	// stateClaimed: this delivery holds the message's transport key.
	stateClaimed
	// stateInterchangesClaimed: it holds the claims of the payloads' new
	// interchanges too; those accepted before are set aside.
	stateInterchangesClaimed
	// stateHandled: the business handler succeeded; the outcome must now
	// be recorded even if the partner hangs up.
	stateHandled
	// stateDriftAccepted: the key was accepted with another payload and
	// on_drift: accept processes the message as new.
	stateDriftAccepted

	// stateAccepted (final): recorded as accepted with the positive reply.
	stateAccepted
	// stateDuplicate (final): answered from the stored reply.
	stateDuplicate
	// stateDuplicateInterchange (final): every payload an interchange
	// accepted before under another transport id; no handler ran.
	stateDuplicateInterchange
	// stateInFlight (final): another delivery holds the key or an
	// interchange; 503 with Retry-After.
	stateInFlight
	// stateDrift (final): refused, the key or interchange carried another
	// payload before (on_drift: reject).
	stateDrift
	// stateQuarantined (final): as stateDrift, the payloads kept for an
	// operator (on_drift: quarantine).
	stateQuarantined
	// stateRefused (final): refused for a damaged business envelope.
	stateRefused
	// stateAbandoned (final): the handler failed; claims released so the
	// partner's retransmission is processed.
	stateAbandoned
	// stateClaimLost (final): another delivery took the message over while
	// the handler ran; 503.
	stateClaimLost
	// stateUnavailable (final): the store or the audit could not record the
	// message; 503 with Retry-After, nothing held.
	stateUnavailable
	// stateFailed (final): an answer could not be built; HTTP 500 with an
	// incident reference, nothing held.
	stateFailed

	stateEnd // follows the last state
)

var stateNames = map[state]string{
	stateNone: "none", stateReceived: "received", stateClaimed: "claimed", stateInterchangesClaimed: "interchanges-claimed",
	stateHandled: "handled", stateDriftAccepted: "drift-accepted", stateAccepted: "accepted", stateDuplicate: "duplicate",
	stateDuplicateInterchange: "duplicate-interchange", stateInFlight: "in-flight", stateDrift: "drift",
	stateQuarantined: "quarantined", stateRefused: "refused", stateAbandoned: "abandoned", stateClaimLost: "claim-lost",
	stateUnavailable: "unavailable", stateFailed: "failed",
}

func (s state) String() string {
	if n, ok := stateNames[s]; ok {
		return n
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// The decisions the pipeline records in the audit trail (audit.Record's
// Decision); decisionStates names the state each one marks.
const (
	decisionNew                  = "new"
	decisionReused               = "reused"
	decisionInFlight             = "in-flight"
	decisionDuplicate            = "duplicate"
	decisionDrift                = "drift"
	decisionQuarantined          = "quarantined"
	decisionDriftAccepted        = "drift-accepted"
	decisionRejected             = "rejected"
	decisionNewInterchange       = "new-interchange"
	decisionReusedInterchange    = "reused-interchange"
	decisionDuplicateInterchange = "duplicate-interchange"
	decisionInFlightInterchange  = "in-flight-interchange"
	decisionOK                   = "ok"
	decisionError                = "error"
	decisionAccepted             = "accepted"
	decisionUnavailable          = "unavailable"
)

// decisionStates maps an audit record's step:decision to the states the
// delivery is in, or reaches, when it is written: the interchanges'
// decisions are recorded in stateClaimed while they are claimed one by one.
// A negative or duplicate reply's record (reply: with no decision) belongs
// to the final state that it answers.
var decisionStates = map[string][]state{
	"received:":                                {stateReceived},
	"decision:" + decisionNew:                  {stateClaimed},
	"decision:" + decisionReused:               {stateClaimed},
	"decision:" + decisionInFlight:             {stateInFlight},
	"decision:" + decisionDuplicate:            {stateDuplicate},
	"decision:" + decisionDrift:                {stateDrift},
	"decision:" + decisionQuarantined:          {stateQuarantined},
	"decision:" + decisionDriftAccepted:        {stateDriftAccepted, stateClaimed, stateInterchangesClaimed},
	"decision:" + decisionRejected:             {stateRefused},
	"decision:" + decisionNewInterchange:       {stateClaimed, stateInterchangesClaimed},
	"decision:" + decisionReusedInterchange:    {stateClaimed, stateInterchangesClaimed},
	"decision:" + decisionDuplicateInterchange: {stateClaimed, stateInterchangesClaimed, stateDuplicateInterchange},
	"decision:" + decisionInFlightInterchange:  {stateInFlight},
	"handler:" + decisionOK:                    {stateHandled, stateAccepted},
	"handler:" + decisionError:                 {stateAbandoned},
	"reply:" + decisionAccepted:                {stateAccepted},
	"reply:" + decisionDuplicateInterchange:    {stateDuplicateInterchange},
	"reply:" + decisionUnavailable:             {stateUnavailable, stateClaimLost},
	"reply:" + decisionError:                   {stateFailed},
	"reply:":                                   {stateDuplicate, stateInFlight, stateDrift, stateQuarantined, stateRefused, stateAbandoned},
}

// transition is one row of the table in state's doc comment.
type transition struct {
	from, to state
	event    string
}

// transitions is the table of state's doc comment as data: the steps of
// delivery.go move a delivery only along these rows.
var transitions = []transition{
	{stateReceived, stateRefused, "business envelope damaged"},
	{stateReceived, stateUnavailable, "store or audit down"},
	{stateReceived, stateFailed, "a payload cannot be read back, or a reply cannot be built"},
	{stateReceived, stateInFlight, "key held by another delivery"},
	{stateReceived, stateDuplicate, "key accepted before, same payload"},
	{stateReceived, stateDrift, "key accepted before, other payload (on_drift: reject)"},
	{stateReceived, stateQuarantined, "key accepted before, other payload (on_drift: quarantine)"},
	{stateReceived, stateDriftAccepted, "key accepted before, other payload (on_drift: accept)"},
	{stateReceived, stateClaimed, "key claimed"},
	{stateDriftAccepted, stateClaimed, "key claimed again"},
	{stateDriftAccepted, stateInFlight, "key held by another delivery"},
	{stateDriftAccepted, stateUnavailable, "store down"},
	{stateClaimed, stateUnavailable, "claim decision not recorded, or ledger down"},
	{stateClaimed, stateInterchangesClaimed, "every interchange claimed or seen before"},
	{stateClaimed, stateInFlight, "an interchange held by another delivery"},
	{stateClaimed, stateDrift, "an interchange accepted with other content (on_drift: reject)"},
	{stateClaimed, stateQuarantined, "an interchange accepted with other content (on_drift: quarantine)"},
	{stateClaimed, stateRefused, "one interchange twice with different content"},
	{stateClaimed, stateFailed, "a negative reply cannot be built"},
	{stateInterchangesClaimed, stateDuplicateInterchange, "every payload an interchange accepted before"},
	{stateInterchangesClaimed, stateHandled, "handler returned nil"},
	{stateInterchangesClaimed, stateAbandoned, "handler (or TxHandler) failed or panicked"},
	{stateInterchangesClaimed, stateClaimLost, "claim lost while the handler ran"},
	{stateInterchangesClaimed, stateAccepted, "TxHandler committed with the accept"},
	{stateInterchangesClaimed, stateUnavailable, "accept transaction failed or found stale"},
	{stateInterchangesClaimed, stateFailed, "a reply cannot be built"},
	{stateHandled, stateAccepted, "interchanges, then key accepted with the reply"},
	{stateHandled, stateUnavailable, "audit or store down, or claim found stale"},
	{stateHandled, stateFailed, "positive reply cannot be built"},
}
