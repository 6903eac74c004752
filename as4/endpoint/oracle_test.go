package endpoint_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/beevik/etree"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/internal/xmlenc"
)

// TestCBCIsNoPaddingOracle replays a captured encrypted message with one
// attachment's EncryptedData switched to AES-CBC and its body replaced by
// IV ‖ one block, for all 256 values of the IV's last byte. Exactly 16 of
// them decrypt to a valid padding; if the answers told those apart from the
// others (EBMS:0101 digest mismatch against EBMS:0102), the endpoint would be
// a CBC padding oracle on the content keys of captured messages. Every
// variant must get the same answer.
func TestCBCIsNoPaddingOracle(t *testing.T) {
	t.Parallel()
	k := getKeys(t)
	h := newHarness(t, harnessOptions{})
	c := rsaClient(k)
	out, err := c.Build(testMessage("cbc-oracle@acme.test"))
	if err != nil {
		t.Fatal(err)
	}
	m := splitMIME(t, out)
	cid := strings.Trim(m.headers[2].Get("Content-ID"), "<>")
	m.editSOAP(t, func(doc *etree.Document) {
		var switched bool
		var walk func(el *etree.Element)
		walk = func(el *etree.Element) {
			if el.Tag == "EncryptedData" && el.NamespaceURI() == xmlenc.NSXEnc {
				cr := find(el, xmlenc.NSXEnc, "CipherReference")
				if cr != nil && strings.Contains(cr.SelectAttrValue("URI", ""), cid) {
					find(el, xmlenc.NSXEnc, "EncryptionMethod").CreateAttr("Algorithm", xmlenc.AlgAES128CBC)
					switched = true
				}
			}
			for _, c := range el.ChildElements() {
				walk(c)
			}
		}
		walk(doc.Root())
		if !switched {
			t.Fatal("no EncryptedData for the second attachment")
		}
	})
	answers := map[string]int{}
	for i := 0; i < 256; i++ {
		block := make([]byte, 32)
		for j := range block {
			block[j] = byte(7*j + 3)
		}
		block[15] = byte(i)
		m.bodies[2] = block
		resp, err := c.Post(context.Background(), h.url, m.join(t, out))
		if err == nil {
			t.Fatalf("accepted: %s", resp.Body)
		}
		code, ae := signalCode(t, k, resp)
		// The incident reference differs per answer by design; it carries
		// nothing about the padding.
		answers[fmt.Sprintf("HTTP %d %s %s", resp.Status, code, incidentRE.ReplaceAllString(ae.Detail, "GW-……"))]++
	}
	if len(answers) != 1 {
		t.Fatalf("answers depend on the CBC padding: %v", answers)
	}
	for a := range answers {
		if !strings.Contains(a, as4.CodePolicyNoncompliance) {
			t.Errorf("answer %q, want EBMS:0103 (AES-CBC is not accepted unless configured)", a)
		}
	}
	if h.handler.count() != 0 {
		t.Fatal("the handler ran")
	}
}
