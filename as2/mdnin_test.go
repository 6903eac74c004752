package as2

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	as2client "github.com/edigateway/gateway/as2/client"
	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/internal/cms"
	"github.com/edigateway/gateway/mdn"
	"github.com/edigateway/gateway/partners"
)

// fakeMDNs is an MDNReceiver that records its calls and answers verdict.
type fakeMDNs struct {
	mu      sync.Mutex
	calls   []mdnCall
	verdict MDNVerdict
}

type mdnCall struct {
	partner string
	header  http.Header
	body    []byte
}

func (f *fakeMDNs) ReceiveMDN(_ context.Context, p *partners.Partner, h http.Header, body []byte) MDNVerdict {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, mdnCall{p.ID, h.Clone(), bytes.Clone(body)})
	return f.verdict
}

func (f *fakeMDNs) got() []mdnCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]mdnCall(nil), f.calls...)
}

// partnerMDN is an async MDN from ACME for our message <out-1@gateway>:
// signed with ACME's key (as its product would) or unsigned.
func partnerMDN(t testing.TB, signed bool, text string) (http.Header, []byte) {
	t.Helper()
	k := getKeys(t)
	rep := mdn.Report{ReportingUA: "OpenAS2 Server", OriginalRecipient: "ACME", FinalRecipient: "ACME",
		OriginalMessageID: "<out-1@gateway>", MIC: "q1/4B2bV0Kh1Wg3oHNx1nhJ/SQxg6lZ2AsBtdMyK1ps=", MICAlg: "sha-256",
		Disposition: mdn.DispProcessed, HumanText: text, AS2From: "ACME", AS2To: "GATEWAY", MessageID: "<mdn-1@acme>"}
	h := rep.Headers()
	var ct string
	var body []byte
	if signed {
		var err error
		ct, body, err = mdn.Sign(mdn.BuildEntity(rep), "sha-256", func(c []byte) ([]byte, error) {
			return cms.Sign(c, k.p2.Cert, k.p2.Key, cms.SignOptions{Digest: cms.DigestSHA256})
		})
		if err != nil {
			t.Fatal(err)
		}
	} else {
		ct, body = mdn.Build(rep)
	}
	h.Set("Content-Type", ct)
	return h, body
}

// postChunked posts body without a Content-Length.
func (e *env) postChunked(t testing.TB, h http.Header, body []byte) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/as2", struct{ io.Reader }{bytes.NewReader(body)})
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.Request.ContentLength > 0 {
		t.Fatalf("the request went with Content-Length %d", resp.Request.ContentLength)
	}
	return resp, b
}

// mdnAudit returns the StepMDN records of partner acme.
func mdnAudit(t testing.TB, e *env) []audit.Record {
	t.Helper()
	recs, err := e.store.Audit().Query(context.Background(), audit.Query{Partner: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	var out []audit.Record
	for _, r := range recs {
		if r.Step == audit.StepMDN {
			out = append(out, r)
		}
	}
	return out
}

// TestAsyncMDNReachesReceiver: an unsigned and a signed MDN from a known
// partner go to the receiver with the request's exact headers and body,
// never to the business handler, and are audited.
func TestAsyncMDNReachesReceiver(t *testing.T) {
	for _, signed := range []bool{false, true} {
		name := "unsigned"
		if signed {
			name = "signed"
		}
		t.Run(name, func(t *testing.T) {
			rcv := &fakeMDNs{verdict: MDNVerdict{Status: http.StatusOK, Reason: "message delivered"}}
			e := newEnv(t, envOptions{mdnIn: rcv})
			h, body := partnerMDN(t, signed, "")
			resp, text := e.post(t, h, body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("HTTP %d: %s", resp.StatusCode, text)
			}
			calls := rcv.got()
			if len(calls) != 1 {
				t.Fatalf("receiver called %d times, want 1", len(calls))
			}
			c := calls[0]
			if c.partner != "acme" {
				t.Errorf("partner %q, want acme", c.partner)
			}
			if !bytes.Equal(c.body, body) {
				t.Errorf("receiver got a body of %d bytes that is not the request's (%d bytes)", len(c.body), len(body))
			}
			for k := range h {
				if got, want := c.header.Get(k), h.Get(k); got != want {
					t.Errorf("header %s = %q, want %q", k, got, want)
				}
			}
			if n := e.handler.count("<mdn-1@acme>"); n != 0 {
				t.Errorf("the business handler ran %d times for the MDN", n)
			}
			recs := mdnAudit(t, e)
			if len(recs) != 1 || recs[0].Decision != "accepted" || recs[0].Disposition != "processed" || recs[0].Protocol != "as2" ||
				recs[0].MessageID != "out-1@gateway" {
				t.Fatalf("audit %+v, want one mdn record accepted/processed", recs)
			}
			if !strings.Contains(string(text), "accepted") || !strings.Contains(string(text), "message delivered") {
				t.Errorf("answer %q", text)
			}
		})
	}
}

// TestAsyncMDNVerdictPassedThrough: the receiver's status is the answer
// (503 with Retry-After; a refusal with the reason and an incident in the
// text, the log and the audit); a status the receiver should not give is
// answered 503, never 500.
func TestAsyncMDNVerdictPassedThrough(t *testing.T) {
	cases := []struct {
		verdict MDNVerdict
		status  int
		want    string
	}{
		{MDNVerdict{http.StatusOK, "duplicate MDN: the message was delivered before"}, http.StatusOK, "duplicate MDN"},
		{MDNVerdict{http.StatusNotFound, "no message <out-1@gateway> was sent to you"}, http.StatusNotFound, "no message <out-1@gateway> was sent to you"},
		{MDNVerdict{http.StatusForbidden, "the MDN signature does not verify"}, http.StatusForbidden, "signature does not verify"},
		{MDNVerdict{http.StatusConflict, "Received-Content-MIC matches no transmission"}, http.StatusConflict, "matches no transmission"},
		{MDNVerdict{http.StatusServiceUnavailable, "the queue is unavailable"}, http.StatusServiceUnavailable, "the queue is unavailable"},
		{MDNVerdict{http.StatusInternalServerError, "panic: nil map"}, http.StatusServiceUnavailable, "could not be recorded"},
		{MDNVerdict{}, http.StatusServiceUnavailable, "could not be recorded"},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("status-%d", tc.verdict.Status), func(t *testing.T) {
			rcv := &fakeMDNs{verdict: tc.verdict}
			e := newEnv(t, envOptions{mdnIn: rcv})
			h, body := partnerMDN(t, true, "")
			resp, text := e.post(t, h, body)
			if resp.StatusCode != tc.status {
				t.Fatalf("HTTP %d, want %d: %s", resp.StatusCode, tc.status, text)
			}
			if !strings.Contains(string(text), tc.want) {
				t.Errorf("answer %q lacks %q", text, tc.want)
			}
			if strings.Contains(string(text), "panic") {
				t.Errorf("the receiver's internal words reached the partner: %q", text)
			}
			if got := resp.Header.Get("Retry-After"); (tc.status == http.StatusServiceUnavailable) != (got != "") {
				t.Errorf("Retry-After %q with HTTP %d", got, tc.status)
			}
			recs := mdnAudit(t, e)
			if len(recs) != 1 {
				t.Fatalf("%d mdn audit records, want 1", len(recs))
			}
			wantDecision := map[int]string{200: "accepted", 503: "unavailable"}[tc.status]
			if wantDecision == "" {
				wantDecision = "rejected"
			}
			if recs[0].Decision != wantDecision {
				t.Errorf("audit decision %q, want %q", recs[0].Decision, wantDecision)
			}
			if tc.status != http.StatusOK {
				if inc := noLeak(t, e, string(text)); recs[0].Incident != inc {
					t.Errorf("audit incident %q, answer's %q", recs[0].Incident, inc)
				}
			}
		})
	}
}

// TestAsyncMDNUnknownPartner: an MDN whose AS2-From names no partner gets
// the unknown-sender refusal; the receiver is not called.
func TestAsyncMDNUnknownPartner(t *testing.T) {
	rcv := &fakeMDNs{verdict: MDNVerdict{Status: http.StatusOK}}
	e := newEnv(t, envOptions{mdnIn: rcv})
	h, body := partnerMDN(t, false, "")
	h.Set("AS2-From", "NOBODY")
	resp, text := e.post(t, h, body)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(text), "no trading partner agreement") {
		t.Fatalf("HTTP %d: %s", resp.StatusCode, text)
	}
	noLeak(t, e, string(text))
	if n := len(rcv.got()); n != 0 {
		t.Fatalf("receiver called %d times", n)
	}
}

// TestAsyncMDNTooLarge: an MDN over MaxMDNBytes gets 413, with and without
// a Content-Length, signed (recognised by its first part) or not; the
// receiver is not called and the handler does not run.
func TestAsyncMDNTooLarge(t *testing.T) {
	rcv := &fakeMDNs{verdict: MDNVerdict{Status: http.StatusOK}}
	e := newEnv(t, envOptions{mdnIn: rcv, maxMDN: 4096})
	long := strings.Repeat("This MDN is long. ", 400)
	for _, signed := range []bool{false, true} {
		h, body := partnerMDN(t, signed, long)
		if len(body) <= 4096 {
			t.Fatalf("the MDN has only %d bytes", len(body))
		}
		for _, chunked := range []bool{false, true} {
			post := e.post
			if chunked {
				post = e.postChunked
			}
			resp, text := post(t, h.Clone(), body)
			if resp.StatusCode != http.StatusRequestEntityTooLarge {
				t.Fatalf("signed %v chunked %v: HTTP %d: %s", signed, chunked, resp.StatusCode, text)
			}
		}
	}
	if n := len(rcv.got()); n != 0 {
		t.Fatalf("receiver called %d times", n)
	}
	if n := e.handler.count("<mdn-1@acme>"); n != 0 {
		t.Fatalf("the business handler ran %d times", n)
	}
	// The MDN was not read: its record is under its own Message-ID.
	if recs := mdnAudit(t, e); len(recs) != 4 || recs[0].Decision != "rejected" || recs[0].MessageID != "mdn-1@acme" {
		t.Fatalf("audit %+v, want 4 rejected records", recs)
	}
	// An MDN of exactly the limit is accepted.
	h, body := partnerMDN(t, false, "")
	e2 := newEnv(t, envOptions{mdnIn: rcv, maxMDN: int64(len(body))})
	if resp, text := e2.post(t, h, body); resp.StatusCode != http.StatusOK {
		t.Fatalf("an MDN of exactly the limit: HTTP %d: %s", resp.StatusCode, text)
	}
}

// TestAsyncMDNWithoutReceiver: without Config.MDNs an MDN is refused with
// a 400 that says so (before, a partner's MDN reached the business handler
// as a payload when the agreement allowed unsigned or signed-only messages).
func TestAsyncMDNWithoutReceiver(t *testing.T) {
	e := newEnv(t, envOptions{})
	for _, signed := range []bool{false, true} {
		h, body := partnerMDN(t, signed, "")
		resp, text := e.post(t, h, body)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(text), "does not accept asynchronous MDNs") {
			t.Fatalf("signed %v: HTTP %d: %s", signed, resp.StatusCode, text)
		}
		noLeak(t, e, string(text))
	}
	if n := e.handler.count("<mdn-1@acme>"); n != 0 {
		t.Fatalf("the business handler ran %d times for an MDN", n)
	}
}

// TestAsyncMDNMalformed: a body that says it is a report and is not one is
// refused with 400; the receiver is not called.
func TestAsyncMDNMalformed(t *testing.T) {
	rcv := &fakeMDNs{verdict: MDNVerdict{Status: http.StatusOK}}
	e := newEnv(t, envOptions{mdnIn: rcv})
	h, _ := partnerMDN(t, false, "")
	resp, text := e.post(t, h, []byte("not a multipart body at all"))
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(text), "not a readable MDN") {
		t.Fatalf("HTTP %d: %s", resp.StatusCode, text)
	}
	noLeak(t, e, string(text))
	if n := len(rcv.got()); n != 0 {
		t.Fatalf("receiver called %d times", n)
	}
}

// TestMessagesAreNotMDNs: with a receiver configured, messages still go to
// the handler: signed and encrypted, signed only, a multipart/report
// payload inside encryption (MDNs are never encrypted), and a signed-only
// multipart/report payload whose sender asks for an MDN (an MDN never asks
// for one). A signed-only multipart/report that asks for no MDN cannot be
// told from a signed MDN: it is taken as one (documented in docs/as2.md).
func TestMessagesAreNotMDNs(t *testing.T) {
	rcv := &fakeMDNs{verdict: MDNVerdict{Status: http.StatusOK}}
	e := newEnv(t, envOptions{mdnIn: rcv})
	reportHeader, report := partnerMDN(t, false, "a report as business data")
	reportCT := reportHeader.Get("Content-Type")
	cases := []struct {
		name        string
		cipher      string
		mdnMode     as2client.MDNMode
		payload     []byte
		contentType string
		asMDN       bool
	}{
		{"signed and encrypted", "aes128-cbc", as2client.MDNSync, []byte("UNB+UNOC:3+ACME+GATEWAY'\n"), "application/edifact", false},
		{"signed only", "", as2client.MDNSync, []byte("UNB+UNOC:3+ACME+GATEWAY'\n"), "application/edifact", false},
		{"signed only, no MDN asked", "", as2client.MDNNone, []byte("UNB+UNOC:3+ACME+GATEWAY'\n"), "application/edifact", false},
		{"signed only, larger than the peek and the MDN limit", "", as2client.MDNNone, bytes.Repeat([]byte("UNB+UNOC:3+ACME+GATEWAY'\n"), 100000), "application/edifact", false},
		{"encrypted report payload", "aes128-cbc", as2client.MDNNone, report, reportCT, false},
		{"signed report payload asking for an MDN", "", as2client.MDNSync, report, reportCT, false},
		{"signed report payload asking for no MDN", "", as2client.MDNNone, report, reportCT, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := e.client()
			c.Cipher, c.MDN = tc.cipher, tc.mdnMode
			msg, err := c.Prepare(tc.payload, tc.contentType, "")
			if err != nil {
				t.Fatal(err)
			}
			before := len(rcv.got())
			res, err := c.Send(context.Background(), msg)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != http.StatusOK {
				t.Fatalf("HTTP %d %v", res.Status, res.Problems)
			}
			called := len(rcv.got()) - before
			if tc.asMDN {
				if called != 1 || e.handler.count(msg.ID) != 0 {
					t.Fatalf("receiver called %d times, handler ran %d times; want the MDN path", called, e.handler.count(msg.ID))
				}
				return
			}
			if called != 0 {
				t.Fatalf("a message reached the MDN receiver")
			}
			if got := e.handler.payloads(msg.ID); len(got) != 1 || !bytes.Equal(got[0], tc.payload) {
				t.Fatalf("handler got %d payloads, want the message's", len(got))
			}
			if tc.mdnMode == as2client.MDNSync && (res.MDN == nil || !res.MDN.Disposition.IsProcessed()) {
				t.Fatalf("no positive MDN: %+v", res.MDN)
			}
		})
	}
}

// TestLooksLikeMDN: the detection from headers and the first bytes.
func TestLooksLikeMDN(t *testing.T) {
	hdr := func(ct string, kv ...string) http.Header {
		h := http.Header{"Content-Type": {ct}}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	signed := `multipart/signed; protocol="application/pkcs7-signature"; micalg=sha-256; boundary="b1"`
	first := func(ct string) []byte {
		return []byte("--b1\r\nContent-Type: " + ct + "\r\n\r\n--x\r\n")
	}
	cases := []struct {
		name string
		h    http.Header
		peek []byte
		want bool
	}{
		{"unsigned report", hdr("multipart/report; report-type=disposition-notification; boundary=x"), nil, true},
		{"unsigned report, quoted upper-case report-type", hdr(`Multipart/Report; Report-Type="Disposition-Notification"; boundary=x`), nil, true},
		{"unsigned report without report-type", hdr("multipart/report; boundary=x"), nil, true},
		{"delivery-status report", hdr("multipart/report; report-type=delivery-status; boundary=x"), nil, false},
		{"report asking for an MDN", hdr("multipart/report; report-type=disposition-notification; boundary=x", "Disposition-Notification-To", "a@b"), nil, false},
		{"encrypted", hdr(`application/pkcs7-mime; smime-type=enveloped-data; name=smime.p7m`), first("multipart/report"), false},
		{"compressed", hdr(`application/pkcs7-mime; smime-type=compressed-data`), nil, false},
		{"plain edifact", hdr("application/edifact"), nil, false},
		{"no content type", http.Header{}, nil, false},
		{"signed report", hdr(signed), first("multipart/report; report-type=disposition-notification; boundary=x"), true},
		{"signed report, preamble and LF line ends", hdr(signed), []byte("This is an S/MIME message\n\n--b1\nContent-Transfer-Encoding: 7bit\nContent-Type: multipart/report;\n\treport-type=disposition-notification;\n boundary=x\n\n--x\n"), true},
		{"signed report, delimiter with trailing blanks", hdr(signed), []byte("--b1  \r\ncontent-type: multipart/report; boundary=x\r\n\r\n"), true},
		{"signed edifact", hdr(signed), first("application/edifact"), false},
		{"signed delivery-status", hdr(signed), first("multipart/report; report-type=delivery-status"), false},
		{"signed report asking for an MDN", hdr(signed, "Disposition-Notification-To", "a@b"), first("multipart/report"), false},
		{"signed, header block cut by the peek", hdr(signed), []byte("--b1\r\nContent-Type: multipart/report\r\nContent-Transfer-Encoding: 7bit\r\n"), false},
		{"signed, no delimiter in the peek", hdr(signed), []byte("preamble only\r\n"), false},
		{"signed, other boundary", hdr(signed), []byte("--b2\r\nContent-Type: multipart/report\r\n\r\n"), false},
		{"signed, boundary prefix is not the delimiter", hdr(signed), []byte("--b1x\r\nContent-Type: multipart/report\r\n\r\n"), false},
		{"signed without boundary", hdr(`multipart/signed; protocol="application/pkcs7-signature"`), first("multipart/report"), false},
		{"signed, broken parameters keep the boundary", hdr(`multipart/signed; micalg=sha-256; micalg=sha1; boundary="b1"`), first("multipart/report"), true},
	}
	for _, tc := range cases {
		if got := looksLikeMDN(tc.h, tc.peek); got != tc.want {
			t.Errorf("%s: looksLikeMDN = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestSignedBodyCutAfterPeek: a signed-only message (whose first bytes the
// MDN detection reads) cut before its Content-Length still gets the answer
// of a body that could not be read (400), whether the cut falls within the
// peek or after it, streamed or in memory; the handler never runs.
func TestSignedBodyCutAfterPeek(t *testing.T) {
	for _, threshold := range []int64{1, -1} {
		e := newEnv(t, envOptions{streamThreshold: threshold, mdnIn: &fakeMDNs{verdict: MDNVerdict{Status: http.StatusOK}}})
		c := e.client()
		// No MDN asked for: only then is a signed message peeked at.
		c.Cipher, c.MDN = "", as2client.MDNNone
		for _, size := range []int{4000, 400000} {
			m := prepare(t, c, strings.Repeat("ISA*00*PO-LINE*0001~\n", size/21))
			conn, err := net.Dial("tcp", e.srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			var head strings.Builder
			fmt.Fprintf(&head, "POST /as2 HTTP/1.1\r\nHost: gw\r\nContent-Length: %d\r\n", len(m.Body))
			for k, vs := range m.Header {
				for _, v := range vs {
					fmt.Fprintf(&head, "%s: %s\r\n", k, v)
				}
			}
			head.WriteString("\r\n")
			if _, err := conn.Write(append([]byte(head.String()), m.Body[:len(m.Body)/2]...)); err != nil {
				t.Fatal(err)
			}
			conn.(*net.TCPConn).CloseWrite()
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			conn.Close()
			if err != nil {
				t.Fatalf("no answer to a cut body: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("threshold %d, %d bytes cut in half: HTTP %d, want 400", threshold, len(m.Body), resp.StatusCode)
			}
			if n := e.handler.count(m.ID); n != 0 {
				t.Fatalf("handler ran %d times for a cut body", n)
			}
			if r, err := c.Send(context.Background(), m); err != nil || !r.OK() {
				t.Fatalf("the whole message: %v %+v", err, r)
			}
		}
	}
}

// onceErrBody yields data, then err once, then io.EOF: a body whose reader
// does not repeat the error that cut it (net/http's own may not).
type onceErrBody struct {
	data []byte
	err  error
	sent bool
}

func (b *onceErrBody) Read(p []byte) (int, error) {
	if len(b.data) > 0 {
		n := copy(p, b.data)
		b.data = b.data[n:]
		return n, nil
	}
	if !b.sent {
		b.sent = true
		return 0, b.err
	}
	return 0, io.EOF
}

func (b *onceErrBody) Close() error { return nil }

// TestPeekKeepsTheBodysError: the error that cuts a signed message short
// within the MDN detection's peek is what the spooling sees next, even
// from a body that would answer io.EOF afterwards: the message is refused
// as unreadable, not taken for a complete one.
func TestPeekKeepsTheBodysError(t *testing.T) {
	e := newEnv(t, envOptions{mdnIn: &fakeMDNs{verdict: MDNVerdict{Status: http.StatusOK}}})
	c := e.client()
	c.Cipher, c.MDN = "", as2client.MDNNone
	m := prepare(t, c, strings.Repeat("ISA*00*PO-LINE*0001~\n", 200))
	req := httptest.NewRequest(http.MethodPost, "/as2", nil)
	req.Header = m.Header.Clone()
	req.ContentLength = int64(len(m.Body))
	req.Body = &onceErrBody{data: bytes.Clone(m.Body[:len(m.Body)/2]), err: io.ErrUnexpectedEOF}
	rec := httptest.NewRecorder()
	e.ep.ServeHTTP(rec, req)
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "could not be read") {
		t.Fatalf("HTTP %d: %s", rec.Code, rec.Body.String())
	}
	if n := e.handler.count(m.ID); n != 0 {
		t.Fatalf("handler ran %d times for a cut body", n)
	}
}
