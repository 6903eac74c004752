package mdn

import (
	"net/http"
	"strings"
	"testing"
)

// FuzzParseHTTP feeds arbitrary MDN responses (a synchronous MDN, or an
// asynchronous one posted to us) to ParseHTTP: no panic; it parses what
// Parse parses, with the transport headers (AS2-From, AS2-To, Message-ID)
// unquoted; and an AS2 name quoted as we quote it reads back as itself.
func FuzzParseHTTP(f *testing.F) {
	ct, body := Build(sampleReport())
	f.Add(ct, body, "OURID", `"Partner Co"`, "<mdn-1@gateway>", "Partner Co")
	f.Add(ct, body, ` "a \"b\" c" `, `"open`, " <x> ", `back\slash`)
	f.Add("multipart/report; boundary=x", []byte("--x\n\n--x--"), `""`, `"\"`, "", " lead")
	f.Fuzz(func(t *testing.T, contentType string, body []byte, from, to, messageID, name string) {
		h := http.Header{}
		h.Set("Content-Type", contentType)
		h["As2-From"] = []string{from}
		h["As2-To"] = []string{to}
		h["Message-Id"] = []string{messageID}
		p, err := ParseHTTP(h, body)
		_, perr := Parse(contentType, body)
		if (err == nil) != (perr == nil) {
			t.Fatalf("ParseHTTP %v, Parse %v", err, perr)
		}
		if err == nil {
			if p.Report.AS2From != unquoteAS2ID(from) || p.Report.AS2To != unquoteAS2ID(to) || p.Report.MessageID != strings.TrimSpace(messageID) {
				t.Fatalf("transport %q %q %q from headers %q %q %q", p.Report.AS2From, p.Report.AS2To, p.Report.MessageID, from, to, messageID)
			}
		}
		if name == strings.TrimSpace(name) {
			if back := unquoteAS2ID(quoteAS2ID(name)); back != name {
				t.Fatalf("AS2 name %q quoted as %q reads back as %q", name, quoteAS2ID(name), back)
			}
		}
	})
}
