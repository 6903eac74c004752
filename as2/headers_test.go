package as2

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/mdn"
)

func TestParseAS2Name(t *testing.T) {
	for in, want := range map[string]string{
		"ACME":                               "ACME",
		"  ACME\t":                           "ACME",
		`"ACME"`:                             "ACME",
		`"ACME Corp"`:                        "ACME Corp",
		`"say \"hi\" \\ back"`:               `say "hi" \ back`,
		`"  spaced  " `:                      "  spaced  ",
		"Bare Name With Spaces":              "Bare Name With Spaces",
		strings.Repeat("x", 128):             strings.Repeat("x", 128),
		`"` + strings.Repeat("y", 128) + `"`: strings.Repeat("y", 128),
	} {
		got, err := ParseAS2Name(in)
		if err != nil || got != want {
			t.Errorf("ParseAS2Name(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", `""`, `"open`, `"a" b`, strings.Repeat("x", 129), "caf\xc3\xa9", "a\x01b"} {
		if got, err := ParseAS2Name(in); err == nil {
			t.Errorf("ParseAS2Name(%q) = %q, want an error", in, got)
		}
	}
}

func TestParseHeaders(t *testing.T) {
	h := http.Header{}
	h.Set("AS2-From", `"ACME Corp"`)
	h.Set("AS2-To", "GATEWAY")
	h.Set("Message-Id", " abc@acme ")
	h.Set("Subject", "PO\x01 1")
	h.Set("Disposition-Notification-To", "mailto:as2@acme.example")
	h.Set("Disposition-Notification-Options", `signed-receipt-protocol="required", pkcs7-signature;signed-receipt-micalg = optional, SHA-256 , sha1, ; foo=bar; garbage`)
	h.Set("Receipt-Delivery-Option", " https://acme.example/as2/mdn ")
	r, err := ParseHeaders(h)
	if err != nil {
		t.Fatal(err)
	}
	want := &Request{From: "ACME Corp", To: "GATEWAY", MessageID: "abc@acme", Subject: "PO 1", MDN: MDNRequest{
		Requested: true, To: "mailto:as2@acme.example", Protocols: []string{"pkcs7-signature"}, ProtocolRequired: true,
		MICAlgs: []string{"SHA-256", "sha1"}, AsyncURL: "https://acme.example/as2/mdn"}}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("got  %+v\nwant %+v", r, want)
	}
	if !r.MDN.Signed() || !r.MDN.Async() {
		t.Error("signed async MDN not recognised")
	}
	a, ok := chooseMICAlg([]string{"md2", "SHA-256"}, func(string) bool { return true })
	if !ok || a.digest != "sha256" || a.spelled != "SHA-256" {
		t.Errorf("chooseMICAlg = %+v", a)
	}
	h.Del("Message-Id")
	if _, err := ParseHeaders(h); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("missing Message-ID: %v", err)
	}
}

func TestAsyncURL(t *testing.T) {
	for in, ok := range map[string]bool{
		"http://acme.example/mdn": true, "https://u:p@acme.example:8443/mdn?x=1": true,
		"mailto:as2@acme.example": false, "file:///etc/passwd": false, "https:///nohost": false, "::": false,
	} {
		if _, err := asyncURL(in); (err == nil) != ok {
			t.Errorf("asyncURL(%q): %v", in, err)
		}
	}
	if got := redactURL("https://u:p@acme.example:8443/mdn?token=1"); got != "https://acme.example:8443/mdn" {
		t.Errorf("redactURL = %q", got)
	}
}

// rawPost writes a hand-made HTTP/1.1 request on a TCP connection and
// returns the response.
func rawPost(t *testing.T, e *env, head string, body []byte, chunked bool) (*http.Response, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	var b bytes.Buffer
	b.WriteString("POST /as2 HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n")
	b.WriteString(head)
	if chunked {
		b.WriteString("Transfer-Encoding: chunked\r\n\r\n")
		for rest := body; len(rest) > 0; {
			n := min(len(rest), 97)
			fmt.Fprintf(&b, "%x\r\n", n)
			b.Write(rest[:n])
			b.WriteString("\r\n")
			rest = rest[n:]
		}
		b.WriteString("0\r\n\r\n")
	} else {
		fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n", len(body))
		b.Write(body)
	}
	if _, err := conn.Write(b.Bytes()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(resp.Body)
	return resp, rb
}

// TestWireVariants sends requests byte by byte as other products do:
// folded header lines, chunked bodies, quoted and bare AS2 names, a
// Message-ID without brackets, and each Content-Transfer-Encoding form.
func TestWireVariants(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	c := e.client()

	// multipart/signed, folded Content-Type and options, chunked.
	c.Cipher = ""
	m := prepare(t, c, "signed, folded, chunked")
	ct := strings.Replace(m.Header.Get("Content-Type"), "; boundary=", ";\r\n\tboundary=", 1)
	id := strings.Trim(m.ID, "<>")
	head := "AS2-From: \"ACME\"\r\nAS2-To: GATEWAY\r\nAS2-Version: 1.2\r\nMessage-ID: " + id + "\r\n" +
		"Content-Type: " + ct + "\r\nDisposition-Notification-To: as2@acme.example\r\n" +
		"Disposition-Notification-Options: signed-receipt-protocol=optional, pkcs7-signature;\r\n signed-receipt-micalg=optional, sha-256\r\n"
	resp, body := rawPost(t, e, head, m.Body, true)
	p := expectMDN(t, resp, body, mdn.DispProcessed)
	verifyMDN(t, p)
	if !p.Report.MICEquals(m.MIC, m.MICAlg) || p.Report.OriginalMessageID != id || resp.Header.Get("AS2-To") != "ACME" {
		t.Fatalf("MDN %+v, headers %v", p.Report, resp.Header)
	}
	// The bracketed spelling of the same Message-ID is the same message.
	resp, body = rawPost(t, e, strings.Replace(head, id, "<"+id+">", 1), m.Body, false)
	expectMDN(t, resp, body, mdn.DispDuplicateDocument)

	// Enveloped data with CTE binary, base64 and absent.
	c = e.client()
	for _, cte := range []string{"binary", "base64", ""} {
		m := prepare(t, c, "encrypted, CTE "+cte)
		h := m.Header.Clone()
		b := m.Body
		switch cte {
		case "base64":
			enc := base64.StdEncoding.EncodeToString(b)
			var lines []string
			for len(enc) > 64 {
				lines, enc = append(lines, enc[:64]), enc[64:]
			}
			b = []byte(strings.Join(append(lines, enc), "\r\n") + "\r\n")
			h.Set("Content-Transfer-Encoding", "base64")
		case "":
			h.Del("Content-Transfer-Encoding")
		default:
			h.Set("Content-Transfer-Encoding", cte)
		}
		resp, body := e.post(t, h, b)
		p := expectMDN(t, resp, body, mdn.DispProcessed)
		if !p.Report.MICEquals(m.MIC, m.MICAlg) {
			t.Errorf("CTE %q: MIC %s, want %s", cte, p.Report.MIC, m.MIC)
		}
		if got := e.handler.payloads(m.ID); len(got) != 1 || string(got[0]) != "encrypted, CTE "+cte {
			t.Errorf("CTE %q: handler got %q", cte, got)
		}
	}

	// A plain (unsigned, unencrypted) payload with CTE base64 at HTTP level.
	c.SignDigest, c.Cipher, c.TransferEncoding = "", "", "base64"
	m = prepare(t, c, "plain\x00binary\xff")
	resp, body = e.post(t, m.Header, m.Body)
	p = expectMDN(t, resp, body, mdn.DispProcessed)
	if !p.Report.MICEquals(m.MIC, m.MICAlg) || string(e.handler.payloads(m.ID)[0]) != "plain\x00binary\xff" {
		t.Fatalf("plain base64: MIC %s want %s, payload %q", p.Report.MIC, m.MIC, e.handler.payloads(m.ID))
	}
}

func TestMultipleAttachments(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	c := e.client()
	related := "--b1\r\nContent-Type: application/edifact\r\nContent-Disposition: attachment; filename=\"a.edi\"\r\nContent-ID: <a@acme>\r\n\r\nUNB+A'\r\n" +
		"--b1\r\nContent-Type: application/pdf\r\nContent-Transfer-Encoding: base64\r\nContent-Disposition: attachment; filename=\"b.pdf\"\r\n\r\nJVBERi0xLjQK\r\n--b1--\r\n"
	m, err := c.Prepare([]byte(related), `multipart/related; boundary="b1"; type="application/edifact"`, "")
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Send(t.Context(), m)
	if err != nil || !res.OK() {
		t.Fatalf("%v %+v", err, res)
	}
	got := e.handler.payloads(m.ID)
	if len(got) != 2 || string(got[0]) != "UNB+A'" || string(got[1]) != "%PDF-1.4\n" {
		t.Fatalf("payloads %q", got)
	}
}
