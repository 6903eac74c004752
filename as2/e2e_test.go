package as2

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	as2client "github.com/edigateway/gateway/as2/client"
	"github.com/edigateway/gateway/internal/smime"
	"github.com/edigateway/gateway/mdn"
)

// TestSenderMatrix sends every combination of signing, encryption,
// compression and MDN mode through the real HTTP server twice with
// identical bytes: the handler runs once, the first MDN is processed and
// the second the duplicate one, both carrying the sender's MIC.
func TestSenderMatrix(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	for _, sign := range []string{"", "sha1", "sha256", "sha512"} {
		for _, enc := range []string{"", "3des", "aes128-cbc", "aes256-cbc", "aes128-gcm"} {
			for _, compress := range []bool{false, true} {
				for _, mode := range []as2client.MDNMode{as2client.MDNSync, as2client.MDNAsync} {
					name := fmt.Sprintf("sign=%s/enc=%s/compress=%v/mdn=%s", orNone(sign), orNone(enc), compress, mode)
					t.Run(name, func(t *testing.T) {
						t.Parallel()
						c := e.client()
						c.SignDigest, c.Cipher, c.MDN = sign, enc, mode
						if compress {
							c.Compression = smime.CompressThenSign
							if sign == "sha512" {
								c.Compression = smime.SignThenCompress
							}
						}
						payload := []byte("UNA:+.? 'UNB+UNOC:3+ACME:14+GATEWAY:14+260101:1200+" + name + "'\nUNZ+1+1'\n\x00\x01\xfe\xff\r\nend")
						sendTwice(t, e, c, payload, "order.edi")
					})
				}
			}
		}
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// sendTwice sends one prepared message twice and checks both MDNs, the
// handler count and the delivered bytes.
func sendTwice(t *testing.T, e *env, c *as2client.Client, payload []byte, filename string) {
	t.Helper()
	msg, err := c.Prepare(payload, "application/edi-consent", filename)
	if err != nil {
		t.Fatal(err)
	}
	first := sendAndCheck(t, e, c, msg, 1)
	second := sendAndCheck(t, e, c, msg, 2)
	if got := first.Disposition; got.String() != mdn.DispProcessed.String() {
		t.Errorf("first MDN disposition %q", got)
	}
	if got := second.Disposition; got.String() != mdn.DispDuplicateDocument.String() {
		t.Errorf("second MDN disposition %q, want the duplicate one", got)
	}
	for i, ch := range []*as2client.MDNCheck{first, second} {
		if !ch.MICMatched || !ch.Verified || ch.Signer == nil || !ch.Signer.Equal(keys.gw1.Cert) {
			t.Errorf("MDN %d: MIC matched %v, verified %v, problems %v", i+1, ch.MICMatched, ch.Verified, ch.Problems)
		}
	}
	if first.MDN.Report.MIC != second.MDN.Report.MIC || first.MDN.Report.MICAlg != second.MDN.Report.MICAlg {
		t.Errorf("duplicate MIC %s differs from original %s", second.MDN.Report.MIC, first.MDN.Report.MIC)
	}
	if n := e.handler.count(msg.ID); n != 1 {
		t.Fatalf("handler ran %d times for %s", n, msg.ID)
	}
	got := e.handler.payloads(msg.ID)
	if len(got) != 1 || !bytes.Equal(got[0], payload) {
		t.Fatalf("handler got %q, want %q", got, payload)
	}
	var steps []string
	for _, r := range e.auditFor(t, "ACME", msg.ID) {
		steps = append(steps, string(r.Step)+":"+r.Decision)
	}
	want := "[received: decision:new handler:ok reply:accepted received: decision:duplicate reply:]"
	if fmt.Sprint(steps) != want {
		t.Errorf("audit %v, want %s", steps, want)
	}
}

// sendAndCheck sends msg and returns the check of its n-th MDN, sync or
// async.
func sendAndCheck(t *testing.T, e *env, c *as2client.Client, msg *as2client.Message, n int) *as2client.MDNCheck {
	t.Helper()
	res, err := c.Send(context.Background(), msg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != 200 {
		t.Fatalf("send %d: HTTP %d %v", n, res.Status, res.Problems)
	}
	if res.BytesSent != int64(len(msg.Body)) {
		t.Errorf("sent %d of %d bytes", res.BytesSent, len(msg.Body))
	}
	if c.MDN == as2client.MDNAsync {
		if res.MDN != nil {
			t.Fatal("async send returned a sync MDN")
		}
		m := e.mdns.wait(t, msg.ID, n)
		return c.CheckMDN(msg, m.header, m.body)
	}
	if res.MDN == nil {
		t.Fatalf("send %d: no MDN", n)
	}
	return res.MDN
}
