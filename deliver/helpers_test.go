package deliver

import (
	"crypto/sha256"
	"encoding/hex"
	"net/textproto"
	"strings"
	"time"

	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/exchange"
)

func testPayload(name, ct, body string) exchange.Payload {
	sum := sha256.Sum256([]byte(body))
	return exchange.NewPayload(exchange.Payload{Filename: name, ContentType: ct, Size: int64(len(body)),
		SHA256: hex.EncodeToString(sum[:])}, exchange.MemoryBody(body))
}

// testMessage is an AS4 message of two payloads, the first an EDIFACT
// interchange, with keys set as the pipeline sets them.
func testMessage() *exchange.Message {
	m := &exchange.Message{Partner: "acme", Protocol: exchange.AS4, MessageID: "m-1@acme.example",
		Received:     time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC),
		Headers:      textproto.MIMEHeader{"Service": {"urn:invoicing"}, "Action": {"Deliver"}},
		TransportKey: dedup.TransportKey("as4", "as4", "urn:acme", "m-1@acme.example"),
		Payloads: []exchange.Payload{testPayload("rechnung-ü\r\nX-Evil: 1.edi", "application/EDIFACT", "UNB+UNOC:3+ACME+US+261201:0900+REF1'"),
			testPayload("", "text/plain; charset=utf-8", "notes")}}
	m.IdempotencyKey = string(m.TransportKey)
	m.Payloads[0].IdempotencyKey = strings.Repeat("ab", 32)
	m.Payloads[1].IdempotencyKey = strings.Repeat("cd", 32)
	m.Interchanges = []dedup.Interchange{{Key: dedup.Key(m.Payloads[0].IdempotencyKey), Standard: "EDIFACT",
		Sender: "ACME", Recipient: "US", Reference: "REF1"}}
	return m
}
