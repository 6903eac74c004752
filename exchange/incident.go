package exchange

import (
	"crypto/rand"
)

// incidentAlphabet is Crockford's base 32 without the letters that read as
// digits (I, L, O) or spell words (U): easy to read out on the phone.
const incidentAlphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// NewIncident returns a fresh incident reference such as "GW-7K3QX9": the
// handle a partner quotes for a refusal. Every refusal's reply carries one,
// and the log line and the audit record that hold the detail carry the same
// one, so that the operator finds what the partner was not told. Six
// characters of base 32 (30 random bits) are enough to tell incidents apart
// in a log; they are no secret and no key.
func NewIncident() string {
	var b [6]byte
	rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	out := []byte("GW-")
	for _, c := range b {
		out = append(out, incidentAlphabet[c&31])
	}
	return string(out)
}

// IncidentNote is how a reply quotes an incident: "incident GW-7K3QX9,
// quote it when you ask us about this message".
func IncidentNote(incident string) string {
	return "incident " + incident + ", quote it when you ask us about this message"
}
