package transmit_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/edigateway/gateway/internal/cms"
	"github.com/edigateway/gateway/internal/transmit"
	"github.com/edigateway/gateway/mdn"
	"github.com/edigateway/gateway/outbound"
)

const fuzzMIC = "q7b6wI5TXDQ8Q1wqL0xRzEaL0iS/TWbzJJ9Rr3tz1gM="

// FuzzVerifyAsyncMDN feeds arbitrary asynchronous MDNs (Content-Type and
// body, as a partner posts them) to VerifyAsyncMDN, seeded with the
// partner's signed positive and negative MDNs and an unsigned one. It must
// not panic; whatever settles the message (no error) comes with evidence,
// and a delivery with the signer whose signature verified (a signed MDN is
// required).
func FuzzVerifyAsyncMDN(f *testing.F) {
	gw := theirs(f)
	tr := transmit.NewAS2(identity(f), func(string) (*transmit.AS2Settings, error) {
		return &transmit.AS2Settings{URL: "http://127.0.0.1:1", To: "GATEWAY", PartnerCerts: certs(gw.Cert), SignedMDN: true}, nil
	}, f.TempDir())
	m := outbound.Message{Partner: "gw", Protocol: outbound.AS2, MessageID: "<fuzz@DEMO>", Sent: []string{fuzzMIC + ", sha-256"}}
	for _, d := range []mdn.Disposition{mdn.DispProcessed, mdn.DispDecryptionFailed, mdn.DispDuplicateDocument} {
		rep := mdn.Report{ReportingUA: "fuzz", FinalRecipient: "GATEWAY", OriginalMessageID: m.MessageID, MIC: fuzzMIC, MICAlg: "sha-256",
			Disposition: d, AS2From: "GATEWAY", AS2To: "DEMO"}
		ct, body, err := mdn.Sign(mdn.BuildEntity(rep), "sha-256", func(c []byte) ([]byte, error) {
			return cms.SignDetached(c, gw.Cert, gw.Key, "sha256")
		})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(ct, body)
		ct, body = mdn.Build(rep)
		f.Add(ct, body)
	}
	f.Add("multipart/report; boundary=x", []byte("--x\r\n\r\n--x--"))
	f.Add("text/plain", []byte("not an MDN"))
	f.Fuzz(func(t *testing.T, contentType string, body []byte) {
		h := http.Header{"Content-Type": {contentType}}
		delivered, reason, ev, err := tr.VerifyAsyncMDN(context.Background(), m, h, body)
		if err != nil {
			if delivered || reason != "" {
				t.Fatalf("error %v with a verdict: delivered %v reason %q", err, delivered, reason)
			}
			return
		}
		if ev == nil || ev.Kind != "mdn" {
			t.Fatalf("settled without evidence: delivered %v reason %q", delivered, reason)
		}
		if ev.Signer == "" {
			t.Fatalf("settled by an MDN whose signature did not verify: delivered %v reason %q", delivered, reason)
		}
		if !delivered && reason == "" {
			t.Fatal("refused without a reason")
		}
	})
}
