package main

import (
	"fmt"
	"path/filepath"
	"testing"
)

// gatewayYAML is the gateway.yaml of a test gateway: listen, store, the
// partner directory (the fixture's when partners is ""), the fixture's
// identity (AS2 id GATEWAY, party urn:demo:gateway, its key pair) and
// rest, the test's own settings (handler, lease, timeouts, …).
func gatewayYAML(t *testing.T, listen, store, partners, rest string) []byte {
	t.Helper()
	fixture := filepath.Dir(demoConfig(t))
	if partners == "" {
		partners = filepath.Join(fixture, "partners")
	}
	return fmt.Appendf(nil, `listen: %s
store: %s
partners: %s
identity:
  as2_id: GATEWAY
  party_id: urn:demo:gateway
  party_type: urn:oasis:names:tc:ebcore:partyid-type:unregistered
  keys:
    - cert: %s
      key: %s
%s`, listen, store, partners, filepath.Join(fixture, "keys", "gateway.pem"), filepath.Join(fixture, "keys", "gateway.key"), rest)
}
