package exchange

import (
	"bytes"
	"context"
	"io"
	"net/textproto"
	"os"
	"strconv"
	"time"

	"github.com/edigateway/gateway/dedup"
)

// Protocol names the transport a message arrived on.
type Protocol string

const (
	AS2 Protocol = "as2"
	AS4 Protocol = "as4"
)

// Message is one verified, decrypted, decompressed inbound business message
// as a Handler sees it.
type Message struct {
	// Partner is the configured partner id (the partner YAML's id).
	Partner  string
	Protocol Protocol
	// MessageID is the transport message id, normalised (no angle brackets).
	MessageID string
	Received  time.Time
	// Headers are the transport headers relevant to the business side (AS2
	// headers, or ebMS values such as Service, Action, ConversationId).
	Headers  textproto.MIMEHeader
	Payloads []Payload
	// TransportKey is the dedup key of (protocol, sender, message id).
	TransportKey dedup.Key
	// IdempotencyKey is the stable key of this message for making the
	// handler's external effects idempotent: every retransmission of the
	// message (same sender, same message id; after a handler failure, a
	// crash or a store outage) carries the same value. It is the transport
	// key (64 lowercase hex, the audit records' "key"). For per-document
	// effects use each Payload's IdempotencyKey, which also survives a
	// resend of an interchange under a new message id.
	IdempotencyKey string
	// Interchanges are the business envelopes found in the payloads, in
	// payload order (payloads without an envelope have none).
	Interchanges []dedup.Interchange
	// DuplicatePayloads are payloads left out of Payloads because their
	// interchange was already accepted under another transport id.
	DuplicatePayloads []Payload
}

// Payload is one business document of a message.
type Payload struct {
	// ContentID is the MIME Content-ID without angle brackets (AS4 parts).
	ContentID   string
	ContentType string
	// Filename comes from Content-Disposition when the sender gave one.
	Filename string
	Size     int64
	// SHA256 is the lowercase hex SHA-256 of the payload bytes.
	SHA256 string
	// Properties are protocol metadata of this part (AS4 PartProperties).
	Properties map[string]string
	// IdempotencyKey is the stable key of this payload for making external
	// effects idempotent (64 lowercase hex). A payload carrying a business
	// interchange has its interchange key (the audit records'
	// "interchange_key"), the same for a retransmission and for the same
	// interchange resent under a new message id; any other payload has a key
	// derived from the message's IdempotencyKey and its position in the
	// message as sent. Under on_drift: accept a changed payload keeps the
	// key of the id or reference it reuses; compare SHA256 as well if such a
	// payload must be processed again.
	IdempotencyKey string
	body           Body
}

// Body is where a payload's bytes live: memory for small payloads, a spool
// file for large ones, so that large messages need not sit in memory.
type Body interface {
	Open() (io.ReadCloser, error)
}

// NewPayload returns a payload reading from b.
func NewPayload(p Payload, b Body) Payload { p.body = b; return p }

// Open returns a fresh reader over the payload's bytes. Each call starts at
// the first byte.
func (p Payload) Open() (io.ReadCloser, error) {
	if p.body == nil {
		return io.NopCloser(bytes.NewReader(nil)), nil
	}
	return p.body.Open()
}

// MemoryBody is a payload held in memory.
type MemoryBody []byte

func (b MemoryBody) Open() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }

// FileBody is a payload spooled to a file.
type FileBody string

func (f FileBody) Open() (io.ReadCloser, error) { return os.Open(string(f)) }

// Handler is the business plug-in. The gateway accepts each message exactly
// once (one positive reply recorded per key; retransmissions get that reply
// and no handler run), but the handler itself runs at least once per
// accepted key: a crash or store outage between its side effect and the
// accept runs it again for the partner's retransmission. It is exactly once
// only when the handler is idempotent on the keys it is given
// (Message.IdempotencyKey, Payload.IdempotencyKey). An error (or panic)
// abandons the claim and answers the partner with a refusal that asks for a
// retransmission, which is processed anew: AS2 answers HTTP 503 with
// Retry-After and the incident, and sends no MDN (whatever MDN was asked
// for: senders take a negative MDN as final and never retransmit); AS4
// answers a signed EBMS:0004 error with HTTP 500 and a SOAP Receiver fault.
// Nothing is stored as the message's reply. A handler whose data lives in the
// gateway's database can be a TxHandler instead: exactly once without
// idempotency.
type Handler interface {
	Handle(ctx context.Context, msg *Message) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, msg *Message) error

func (f HandlerFunc) Handle(ctx context.Context, msg *Message) error { return f(ctx, msg) }

// payloadKeyTag versions the idempotency key of a payload without an
// interchange; changing its encoding would give retransmissions of messages
// received by an older gateway new keys.
const payloadKeyTag = "gateway/payload-idempotency-key/v1"

// setIdempotencyKeys gives the message and each payload (in the order sent,
// before duplicates are moved out) their idempotency keys; ics are the
// payloads' interchanges.
func setIdempotencyKeys(m *Message, ics []payloadInterchange) {
	m.IdempotencyKey = string(m.TransportKey)
	byPayload := map[int]dedup.Key{}
	for _, pic := range ics {
		byPayload[pic.payload] = pic.ic.Key
	}
	for i := range m.Payloads {
		if k, ok := byPayload[i]; ok {
			m.Payloads[i].IdempotencyKey = string(k)
			continue
		}
		m.Payloads[i].IdempotencyKey = string(dedup.HashFields(payloadKeyTag, m.IdempotencyKey, strconv.Itoa(i+1)))
	}
}
