package peppol

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const testSBDH = `<?xml version="1.0"?>
<StandardBusinessDocument xmlns="http://www.unece.org/cefact/namespaces/StandardBusinessDocumentHeader">
 <StandardBusinessDocumentHeader>
  <HeaderVersion>1.0</HeaderVersion>
  <Sender><Identifier Authority="iso6523-actorid-upis">0088:1</Identifier></Sender>
  <Receiver><Identifier Authority="iso6523-actorid-upis">0088:2</Identifier></Receiver>
  <DocumentIdentification><Standard>s</Standard><TypeVersion>2.1</TypeVersion><InstanceIdentifier>i-1</InstanceIdentifier><Type>Invoice</Type></DocumentIdentification>
  <BusinessScope>
   <Scope><Type>DOCUMENTID</Type><InstanceIdentifier>doc</InstanceIdentifier><Identifier>busdox-docid-qns</Identifier></Scope>
   <Scope><Type>PROCESSID</Type><InstanceIdentifier>proc</InstanceIdentifier></Scope>
   <Scope><Type>COUNTRY_C1</Type><InstanceIdentifier>SE</InstanceIdentifier></Scope>
  </BusinessScope>
 </StandardBusinessDocumentHeader>
 <Invoice xmlns="urn:oasis:names:specification:ubl:schema:xsd:Invoice-2"/>
</StandardBusinessDocument>`

func TestParseSBDH(t *testing.T) {
	h, err := ParseSBDH([]byte(testSBDH))
	if err != nil {
		t.Fatal(err)
	}
	want := SBDH{Sender: Identifier{"iso6523-actorid-upis", "0088:1"}, Receiver: Identifier{"iso6523-actorid-upis", "0088:2"},
		DocumentType: Identifier{"busdox-docid-qns", "doc"}, Process: Identifier{"cenbii-procid-ubl", "proc"}, CountryC1: "SE",
		InstanceID: "i-1", DocumentStandard: "s", DocumentTypeLocal: "Invoice"}
	if *h != want {
		t.Fatalf("got %+v", *h)
	}
	for name, tc := range map[string]struct{ from, to, err string }{
		"dtd":       {`<?xml version="1.0"?>`, `<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "b">]>`, "DTD"},
		"not sbdh":  {`<StandardBusinessDocument xmlns="http://www.unece.org/cefact/namespaces/StandardBusinessDocumentHeader">`, `<StandardBusinessDocument xmlns="urn:x">`, "not a StandardBusinessDocument"},
		"no proc":   {`<Scope><Type>PROCESSID</Type><InstanceIdentifier>proc</InstanceIdentifier></Scope>`, ``, "PROCESSID] is missing"},
		"two docs":  {`<Scope><Type>PROCESSID</Type>`, `<Scope><Type>DOCUMENTID</Type><InstanceIdentifier>x</InstanceIdentifier></Scope><Scope><Type>PROCESSID</Type>`, "two DOCUMENTID"},
		"no scheme": {`<Identifier Authority="iso6523-actorid-upis">0088:1`, `<Identifier>0088:1`, "Sender/Identifier/@Authority is missing"},
		"cut":       {`</StandardBusinessDocumentHeader>`, ``, "StandardBusinessDocumentHeader"},
	} {
		b := strings.Replace(testSBDH, tc.from, tc.to, 1)
		if name == "cut" {
			b = testSBDH[:strings.Index(testSBDH, "<BusinessScope>")]
		}
		if _, err := ParseSBDH([]byte(b)); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, want %q", name, err, tc.err)
		}
	}
}

func TestParseParticipant(t *testing.T) {
	if id, err := ParseParticipant("0088:5790000435975"); err != nil || id.Scheme != ParticipantScheme {
		t.Fatal(id, err)
	}
	if id, err := ParseParticipant("other-scheme::X"); err != nil || id.Value != "X" {
		t.Fatal(id, err)
	}
	for _, bad := range []string{"5790000435975", "88:1", "0088:", "abcd:1"} {
		if _, err := ParseParticipant(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// Records: one line per accepted transaction, the month read back once per
// message id, a torn last line skipped.
func TestRecorderMonth(t *testing.T) {
	r := &Recorder{Dir: t.TempDir()}
	at := time.Date(2026, 3, 31, 23, 59, 0, 0, time.UTC)
	for _, tx := range []Transaction{{Time: at, MessageID: "a"}, {Time: at, MessageID: "a"}, {Time: at.Add(2 * time.Minute), MessageID: "b"}} {
		if err := r.Add(&tx); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.OpenFile(filepath.Join(r.Dir, "transactions-2026-03.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"message_id":"torn`)
	f.Close()
	txs, err := r.Month("2026-03")
	if err != nil || len(txs) != 1 || txs[0].MessageID != "a" {
		t.Fatalf("march %+v %v", txs, err)
	}
	if txs, err := r.Month("2026-04"); err != nil || len(txs) != 1 {
		t.Fatalf("april %+v %v", txs, err)
	}
	if _, err := r.Month("2026-13"); err == nil {
		t.Fatal("bad month accepted")
	}
	b, err := EUSR("2026-02", "POP000001", nil)
	if err != nil || !strings.Contains(string(b), "<EndDate>2026-02-28</EndDate>") {
		t.Fatalf("%s %v", b, err)
	}
}

// FuzzParseSBDH: partner bytes never panic the SBDH reader, and what it
// accepts has every field the checks need.
func FuzzParseSBDH(f *testing.F) {
	f.Add([]byte(testSBDH))
	f.Add([]byte(`<?xml version="1.0"?><!DOCTYPE a><a/>`))
	f.Add([]byte(`<StandardBusinessDocument xmlns="http://www.unece.org/cefact/namespaces/StandardBusinessDocumentHeader"><StandardBusinessDocumentHeader>`))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseSBDH(b)
		if err == nil && (h.Sender.Value == "" || h.Receiver.Value == "" || h.DocumentType.Value == "" || h.Process.Value == "") {
			t.Fatalf("accepted without a required field: %+v", h)
		}
	})
}
