package endpoint_test

import (
	"net/http"
	"testing"

	"github.com/edigateway/gateway/as4"
)

// A message whose eb:From names no trading partner is refused with
// EBMS:0010 as soon as its envelope part is read: its attachments are not
// read (nor spooled), so an unauthenticated stranger costs no more than an
// envelope. The test sends all but the last MiB of a message with a 2 MiB
// attachment and must get the signed error without sending the rest; a
// server that read on would wait for bytes that never come.
func TestUnknownSenderRefusedBeforeAttachments(t *testing.T) {
	k := getKeys(t)
	h := newHarness(t, harnessOptions{})
	_, out := bigMessage(t, k, "stranger-1@nobody", as4.PartyID{Value: "urn:nobody"})
	// A server that read on would wait for bytes that never come.
	resp := sendPart(t, h.url, out, len(out.Body)-1<<20, false)
	code, _ := signalCode(t, k, resp)
	if code != as4.CodeProcessingModeMismatch || resp.Status != http.StatusOK || h.handler.count() != 0 {
		t.Fatalf("unknown sender: HTTP %d, %s, handler ran %d times; want 200, EBMS:0010, none", resp.Status, code, h.handler.count())
	}
}
