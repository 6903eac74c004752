package exchange

import "github.com/edigateway/gateway/dedup"

// PayloadInterchange returns the business interchange found in payload i of
// m (matched by the payload's idempotency key, which is its interchange key
// when it carries one), and whether there is one.
func (m *Message) PayloadInterchange(i int) (dedup.Interchange, bool) {
	if i < 0 || i >= len(m.Payloads) || m.Payloads[i].IdempotencyKey == "" {
		return dedup.Interchange{}, false
	}
	for _, ic := range m.Interchanges {
		if string(ic.Key) == m.Payloads[i].IdempotencyKey {
			return ic, true
		}
	}
	return dedup.Interchange{}, false
}
