package envelope

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"testing"
	"time"
)

// repeatReader yields head, then body n times, then tail, without holding
// more than those three.
type repeatReader struct {
	parts [][]byte
	n     int // repetitions of parts[1] left
	off   int
	stage int
}

func newRepeatReader(head, body, tail string, n int) *repeatReader {
	return &repeatReader{parts: [][]byte{[]byte(head), []byte(body), []byte(tail)}, n: n}
}

func (r *repeatReader) Read(p []byte) (int, error) {
	out := 0
	for out < len(p) && r.stage < 3 {
		cur := r.parts[r.stage]
		c := copy(p[out:], cur[r.off:])
		out += c
		r.off += c
		if r.off == len(cur) {
			r.off = 0
			if r.stage == 1 {
				if r.n--; r.n > 0 {
					continue
				}
			}
			r.stage++
			if r.stage == 1 && r.n == 0 {
				r.stage = 2
			}
		}
	}
	if out == 0 {
		return 0, io.EOF
	}
	return out, nil
}

func (r *repeatReader) size() int64 {
	return int64(len(r.parts[0])) + int64(r.n)*int64(len(r.parts[1])) + int64(len(r.parts[2]))
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

var heapSample = []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/unused:bytes"}}

func heapNow() uint64 {
	metrics.Read(heapSample)
	return heapSample[0].Value.Uint64() + heapSample[1].Value.Uint64()
}

// heapGrowth runs f and returns the peak growth of the heap (objects and
// unused spans, sampled every millisecond) over the heap before it.
func heapGrowth(f func()) uint64 {
	runtime.GC()
	debug.FreeOSMemory()
	idle := heapNow()
	peak := idle
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			peak = max(peak, heapNow())
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	f()
	close(stop)
	<-done
	peak = max(peak, heapNow())
	return peak - idle
}

// maxHeapGrowth is what extracting an envelope from a payload of any size
// may add to the heap.
const maxHeapGrowth = 8 << 20

// TestExtractReaderLargeEDIFACT: a 200 MiB price catalogue (PRICAT with a
// million LIN groups) is read to its UNZ as a stream in fixed memory.
func TestExtractReaderLargeEDIFACT(t *testing.T) {
	if testing.Short() {
		t.Skip("reads 200 MiB")
	}
	body := "LIN+1++4000862141404:SRS'PIA+1+ABC?+123:SA'IMD+F++:::Price catalogue line with a long description'PRI+AAA:27.50:CT'QTY+21:5'FTX+AAI+++It?'s ok'\n"
	n := 200<<20/len(body) + 1
	r := newRepeatReader("UNA:+.? 'UNB+UNOC:3+5412345000013:14+4012345000023:14+240315:0930+PC0001'UNH+1+PRICAT:D:96A:UN:EAN008'", body,
		"UNT+9+1'UNZ+1+PC0001'\n", n)
	if r.size() < 200<<20 {
		t.Fatalf("generated %d bytes", r.size())
	}
	want := &Interchange{Standard: StandardEDIFACT, Sender: "5412345000013", SenderQualifier: "14", Recipient: "4012345000023", RecipientQualifier: "14",
		Reference: "PC0001", Date: "240315", Time: "0930", Type: "PRICAT", TypeVersion: "D:96A:UN:EAN008", Syntax: "UNOC:3"}
	extractLarge(t, "200 MiB EDIFACT", "application/edifact", r, 200<<20, want)
}

// extractLarge extracts the envelope of a generated payload of at least
// size bytes and checks the result, that every byte was read and the heap
// growth.
func extractLarge(t *testing.T, name, contentType string, r io.Reader, size int64, want *Interchange) {
	t.Helper()
	var (
		ic  *Interchange
		err error
	)
	cr := &countingReader{r: r}
	grew := heapGrowth(func() { ic, err = ExtractTypedReader(contentType, cr) })
	if err != nil {
		t.Fatal(err)
	}
	if *ic != *want || cr.n < size {
		t.Errorf("read %d bytes, got %+v\nwant %+v", cr.n, *ic, *want)
	}
	t.Logf("%s: heap growth %.1f MiB", name, float64(grew)/(1<<20))
	if grew > maxHeapGrowth {
		t.Errorf("heap grew %d bytes, more than %d", grew, maxHeapGrowth)
	}
}

// TestExtractReaderLargeUBLAttachment: a UBL invoice whose 100 MiB base64
// attachment comes before the party endpoint ids is read in fixed memory
// with every value intact.
func TestExtractReaderLargeUBLAttachment(t *testing.T) {
	if testing.Short() {
		t.Skip("reads 100 MiB")
	}
	head := `<?xml version="1.0" encoding="UTF-8"?>` + "\n" + `<Invoice xmlns="urn:oasis:names:specification:ubl:schema:xsd:Invoice-2" xmlns:cbc="urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2" xmlns:cac="urn:oasis:names:specification:ubl:schema:xsd:CommonAggregateComponents-2">` +
		`<cbc:UBLVersionID>2.1</cbc:UBLVersionID><cbc:ID>INV-2024-0042</cbc:ID><cbc:IssueDate>2024-03-15</cbc:IssueDate>` +
		`<cac:AdditionalDocumentReference><cbc:ID>drawing</cbc:ID><cac:Attachment><cbc:EmbeddedDocumentBinaryObject mimeCode="application/pdf" filename="drawing.pdf">`
	body := strings.Repeat("JVBERi0xLjcKJeLjz9MKMSAwIG9iago8PC9UeXBlL0NhdGFsb2c+PgplbmRvYmoK", 16) + "\r\n"
	tail := `</cbc:EmbeddedDocumentBinaryObject></cac:Attachment></cac:AdditionalDocumentReference>` +
		`<cac:AccountingSupplierParty><cac:Party><cbc:EndpointID schemeID="0088">5412345000013</cbc:EndpointID></cac:Party></cac:AccountingSupplierParty>` +
		`<cac:AccountingCustomerParty><cac:Party><cbc:EndpointID schemeID="0088">4012345000023</cbc:EndpointID></cac:Party></cac:AccountingCustomerParty>` +
		`</Invoice>` + "\n"
	r := newRepeatReader(head, body, tail, 100<<20/len(body)+1)
	want := &Interchange{Standard: StandardUBL, Sender: "5412345000013", SenderQualifier: "0088", Recipient: "4012345000023", RecipientQualifier: "0088",
		Reference: "INV-2024-0042", Date: "2024-03-15", Type: "Invoice", TypeVersion: "2.1", Syntax: nsInvoice}
	extractLarge(t, "UBL with a 100 MiB attachment", "application/xml", r, 100<<20, want)
}

// TestLongSegments: a service segment longer than MaxSegmentLength makes the
// envelope damaged, saying so; any other segment may be longer (an X12 BIN
// or EDIFACT FTX carrying megabytes) and is skipped.
func TestLongSegments(t *testing.T) {
	long := strings.Repeat("A", MaxSegmentLength)
	edi := func(unh, mid string) string {
		return "UNB+UNOA:2+S:14+R:14+240315:0930+X'UNH+1+INVOIC:D:96A:UN" + unh + "'" + mid + "UNZ+1+X'"
	}
	x12 := func(st, mid string) string {
		return isa('*', '>', '~', "SENDERID", "000000905", "P") + "GS*IN*S*R*20240315*1253*905*X*004010~ST*810*0001" + st + "~" + mid +
			"SE*2*0001~GE*1*905~IEA*1*000000905~"
	}
	for _, tc := range []struct{ name, payload, err string }{
		{"edifact UNH", edi("+"+long, ""), `edifact: segment "UNH" is longer than 1048576 bytes`},
		{"edifact UNB", "UNB+UNOA:2+S:14+R:14+240315:0930+X+" + long + "'UNH+1+INVOIC'UNZ+1+X'", `edifact: segment "UNB" is longer than 1048576 bytes`},
		{"edifact UNZ", edi("", "UNZ+1+X+"+long+"'"), `edifact: segment "UNZ" is longer than 1048576 bytes`},
		{"edifact FTX", edi("", "FTX+AAI+++"+long+long+"?'"+long+"'"), ""},
		{"edifact second UNH", edi("", "UNH+2+"+long+"'"), ""},
		{"x12 ST", x12("*"+long, ""), `x12: segment "ST" is longer than 1048576 bytes`},
		{"x12 IEA", strings.Replace(x12("", ""), "IEA*1*000000905~", "IEA*1*000000905*"+long+"~", 1), `x12: segment "IEA" is longer than 1048576 bytes`},
		{"x12 BIN", x12("", "BIN*3000000*"+long+long+long+"~"), ""},
		{"x12 no separator", x12("", long+"X~"), `x12: segment "` + long[:16] + `" has no element separator in its first 1048576 bytes`},
	} {
		ic, err := Extract([]byte(tc.payload))
		if tc.err == "" {
			if err != nil || ic.Reference == "" {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, ErrDamaged) || err.Error() != tc.err || Reason(err) != partnerReason(tc.err) {
			t.Errorf("%s: %v (reason %q), want %q", tc.name, err, Reason(err), tc.err)
		}
	}
}

// TestXMLLongMarkupRefused: markup longer than xmlMaxMarkup is damaged with
// a reason saying so (the decoder would have to hold it whole), while text
// and CDATA of any length are read.
func TestXMLLongMarkup(t *testing.T) {
	doc := func(inner string) string {
		return `<Invoice xmlns="` + nsInvoice + `" xmlns:cbc="urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2">` + inner + `<cbc:ID>I1</cbc:ID></Invoice>`
	}
	long := strings.Repeat("x", xmlMaxMarkup)
	for _, tc := range []struct{ name, payload, reason string }{
		{"attribute", doc(`<cbc:Note a="` + long + `"/>`), "UBL: malformed XML: tag longer than 1048576 bytes"},
		{"comment", doc(`<!--` + long + `-->`), "UBL: malformed XML: comment longer than 1048576 bytes"},
		{"text", doc(`<cbc:Note>` + long + long + `</cbc:Note>`), ""},
		{"cdata", doc(`<cbc:Note><![CDATA[` + long + `]]]]>` + long + `]]></cbc:Note>`), ""},
	} {
		ic, err := Extract([]byte(tc.payload))
		if tc.reason == "" {
			if err != nil || ic.Reference != "I1" {
				t.Errorf("%s: %+v, %v", tc.name, ic, err)
			}
			continue
		}
		if !errors.Is(err, ErrDamaged) || Reason(err) != tc.reason {
			t.Errorf("%s: %v (reason %q), want reason %q", tc.name, err, Reason(err), tc.reason)
		}
	}
}

// TestExtractReaderReadError: an error reading the payload is returned as
// such, never as a damaged envelope (the partner's message is not at
// fault).
func TestExtractReaderReadError(t *testing.T) {
	boom := errors.New("disk gone")
	for _, head := range []string{"UNB+UNOA:2+S:14+R:14+240315:0930+X'UNH+1+INVOIC'", isa('*', '>', '~', "S", "1", "P"), `<Invoice xmlns="` + nsInvoice + `">`} {
		_, err := ExtractReader(io.MultiReader(strings.NewReader(head), &failingReader{boom}))
		if !errors.Is(err, boom) || errors.Is(err, ErrDamaged) {
			t.Errorf("%.20q: %v", head, err)
		}
	}
}

type failingReader struct{ err error }

func (f *failingReader) Read([]byte) (int, error) { return 0, f.err }

// TestReaderMatchesBytes: ExtractReader over a reader that returns one
// byte at a time gives what Extract gives, for every seed payload.
func TestReaderMatchesBytes(t *testing.T) {
	for _, name := range []string{"edifact/invoic-release.edi", "edifact/damaged-no-unz.edi", "x12/810-crlf.x12", "ubl/invoice-uuid.xml", "ubl/damaged-truncated.xml", "sbdh/sbdh-creditnote.xml"} {
		data := readTestdata(t, name)
		ic, err := Extract(data)
		ic2, err2 := ExtractReader(&oneByteReader{bytes.NewReader(data)})
		if (err == nil) != (err2 == nil) || err != nil && err.Error() != err2.Error() || ic != nil && *ic != *ic2 {
			t.Errorf("%s: %+v, %v; one byte at a time %+v, %v", name, ic, err, ic2, err2)
		}
	}
}

type oneByteReader struct{ r io.Reader }

func (o *oneByteReader) Read(p []byte) (int, error) {
	if len(p) > 1 {
		p = p[:1]
	}
	return o.r.Read(p)
}

// TestExtractReaderReusesItsBuffer: extracting from one payload after
// another allocates far less than the 64 KiB read buffer per payload, and a
// reused buffer holds nothing of the payload before (a short or failing
// payload after a long one is read for what it is).
func TestExtractReaderReusesItsBuffer(t *testing.T) {
	long := "UNB+UNOA:2+LONGSENDER:14+LONGRECIPIENT:14+240315:0930+LONGREF'UNH+1+INVOIC:D:96A:UN'" + strings.Repeat("LIN+1++4000862141404:SRS'", 2000) + "UNT+2002+1'UNZ+1+LONGREF'"
	if ic, err := ExtractReader(strings.NewReader(long)); err != nil || ic.Reference != "LONGREF" {
		t.Fatalf("long payload: %+v, %v", ic, err)
	}
	small := "UNB+UNOA:2+S:14+R:14+240315:0930+X'UNH+1+INVOIC:D:96A:UN'UNT+2+1'UNZ+1+X'"
	const rounds = 50
	var ic *Interchange
	var err error
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	for range rounds {
		if ic, err = ExtractReader(strings.NewReader(small)); err != nil {
			break
		}
	}
	runtime.ReadMemStats(&b)
	if err != nil || ic.Reference != "X" || ic.Sender != "S" {
		t.Fatalf("small payload: %+v, %v", ic, err)
	}
	if per := (b.TotalAlloc - a.TotalAlloc) / rounds; per > 16<<10 && !raceEnabled {
		t.Fatalf("a %d-byte payload allocated %d KiB per extraction", len(small), per>>10)
	}
	if _, err := ExtractReader(strings.NewReader("UNB+")); !errors.Is(err, ErrDamaged) {
		t.Fatalf("truncated payload after others: %v", err)
	}
	if _, err := ExtractReader(io.MultiReader(strings.NewReader("UN"), iotestErr{})); err == nil || errors.Is(err, ErrDamaged) {
		t.Fatalf("failing reader after others: %v", err)
	}
	if ic, err := ExtractTypedReader("application/edifact", strings.NewReader(small)); err != nil || ic.Reference != "X" {
		t.Fatalf("typed, after a failing reader: %+v, %v", ic, err)
	}
}

type iotestErr struct{}

func (iotestErr) Read([]byte) (int, error) { return 0, errors.New("disk gone") }

// partnerReason is what Reason gives for a damaged envelope whose error
// text is errText: the standard's label replaced by its name.
func partnerReason(errText string) string {
	for label, name := range map[string]string{"edifact": "EDIFACT", "x12": "X12", "ubl": "UBL", "sbdh": "PEPPOL SBDH", "peppol-sbdh": "PEPPOL SBDH", "xml": "XML"} {
		if rest, ok := strings.CutPrefix(errText, label+": "); ok {
			return name + ": " + rest
		}
	}
	return errText
}

// TestExtractReaderReadErrorAtTheStart: an error reading the first bytes,
// which decide whether the payload recognisably starts as a business
// document, is returned as such, not taken for an opaque payload.
func TestExtractReaderReadErrorAtTheStart(t *testing.T) {
	boom := errors.New("disk gone")
	for _, head := range []string{"UNA:+.? '", "UNB", "ISA*0", "<?xm"} {
		_, err := ExtractReader(io.MultiReader(strings.NewReader(head), &failingReader{boom}))
		if !errors.Is(err, boom) || errors.Is(err, ErrDamaged) || err == ErrNoEnvelope {
			t.Errorf("%q: %v", head, err)
		}
	}
}
