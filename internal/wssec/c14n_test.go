package wssec

import (
	"bytes"
	"testing"

	"github.com/beevik/etree"
	dsig "github.com/russellhaering/goxmldsig"
	"github.com/russellhaering/goxmldsig/etreeutils"

	"github.com/edigateway/gateway/internal/interop"
)

func etreeDoc(t testing.TB, s string) *etree.Document {
	t.Helper()
	doc := etree.NewDocument()
	if err := doc.ReadFromString(s); err != nil {
		t.Fatal(err)
	}
	return doc
}

// W3C Canonical XML 1.0 §3.3 (start and end tags, namespace handling),
// without its DTD.
const c14nExample33 = `<doc>
   <e1   />
   <e2   ></e2>
   <e3   name = "elem3"   id="elem3"   />
   <e4   name="elem4"   id="elem4"   ></e4>
   <e5 a:attr="out" b:attr="sorted" attr2="all" attr="I'm"
      xmlns:b="http://www.ietf.org"
      xmlns:a="http://www.w3.org"
      xmlns="http://example.org"/>
   <e6 xmlns="" xmlns:a="http://www.w3.org">
      <e7 xmlns="http://www.ietf.org">
         <e8 xmlns="" xmlns:a="http://www.w3.org">
            <e9 xmlns="" xmlns:a="http://www.ietf.org"/>
         </e8>
      </e7>
   </e6>
</doc>`

func TestC14NSpecExample33(t *testing.T) {
	doc := etreeDoc(t, c14nExample33)
	inclusive := `<doc>
   <e1></e1>
   <e2></e2>
   <e3 id="elem3" name="elem3"></e3>
   <e4 id="elem4" name="elem4"></e4>
   <e5 xmlns="http://example.org" xmlns:a="http://www.w3.org" xmlns:b="http://www.ietf.org" attr="I'm" attr2="all" b:attr="sorted" a:attr="out"></e5>
   <e6 xmlns:a="http://www.w3.org">
      <e7 xmlns="http://www.ietf.org">
         <e8 xmlns="">
            <e9 xmlns:a="http://www.ietf.org"></e9>
         </e8>
      </e7>
   </e6>
</doc>`
	exclusive := `<doc>
   <e1></e1>
   <e2></e2>
   <e3 id="elem3" name="elem3"></e3>
   <e4 id="elem4" name="elem4"></e4>
   <e5 xmlns="http://example.org" xmlns:a="http://www.w3.org" xmlns:b="http://www.ietf.org" attr="I'm" attr2="all" b:attr="sorted" a:attr="out"></e5>
   <e6>
      <e7 xmlns="http://www.ietf.org">
         <e8 xmlns="">
            <e9></e9>
         </e8>
      </e7>
   </e6>
</doc>`
	for _, tc := range []struct {
		m    c14nMethod
		want string
	}{{c14nMethod{}, inclusive}, {c14nMethod{v11: true}, inclusive}, {c14nMethod{exclusive: true}, exclusive}} {
		got, err := canonicalizeDocument(doc, tc.m)
		if err != nil || string(got) != tc.want {
			t.Errorf("%+v: %v\n%s\nwant\n%s", tc.m, err, got, tc.want)
		}
	}
}

// W3C Canonical XML 1.0 §3.1 (PIs, comments, outside of document element),
// without its DOCTYPE.
func TestC14NSpecExample31(t *testing.T) {
	doc := etreeDoc(t, `<?xml version="1.0"?>

<?xml-stylesheet   href="doc.xsl"
   type="text/xsl"   ?>

<doc>Hello, world!<!-- Comment 1 --></doc>

<?pi-without-data     ?>

<!-- Comment 2 -->

<!-- Comment 3 -->`)
	without := "<?xml-stylesheet href=\"doc.xsl\"\n   type=\"text/xsl\"   ?>\n<doc>Hello, world!</doc>\n<?pi-without-data?>"
	with := "<?xml-stylesheet href=\"doc.xsl\"\n   type=\"text/xsl\"   ?>\n<doc>Hello, world!<!-- Comment 1 --></doc>\n<?pi-without-data?>\n<!-- Comment 2 -->\n<!-- Comment 3 -->"
	if got, err := canonicalizeDocument(doc, c14nMethod{}); err != nil || string(got) != without {
		t.Errorf("without comments: %v\n%q", err, got)
	}
	if got, err := canonicalizeDocument(doc, c14nMethod{comments: true}); err != nil || string(got) != with {
		t.Errorf("with comments: %v\n%q", err, got)
	}
}

// Exclusive XML Canonicalization §2.2: a subtree in its document context.
func TestExcC14NSpecSubtree(t *testing.T) {
	doc := etreeDoc(t, `<n0:local xmlns:n0="foo:bar" xmlns:n3="ftp://example.org"><n1:elem2 xmlns:n1="http://example.net" xml:lang="en"><n3:stuff xmlns:n3="ftp://example.org"/></n1:elem2></n0:local>`)
	elem2 := doc.Root().ChildElements()[0]
	for _, tc := range []struct {
		m          c14nMethod
		prefixList string
		want       string
	}{
		{c14nMethod{}, "", `<n1:elem2 xmlns:n0="foo:bar" xmlns:n1="http://example.net" xmlns:n3="ftp://example.org" xml:lang="en"><n3:stuff></n3:stuff></n1:elem2>`},
		{c14nMethod{exclusive: true}, "", `<n1:elem2 xmlns:n1="http://example.net" xml:lang="en"><n3:stuff xmlns:n3="ftp://example.org"></n3:stuff></n1:elem2>`},
		{c14nMethod{exclusive: true}, "n0 n3 absent", `<n1:elem2 xmlns:n0="foo:bar" xmlns:n1="http://example.net" xmlns:n3="ftp://example.org" xml:lang="en"><n3:stuff></n3:stuff></n1:elem2>`},
	} {
		got, err := canonicalize(elem2, tc.m, tc.prefixList, nil)
		if err != nil || string(got) != tc.want {
			t.Errorf("%+v %q: %v\n%s\nwant\n%s", tc.m, tc.prefixList, err, got, tc.want)
		}
	}
}

func TestC14NEscapingInheritanceAndEnveloped(t *testing.T) {
	doc := etreeDoc(t, `<r xml:lang="de" xml:space="preserve" xmlns:ds="`+NamespaceDSig+`"><a t="&lt;&amp;&gt;&quot;&#9;&#10;&#13;'">x &lt; y &amp;&amp; z &gt; w&#13;<b/><ds:Signature><ds:SignedInfo/></ds:Signature><c/></a></r>`)
	a := doc.Root().ChildElements()[0]
	sig := a.ChildElements()[1]
	got, err := canonicalize(a, c14nMethod{exclusive: true}, "", sig)
	want := `<a t="&lt;&amp;>&quot;&#x9;&#xA;&#xD;'">x &lt; y &amp;&amp; z &gt; w&#xD;<b></b><c></c></a>`
	if err != nil || string(got) != want {
		t.Errorf("exclusive, enveloped: %v\n%s\nwant\n%s", err, got, want)
	}
	got, _ = canonicalize(a, c14nMethod{}, "", sig)
	if !bytes.HasPrefix(got, []byte(`<a xmlns:ds="`+NamespaceDSig+`" t="&lt;&amp;>&quot;&#x9;&#xA;&#xD;'" xml:lang="de" xml:space="preserve">`)) {
		t.Errorf("inclusive 1.0 inherits xml:* attributes: %s", got)
	}
	if _, err := canonicalize(etreeDoc(t, `<p:a/>`).Root(), c14nMethod{exclusive: true}, "", nil); err == nil {
		t.Error("undeclared prefix accepted")
	}
}

// goxmldsigExc canonicalises el the goxmldsig way: detach with the
// in-scope namespaces, then its exclusive canonicalizer.
func goxmldsigExc(t testing.TB, el *etree.Element, prefixList string) []byte {
	t.Helper()
	ctx, err := etreeutils.NSBuildParentContext(el)
	if err != nil {
		t.Fatal(err)
	}
	detached, err := etreeutils.NSDetatch(ctx, el)
	if err != nil {
		t.Fatal(err)
	}
	out, err := dsig.MakeC14N10ExclusiveCanonicalizerWithPrefixList(prefixList).Canonicalize(detached)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestExcC14NMatchesGoxmldsig cross-checks the exclusive canonicalizer
// against goxmldsig on every referenced element and SignedInfo of the
// interop vectors and of our own signed message, with their prefix lists.
func TestExcC14NMatchesGoxmldsig(t *testing.T) {
	envelopes := map[string][]byte{
		"helger":   helgerEnvelope(t),
		"receipt":  interop.Read(t, "as4/TestReceipt12.xml"),
		"holodeck": holodeckParts(t)[0].body,
		"ours":     signedMessage(t, key(t, "rsa"), testAttachments(), nil),
	}
	for name, raw := range envelopes {
		doc := mustParse(t, raw)
		sig, err := ParseSignature(doc, VerifyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		check := func(what string, el *etree.Element, pl string) {
			mine, err := canonicalize(el, c14nMethod{exclusive: true}, pl, nil)
			if err != nil {
				t.Fatal(err)
			}
			if theirs := goxmldsigExc(t, el, pl); !bytes.Equal(mine, theirs) {
				t.Errorf("%s %s: differs from goxmldsig\nmine   %s\ntheirs %s", name, what, mine, theirs)
			}
		}
		check("SignedInfo", sig.SignedInfo, sig.PrefixList)
		for _, r := range sig.References {
			if el := sig.ids[r.URI[min(1, len(r.URI)):]]; el != nil && r.URI[0] == '#' {
				check(r.URI, el, r.Transforms[len(r.Transforms)-1].PrefixList)
			}
		}
	}
	// Where goxmldsig v1.6.1 is wrong: attributes in different namespaces
	// must be ordered by namespace URI (C14N §2.2), not by local name.
	el := etreeDoc(t, `<r xmlns:z="urn:a" xmlns:b="urn:z" b:x="2" z:y="1"/>`).Root()
	mine, _ := canonicalize(el, c14nMethod{exclusive: true}, "", nil)
	if want := `<r xmlns:b="urn:z" xmlns:z="urn:a" z:y="1" b:x="2"></r>`; string(mine) != want {
		t.Errorf("attribute order: %s, want %s", mine, want)
	}
	t.Logf("goxmldsig orders the same element as %s", goxmldsigExc(t, el, ""))
}

// README quirk 5: SignedInfo must be canonicalised with its own PrefixList.
func TestSignedInfoNeedsItsPrefixList(t *testing.T) {
	doc := mustParse(t, interop.Read(t, "as4/TestReceipt12.xml"))
	sig, err := ParseSignature(doc, VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cert := bstCertificate(t, doc)
	if err := sig.VerifySignedInfo(cert); err != nil {
		t.Fatalf("with PrefixList %q: %v", sig.PrefixList, err)
	}
	sig.PrefixList = ""
	if err := sig.VerifySignedInfo(cert); Code(err) != CodeFailedAuthentication {
		t.Fatalf("without PrefixList: %v", err)
	}
}
