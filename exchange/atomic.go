package exchange

import (
	"github.com/edigateway/gateway/audit"
)

// AuditParts names the two parts of a Pipeline's Audit: the store's own
// durable table, and everything else (a JSON-lines file, metrics; nil when
// there is nothing else). Set it only when Audit writes to both and fails
// when either fails (not BestEffort).
//
// With a store that is a dedup.Atomic, the pipeline then records a message
// in fewer commits, every one of them all or nothing:
//
//   - the claim: the received record, the claim and (when claimed) the
//     decision record, the claim of the message's first interchange in the
//     ledger and its decision record in one transaction of the store, then
//     these records in the other sinks in one step (audit.WriteBatch: one
//     sync of a JSON-lines file; with an audit.Appender, such as the file,
//     they are appended without a sync of their own and become durable
//     with the handler's record, before the accept); further interchanges
//     of the message are claimed one transaction each;
//   - the accept: the handler's record, the accept of every interchange,
//     the accept of the transport key with the stored reply and the reply
//     record in one transaction; the other sinks' handler record is durable
//     before it starts (written while the reply is signed), their reply
//     record is written once it committed.
//
// So the store never holds a claim without its received and decision
// records, nor an accept without the handler's and the reply's, and a
// positive reply still goes out only once both parts hold every record.
// A failed accept transaction leaves nothing of it and is retried step by
// step (as without AuditParts), so a transport accept found stale still
// leaves the interchanges accepted.
type AuditParts struct {
	Store audit.Sink
	Other audit.Sink
}
