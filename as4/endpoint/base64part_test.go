package endpoint_test

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/as4/client"
)

// TestBase64PartSameVerdictHoweverItArrives: through the real endpoint, a
// known partner's attachment sent with Content-Transfer-Encoding: base64
// is received when its base64 is well formed, and refused with the signed
// EBMS:0007 MimeInconsistency (the handler never runs) when base64 text
// goes on after '=' padding, whether the body arrives in one write or a
// byte at a time. (The endpoint's buffered MIME reading already gave the
// base64 decoder large reads, so this held before base64body's own guard;
// as4.TestReadMessageBase64TextAfterPaddingSameVerdictHoweverItArrives
// shows the reader-level difference.)
func TestBase64PartSameVerdictHoweverItArrives(t *testing.T) {
	k := getKeys(t)
	h := newHarness(t, harnessOptions{})
	build := func(id string, encode func(b []byte) string) *client.Outgoing {
		t.Helper()
		m := testMessage(id)
		m.Payloads = []client.Payload{{MimeType: "application/edifact", Data: []byte("UNB+UNOC:3+ACME+GATEWAY+261205:1200+1'")}}
		out, err := rsaClient(k).Build(m)
		if err != nil {
			t.Fatal(err)
		}
		mm := splitMIME(t, out)
		last := len(mm.bodies) - 1
		mm.headers[last].Set("Content-Transfer-Encoding", "base64")
		mm.bodies[last] = []byte(encode(mm.bodies[last]))
		return mm.join(t, out)
	}
	wrapped := func(b []byte) string {
		s := base64.StdEncoding.EncodeToString(b)
		var lines []string
		for len(s) > 76 {
			lines, s = append(lines, s[:76]), s[76:]
		}
		return strings.Join(append(lines, s), "\r\n")
	}
	for _, piece := range []int{1 << 20, 1} {
		before := h.handler.count()
		good := build(fmt.Sprintf("b64-good-%d@acme.test", piece), wrapped)
		if resp := sendRaw(t, h.url, good.ContentType, len(good.Body), good.Body, piece, false); resp.Status != 200 || h.handler.count() != before+1 {
			t.Fatalf("well-formed base64 part in writes of %d bytes: HTTP %d, handler ran %d times\n%s", piece, resp.Status, h.handler.count()-before, resp.Body)
		}
		bad := build(fmt.Sprintf("b64-bad-%d@acme.test", piece), func(b []byte) string { return "QQ==\r\n" + wrapped(b) })
		resp := sendRaw(t, h.url, bad.ContentType, len(bad.Body), bad.Body, piece, false)
		if code, ae := signalCode(t, k, resp); code != as4.CodeMimeInconsistency || h.handler.count() != before+1 {
			t.Fatalf("base64 text after padding in writes of %d bytes: HTTP %d, %s (%v), handler ran %d times; want EBMS:0007, not run",
				piece, resp.Status, code, ae, h.handler.count()-before-1)
		}
	}
}
