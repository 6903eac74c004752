// Package exchange is the receive pipeline shared by every protocol: claim
// the transport key, run the handler once, audit, accept, reply. Protocol
// packages parse and verify a request into a Message and give the pipeline
// the protocol's replies; the pipeline owns every dedup decision.
package exchange

import (
	"bytes"
	"context"
	"io"
	"net/textproto"
	"os"
	"time"

	"gateway/dedup"
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
	body       Body
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

// Handler is the business plug-in: it receives each new message exactly once
// per accepted key. An error (or panic) abandons the claim and answers the
// partner negatively, so that its retransmission is processed anew.
type Handler interface {
	Handle(ctx context.Context, msg *Message) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, msg *Message) error

func (f HandlerFunc) Handle(ctx context.Context, msg *Message) error { return f(ctx, msg) }
