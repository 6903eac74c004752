package envelope

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/internal/interop"
)

const (
	nsInvoice    = "urn:oasis:names:specification:ubl:schema:xsd:Invoice-2"
	nsCreditNote = "urn:oasis:names:specification:ubl:schema:xsd:CreditNote-2"
	nsOrder      = "urn:oasis:names:specification:ubl:schema:xsd:Order-2"
)

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// isa builds a 106-byte ISA with the given separators and a few fields.
func isa(sep, comp, term byte, sender, ctl, usage string) string {
	f := []string{"00", strings.Repeat(" ", 10), "00", strings.Repeat(" ", 10), "ZZ", pad(sender, 15), "ZZ", pad("RECEIVERID", 15),
		"240315", "1253", "U", "00401", ctl, "0", usage, string([]byte{comp})}
	return "ISA" + string([]byte{sep}) + strings.Join(f, string([]byte{sep})) + string([]byte{term})
}

func pad(s string, n int) string { return s + strings.Repeat(" ", n-len(s)) }

var x12Tilde = &Interchange{
	Standard: StandardX12, Sender: "SENDERID", SenderQualifier: "ZZ", Recipient: "RECEIVERID", RecipientQualifier: "ZZ",
	Reference: "000000905", Date: "240315", Time: "1253", Type: "810", TypeVersion: "004010", Syntax: "00401",
}

func with(ic *Interchange, edit func(*Interchange)) *Interchange {
	c := *ic
	edit(&c)
	return &c
}

// TestExtractFiles covers the generated interchanges in testdata/: one per
// delimiter variant and per standard, asserting every field.
func TestExtractFiles(t *testing.T) {
	tests := []struct {
		file string
		want *Interchange
	}{
		{"edifact/invoic-default.edi", &Interchange{
			Standard: StandardEDIFACT, Sender: "5412345000013", SenderQualifier: "14", Recipient: "4012345000023", RecipientQualifier: "14",
			Reference: "INV0001", Date: "20240315", Time: "1412", Type: "INVOIC", TypeVersion: "D:96A:UN:EAN008", Syntax: "UNOC:3", Test: true}},
		{"edifact/invoic-una-custom.edi", &Interchange{
			Standard: StandardEDIFACT, Sender: "SENDER+01", SenderQualifier: "ZZZ", Recipient: "RECEIVER:01", RecipientQualifier: "ZZZ",
			Reference: "REF^001", Date: "240315", Time: "0930", Type: "INVOIC", TypeVersion: "D:01B:UN", Syntax: "UNOC:3"}},
		{"edifact/invoic-release.edi", &Interchange{
			Standard: StandardEDIFACT, Sender: "ACME+CO:1", SenderQualifier: "ZZ", Recipient: "BUYER?X", RecipientQualifier: "ZZ",
			Reference: "R'17+1", Date: "240315", Time: "0930", Type: "INVOIC", TypeVersion: "D:96A:UN", Syntax: "UNOA:2"}},
		{"edifact/invoic-crlf.edi", &Interchange{
			Standard: StandardEDIFACT, Sender: "SENDER 1", Recipient: "RECEIVER 2", RecipientQualifier: "ZZ",
			Reference: "CRLF01", Date: "20240315", Time: "2359", Type: "INVOIC", TypeVersion: "D:96A:UN", Syntax: "UNOB:4"}},
		{"x12/810-tilde.x12", x12Tilde},
		{"x12/810-newline.x12", with(x12Tilde, func(ic *Interchange) { ic.Test = true })},
		{"x12/810-crlf.x12", with(x12Tilde, func(ic *Interchange) {
			ic.SenderQualifier, ic.Sender, ic.RecipientQualifier, ic.Recipient = "01", "123456789", "08", "9876543210"
		})},
		{"x12/850-5010-pipe.x12", with(x12Tilde, func(ic *Interchange) {
			ic.Reference, ic.Type, ic.TypeVersion, ic.Syntax = "000000077", "850", "005010X999", "00501"
		})},
		{"ubl/invoice-uuid.xml", &Interchange{
			Standard: StandardUBL, Sender: "5412345000013", SenderQualifier: "0088", Recipient: "987654321", RecipientQualifier: "0192",
			Reference: "3f0c9d2e-8b1a-4c57-9e36-0d5b2a7f1c44", Date: "2024-03-15", Time: "14:12:00", Type: "Invoice", TypeVersion: "2.1", Syntax: nsInvoice}},
		{"ubl/order.xml", &Interchange{
			Standard: StandardUBL, Sender: "7300010000001", SenderQualifier: "0088", Recipient: "5567321707", RecipientQualifier: "0007",
			Reference: "PO-&-77", Date: "2024-03-15", Type: "Order", Syntax: nsOrder}},
		{"sbdh/sbdh-creditnote.xml", &Interchange{
			Standard: StandardPeppolSBDH, Sender: "0088:5412345000013", SenderQualifier: "iso6523-actorid-upis",
			Recipient: "0192:987654321", RecipientQualifier: "iso6523-actorid-upis", Reference: "6f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0",
			Date: "2024-03-15T14:12:00+01:00", Type: "CreditNote", TypeVersion: "2.1", Syntax: nsCreditNote}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			data := readTestdata(t, tc.file)
			orig := bytes.Clone(data)
			got, err := Extract(data)
			if err != nil {
				t.Fatalf("Extract: %v", err)
			}
			if *got != *tc.want {
				t.Errorf("Extract =\n %+v\nwant\n %+v", *got, *tc.want)
			}
			if !bytes.Equal(data, orig) {
				t.Error("Extract modified its input")
			}
			// A byte order mark and leading white space change nothing.
			got2, err := Extract(append([]byte("\xef\xbb\xbf \r\n\t"), bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))...))
			if err != nil || *got2 != *tc.want {
				t.Errorf("with BOM and leading white space: %+v, %v", got2, err)
			}
		})
	}
}

// TestExtractInterop reads the shared vendor vectors (never copied into the
// project); the expected values are those of ../shared/interop/README.md.
func TestExtractInterop(t *testing.T) {
	tests := []struct {
		file string
		want *Interchange
	}{
		{"as2/payload.txt", &Interchange{
			Standard: StandardEDIFACT, Sender: "<Sender GLN>", SenderQualifier: "14", Recipient: "<Receiver GLN>", RecipientQualifier: "14",
			Reference: "5", Date: "140407", Time: "0910", Type: "ORDERS", TypeVersion: "D:96A:UN:EAN008", Syntax: "UNOA:2"}},
		{"payloads/base-sbdh.xml", &Interchange{
			Standard: StandardPeppolSBDH, Sender: "9915:phase4-test-sender", SenderQualifier: "iso6523-actorid-upis",
			Recipient: "9915:helger", RecipientQualifier: "iso6523-actorid-upis", Reference: "123456789",
			Date: "2023-10-25T15:42:10Z", Type: "Invoice", TypeVersion: "2.1", Syntax: "urn:oasis:names:specification:ubl:schema:xsd:Invoice-2"}},
		{"payloads/base-example.xml", &Interchange{
			Standard: StandardUBL, Sender: "phase4-test-sender", SenderQualifier: "9915", Recipient: "helger", RecipientQualifier: "9915",
			Reference: "test-invoice-phase4", Date: "2021-10-13", Type: "Invoice", Syntax: nsInvoice}},
		{"payloads/at-gov-peppol-ubl.xml", &Interchange{
			Standard: StandardUBL, Sender: "987654321", SenderQualifier: "0088", Recipient: "123456789", RecipientQualifier: "0088",
			Reference: "ERB_UBL_INVOICE_001", Date: "2025-01-01", Type: "Invoice", TypeVersion: "2.1", Syntax: nsInvoice}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			got, err := Extract(interop.Read(t, tc.file))
			if err != nil {
				t.Fatalf("Extract: %v", err)
			}
			if *got != *tc.want {
				t.Errorf("Extract =\n %+v\nwant\n %+v", *got, *tc.want)
			}
		})
	}
}

// TestExtractInline covers variants and edge cases small enough to write
// inline. want nil means an error: wantErr is its exact text, and it must
// wrap ErrDamaged (or be ErrNoEnvelope itself when noEnvelope is set).
func TestExtractInline(t *testing.T) {
	edi := func(s string) []byte { return []byte(s) }
	const (
		unh = "UNH+1+INVOIC:D:96A:UN'"
		unb = "UNB+UNOA:2+S:14+R:14+240315:0930+X'"
	)
	basic := &Interchange{Standard: StandardEDIFACT, Sender: "S", SenderQualifier: "14", Recipient: "R", RecipientQualifier: "14",
		Reference: "X", Date: "240315", Time: "0930", Type: "INVOIC", TypeVersion: "D:96A:UN", Syntax: "UNOA:2"}
	x12Body := "GS*IN*SENDERID*RECEIVERID*20240315*1253*905*X*004010~ST*810*0001~SE*2*0001~GE*1*905~IEA*1*000000905~"
	ublDoc := func(root, ns, body string) []byte {
		return []byte(`<` + root + ` xmlns="` + ns + `" xmlns:cbc="urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2"` +
			` xmlns:cac="urn:oasis:names:specification:ubl:schema:xsd:CommonAggregateComponents-2">` + body + `</` + root + `>`)
	}
	ublParty := func(party, id, scheme string) string {
		return `<cac:` + party + `><cac:Party><cbc:EndpointID schemeID="` + scheme + `">` + id + `</cbc:EndpointID></cac:Party></cac:` + party + `>`
	}
	tests := []struct {
		name       string
		payload    []byte
		want       *Interchange
		wantErr    string
		noEnvelope bool
	}{
		// Not an envelope.
		{name: "empty", payload: nil, noEnvelope: true},
		{name: "white space", payload: edi(" \r\n\t"), noEnvelope: true},
		{name: "BOM only", payload: edi("\xef\xbb\xbf"), noEnvelope: true},
		{name: "PDF", payload: edi("%PDF-1.7\n%\xe2\xe3\xcf\xd3\n"), noEnvelope: true},
		{name: "text UNBOUND", payload: edi("UNBOUND text"), noEnvelope: true},
		{name: "text UNAVAILABLE", payload: edi("UNAVAILABLE"), noEnvelope: true},
		{name: "text ISAAC", payload: edi("ISAAC NEWTON " + strings.Repeat("x", 120)), noEnvelope: true},
		{name: "XML other root", payload: edi(`<?xml version="1.0"?><note><to>x</to></note>`), noEnvelope: true},
		{name: "cXML with DOCTYPE", payload: edi(`<?xml version="1.0"?><!DOCTYPE cXML SYSTEM "http://xml.cxml.org/schemas/cXML/1.2.014/cXML.dtd"><cXML payloadID="1"/>`), noEnvelope: true},
		{name: "HTML", payload: edi("<html><body>hi</body></html>"), noEnvelope: true},
		// Bytes that only might be a business document and do not parse as
		// one are an opaque payload, not a damaged envelope: '<' without a
		// root start tag that parses, "UNB" without the data element
		// separator, "UNA" without a valid advice or a UNB after it, "ISA"
		// without "ISA*xx*" (TestExtractTyped: declared, they are damaged).
		{name: "not XML after <", payload: edi("<<<>>>"), noEnvelope: true},
		{name: "binary after <", payload: edi("<\x93\x01\xfe<a\x00>"), noEnvelope: true},
		{name: "start tag that does not parse", payload: edi("<a\x01b>"), noEnvelope: true},
		{name: "UBL without XML declaration cut inside its root start tag", payload: edi(`<Invoice xmlns="urn:oasis:names:specification:ubl:schema:xsd:Invoice-2" xmlns:cbc="urn:oasis:na`), noEnvelope: true},
		{name: "comment only", payload: edi("<!-- x -->"), noEnvelope: true},
		{name: "edifact UNB alone", payload: edi("UNB"), noEnvelope: true},
		{name: "edifact UNB wrong separator", payload: edi("UNB:UNOA'"), noEnvelope: true},
		{name: "edifact UNA truncated", payload: edi("UNA:+."), noEnvelope: true},
		{name: "edifact UNA non-ASCII duplicate", payload: edi("UNA\xae\xae.? '"), noEnvelope: true},
		{name: "edifact UNA letter separator", payload: edi("UNA:X.? '"), noEnvelope: true},
		{name: "edifact UNA then nothing", payload: edi("UNA:+.? '  "), noEnvelope: true},
		{name: "edifact UNA then UNH", payload: edi("UNA:+.? '" + unh), noEnvelope: true},
		{name: "x12 ISA and binary", payload: edi("ISA*\x00\x01\x02" + strings.Repeat("\xff", 120)), noEnvelope: true},
		{name: "x12 ISA space separator", payload: edi("ISA 00 " + strings.Repeat("x", 120)), noEnvelope: true},
		// A payload with an XML declaration that does not parse to a root
		// element is damaged.
		{name: "text before root", payload: edi("<?xml version=\"1.0\"?>junk<Invoice/>"), wantErr: "xml: text before the root element"},
		{name: "UBL cut inside its root start tag", payload: edi(`<?xml version="1.0" encoding="UTF-8"?>` + "\n" + `<Invoice xmlns="urn:oasis:names:specification:ubl:schema:xsd:Invoice-2" xmlns:cbc="urn:oasis:na`),
			wantErr: "xml: malformed XML before the root element: XML syntax error on line 2: unexpected EOF"},
		{name: "XML declaration only", payload: edi(`<?xml version="1.0"?>` + "\n"), wantErr: "xml: the document ends before its root element"},
		{name: "XML cut inside the declaration", payload: edi(`<?xml version="1.0" enc`),
			wantErr: "xml: malformed XML before the root element: XML syntax error on line 1: unexpected EOF"},
		{name: "UTF-16 BOM", payload: edi("\xff\xfe<\x00?\x00x\x00"), noEnvelope: true},

		// EDIFACT variants.
		{name: "edifact no UNA", payload: edi(unb + unh + "UNZ+1+X'"), want: basic},
		{name: "edifact LF after each segment, trailing spaces", payload: edi("UNB+UNOA:2+S:14+R:14+240315:0930+X'\n" + unh + "\nUNZ+1+X'\n   \n"), want: basic},
		{name: "edifact level B separators", payload: edi("UNB\x1dUNOB\x1f3\x1dS\x1f14\x1dR\x1f14\x1d240315\x1f0930\x1dX\x1cUNH\x1d1\x1dINVOIC\x1fD\x1f96A\x1fUN\x1cUNZ\x1d1\x1dX\x1c"),
			want: with(basic, func(ic *Interchange) { ic.Syntax = "UNOB:3" })},
		{name: "edifact UNA without release character", payload: edi("UNA:+. *'UNB+UNOA:2+S?:14+R:14+240315:0930+X?'" + unh + "UNZ+1+X?'"),
			want: with(basic, func(ic *Interchange) { ic.Sender, ic.SenderQualifier, ic.Reference = "S?", "14", "X?" })},
		{name: "edifact UNA newline terminator", payload: edi("UNA:+.? \nUNB+UNOA:2+S:14+R:14+240315:0930+X\nUNH+1+INVOIC:D:96A:UN\nUNZ+1+X\n"), want: basic},
		{name: "edifact released release character and terminator", payload: edi("UNB+UNOA:2+S:14+R:14+240315:0930+A???'B'" + unh + "UNZ+1+A???'B'"),
			want: with(basic, func(ic *Interchange) { ic.Reference = "A?'B" })},
		{name: "edifact values trimmed", payload: edi("UNB+UNOA:2+ S :14+R :14+240315:0930+ X '" + unh + "UNZ+1+X'"), want: basic},
		{name: "edifact test indicator", payload: edi("UNB+UNOA:2+S:14+R:14+240315:0930+X++++++1'" + unh + "UNZ+1+X'"),
			want: with(basic, func(ic *Interchange) { ic.Test = true })},
		{name: "edifact first UNH wins", payload: edi(unb + unh + "UNT+2+1'UNH+2+ORDERS:D:96A:UN'UNZ+2+X'"), want: basic},

		// EDIFACT damaged.
		{name: "edifact UNB cut", payload: edi("UNB+"), wantErr: `edifact: segment "UNB" is not terminated (no '\'' before the end of the data)`},
		{name: "edifact level B UNB cut", payload: edi("UNB\x1dUNOB"), wantErr: `edifact: segment "UNB" is not terminated (no '\x1c' before the end of the data)`},
		{name: "edifact UNA duplicate separators", payload: edi("UNA::.? '" + unb), wantErr: `edifact: UNA: UNA1 component data element separator and UNA2 data element separator are both ':'`},
		{name: "edifact UNA letter separator then UNB", payload: edi("UNA:X.? '\r\n" + unb), wantErr: `edifact: UNA: UNA2 data element separator 'X' cannot be a separator`},
		{name: "edifact UNB without reference", payload: edi("UNB+UNOA:2+S:14+R:14+240315:0930'" + unh + "UNZ+1+'"), wantErr: "edifact: UNB without interchange control reference (0020)"},
		{name: "edifact UNB without sender", payload: edi("UNB+UNOA:2+:14+R:14+240315:0930+X'"), wantErr: "edifact: UNB without S002 interchange sender identification (0004)"},
		{name: "edifact UNB without time", payload: edi("UNB+UNOA:2+S:14+R:14+240315+X'"), wantErr: "edifact: UNB without S004 time (0019)"},
		{name: "edifact UNZ missing", payload: edi(unb + unh + "UNT+2+1'"), wantErr: `edifact: UNZ interchange trailer missing (UNB 0020 "X")`},
		{name: "edifact UNZ unterminated", payload: edi(unb + unh + "UNZ+1+X"), wantErr: `edifact: segment "UNZ" is not terminated (no '\'' before the end of the data)`},
		{name: "edifact release at end", payload: edi(unb + unh + "UNZ+1+X?"), wantErr: `edifact: segment "UNZ" ends in a release character at the end of the data`},
		{name: "edifact released terminator hides UNZ", payload: edi(unb + unh + "UNZ+1+X?'"), wantErr: `edifact: segment "UNZ" is not terminated (no '\'' before the end of the data)`},
		{name: "edifact UNZ mismatch after release", payload: edi("UNB+UNOA:2+S:14+R:14+240315:0930+X?+1'" + unh + "UNZ+1+X+1'"), wantErr: `edifact: UNZ 0020 "X" does not match UNB 0020 "X+1"`},
		{name: "edifact long mismatching reference clipped", payload: edi("UNB+UNOA:2+S:14+R:14+240315:0930+X'" + unh + "UNZ+1+" + strings.Repeat("Y", 5000) + "'"),
			wantErr: `edifact: UNZ 0020 "` + strings.Repeat("Y", 80) + `..." does not match UNB 0020 "X"`},
		{name: "edifact no UNH", payload: edi(unb + "UNZ+0+X'"), wantErr: `edifact: interchange "X" holds no UNH message`},
		{name: "edifact UNH without type", payload: edi(unb + "UNH+1+:D:96A'UNZ+1+X'"), wantErr: "edifact: first UNH without message type (S009 0065)"},
		{name: "edifact second UNB", payload: edi(unb + unh + unb + "UNZ+1+X'"), wantErr: `edifact: UNB inside interchange "X" before its UNZ`},
		{name: "edifact two interchanges", payload: edi(unb + unh + "UNZ+1+X'\n" + unb + unh + "UNZ+1+X'"), wantErr: `edifact: 65 bytes after the UNZ of interchange "X" (only one interchange per payload is read)`},
		{name: "edifact reference too long", payload: edi("UNB+UNOA:2+S:14+R:14+240315:0930+" + strings.Repeat("R", 600) + "'" + unh + "UNZ+1+" + strings.Repeat("R", 600) + "'"),
			wantErr: "edifact: reference is 600 bytes long, more than 512"},

		// X12 variants.
		{name: "x12 newline terminator, last newline stripped", payload: edi(isa('*', '>', '\n', "SENDERID", "000000905", "P") + strings.ReplaceAll(strings.TrimSuffix(x12Body, "~"), "~", "\n")),
			want: x12Tilde},
		{name: "x12 CR terminator with LF", payload: edi(isa('*', '>', '\r', "SENDERID", "000000905", "P") + "\n" + strings.ReplaceAll(x12Body, "~", "\r\n")),
			want: x12Tilde},
		{name: "x12 trailing spaces inside elements", payload: edi(isa('*', '>', '~', "SENDERID", "000000905", "P") + strings.Replace(x12Body, "IEA*1*000000905", "IEA*1*000000905  ", 1)),
			want: x12Tilde},
		{name: "x12 non-ASCII terminator", payload: edi(isa('*', '>', 0x85, "SENDERID", "000000905", "P") + strings.ReplaceAll(x12Body, "~", "\x85")), want: x12Tilde},
		{name: "x12 TA1 only", payload: edi(isa('*', '>', '~', "SENDERID", "000000905", "P") + "TA1*000000123*240315*1253*A*000~IEA*0*000000905~"),
			want: with(x12Tilde, func(ic *Interchange) { ic.Type, ic.TypeVersion = "TA1", "" })},

		// X12 damaged.
		{name: "x12 ISA truncated", payload: edi(isa('*', '>', '~', "SENDERID", "000000905", "P")[:105]), wantErr: "x12: ISA segment truncated: 105 of 106 bytes"},
		{name: "x12 ISA short field", payload: edi(strings.Replace(isa('*', '>', '~', "SENDERID", "000000905", "P"), "SENDERID       ", "SENDERID      ", 1) + x12Body),
			wantErr: `x12: ISA is not 106 bytes of fixed-width elements: expected the element separator '*' before ISA07 at offset 50, found 'Z'`},
		{name: "x12 separators not distinct", payload: edi(isa('*', '*', '~', "SENDERID", "000000905", "P") + x12Body),
			wantErr: `x12: ISA separators not distinct: element '*', component '*', segment terminator '~'`},
		{name: "x12 space terminator", payload: edi(isa('*', '>', ' ', "SENDERID", "000000905", "P") + x12Body),
			wantErr: `x12: ISA segment terminator ' ' (offset 105) cannot be a terminator`},
		{name: "x12 alphanumeric component separator", payload: edi(isa('*', 'Q', '~', "SENDERID", "000000905", "P") + x12Body),
			wantErr: `x12: ISA16 component element separator 'Q' cannot be a separator`},
		{name: "x12 terminator inside ISA", payload: edi(isa('*', '>', '~', "SEND~RID", "000000905", "P") + x12Body),
			wantErr: `x12: ISA06 contains a separator '~'`},
		{name: "x12 empty sender", payload: edi(isa('*', '>', '~', "", "000000905", "P") + x12Body), wantErr: "x12: ISA without ISA06 interchange sender ID"},
		{name: "x12 IEA missing", payload: edi(isa('*', '>', '~', "SENDERID", "000000905", "P") + "GS*IN~ST*810*1~SE*2*1~"), wantErr: `x12: IEA interchange trailer missing (ISA13 "000000905")`},
		{name: "x12 IEA unterminated", payload: edi(isa('*', '>', '~', "SENDERID", "000000905", "P") + strings.TrimSuffix(x12Body, "~")),
			wantErr: `x12: segment "IEA" is not terminated (no '~' before the end of the data)`},
		{name: "x12 no transaction set", payload: edi(isa('*', '>', '~', "SENDERID", "000000905", "P") + "IEA*0*000000905~"), wantErr: `x12: interchange "000000905" holds no ST transaction set and no TA1`},
		{name: "x12 ST without type", payload: edi(isa('*', '>', '~', "SENDERID", "000000905", "P") + "ST**1~IEA*0*000000905~"), wantErr: "x12: first ST without transaction set identifier code (ST01)"},
		{name: "x12 nested ISA", payload: edi(isa('*', '>', '~', "SENDERID", "000000905", "P") + isa('*', '>', '~', "SENDERID", "000000905", "P") + x12Body),
			wantErr: `x12: ISA inside interchange "000000905" before its IEA`},
		{name: "x12 data after IEA", payload: edi(isa('*', '>', '~', "SENDERID", "000000905", "P") + x12Body + "\nGS*X~"),
			wantErr: `x12: 5 bytes after the IEA of interchange "000000905" (only one interchange per payload is read)`},

		// UBL variants.
		{name: "ubl CreditNote default parties", payload: ublDoc("CreditNote", nsCreditNote, `<cbc:ID>CN-9</cbc:ID><cbc:IssueDate>2024-01-02</cbc:IssueDate>`+
			ublParty("AccountingSupplierParty", "S1", "0088")+ublParty("AccountingCustomerParty", "C1", "0192")),
			want: &Interchange{Standard: StandardUBL, Sender: "S1", SenderQualifier: "0088", Recipient: "C1", RecipientQualifier: "0192",
				Reference: "CN-9", Date: "2024-01-02", Type: "CreditNote", Syntax: nsCreditNote}},
		{name: "ubl OrderResponse parties reversed", payload: ublDoc("OrderResponse", "urn:oasis:names:specification:ubl:schema:xsd:OrderResponse-2", `<cbc:ID>OR-1</cbc:ID>`+
			ublParty("SellerSupplierParty", "SELLER", "0007")+ublParty("BuyerCustomerParty", "BUYER", "0088")),
			want: &Interchange{Standard: StandardUBL, Sender: "SELLER", SenderQualifier: "0007", Recipient: "BUYER", RecipientQualifier: "0088",
				Reference: "OR-1", Type: "OrderResponse", Syntax: "urn:oasis:names:specification:ubl:schema:xsd:OrderResponse-2"}},
		{name: "ubl ApplicationResponse", payload: ublDoc("ApplicationResponse", "urn:oasis:names:specification:ubl:schema:xsd:ApplicationResponse-2",
			`<cbc:ID>AR-1</cbc:ID><cac:SenderParty><cbc:EndpointID schemeID="0088">A</cbc:EndpointID></cac:SenderParty><cac:ReceiverParty><cbc:EndpointID schemeID="0088">B</cbc:EndpointID></cac:ReceiverParty>`),
			want: &Interchange{Standard: StandardUBL, Sender: "A", SenderQualifier: "0088", Recipient: "B", RecipientQualifier: "0088",
				Reference: "AR-1", Type: "ApplicationResponse", Syntax: "urn:oasis:names:specification:ubl:schema:xsd:ApplicationResponse-2"}},
		{name: "ubl ISO-8859-1", payload: append([]byte(`<?xml version="1.0" encoding="ISO-8859-1"?>`), ublDoc("Invoice", nsInvoice, "<cbc:ID>F\xfcr-1</cbc:ID>")...),
			want: &Interchange{Standard: StandardUBL, Reference: "Für-1", Type: "Invoice", Syntax: nsInvoice}},
		{name: "ubl CDATA and comments in ID", payload: ublDoc("Invoice", nsInvoice, "<cbc:ID><!-- c --><![CDATA[A<1>]]>B</cbc:ID>"),
			want: &Interchange{Standard: StandardUBL, Reference: "A<1>B", Type: "Invoice", Syntax: nsInvoice}},
		{name: "ubl cbc prefix bound elsewhere is ignored", payload: []byte(`<Invoice xmlns="` + nsInvoice + `" xmlns:cbc="urn:other"><cbc:ID>X</cbc:ID></Invoice>`),
			wantErr: "ubl: Invoice has neither cbc:UUID nor cbc:ID"},

		// UBL and SBDH damaged.
		{name: "ubl two IDs", payload: ublDoc("Invoice", nsInvoice, "<cbc:ID>A</cbc:ID><cbc:ID>B</cbc:ID>"), wantErr: "ubl: more than one cbc:ID"},
		{name: "ubl element inside ID", payload: ublDoc("Invoice", nsInvoice, "<cbc:ID>A<b/></cbc:ID>"), wantErr: "ubl: cbc:ID contains element <b>"},
		{name: "ubl root does not match namespace", payload: ublDoc("Invoice", nsOrder, "<cbc:ID>A</cbc:ID>"),
			wantErr: `ubl: root element "Invoice" is not the document element of namespace "urn:oasis:names:specification:ubl:schema:xsd:Order-2"`},
		{name: "ubl second root", payload: append(ublDoc("Invoice", nsInvoice, "<cbc:ID>A</cbc:ID>"), "<x/>"...), wantErr: "ubl: element <x> after the root element"},
		{name: "ubl text after root", payload: append(ublDoc("Invoice", nsInvoice, "<cbc:ID>A</cbc:ID>"), " junk"...), wantErr: "ubl: text after the root element"},
		{name: "ubl undefined entity", payload: ublDoc("Invoice", nsInvoice, "<cbc:ID>&xxe;</cbc:ID>"), wantErr: "ubl: malformed XML: XML syntax error on line 1: invalid character entity &xxe;"},
		{name: "ubl mismatched end", payload: []byte(`<Invoice xmlns="` + nsInvoice + `"><a></b></Invoice>`), wantErr: "ubl: malformed XML: XML syntax error on line 1: element <a> closed by </b>"},
		{name: "ubl too deep", payload: ublDoc("Invoice", nsInvoice, "<cbc:ID>A</cbc:ID>"+strings.Repeat("<x>", 70)+strings.Repeat("</x>", 70)), wantErr: "ubl: elements nested deeper than 64"},
		{name: "ubl unsupported encoding", payload: append([]byte(`<?xml version="1.0" encoding="windows-1252"?>`), ublDoc("Invoice", nsInvoice, "<cbc:ID>A</cbc:ID>")...),
			wantErr: `ubl: unsupported encoding "windows-1252" (UTF-8, US-ASCII and ISO-8859-1 are read)`},
		{name: "ubl ID too long", payload: ublDoc("Invoice", nsInvoice, "<cbc:ID>"+strings.Repeat("9", 513)+"</cbc:ID>"), wantErr: "ubl: reference is 513 bytes long, more than 512"},
		{name: "sbdh without InstanceIdentifier", payload: []byte(`<StandardBusinessDocument xmlns="` + nsSBDH + `"><StandardBusinessDocumentHeader><DocumentIdentification><Type>Invoice</Type></DocumentIdentification></StandardBusinessDocumentHeader></StandardBusinessDocument>`),
			wantErr: "sbdh: no StandardBusinessDocumentHeader/DocumentIdentification/InstanceIdentifier"},
		{name: "sbdh two senders", payload: []byte(`<StandardBusinessDocument xmlns="` + nsSBDH + `"><StandardBusinessDocumentHeader><Sender><Identifier>a</Identifier></Sender><Sender><Identifier>b</Identifier></Sender></StandardBusinessDocumentHeader></StandardBusinessDocument>`),
			wantErr: "sbdh: more than one Sender/Identifier"},
		{name: "sbdh truncated", payload: []byte(`<StandardBusinessDocument xmlns="` + nsSBDH + `"><StandardBusinessDocumentHeader>`),
			wantErr: "sbdh: malformed XML: XML syntax error on line 1: unexpected EOF"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Extract(tc.payload)
			switch {
			case tc.want != nil:
				if err != nil {
					t.Fatalf("Extract: %v", err)
				}
				if *got != *tc.want {
					t.Errorf("Extract =\n %+v\nwant\n %+v", *got, *tc.want)
				}
			case tc.noEnvelope:
				if err != ErrNoEnvelope || got != nil {
					t.Fatalf("Extract = %+v, %v; want nil, ErrNoEnvelope", got, err)
				}
			default:
				if err == nil {
					t.Fatalf("Extract = %+v, want error %q", *got, tc.wantErr)
				}
				if got != nil || !errors.Is(err, ErrDamaged) || errors.Is(err, ErrNoEnvelope) {
					t.Errorf("Extract = %v, %v; want nil and an error wrapping only ErrDamaged", got, err)
				}
				if err.Error() != tc.wantErr {
					t.Errorf("error\n %s\nwant\n %s", err, tc.wantErr)
				}
			}
		})
	}
}

// TestExtractDamagedFiles covers the damaged generated vectors.
func TestExtractDamagedFiles(t *testing.T) {
	tests := []struct{ file, wantErr string }{
		{"edifact/damaged-unz-mismatch.edi", `edifact: UNZ 0020 "ABD" does not match UNB 0020 "ABC"`},
		{"edifact/damaged-no-unz.edi", `edifact: UNZ interchange trailer missing (UNB 0020 "ABC")`},
		{"x12/damaged-isa-truncated.x12", "x12: ISA segment truncated: 60 of 106 bytes"},
		{"x12/damaged-iea-mismatch.x12", `x12: IEA02 "000000906" does not match ISA13 "000000905"`},
		{"ubl/damaged-doctype.xml", "ubl: DOCTYPE declaration refused (DTDs and entity declarations are not read)"},
		{"ubl/damaged-truncated.xml", "ubl: malformed XML: XML syntax error on line 6: unexpected EOF"},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			got, err := Extract(readTestdata(t, tc.file))
			if got != nil || !errors.Is(err, ErrDamaged) {
				t.Fatalf("Extract = %+v, %v; want nil and ErrDamaged", got, err)
			}
			if err.Error() != tc.wantErr {
				t.Errorf("error\n %s\nwant\n %s", err, tc.wantErr)
			}
		})
	}
}

// TestExtractUnwrap checks that an XML syntax error stays reachable.
func TestExtractUnwrap(t *testing.T) {
	_, err := Extract(readTestdata(t, "ubl/damaged-truncated.xml"))
	var inner interface{ Unwrap() error }
	if !errors.As(err, &inner) || inner.Unwrap() == nil {
		t.Fatalf("error %v does not unwrap to the XML syntax error", err)
	}
}

// referenceKey is an independent implementation of the documented encoding.
func referenceKey(fields ...string) string {
	h := sha256.New()
	for _, f := range append([]string{"gateway/interchange-key/v1"}, fields...) {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestKeyVectors pins the business key encoding. If one of these values
// changes, ledgers written before the change stop matching: bump KeyTag.
func TestKeyVectors(t *testing.T) {
	tests := []struct {
		name    string
		ic      *Interchange
		partner string
		want    dedup.Key
	}{
		{"edifact", &Interchange{Standard: "edifact", Sender: "5412345000013", SenderQualifier: "14", Recipient: "4012345000023", RecipientQualifier: "14",
			Reference: "INV0001", Date: "20240315", Time: "1412", Type: "INVOIC"}, "acme",
			"ab49e05456d01513f95bc5372fbab6bff3efd60d2d117f7214b7f6495047c108"},
		{"x12", &Interchange{Standard: "x12", Sender: "SENDERID", SenderQualifier: "ZZ", Recipient: "RECEIVERID", RecipientQualifier: "ZZ",
			Reference: "000000905", Date: "240315", Type: "810"}, "acme",
			"04d30762847ecd7017be791b23dc7f0d9cac66813465bf609690f12af30104f5"},
		{"peppol-sbdh", &Interchange{Standard: "peppol-sbdh", Sender: "9915:phase4-test-sender", SenderQualifier: "iso6523-actorid-upis",
			Recipient: "9915:helger", RecipientQualifier: "iso6523-actorid-upis", Reference: "123456789", Date: "2023-10-25T15:42:10Z", Type: "Invoice"}, "phase4",
			"e6c8ba5cadd21f730727f0641852c8d04f13dee1ad2eba263efa44983def6260"},
		{"empty", &Interchange{}, "", "781c4d85cd2f1f8f754621a993c5c3aa7af7553a12ed9c8848fe266cd44cb08a"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.ic.Key(tc.partner)
			ic := tc.ic
			date := ic.Date
			if ic.Standard == StandardPeppolSBDH {
				date = ""
			}
			ref := referenceKey(tc.partner, ic.Standard, ic.SenderQualifier, ic.Sender, ic.RecipientQualifier, ic.Recipient, ic.Reference, date, ic.Type)
			if string(got) != ref {
				t.Errorf("Key = %s, documented encoding gives %s", got, ref)
			}
			if got != tc.want {
				t.Errorf("Key = %s, pinned %s", got, tc.want)
			}
			if !got.Valid() {
				t.Errorf("Key %q is not a valid dedup.Key", got)
			}
		})
	}
}

// TestKeyFields checks which fields the key covers, and that the length
// prefix separates neighbouring fields.
func TestKeyFields(t *testing.T) {
	base := &Interchange{Standard: "edifact", Sender: "S", SenderQualifier: "14", Recipient: "R", RecipientQualifier: "14",
		Reference: "X", Date: "240315", Time: "0930", Type: "INVOIC", TypeVersion: "D:96A:UN", Syntax: "UNOA:2"}
	k := base.Key("p")
	changes := map[string]func(*Interchange){
		"standard":            func(ic *Interchange) { ic.Standard = "x12" },
		"sender":              func(ic *Interchange) { ic.Sender = "T" },
		"sender qualifier":    func(ic *Interchange) { ic.SenderQualifier = "ZZ" },
		"recipient":           func(ic *Interchange) { ic.Recipient = "Q" },
		"recipient qualifier": func(ic *Interchange) { ic.RecipientQualifier = "ZZ" },
		"reference":           func(ic *Interchange) { ic.Reference = "Y" },
		"date":                func(ic *Interchange) { ic.Date = "240316" },
		"type":                func(ic *Interchange) { ic.Type = "ORDERS" },
		"qualifier into id":   func(ic *Interchange) { ic.SenderQualifier, ic.Sender = "1", "4S" },
	}
	for name, edit := range changes {
		if with(base, edit).Key("p") == k {
			t.Errorf("changing %s keeps the key", name)
		}
	}
	if base.Key("q") == k {
		t.Error("changing the partner keeps the key")
	}
	same := map[string]func(*Interchange){
		"time":         func(ic *Interchange) { ic.Time = "2359" },
		"type version": func(ic *Interchange) { ic.TypeVersion = "D:01B:UN" },
		"syntax":       func(ic *Interchange) { ic.Syntax = "UNOC:3" },
		"test":         func(ic *Interchange) { ic.Test = true },
	}
	for name, edit := range same {
		if with(base, edit).Key("p") != k {
			t.Errorf("changing %s changes the key", name)
		}
	}
	// A PEPPOL InstanceIdentifier is unique forever: the date does not scope it.
	sbdh := with(base, func(ic *Interchange) { ic.Standard = StandardPeppolSBDH })
	if with(sbdh, func(ic *Interchange) { ic.Date = "2030-01-01T00:00:00Z" }).Key("p") != sbdh.Key("p") {
		t.Error("peppol-sbdh: changing CreationDateAndTime changes the key")
	}
	if with(sbdh, func(ic *Interchange) { ic.Reference = "Y" }).Key("p") == sbdh.Key("p") {
		t.Error("peppol-sbdh: changing InstanceIdentifier keeps the key")
	}
}

// TestSameInterchangeSameKey: one interchange written with different
// delimiters, line ends and padding has one key.
func TestSameInterchangeSameKey(t *testing.T) {
	variants := map[string][]byte{
		"default":      readTestdata(t, "edifact/invoic-default.edi"),
		"custom UNA":   []byte("UNA|^,\\*~\r\nUNB^UNOC|3^5412345000013|14^4012345000023|14^20240315|1412^INV0001^^^^^^1~\r\nUNH^1^INVOIC|D|96A|UN|EAN008~\r\nUNT^2^1~\r\nUNZ^1^INV0001~\r\n"),
		"level B":      []byte("UNB\x1dUNOC\x1f3\x1d5412345000013\x1f14\x1d4012345000023\x1f14\x1d20240315\x1f1412\x1dINV0001\x1cUNH\x1d1\x1dINVOIC\x1cUNZ\x1d1\x1dINV0001\x1c"),
		"LF and space": []byte("\xef\xbb\xbf\n UNA:+.? '\nUNB+UNOC:3+5412345000013:14+4012345000023:14+20240315:1412+INV0001'\nUNH+1+INVOIC:D:96A:UN'\nUNZ+1+INV0001'\n\n"),
	}
	want := dedup.Key("")
	for name, data := range variants {
		ic, err := Extract(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		k := ic.Key("acme")
		if want == "" {
			want = k
		}
		if k != want {
			t.Errorf("%s: key %s, want %s (%+v)", name, k, want, *ic)
		}
	}
	x12 := []string{"x12/810-tilde.x12", "x12/810-newline.x12"}
	a, errA := Extract(readTestdata(t, x12[0]))
	b, errB := Extract(readTestdata(t, x12[1]))
	if errA != nil || errB != nil || a.Key("acme") != b.Key("acme") {
		t.Errorf("X12 with ~ and with newline terminators: %v %v, keys differ", errA, errB)
	}
}

// TestExtractTyped: a payload declared XML by its MIME type must be XML; the
// type does not change what is read from a payload that is XML or EDI.
func TestExtractTyped(t *testing.T) {
	ubl := []byte(`<Invoice xmlns="urn:oasis:names:specification:ubl:schema:xsd:Invoice-2" xmlns:cbc="urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2"><cbc:ID>I1</cbc:ID></Invoice>`)
	tests := []struct {
		ct, payload string
		wantErr     string // "" ok, "none" ErrNoEnvelope
	}{
		{"application/xml", string(ubl), ""},
		{"text/plain", string(ubl), ""},
		{"application/xml", "UNB+UNOA:2+S:14+R:14+240315:0930+X'UNH+1+INVOIC:D:96A:UN'UNZ+1+X'", ""},
		{"application/xml", "", "xml: the payload is declared application/xml but is empty"},
		{"text/xml; charset=utf-8", "  \r\n", "xml: the payload is declared text/xml but is empty"},
		{"application/vnd.peppol.invoice+xml", "%PDF-1.7", "xml: the payload is declared application/vnd.peppol.invoice+xml but does not start with an XML declaration or element"},
		{"Application/XML", "garbage", "xml: the payload is declared application/xml but does not start with an XML declaration or element"},
		{"application/xml", string(ubl[:40]), "xml: malformed XML before the root element: XML syntax error on line 1: unexpected EOF"},
		{"application/xml", "<note/>", "none"},
		// Declared XML, '<' and no root start tag that parses: damaged (the
		// same bytes untyped or application/octet-stream are opaque).
		{"application/xml", "<<<>>>", "xml: malformed XML before the root element: XML syntax error on line 1: expected element name after <"},
		{"text/xml", "<=\x93\x01", "xml: malformed XML before the root element: XML syntax error on line 1: expected element name after <"},
		{"application/octet-stream", "<<<>>>", "none"},
		{"application/octet-stream", "<\x93\x01", "none"},
		{"application/octet-stream", string(ubl[:40]), "none"},
		{"application/octet-stream", `<?xml version="1.0"?>` + "\x93", "xml: malformed XML before the root element: XML syntax error on line 1: invalid UTF-8"},
		// Declared EDI: a tag and a separator are enough to be read as EDI.
		{"application/EDIFACT", "UNB", `edifact: segment "UNB" is not terminated (no '\'' before the end of the data)`},
		{"application/edifact", "UNB:UNOA'", `edifact: interchange does not start with UNB followed by the data element separator '+' (found "UNB")`},
		{"application/edifact", "UNA:+.", "edifact: UNA service string advice truncated: 6 of 9 bytes"},
		{"application/edifact", "UNA:+.? '  ", "edifact: UNB interchange header missing after UNA"},
		{"application/edifact", "UNA:+.? 'UNH+1+INVOIC:D:96A:UN'", `edifact: interchange does not start with UNB followed by the data element separator '+' (found "UNH")`},
		{"application/edifact", "UNA\xae\xae.? '", `edifact: UNA: UNA1 component data element separator and UNA2 data element separator are both '\xae'`},
		{"application/edi-x12", "ISA 00 x", "x12: ISA segment truncated: 8 of 106 bytes"},
		{"application/edifact", "%PDF-1.7", "none"},
		{"application/xml", "\xff\xfe<\x00n\x00/\x00>\x00", "none"}, // UTF-16 is not read: transport dedup only
		{"application/octet-stream", "garbage", "none"},
		{"", "garbage", "none"},
		{"not a media type;;", "garbage", "none"},
	}
	for _, tc := range tests {
		ic, err := ExtractTyped(tc.ct, []byte(tc.payload))
		switch tc.wantErr {
		case "":
			if err != nil || ic == nil {
				t.Errorf("%s %q: %v", tc.ct, clip(tc.payload, 30), err)
			}
		case "none":
			if err != ErrNoEnvelope {
				t.Errorf("%s %q: %v, want ErrNoEnvelope", tc.ct, clip(tc.payload, 30), err)
			}
		default:
			if !errors.Is(err, ErrDamaged) || err.Error() != tc.wantErr {
				t.Errorf("%s %q: %v, want %q", tc.ct, clip(tc.payload, 30), err, tc.wantErr)
			}
		}
	}
}

// TestReasonHasNoParserText: Reason, what partners are told, names the
// standard and the problem but not the XML decoder's error text.
func TestReasonHasNoParserText(t *testing.T) {
	_, err := Extract([]byte("<Invoice xmlns=\"urn:oasis:names:specification:ubl:schema:xsd:Invoice-2\">\n<a></b></Invoice>"))
	if got, want := Reason(err), "UBL: malformed XML (line 2)"; got != want {
		t.Errorf("Reason = %q, want %q (error %v)", got, want, err)
	}
	_, err = Extract([]byte("UNB+UNOA:2+S:14+R:14+240315:0930+X'UNH+1+INVOIC:D:96A:UN'UNZ+1+Y'"))
	if got, want := Reason(err), `EDIFACT: UNZ 0020 "Y" does not match UNB 0020 "X"`; got != want {
		t.Errorf("Reason = %q, want %q (error %v)", got, want, err)
	}
	_, err = ExtractTyped("application/xml", []byte("<Invoice xmlns=\"urn:oasis:names:specification:ubl:schema:xsd:Invoice-2\"\n\x01"))
	if got, want := Reason(err), "XML: malformed XML before the root element (line 2)"; got != want {
		t.Errorf("Reason = %q, want %q (error %v)", got, want, err)
	}
	if got := Reason(errors.New("invalid BER: length 97")); strings.Contains(got, "BER") {
		t.Errorf("Reason of a foreign error = %q", got)
	}
}

// TestRandomBinariesAreOpaque: 10,000 random bytes after the first bytes
// of each standard ('<', "UNB", "ISA", ...), as a load test's random
// application/octet-stream payloads are, are no envelope (transport dedup
// only), never a damaged one, unless they recognisably start as a business
// document. Before, every one starting with '<' (1 in 256) was damaged.
func TestRandomBinariesAreOpaque(t *testing.T) {
	const perHead = 300
	for i, head := range randomHeads {
		damaged := 0
		for n := range perHead {
			data := randomBinary(uint64(i*perHead+n), head, 10_000)
			_, err := ExtractTyped("application/octet-stream", data)
			if errors.Is(err, ErrDamaged) {
				damaged++
				if !recognisable(data) {
					t.Errorf("%q + random bytes (seed %d): damaged: %v", head, i*perHead+n, err)
				}
			} else if err != ErrNoEnvelope {
				t.Fatalf("%q + random bytes: %v", head, err)
			}
		}
		if damaged > 0 {
			t.Logf("%q: %d of %d recognisable and damaged", head, damaged, perHead)
		}
	}
}
