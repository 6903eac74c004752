package as2

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzLooksLikeMDN feeds the MDN detection arbitrary Content-Type values,
// Disposition-Notification-To values and body prefixes: it never panics, a
// request asking for an MDN or an S/MIME envelope is never taken for one,
// and a decision for "MDN" does not change when more of the body arrives.
func FuzzLooksLikeMDN(f *testing.F) {
	signed := `multipart/signed; protocol="application/pkcs7-signature"; micalg=sha-256; boundary="b1"`
	f.Add("multipart/report; report-type=disposition-notification; boundary=x", "", []byte(nil))
	f.Add(signed, "", []byte("--b1\r\nContent-Type: multipart/report; report-type=disposition-notification; boundary=x\r\n\r\n--x\r\n"))
	f.Add(signed, "", []byte("preamble\n\n--b1\nContent-Type: multipart/report;\n\treport-type=disposition-notification\n\n"))
	f.Add(signed, "", []byte("--b1\r\nContent-Type: application/edifact\r\n\r\nUNB+UNOC:3'\r\n--b1--\r\n"))
	f.Add(signed, "mailto:as2@acme", []byte("--b1\r\nContent-Type: multipart/report\r\n\r\n"))
	f.Add(`multipart/signed; boundary=b1; boundary=b2`, "", []byte("--b1\r\ncontent-type: Multipart/Report\r\n\r\n"))
	f.Add("application/pkcs7-mime; smime-type=enveloped-data", "", []byte("0\x80\x06\x09*\x86H\x86\xf7\r\x01\x07\x03"))
	f.Add("multipart/report; report-type=delivery-status", "", []byte(nil))
	for _, signedMDN := range []bool{false, true} {
		h, body := partnerMDN(f, signedMDN, "")
		f.Add(h.Get("Content-Type"), "", body[:min(len(body), mdnPeekBytes)])
	}
	f.Fuzz(func(t *testing.T, contentType, dnt string, peek []byte) {
		h := http.Header{}
		if contentType != "" {
			h["Content-Type"] = []string{contentType}
		}
		if dnt != "" {
			h["Disposition-Notification-To"] = []string{dnt}
		}
		got := looksLikeMDN(h, peek)
		if !got {
			return
		}
		if strings.TrimSpace(dnt) != "" {
			t.Fatalf("a request asking for an MDN (%q) taken for an MDN", dnt)
		}
		if strings.Contains(strings.ToLower(contentType), "pkcs7-mime") && !strings.HasPrefix(strings.ToLower(strings.TrimSpace(contentType)), "multipart/") {
			t.Fatalf("an S/MIME envelope (%q) taken for an MDN", contentType)
		}
		more := append(bytes.Clone(peek), "\r\n--more--\r\nContent-Type: text/plain\r\n\r\n"...)
		if !looksLikeMDN(h, more) {
			t.Fatalf("the decision changed when more of the body arrived: %q", peek)
		}
	})
}

// FuzzServeAsyncMDN posts arbitrary bodies as asynchronous MDNs (no
// Disposition-Notification-To, MDN content types) to the endpoint: a body
// taken for an MDN is answered with the receiver's 200, or 400 or 413
// before the receiver — never a 500, a panic or the business handler.
func FuzzServeAsyncMDN(f *testing.F) {
	rcv := &fakeMDNs{verdict: MDNVerdict{Status: http.StatusOK}}
	e := newEnv(f, envOptions{memory: true, mdnIn: rcv, maxMDN: 64 << 10})
	for _, signedMDN := range []bool{false, true} {
		h, body := partnerMDN(f, signedMDN, "")
		f.Add(h.Get("Content-Type"), body)
		f.Add(h.Get("Content-Type"), body[:len(body)/2])
	}
	f.Add("multipart/report; boundary=x", []byte("--x\r\n\r\n--x--"))
	f.Add(`multipart/signed; boundary="b1"`, []byte("--b1\r\nContent-Type: multipart/report\r\n\r\n--b1--\r\n"))
	f.Fuzz(func(t *testing.T, contentType string, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/as2", bytes.NewReader(body))
		req.Header.Set("AS2-From", "ACME")
		req.Header.Set("AS2-To", "GATEWAY")
		req.Header.Set("Message-Id", "<fuzz-mdn@acme>")
		req.Header["Content-Type"] = []string{contentType}
		if !looksLikeMDN(req.Header, body[:min(len(body), mdnPeekBytes)]) {
			return
		}
		before := len(rcv.got())
		rec := httptest.NewRecorder()
		e.ep.ServeHTTP(rec, req)
		called := len(rcv.got()) - before
		switch rec.Code {
		case http.StatusOK:
			if called != 1 {
				t.Fatalf("200 without the receiver (%d calls)", called)
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			if called != 0 {
				t.Fatalf("HTTP %d after the receiver was called", rec.Code)
			}
		default:
			t.Fatalf("unexpected status %d: %s", rec.Code, rec.Body.Bytes())
		}
		if n := e.handler.count("<fuzz-mdn@acme>"); n != 0 {
			t.Fatalf("the business handler ran for an MDN")
		}
	})
}
