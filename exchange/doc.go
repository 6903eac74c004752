// Package exchange is the receive pipeline shared by every protocol: claim
// the transport key, run the handler, audit, accept, reply. Protocol
// packages parse and verify a request into a Message and give the pipeline
// the protocol's replies; the pipeline owns every dedup decision.
//
// It is also the plug-in API of the gateway. A business handler receives
// each verified, decrypted and decompressed inbound message (AS2 or AS4) as
// a Message with its Payloads, and decides by its error whether the partner
// gets a positive reply (MDN processed, AS4 receipt) or a retryable refusal
// it retransmits after (AS2: HTTP 503 with Retry-After; AS4: EBMS:0004 with
// HTTP 500):
//
//   - Handler (or HandlerFunc) runs at least once per accepted message; it
//     makes its effects exactly once by keying them on
//     Message.IdempotencyKey or Payload.IdempotencyKey (see ExampleHandler).
//   - TxHandler (or TxHandlerFunc) writes in the store transaction that
//     accepts the message (SQLite or PostgreSQL), exactly once without an
//     idempotency check.
//
// Install one with server.Server's SetHandler or SetTxHandler, or name a
// built-in one in gateway.yaml (handler, handlers).
package exchange
