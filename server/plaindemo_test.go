package server

import (
	"strings"
	"testing"
)

// plainDemoPartners is the demo partner directory with the demo partner
// opting out of the encryption partners require by default, AS2 and AS4:
// the memory, spool and streaming measurements and the console's tests
// send signed messages that are not encrypted (as the demo partner
// accepted before encryption became the default).
func plainDemoPartners(t testing.TB) string { return demoPartners(t, optOutOfEncryption) }

// optOutOfEncryption adds require_encryption: false to the demo partner
// file's as2 and as4 sections.
func optOutOfEncryption(y string) string {
	y = strings.Replace(y, "  as2_id: DEMO\n", "  as2_id: DEMO\n  require_encryption: false\n", 1)
	return strings.Replace(y, "  party_id: urn:demo:partner\n", "  party_id: urn:demo:partner\n  require_encryption: false\n", 1)
}
