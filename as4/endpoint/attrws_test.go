package endpoint_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/edigateway/gateway/as4"
)

// TestAttributeLineBreakInSignedHeader: XML 1.0 §3.3.3 turns a literal line
// break inside an attribute value into a space before any application, and
// so any XML-DSig implementation, sees it. A message whose signed eb:Messaging
// was serialised with a line break inside an attribute value (here an
// eb:Property name) is the same signed document as the one with a space and
// must verify.
func TestAttributeLineBreakInSignedHeader(t *testing.T) {
	t.Parallel()
	k := getKeys(t)
	h := newHarness(t, harnessOptions{})
	c := rsaClient(k)
	c.Encryption = nil
	msg := testMessage("attr-ws@acme.test")
	msg.Properties = []as4.Property{{Name: "original sender", Value: "urn:acme:erp"}}
	out, err := c.Build(msg)
	if err != nil {
		t.Fatal(err)
	}
	m := splitMIME(t, out)
	before := []byte(`name="original sender"`)
	if bytes.Count(m.bodies[0], before) != 1 {
		t.Fatalf("property attribute not found once in\n%s", m.bodies[0])
	}
	m.bodies[0] = bytes.Replace(m.bodies[0], before, []byte("name=\"original\r\nsender\""), 1)
	resp, err := c.Post(context.Background(), h.url, m.join(t, out))
	if err != nil {
		t.Fatalf("rejected: %v\n%s", err, resp.Body)
	}
	if h.handler.count() != 1 {
		t.Fatalf("handler ran %d times", h.handler.count())
	}
	// CR LF is one line break, and so one space.
	if got := h.handler.delivered()[0].msg.Headers.Get("Message-Property"); got != "original sender=urn:acme:erp" {
		t.Errorf("property = %q", got)
	}
}
