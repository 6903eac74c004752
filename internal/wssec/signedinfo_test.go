package wssec

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/beevik/etree"
)

// TestSignedInfoRejectsForeignChildren: XML-DSig gives ds:SignedInfo only
// CanonicalizationMethod, SignatureMethod and Reference children. Anything
// else is canonicalised before the signature is authenticated, so it is
// refused (EBMS:0103) even when the signer really signed it.
func TestSignedInfoRejectsForeignChildren(t *testing.T) {
	k := key(t, "rsa")
	atts := testAttachments()
	raw := signedMessage(t, k, atts, nil)
	opts := VerifyOptions{Trusted: []*x509.Certificate{k.cert}}
	for _, tc := range []struct {
		name string
		add  func(si *etree.Element)
	}{
		{"ds:Object", func(si *etree.Element) { si.CreateElement("ds:Object").SetText("x") }},
		{"foreign element", func(si *etree.Element) {
			e := si.CreateElement("x:Extra")
			e.CreateAttr("xmlns:x", "urn:extra")
		}},
		{"ds:Reference in another namespace", func(si *etree.Element) {
			e := si.CreateElement("r:Reference")
			e.CreateAttr("xmlns:r", "urn:not-dsig")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := mustParse(t, raw)
			tc.add(find(doc, NamespaceDSig, "SignedInfo"))
			resign(t, doc, k)
			_, err := Verify(doc, atts, opts)
			if Code(err) != CodePolicyNoncompliance || !strings.Contains(err.Error(), "in ds:SignedInfo") {
				t.Fatalf("Verify = %v, want EBMS:0103 unexpected child of SignedInfo", err)
			}
		})
	}
}

// TestSignedInfoStuffedWithNamespacesRejectedQuickly: a SignedInfo padded
// with thousands of namespace-declaring children under declaration-heavy
// ancestors, addressed to a trusted certificate, is refused before any
// canonicalisation.
func TestSignedInfoStuffedWithNamespacesRejectedQuickly(t *testing.T) {
	k := key(t, "rsa")
	atts := testAttachments()
	raw := signedMessage(t, k, atts, nil)
	var pad bytes.Buffer
	for d := 0; d < 40; d++ {
		pad.WriteString("<x")
		for i := 0; i < 60; i++ {
			fmt.Fprintf(&pad, ` xmlns:p%d_%d="u"`, d, i)
		}
		pad.WriteString(">")
	}
	for i := 0; i < 50000; i++ {
		pad.WriteString(`<a xmlns:q="u"/>`)
	}
	for d := 0; d < 40; d++ {
		pad.WriteString("</x>")
	}
	i := bytes.Index(raw, []byte("</ds:SignedInfo>"))
	if i < 0 {
		t.Fatalf("no </ds:SignedInfo> in %s", raw)
	}
	stuffed := append(append(append([]byte(nil), raw[:i]...), pad.Bytes()...), raw[i:]...)
	doc, err := ParseEnvelope(bytes.NewReader(stuffed), Limits{MaxElements: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = Verify(doc, atts, VerifyOptions{Trusted: []*x509.Certificate{k.cert}})
	if !errors.Is(err, ErrPolicyNoncompliance) {
		t.Fatalf("Verify = %v, want policy noncompliance", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("rejecting took %s", d)
	}
}

// TestCanonicalizeCostIsLinear: the canonicaliser keeps its namespace scope
// as per-prefix stacks. Copying the scope map at every declaring element was
// quadratic: declaration-heavy ancestors times many declaring descendants.
func TestCanonicalizeCostIsLinear(t *testing.T) {
	var b bytes.Buffer
	b.WriteString(`<r xmlns="urn:r">`)
	for d := 0; d < 60; d++ {
		b.WriteString("<x")
		for i := 0; i < 60; i++ {
			fmt.Fprintf(&b, ` xmlns:p%d_%d="u"`, d, i)
		}
		b.WriteString(">")
	}
	for i := 0; i < 100000; i++ {
		b.WriteString(`<a xmlns:q="u"/>`)
	}
	b.WriteString(`<q:b xmlns:q="urn:q"/>`)
	for d := 0; d < 60; d++ {
		b.WriteString("</x>")
	}
	b.WriteString(`</r>`)
	doc, err := parseXML(b.Bytes(), Limits{MaxElements: 1 << 20, MaxAttributes: 128})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []c14nMethod{{exclusive: true}, {}} {
		start := time.Now()
		out, err := canonicalize(doc.Root(), m, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("canonicalize (exclusive=%v) took %s", m.exclusive, d)
		}
		// Exclusive c14n renders no unused declaration; inclusive renders
		// each leaf's own redundant-free xmlns:q once per leaf.
		wantLeaf, wantLast := `<a></a>`, `<q:b xmlns:q="urn:q"></q:b></x>`
		if !m.exclusive {
			wantLeaf = `<a xmlns:q="u"></a>`
		}
		if n := bytes.Count(out, []byte(wantLeaf)); n != 100000 {
			t.Errorf("exclusive=%v: %d leaves %s, want 100000", m.exclusive, n, wantLeaf)
		}
		if !bytes.Contains(out, []byte(wantLast)) {
			t.Errorf("exclusive=%v: no %s in output", m.exclusive, wantLast)
		}
	}
}

// TestCanonicalizeScopeStack checks the namespace rendering rules the
// per-prefix stacks implement: inclusive c14n renders every binding in scope
// at the apex and afterwards only changed bindings; exclusive c14n renders a
// binding where it is first used and again only when it changes, and a
// binding popped at the end of a subtree is rendered again in a sibling.
func TestCanonicalizeScopeStack(t *testing.T) {
	const in = `<o xmlns:a="urn:a" xmlns:z="urn:z"><r xmlns="urn:d" xmlns:b="urn:b">` +
		`<a:c xmlns:a="urn:a2"><a:d xmlns:a="urn:a2"/><e xmlns="" a:x="1"/></a:c>` +
		`<a:f/><b:g xmlns:b="urn:b"/></r></o>`
	doc := etree.NewDocument()
	if err := doc.ReadFromString(in); err != nil {
		t.Fatal(err)
	}
	r := doc.Root().ChildElements()[0]
	for _, tc := range []struct {
		m          c14nMethod
		prefixList string
		want       string
	}{
		{c14nMethod{}, "", `<r xmlns="urn:d" xmlns:a="urn:a" xmlns:b="urn:b" xmlns:z="urn:z">` +
			`<a:c xmlns:a="urn:a2"><a:d></a:d><e xmlns="" a:x="1"></e></a:c>` +
			`<a:f></a:f><b:g></b:g></r>`},
		{c14nMethod{exclusive: true}, "", `<r xmlns="urn:d">` +
			`<a:c xmlns:a="urn:a2"><a:d></a:d><e xmlns="" a:x="1"></e></a:c>` +
			`<a:f xmlns:a="urn:a"></a:f><b:g xmlns:b="urn:b"></b:g></r>`},
		{c14nMethod{exclusive: true}, "z #default", `<r xmlns="urn:d" xmlns:z="urn:z">` +
			`<a:c xmlns:a="urn:a2"><a:d></a:d><e xmlns="" a:x="1"></e></a:c>` +
			`<a:f xmlns:a="urn:a"></a:f><b:g xmlns:b="urn:b"></b:g></r>`},
	} {
		out, err := canonicalize(r, tc.m, tc.prefixList, nil)
		if err != nil {
			t.Fatal(err)
		}
		if string(out) != tc.want {
			t.Errorf("exclusive=%v %q:\n got %s\nwant %s", tc.m.exclusive, tc.prefixList, out, tc.want)
		}
	}
}
