package envelope

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// interopSeedFiles are the shared vendor payloads used as extra seeds when
// present. Fuzz targets must not skip when they are absent, so this does not
// use internal/interop.
var interopSeedFiles = []string{"as2/payload.txt", "payloads/base-sbdh.xml", "payloads/base-example.xml", "payloads/at-gov-peppol-ubl.xml"}

func interopSeedDir() string {
	if d := os.Getenv("GATEWAY_INTEROP_DIR"); d != "" {
		return d
	}
	return filepath.Join("..", "..", "..", "shared", "interop")
}

// addSeeds adds every testdata file and interop payload whose name ends in
// one of exts (all of them when exts is empty).
func addSeeds(f *testing.F, exts ...string) {
	match := func(name string) bool {
		if len(exts) == 0 {
			return true
		}
		for _, e := range exts {
			if strings.HasSuffix(name, e) {
				return true
			}
		}
		return false
	}
	err := filepath.WalkDir("testdata", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), ".") || !match(p) {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		f.Add(b)
		return nil
	})
	if err != nil {
		f.Fatal(err)
	}
	for _, rel := range interopSeedFiles {
		if !match(rel) {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(interopSeedDir(), rel)); err == nil {
			f.Add(b)
		}
	}
}

// checkExtract runs Extract and asserts the properties every input must
// have: no panic, input unchanged, a deterministic result, exactly one of
// success, ErrNoEnvelope and ErrDamaged, and well-formed fields on success.
func checkExtract(t *testing.T, data []byte) *Interchange {
	t.Helper()
	orig := bytes.Clone(data)
	ic, err := Extract(data)
	if !bytes.Equal(orig, data) {
		t.Fatal("Extract modified its input")
	}
	ic2, err2 := Extract(data)
	if (err == nil) != (err2 == nil) || (err != nil && err.Error() != err2.Error()) || (ic != nil && *ic != *ic2) {
		t.Fatalf("Extract is not deterministic: %v, %v / %v, %v", ic, err, ic2, err2)
	}
	if err != nil {
		if ic != nil {
			t.Fatalf("Extract returned %+v with error %v", *ic, err)
		}
		noEnvelope, damaged := err == ErrNoEnvelope, errors.Is(err, ErrDamaged)
		if noEnvelope == damaged {
			t.Fatalf("error %v: ErrNoEnvelope %v, ErrDamaged %v; want exactly one", err, noEnvelope, damaged)
		}
		if damaged && !recognisable(data) {
			t.Fatalf("%q: damaged (%v) but does not recognisably start as a business document", clipBytes(data, 40), err)
		}
		if damaged {
			msg := err.Error()
			if !strings.HasPrefix(msg, "edifact: ") && !strings.HasPrefix(msg, "x12: ") && !strings.HasPrefix(msg, "ubl: ") &&
				!strings.HasPrefix(msg, "sbdh: ") && !strings.HasPrefix(msg, "xml: ") {
				t.Fatalf("damaged error %q does not name the standard", msg)
			}
			// Reason names the standard ("sbdh" becomes "PEPPOL SBDH") and
			// drops the decoder's text.
			if r := Reason(err); r == "" || strings.Contains(r, "XML syntax error") || len(r) > len(msg)+len("PEPPOL ") ||
				!strings.HasPrefix(r, strings.SplitN(partnerReason(msg), ":", 2)[0]+": ") {
				t.Fatalf("Reason %q of %q", r, msg)
			}
		}
		return nil
	}
	switch ic.Standard {
	case StandardEDIFACT, StandardX12, StandardUBL, StandardPeppolSBDH:
	default:
		t.Fatalf("Standard %q", ic.Standard)
	}
	if ic.Reference == "" {
		t.Fatalf("empty Reference: %+v", *ic)
	}
	for _, v := range []string{ic.Sender, ic.SenderQualifier, ic.Recipient, ic.RecipientQualifier, ic.Reference, ic.Date, ic.Time, ic.Type, ic.TypeVersion, ic.Syntax} {
		if len(v) > MaxFieldLength || v != strings.TrimSpace(v) {
			t.Fatalf("field %q too long or not trimmed in %+v", v, *ic)
		}
	}
	if k := ic.Key("p"); !k.Valid() {
		t.Fatalf("invalid key %q", k)
	}
	return ic
}

// FuzzExtract feeds arbitrary payloads, seeded with every vector.
func FuzzExtract(f *testing.F) {
	addSeeds(f)
	f.Add([]byte(""))
	f.Add([]byte("UNA"))
	f.Add([]byte("ISA*"))
	f.Add([]byte("<x/>"))
	f.Fuzz(func(t *testing.T, data []byte) { checkExtract(t, data) })
}

// FuzzExtractTyped feeds arbitrary payloads under XML and other MIME types:
// the same properties as Extract, a declared-XML payload that is not XML is
// damaged, and the type never turns a found envelope into an error.
func FuzzExtractTyped(f *testing.F) {
	addSeeds(f, ".xml")
	for _, s := range []string{"", "  ", "garbage", "<?xml", "<Invoice xmlns=\"urn:oasis:names:specification:ubl:schema:xsd:Invoice-2\"", "\xff\xfe<\x00", "\xef\xbb\xbf<a/>"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		plain := checkExtract(t, data)
		for _, ct := range []string{"application/xml", "text/xml; charset=utf-8", "application/vnd.x+xml", "application/octet-stream"} {
			ic, err := ExtractTyped(ct, data)
			if plain != nil && (err != nil || *ic != *plain) {
				t.Fatalf("%s: %+v, %v; Extract found %+v", ct, ic, err, *plain)
			}
			if err != nil && err != ErrNoEnvelope && !errors.Is(err, ErrDamaged) {
				t.Fatalf("%s: error %v is neither ErrNoEnvelope nor damaged", ct, err)
			}
		}
	})
}

// FuzzExtractEDIFACT is seeded with the EDIFACT vectors.
func FuzzExtractEDIFACT(f *testing.F) {
	addSeeds(f, ".edi", ".txt")
	f.Add([]byte("UNB\x1dUNOB\x1f3\x1dS\x1f14\x1dR\x1f14\x1d240315\x1f0930\x1dX\x1cUNH\x1d1\x1dINVOIC\x1cUNZ\x1d1\x1dX\x1c"))
	f.Add([]byte("UNA:+. *'UNB+UNOA:2+S?:14+R:14+240315:0930+X?'UNH+1+INVOIC:D:96A:UN'UNZ+1+X?'"))
	f.Fuzz(func(t *testing.T, data []byte) { checkExtract(t, data) })
}

// FuzzExtractX12 is seeded with the X12 vectors.
func FuzzExtractX12(f *testing.F) {
	addSeeds(f, ".x12")
	f.Fuzz(func(t *testing.T, data []byte) { checkExtract(t, data) })
}

// FuzzExtractXML is seeded with the UBL and SBDH vectors.
func FuzzExtractXML(f *testing.F) {
	addSeeds(f, ".xml")
	f.Add([]byte(`<?xml version="1.0" encoding="ISO-8859-1"?><Invoice xmlns="urn:oasis:names:specification:ubl:schema:xsd:Invoice-2" xmlns:cbc="urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2"><cbc:ID>F` + "\xfc" + `r</cbc:ID></Invoice>`))
	f.Fuzz(func(t *testing.T, data []byte) { checkExtract(t, data) })
}

// FuzzEDIFACTRoundTrip writes an interchange with fuzzed service string
// advice and fuzzed identifiers, escaping separators with the release
// character, and checks that Extract reads back exactly those identifiers.
func FuzzEDIFACTRoundTrip(f *testing.F) {
	f.Add(":+.? '", "5412345000013", "4012345000023", "INV0001")
	f.Add("|^.\\*~", "SENDER+01", "RECEIVER:01", "REF^001")
	f.Add(":+.? '", "ACME+CO:1", "BUYER?X", "R'17+1")
	f.Add(":+. *'", "S?", "R", "X?")
	f.Add(":+.? \n", "a\nb", " r ", "x'y")
	f.Fuzz(func(t *testing.T, una, sender, recipient, ref string) {
		if len(una) != 6 {
			return
		}
		data := []byte("UNA" + una)
		if isAlnum(una[0]) {
			if _, err := Extract(data); err != ErrNoEnvelope {
				t.Fatalf("UNA%q: %v, want ErrNoEnvelope", una, err)
			}
			return
		}
		// A UNA alone is not recognisably EDIFACT; with a UNB after it,
		// invalid separators are a damaged interchange.
		if _, err := Extract(data); err != ErrNoEnvelope {
			t.Fatalf("UNA%q alone: Extract error %v, want ErrNoEnvelope", una, err)
		}
		d, uerr := parseUNA(data)
		if uerr != nil {
			_, err := Extract(append(data, "UNB+UNOC:3'"...))
			if !errors.Is(err, ErrDamaged) || err.Error() != uerr.Error() {
				t.Fatalf("UNA%q: Extract error %v, want %v", una, err, uerr)
			}
			return
		}
		esc := func(v string) (string, bool) {
			var b strings.Builder
			for i := 0; i < len(v); i++ {
				c := v[i]
				if c == d.component || c == d.element || c == d.terminator ||
					(d.release != 0 && c == d.release) || (d.repetition != 0 && c == d.repetition) {
					if d.release == 0 {
						return "", false
					}
					b.WriteByte(d.release)
				}
				b.WriteByte(c)
			}
			return b.String(), true
		}
		s, ok1 := esc(sender)
		r, ok2 := esc(recipient)
		x, ok3 := esc(ref)
		if !ok1 || !ok2 || !ok3 {
			return // not representable without a release character
		}
		e, c, term := string([]byte{d.element}), string([]byte{d.component}), string([]byte{d.terminator})
		data = append(data, "UNB"+e+"UNOC"+c+"3"+e+s+c+"ZZ"+e+r+c+"ZZ"+e+"240315"+c+"0930"+e+x+term+
			"UNH"+e+"1"+e+"INVOIC"+c+"D"+c+"96A"+c+"UN"+term+
			"UNZ"+e+"1"+e+x+term...)
		want := &Interchange{Standard: StandardEDIFACT, Sender: strings.TrimSpace(sender), SenderQualifier: "ZZ",
			Recipient: strings.TrimSpace(recipient), RecipientQualifier: "ZZ", Reference: strings.TrimSpace(ref),
			Date: "240315", Time: "0930", Type: "INVOIC", TypeVersion: "D:96A:UN", Syntax: "UNOC:3"}
		got, err := Extract(data)
		if want.Sender == "" || want.Recipient == "" || want.Reference == "" ||
			len(want.Sender) > MaxFieldLength || len(want.Recipient) > MaxFieldLength || len(want.Reference) > MaxFieldLength {
			if !errors.Is(err, ErrDamaged) {
				t.Fatalf("%q: got %+v, %v; want ErrDamaged", data, got, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("%q: %v", data, err)
		}
		if *got != *want {
			t.Fatalf("%q:\n got %+v\nwant %+v", data, *got, *want)
		}
	})
}

// FuzzX12RoundTrip writes an interchange with fuzzed separators, sender and
// control number, and checks what Extract reads back.
func FuzzX12RoundTrip(f *testing.F) {
	f.Add(byte('*'), byte('>'), byte('~'), "SENDERID", "000000905")
	f.Add(byte('*'), byte('>'), byte('\n'), "SENDERID", "000000905")
	f.Add(byte('|'), byte('\\'), byte('\r'), "123456789", "77")
	f.Add(byte('*'), byte('*'), byte('~'), "S", "1")
	f.Fuzz(func(t *testing.T, sep, comp, term byte, sender, ctl string) {
		if len(sender) > 15 || len(ctl) > 9 || strings.IndexByte(sender+ctl, sep) >= 0 || strings.IndexByte(sender+ctl, term) >= 0 {
			return
		}
		s, tm := string([]byte{sep}), string([]byte{term})
		head := isa(sep, comp, term, sender, pad(ctl, 9), "P")
		data := []byte(head + "GS" + s + "IN" + tm + "ST" + s + "810" + s + "0001" + tm + "SE" + s + "2" + s + "0001" + tm +
			"IEA" + s + "1" + s + ctl + tm)
		got, err := Extract(data)
		switch {
		case isAlnum(sep) || isSpace(sep): // not recognisably X12
			if err != ErrNoEnvelope {
				t.Fatalf("%q: %v, want ErrNoEnvelope", data, err)
			}
			return
		case isAlnum(comp) || isSpace(comp) || isAlnum(term) || term == ' ' || term == '\t' ||
			sep == comp || sep == term || comp == term ||
			strings.TrimSpace(sender) == "" || strings.TrimSpace(ctl) == "":
			if !errors.Is(err, ErrDamaged) {
				t.Fatalf("%q: %+v, %v; want ErrDamaged", data, got, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("%q: %v", data, err)
		}
		want := &Interchange{Standard: StandardX12, Sender: strings.TrimSpace(sender), SenderQualifier: "ZZ", Recipient: "RECEIVERID",
			RecipientQualifier: "ZZ", Reference: strings.TrimSpace(ctl), Date: "240315", Time: "1253", Type: "810", Syntax: "00401"}
		if *got != *want {
			t.Fatalf("%q:\n got %+v\nwant %+v", data, *got, *want)
		}
	})
}

func isXMLChar(r rune) bool {
	return r == 0x09 || r == 0x0A || r == 0x0D || r >= 0x20 && r <= 0xD7FF || r >= 0xE000 && r <= 0xFFFD || r >= 0x10000 && r <= 0x10FFFF
}

// FuzzUBLRoundTrip writes a UBL invoice with a fuzzed, XML-escaped cbc:ID
// and EndpointID, and checks that Extract reads back exactly those values.
func FuzzUBLRoundTrip(f *testing.F) {
	f.Add("test-invoice-phase4", "phase4-test-sender", "9915")
	f.Add("  A&B<C>  ", "\r\nx\t", `"'`)
	f.Add("", "x", "")
	f.Fuzz(func(t *testing.T, id, endpoint, scheme string) {
		for _, v := range []string{id, endpoint, scheme} {
			if !utf8.ValidString(v) || strings.IndexFunc(v, func(r rune) bool { return !isXMLChar(r) }) >= 0 {
				return
			}
		}
		esc := func(v string) string {
			var b strings.Builder
			if err := xml.EscapeText(&b, []byte(v)); err != nil {
				t.Fatal(err)
			}
			return b.String()
		}
		data := []byte(`<Invoice xmlns="urn:oasis:names:specification:ubl:schema:xsd:Invoice-2"` +
			` xmlns:cbc="urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2"` +
			` xmlns:cac="urn:oasis:names:specification:ubl:schema:xsd:CommonAggregateComponents-2">` +
			`<cbc:ID>` + esc(id) + `</cbc:ID><cac:AccountingSupplierParty><cac:Party><cbc:EndpointID schemeID="` + esc(scheme) + `">` +
			esc(endpoint) + `</cbc:EndpointID></cac:Party></cac:AccountingSupplierParty></Invoice>`)
		got, err := Extract(data)
		want := &Interchange{Standard: StandardUBL, Sender: strings.TrimSpace(endpoint), SenderQualifier: strings.TrimSpace(scheme),
			Reference: strings.TrimSpace(id), Type: "Invoice", Syntax: nsUBLPrefix + "Invoice-2"}
		if want.Reference == "" || len(want.Reference) > MaxFieldLength || len(want.Sender) > MaxFieldLength || len(want.SenderQualifier) > MaxFieldLength {
			if !errors.Is(err, ErrDamaged) {
				t.Fatalf("%q: %+v, %v; want ErrDamaged", data, got, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("%q: %v", data, err)
		}
		if *got != *want {
			t.Fatalf("%q:\n got %+v\nwant %+v", data, *got, *want)
		}
	})
}

func clipBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// recognisable is the test's own statement of when a payload whose MIME
// type declares nothing may be a damaged envelope: after a UTF-8 byte order
// mark and white space it starts as an EDIFACT interchange ("UNB+",
// "UNB" IS3, a UNA advice followed by "UNB"), an
// X12 interchange ("ISA*00*" with any separator that is not a letter, digit
// or white space), or XML (an XML declaration, or a root start tag that
// encoding/xml parses).
func recognisable(data []byte) bool {
	d := bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	d = bytes.TrimLeft(d, " \t\r\n")
	switch {
	case bytes.HasPrefix(d, []byte("UNB+")) || bytes.HasPrefix(d, []byte("UNB\x1d")):
		return true
	case bytes.HasPrefix(d, []byte("UNA")) && len(d) >= 9:
		return bytes.HasPrefix(bytes.TrimLeft(d[9:], " \t\r\n"), []byte("UNB"))
	case bytes.HasPrefix(d, []byte("ISA")) && len(d) >= 7:
		return !isAlnum(d[3]) && !isSpace(d[3]) && d[6] == d[3]
	case bytes.HasPrefix(d, []byte("<?xml")) && len(d) > 5 && isSpace(d[5]):
		return true
	case bytes.HasPrefix(d, []byte("<")):
		dec := xml.NewDecoder(bytes.NewReader(d))
		dec.CharsetReader = func(_ string, r io.Reader) (io.Reader, error) { return r, nil }
		for {
			tok, err := dec.RawToken()
			if err != nil {
				return false
			}
			if _, ok := tok.(xml.StartElement); ok {
				return true
			}
		}
	}
	return false
}

// randomBinary is n bytes of deterministic pseudo-random data after head.
func randomBinary(seed uint64, head string, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 22))
	b := make([]byte, len(head)+n)
	copy(b, head)
	for i := len(head); i < len(b); i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

// randomHeads are the starts that random binary data shares with business
// documents.
var randomHeads = []string{"<", "<?", "<!", "<a", "U", "UN", "UNA", "UNB", "I", "IS", "ISA", "\xef\xbb\xbf<", " \r\n<"}

// FuzzExtractOpaque feeds random binary data, seeded with random bytes
// after the first bytes of each standard, under no type, a binary type and
// a text type: it is never a damaged envelope unless it recognisably starts
// as a business document (recognisable), and the types that declare
// nothing change nothing.
func FuzzExtractOpaque(f *testing.F) {
	for i, h := range randomHeads {
		f.Add(randomBinary(uint64(i), h, 200))
	}
	f.Add([]byte("<a>\x93"))
	f.Add([]byte("UNB+\x00"))
	f.Add([]byte("ISA*00*\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		plain := checkExtract(t, data)
		for _, ct := range []string{"application/octet-stream", "text/plain", "application/pdf"} {
			ic, err := ExtractTyped(ct, data)
			if errors.Is(err, ErrDamaged) && !recognisable(data) {
				t.Fatalf("%s %q: damaged (%v) but does not recognisably start as a business document", ct, clipBytes(data, 40), err)
			}
			if (plain == nil) != (ic == nil) || plain != nil && *ic != *plain {
				t.Fatalf("%s: %+v, %v; Extract found %+v", ct, ic, err, plain)
			}
		}
	})
}
