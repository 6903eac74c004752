package wssec

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

// TestIDIndexCostIsLinear: the id index is built over the whole,
// unauthenticated envelope. Copying the namespace scope at every element
// that declares a namespace made deep declaration-heavy ancestors times many
// declaring leaves quadratic (this 3.6 MB document took over two minutes).
func TestIDIndexCostIsLinear(t *testing.T) {
	var b bytes.Buffer
	b.WriteString(`<S:Envelope xmlns:S="http://www.w3.org/2003/05/soap-envelope"><S:Body>`)
	for d := 0; d < 60; d++ {
		b.WriteString("<x")
		for i := 0; i < 120; i++ {
			fmt.Fprintf(&b, ` xmlns:p%d_%d="u"`, d, i)
		}
		b.WriteString(">")
	}
	for i := 0; i < 200000; i++ {
		b.WriteString(`<a xmlns:q="u"/>`)
	}
	b.WriteString(`<a xmlns:w="` + NamespaceWSU + `" w:Id="x1"/><a xmlns:w="urn:other" w:Id="x1"/>`)
	for d := 0; d < 60; d++ {
		b.WriteString("</x>")
	}
	b.WriteString(`</S:Body></S:Envelope>`)
	doc, err := parseXML(b.Bytes(), Limits{MaxElements: 1 << 20, MaxAttributes: 128})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	idx, err := buildIDIndex(doc.Root())
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("id index took %s", d)
	}
	// Only the wsu:Id counts; the same local name in another namespace not.
	if len(idx) != 1 || idx["x1"] == nil || idx["x1"].SelectAttrValue("xmlns:w", "") != NamespaceWSU {
		t.Errorf("index = %v", idx)
	}
}
