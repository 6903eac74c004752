// Package deliver holds the built-in hand-offs besides the inbox directory:
// HTTP posts to a business endpoint (HTTP), a local program per payload
// (Exec), and the Router that picks a handler per message by partner,
// protocol, AS4 service/action and content type.
//
// The http and exec handlers deliver each payload on its own (a POST or a
// program run per payload, in order) with the same metadata: HTTP headers
// X-Gateway-… or environment variables GATEWAY_…, and the payload's
// idempotency key. A message fails as a whole when one payload fails; the
// partner's retransmission then delivers every payload again with the same
// keys, so the receiving side must be idempotent on them.
package deliver

import (
	"strconv"
	"strings"
	"time"

	"github.com/edigateway/gateway/exchange"
)

// Field is one metadata value of a payload, with its HTTP header and
// environment variable names.
type Field struct {
	Header, Env, Value string
}

// Fields returns the metadata of payload i of m, empty values left out.
// Values are printable ASCII: other bytes and '%' are percent-encoded
// (%XX, as in a URL), so that a partner's message id or file name can
// neither break a header nor an environment entry.
func Fields(m *exchange.Message, i int) []Field {
	p := m.Payloads[i]
	var out []Field
	add := func(name, v string) {
		if v == "" {
			return
		}
		h := "X-Gateway-" + name
		switch name {
		case "Idempotency-Key":
			h = name
		}
		out = append(out, Field{Header: h, Env: "GATEWAY_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_")), Value: Escape(v)})
	}
	add("Partner", m.Partner)
	add("Protocol", string(m.Protocol))
	add("Message-Id", m.MessageID)
	add("Message-Idempotency-Key", m.IdempotencyKey)
	add("Idempotency-Key", p.IdempotencyKey)
	if !m.Received.IsZero() {
		add("Received", m.Received.UTC().Format(time.RFC3339Nano))
	}
	add("Payload-Index", strconv.Itoa(i+1))
	add("Payload-Count", strconv.Itoa(len(m.Payloads)))
	add("Content-Type", p.ContentType)
	add("Filename", p.Filename)
	add("Content-Id", p.ContentID)
	add("Size", strconv.FormatInt(p.Size, 10))
	add("Sha256", p.SHA256)
	if m.Protocol == exchange.AS4 {
		add("Service", m.Headers.Get("Service"))
		add("Action", m.Headers.Get("Action"))
		add("Conversation-Id", m.Headers.Get("ConversationId"))
	}
	if ic, ok := m.PayloadInterchange(i); ok {
		add("Interchange-Key", string(ic.Key))
		add("Interchange-Standard", ic.Standard)
		add("Interchange-Sender", ic.Sender)
		add("Interchange-Recipient", ic.Recipient)
		add("Reference", ic.Reference)
	}
	return out
}

// Escape percent-encodes every byte of s outside printable ASCII, and '%'.
func Escape(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '%' {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// printable returns at most n bytes of b for a log line, non-printable
// bytes escaped, with a note of what was cut.
func printable(b []byte, n int, total int64) string {
	s := b
	if len(s) > n {
		s = s[:n]
	}
	out := Escape(string(s))
	if total > int64(len(s)) {
		out += "… (" + strconv.FormatInt(total, 10) + " bytes)"
	}
	return out
}
