package envelope

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"
)

// fuzzRunBound is the bound FuzzXMLTextBound cuts runs to: small, so that
// fuzzed documents exercise the cut.
const fuzzRunBound = 16

// xmlTokens decodes data as extractXML does (strict, same charsets) and
// returns its tokens, and the longest run of character data, comment or
// processing instruction as encoding/xml delimits them, in input bytes
// (markup included for CDATA sections, so an over-estimate).
func xmlTokens(r io.Reader) (toks []xml.Token, longest int64, err error) {
	var cs charsetState
	d := xml.NewDecoder(r)
	d.Strict = true
	d.CharsetReader = cs.reader
	for {
		before := d.InputOffset()
		tok, err := d.Token()
		if err == io.EOF {
			return toks, longest, nil
		}
		if err != nil {
			return toks, longest, err
		}
		if _, ok := tok.(xml.CharData); ok {
			longest = max(longest, d.InputOffset()-before)
		}
		toks = append(toks, xml.CopyToken(tok))
	}
}

// FuzzXMLTextBound checks the run filter the XML envelope reader decodes
// through, against encoding/xml on the unfiltered input:
//   - a document whose runs all fit the bound passes unchanged, so the
//     extraction gives identical results and errors;
//   - a document encoding/xml reads without error stays well-formed when
//     cut: the same tokens, each text a prefix of the original one;
//   - whatever the input, extraction through the filter never panics and
//     gives an envelope, ErrNoEnvelope or a damaged envelope.
func FuzzXMLTextBound(f *testing.F) {
	addSeeds(f, ".xml")
	for _, s := range []string{
		`<a>` + strings.Repeat("0123456789", 5) + `</a>`,
		`<a x="1>2" y='>]]>"' z="&amp;&#x20AC;">` + strings.Repeat("é€𝄞", 10) + `&amp;&lt;&#233;&#x1D11E;</a>`,
		`<a>` + strings.Repeat("é", 7) + "x" + strings.Repeat("€", 7) + `</a><!-- é -->`,
		`<a b="x>y">` + strings.Repeat("&amp;", 7) + "&#x20AC;&#x20AC;&#x20AC;" + `</a>`,
		`<a><![CDATA[` + strings.Repeat("]", 30) + `]]><![CDATA[x]]]]>` + strings.Repeat("y", 30) + `]]>tail</a>`,
		`<a><![CDATA[` + strings.Repeat("y", 30) + `]]></a><a><![CDATA[` + strings.Repeat("y", 15) + `]]]></a><a><![CDATA[` + strings.Repeat("y", 15) + `]]></a><a><![CDATA[` + strings.Repeat("€", 6) + `]]></a>`,
		`<?xml version="1.0" encoding="ISO-8859-1"?><a>` + strings.Repeat("\xe9\xfc", 20) + `</a>`,
		`<!DOCTYPE a [<!ENTITY e "x>y"><!-- a '>' comment --><!ELEMENT a ANY>]><a>` + strings.Repeat("z", 40) + `</a>`,
		`<a><!--` + strings.Repeat("-x", 20) + `--><?pi ` + strings.Repeat("?", 20) + ` ?>` + strings.Repeat("t", 20) + `&#0000000000000000000000065;</a>`,
		`<Invoice xmlns="urn:oasis:names:specification:ubl:schema:xsd:Invoice-2" xmlns:cbc="urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2"><cbc:Note>` +
			strings.Repeat("QUJD", 20) + `</cbc:Note><cbc:ID>I1</cbc:ID></Invoice>`,
		"<a>" + strings.Repeat(" ", 30) + "</a>  ",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		toks, longest, tokErr := xmlTokens(bytes.NewReader(data))

		fl := newXMLRunBound(bytes.NewReader(data), fuzzRunBound)
		out, ferr := io.ReadAll(fl)
		var ml *markupTooLongError
		if ferr != nil && !errors.As(ferr, &ml) {
			t.Fatalf("filter error %v", ferr)
		}
		if !fl.cut && ferr == nil && !bytes.Equal(out, data) {
			t.Fatalf("nothing cut but the output differs:\n in %q\nout %q", data, out)
		}
		if tokErr == nil && longest <= fuzzRunBound && fl.cut {
			t.Fatalf("runs are at most %d bytes but the filter cut:\n in %q\nout %q", longest, data, out)
		}

		ic, err := extractXMLFrom(bytes.NewReader(data), true)
		icf, errf := extractXMLFrom(newXMLRunBound(bytes.NewReader(data), fuzzRunBound), true)
		if !fl.cut {
			if (err == nil) != (errf == nil) || err != nil && err.Error() != errf.Error() || ic != nil && *ic != *icf {
				t.Fatalf("nothing cut, yet %+v, %v; unfiltered %+v, %v", icf, errf, ic, err)
			}
		}
		if errf != nil && errf != ErrNoEnvelope && !errors.Is(errf, ErrDamaged) {
			t.Fatalf("filtered error %v is neither ErrNoEnvelope nor damaged", errf)
		}

		if tokErr != nil {
			return
		}
		ftoks, _, err := xmlTokens(newXMLRunBound(bytes.NewReader(data), fuzzRunBound))
		if err != nil {
			t.Fatalf("well-formed input, cut output not: %v\n in %q\nout %q", err, data, out)
		}
		if len(ftoks) != len(toks) {
			t.Fatalf("%d tokens, %d after the cut\n in %q\nout %q", len(toks), len(ftoks), data, out)
		}
		for i := range toks {
			a, b := toks[i], ftoks[i]
			if ca, ok := a.(xml.CharData); ok {
				cb, ok := b.(xml.CharData)
				if !ok || !bytes.HasPrefix(ca, cb) {
					t.Fatalf("token %d: %q cut to %q", i, a, b)
				}
				continue
			}
			if !tokenEqual(a, b) {
				t.Fatalf("token %d: %#v became %#v", i, a, b)
			}
		}
	})
}

func tokenEqual(a, b xml.Token) bool {
	switch a := a.(type) {
	case xml.StartElement:
		b, ok := b.(xml.StartElement)
		if !ok || a.Name != b.Name || len(a.Attr) != len(b.Attr) {
			return false
		}
		for i := range a.Attr {
			if a.Attr[i] != b.Attr[i] {
				return false
			}
		}
		return true
	case xml.EndElement:
		return a == b
	case xml.Comment:
		b, ok := b.(xml.Comment)
		return ok && bytes.Equal(a, b)
	case xml.ProcInst:
		b, ok := b.(xml.ProcInst)
		return ok && a.Target == b.Target && bytes.Equal(a.Inst, b.Inst)
	case xml.Directive:
		b, ok := b.(xml.Directive)
		return ok && bytes.Equal(a, b)
	}
	return false
}
