package as2

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	as2client "github.com/edigateway/gateway/as2/client"
	"github.com/edigateway/gateway/internal/smime"
	"github.com/edigateway/gateway/mdn"
)

// FuzzParseHeaders feeds arbitrary AS2 header values to ParseHeaders and
// checks its guarantees: no panic, names within RFC 4130 §6.2, and quoting
// round trips.
func FuzzParseHeaders(f *testing.F) {
	f.Add("ACME", "GATEWAY", "<a@b>", "signed-receipt-protocol=optional, pkcs7-signature; signed-receipt-micalg=optional, sha-256, sha1", "https://acme/mdn")
	f.Add(`"ACME Corp"`, `"say \"hi\""`, "abc@host", "signed-receipt-protocol=required,pkcs7-signature;signed-receipt-micalg=required,SHA256", "")
	f.Add(`"open`, "", "<>", ";;==,,;", "mailto:x")
	f.Add("mecas2", "pyas2lib", "<mendelson_opensource_AS2-1641304626700-55@mecas2_pyas2lib>", "", "")
	f.Add("a\tb", "\x00", "\r\n", "signed-receipt-micalg", "\x7f")
	f.Fuzz(func(t *testing.T, from, to, id, options, rdo string) {
		h := http.Header{}
		h["As2-From"] = []string{from}
		h["As2-To"] = []string{to}
		h["Message-Id"] = []string{id}
		h["Disposition-Notification-To"] = []string{"x"}
		h["Disposition-Notification-Options"] = []string{options}
		h["Receipt-Delivery-Option"] = []string{rdo}
		r, err := ParseHeaders(h)
		if err != nil {
			return
		}
		for _, n := range []string{r.From, r.To} {
			if n == "" || len(n) > 128 {
				t.Fatalf("name %q accepted", n)
			}
			for i := 0; i < len(n); i++ {
				if n[i] < 0x20 || n[i] > 0x7e {
					t.Fatalf("name %q has a non-printable byte", n)
				}
			}
			back, err := ParseAS2Name(as2client.QuoteName(n))
			if err != nil || back != n {
				t.Fatalf("quoting %q round trips to %q, %v", n, back, err)
			}
		}
		if r.MessageID == "" || hasControl(r.MessageID) {
			t.Fatalf("Message-ID %q accepted", r.MessageID)
		}
		for _, a := range r.MDN.MICAlgs {
			if a == "" || hasControl(a) {
				t.Fatalf("micalg %q", a)
			}
		}
		_, _ = asyncURL(r.MDN.AsyncURL)
	})
}

// FuzzServeAS2 posts arbitrary bodies under arbitrary S/MIME content types
// to the endpoint: whatever arrives, the answer is an MDN or a 4xx/503,
// never a panic or a hang.
func FuzzServeAS2(f *testing.F) {

	e := newEnv(f, envOptions{memory: true})
	c := e.client()
	for _, opt := range []func(*as2client.Client){
		func(*as2client.Client) {},
		func(c *as2client.Client) { c.Cipher = "" },
		func(c *as2client.Client) { c.Cipher, c.SignDigest = "", "" },
		func(c *as2client.Client) { c.Compression = smime.CompressThenSign },
		func(c *as2client.Client) { c.Compression, c.Cipher = smime.SignThenCompress, "aes128-gcm" },
	} {
		cl := *c
		opt(&cl)
		m, err := cl.Prepare([]byte("UNB+UNOC:3+ACME+GATEWAY'\n"), "application/edifact", "a.edi")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(m.Header.Get("Content-Type"), m.Header.Get("Content-Transfer-Encoding"), m.Body)
	}
	if files, _ := filepath.Glob(filepath.Join("..", "..", "shared", "interop", "as2", "*.as2")); len(files) > 0 {
		for _, file := range files {
			raw, err := os.ReadFile(file)
			if err != nil {
				continue
			}
			head, body, ok := bytes.Cut(raw, []byte("\r\n\r\n"))
			if !ok {
				head, body, _ = bytes.Cut(raw, []byte("\n\n"))
			}
			ct := ""
			for _, line := range strings.Split(string(head), "\n") {
				if n, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(n, "content-type") {
					ct = strings.TrimSpace(v)
				}
			}
			f.Add(ct, "", body)
		}
	}
	var seq atomic.Int64
	f.Fuzz(func(t *testing.T, contentType, cte string, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/as2", bytes.NewReader(body))
		req.Header.Set("AS2-From", "ACME")
		req.Header.Set("AS2-To", "GATEWAY")
		req.Header.Set("Message-Id", fmt.Sprintf("<fuzz-%d@acme>", seq.Add(1)))
		req.Header.Set("Disposition-Notification-To", "x")
		req.Header.Set("Disposition-Notification-Options", "signed-receipt-protocol=optional, pkcs7-signature; signed-receipt-micalg=optional, sha-256")
		if contentType != "" {
			req.Header["Content-Type"] = []string{contentType}
		}
		if cte != "" {
			req.Header["Content-Transfer-Encoding"] = []string{cte}
		}
		rec := httptest.NewRecorder()
		e.ep.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK:
			if _, err := mdn.ParseHTTP(rec.Header(), rec.Body.Bytes()); err != nil {
				t.Fatalf("200 without a valid MDN: %v", err)
			}
		case http.StatusBadRequest, http.StatusServiceUnavailable:
		default:
			t.Fatalf("unexpected status %d: %s", rec.Code, rec.Body.Bytes())
		}
	})
}
