package as4

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/edigateway/gateway/internal/limits"
)

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// xmlShapes are envelopes of n small nodes of each kind that costs heap.
var xmlShapes = map[string]func(n int) string{
	"elements with an attribute": func(n int) string { return strings.Repeat(`<a b=""/>`, n) },
	"empty elements":             func(n int) string { return strings.Repeat(`<a/>`, n) },
	"elements and line breaks":   func(n int) string { return strings.Repeat("<a/>\n", n) },
	"elements with text":         func(n int) string { return strings.Repeat("<a>x</a>", n) },
	"comments":                   func(n int) string { return strings.Repeat("<!---->", n) },
	"processing instructions":    func(n int) string { return strings.Repeat("<?a?>", n) },
	"128 attributes": func(n int) string {
		var b strings.Builder
		for range n / 128 {
			b.WriteString("<a")
			for j := range 128 {
				fmt.Fprintf(&b, ` b%d=""`, j)
			}
			b.WriteString("/>")
		}
		return b.String()
	},
	"nested": func(n int) string {
		return strings.Repeat(strings.Repeat("<a>", 60)+strings.Repeat("</a>", 60), n/60)
	},
}

func soapAround(body string) []byte {
	return []byte(`<S:Envelope xmlns:S="http://www.w3.org/2003/05/soap-envelope"><S:Body>` + body + `</S:Body></S:Envelope>`)
}

// TestXMLTreeCost: what ParseXMLCharged charges for a parsed tree covers
// the heap the tree really takes, for every kind of node a partner can
// multiply (issue 22 item 1: 249 000 "<a b=""/>" cost 28 times their
// bytes while the budget reserved 4).
func TestXMLTreeCost(t *testing.T) {
	for name, f := range xmlShapes {
		data := soapAround(f(60000))
		var charged int64
		before := liveHeap()
		doc, err := ParseXMLCharged(data, 0, func(n int64) error { charged += n; return nil })
		live := int64(liveHeap()) - int64(before)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		runtime.KeepAlive(doc)
		t.Logf("%-28s %8d bytes: tree %9d bytes, charged %9d", name, len(data), live, charged)
		if charged < live {
			t.Errorf("%s: charged %d bytes for a tree of %d", name, charged, live)
		}
	}
}

// TestXMLTreeCostLimit: the envelope (249 000 "<a b=""/>", 2.2 MB,
// under the element, attribute and size limits) is refused as EBMS:0009
// before its tree passes MaxXMLTreeBytes; a charge that fails with
// limits.ErrBusy ends the parse with an error that still says so.
func TestXMLTreeCostLimit(t *testing.T) {
	data := soapAround(strings.Repeat(`<a b=""/>`, 249000))
	var charged int64
	_, err := ParseXMLCharged(data, 0, func(n int64) error { charged += n; return nil })
	var ae *Error
	if !errors.Is(err, ErrLimit) || !errors.As(err, &ae) || ae.Code != CodeInvalidHeader {
		t.Fatalf("err %v, want EBMS:0009 wrapping ErrLimit", err)
	}
	if charged > MaxXMLTreeBytes {
		t.Fatalf("charged %d bytes, more than %d", charged, MaxXMLTreeBytes)
	}
	busy := fmt.Errorf("test: %w", limits.ErrBusy)
	_, err = ParseXMLCharged(data, 0, func(n int64) error { return busy })
	if !errors.Is(err, limits.ErrBusy) || !errors.As(err, &ae) || ae.Code != CodeInvalidHeader {
		t.Fatalf("err %v, want EBMS:0009 wrapping limits.ErrBusy", err)
	}
}

// FuzzXMLTreeBound: what ParseXMLCharged charges for any input stays within
// XMLTreeBound of its length, the reservation the endpoint makes before it
// parses an envelope.
func FuzzXMLTreeBound(f *testing.F) {
	for _, shape := range xmlShapes {
		f.Add(soapAround(shape(50)))
	}
	f.Add([]byte("<a>x<a>x<a>x</a>x</a>x</a>"))
	f.Add([]byte("<a><![CDATA[]]><![CDATA[]]><b/>\n<b/>\n</a>"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var charged int64
		ParseXMLCharged(data, 0, func(n int64) error { charged += n; return nil })
		if bound := XMLTreeBound(len(data)); charged > bound {
			t.Fatalf("%d bytes charged for %d bytes of XML, more than the bound %d", charged, len(data), bound)
		}
	})
}
