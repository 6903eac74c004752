package envelope

import (
	"strings"
	"testing"
)

// BenchmarkExtract measures Extract on about 1 MiB of each standard: the
// whole payload is scanned (to find the trailer, or to check the XML is
// complete), so throughput is what matters.
func BenchmarkExtract(b *testing.B) {
	const n = 1 << 20
	edifact := "UNB+UNOA:2+S:14+R:14+240315:0930+X'UNH+1+INVOIC:D:96A:UN'" +
		strings.Repeat("LIN+1++9783898307529:EN'QTY+21:5'PRI+AAA:27.5'FTX+AAI+++It?'s ok'", n/64) + "UNZ+1+X'"
	x12 := isa('*', '>', '~', "SENDERID", "000000905", "P") + "GS*IN*S*R*20240315*1253*905*X*004010~ST*810*0001~" +
		strings.Repeat("IT1*1*5*EA*27.5**VP*9783898307529~\n", n/36) + "SE*2*0001~GE*1*905~IEA*1*000000905~"
	ubl := `<Invoice xmlns="urn:oasis:names:specification:ubl:schema:xsd:Invoice-2" xmlns:cbc="urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2" xmlns:cac="urn:oasis:names:specification:ubl:schema:xsd:CommonAggregateComponents-2">` +
		`<cbc:ID>INV-1</cbc:ID><cbc:IssueDate>2024-03-15</cbc:IssueDate><cac:AdditionalDocumentReference><cbc:ID>att</cbc:ID><cac:Attachment><cbc:EmbeddedDocumentBinaryObject mimeCode="application/pdf">` +
		strings.Repeat("QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo=", n/36) + `</cbc:EmbeddedDocumentBinaryObject></cac:Attachment></cac:AdditionalDocumentReference>` +
		strings.Repeat(`<cac:InvoiceLine><cbc:ID>1</cbc:ID><cbc:InvoicedQuantity unitCode="EA">5</cbc:InvoicedQuantity></cac:InvoiceLine>`, 1000) + `</Invoice>`
	for _, bc := range []struct{ name, data string }{{"edifact", edifact}, {"x12", x12}, {"ubl", ubl}} {
		data := []byte(bc.data)
		if _, err := Extract(data); err != nil {
			b.Fatalf("%s: %v", bc.name, err)
		}
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Extract(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
