package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	as2client "github.com/edigateway/gateway/as2/client"
	"github.com/edigateway/gateway/internal/testpki"
)

// rawResponses writes raw on a new connection to addr and reads responses
// until the gateway closes the connection (or 3 s pass without one).
func rawResponses(t *testing.T, addr, raw string) (resps []*http.Response, bodies []string, closed bool) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for {
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			var ne net.Error
			return resps, bodies, !(errors.As(err, &ne) && ne.Timeout())
		}
		b, _ := io.ReadAll(resp.Body)
		resps, bodies = append(resps, resp), append(bodies, string(b))
	}
}

// smuggled are request heads whose framing a proxy in front of the
// gateway could read differently, with what the refusal says.
var smuggled = []struct{ name, head, reason string }{
	{"CL+TE", "Content-Length: 40\r\nTransfer-Encoding: chunked\r\n", "Content-Length together with Transfer-Encoding"},
	{"CL+TE tab", "Content-Length: 40\r\nTransfer-Encoding:\tchunked\r\n", "Content-Length together with Transfer-Encoding"},
	{"TE+CL trailing space", "Transfer-Encoding: chunked \r\nContent-Length: 40\r\n", "Content-Length together with Transfer-Encoding"},
	{"obs-fold TE", "Content-Length: 5\r\nX-Note: a\r\n Transfer-Encoding: chunked\r\n", "obs-fold"},
	{"duplicate CL", "Content-Length: 5\r\nContent-Length: 5\r\n", "more than one Content-Length"},
}

// TestSmugglingShapesRefusedAndClosed sends, over raw TCP to the real
// listeners, request heads with Content-Length and Transfer-Encoding (also
// with odd whitespace), a folded header and a duplicate Content-Length,
// each followed by a second, hidden request on the same connection: /as2,
// /as4 and the admin listener answer 400 with the reason and an incident
// reference, "Connection: close", and close the connection: the hidden
// request is never answered.
func TestSmugglingShapesRefusedAndClosed(t *testing.T) {
	cfg := demoConfig(t)
	logs := &syncBuffer{}
	s, err := New(context.Background(), cfg, slog.New(slog.NewJSONHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	partner, admin := serveBoth(t, s)
	partnerAddr, adminAddr := strings.TrimPrefix(partner, "http://"), strings.TrimPrefix(admin, "http://")
	hidden := "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
	body := "0\r\n\r\n" // the chunked body's end; a proxy reading Content-Length may see more
	for _, target := range []struct{ name, addr, line string }{
		{"as2", partnerAddr, "POST /as2 HTTP/1.1\r\nHost: gateway\r\nAS2-From: DEMO\r\nAS2-To: GATEWAY\r\nContent-Type: application/pkcs7-mime\r\n"},
		{"as4", partnerAddr, "POST /as4 HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/soap+xml\r\n"},
		{"admin", adminAddr, "POST /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"},
	} {
		for _, sm := range smuggled {
			raw := target.line + sm.head + "\r\n" + body + hidden
			resps, bodies, closed := rawResponses(t, target.addr, raw)
			switch {
			case len(resps) != 1:
				t.Errorf("%s, %s: %d responses, want 1 (the refusal; the hidden request unanswered): %q", target.name, sm.name, len(resps), bodies)
			case resps[0].StatusCode != 400 || !strings.Contains(bodies[0], sm.reason) || !strings.Contains(bodies[0], "incident GW-"):
				t.Errorf("%s, %s: %d %q, want 400 saying %q with an incident reference", target.name, sm.name, resps[0].StatusCode, bodies[0], sm.reason)
			case !resps[0].Close:
				t.Errorf("%s, %s: the refusal does not say Connection: close", target.name, sm.name)
			}
			if !closed {
				t.Errorf("%s, %s: the connection stayed open", target.name, sm.name)
			}
		}
	}
	if !strings.Contains(logs.String(), `"msg":"request refused before the endpoint`) {
		t.Errorf("no refusal logged:\n%s", logs.String())
	}
	_, m := get(t, admin+"/metrics", "")
	for listener, want := range map[string]string{"partner": "10", "admin": "5"} {
		if line := `gateway_requests_refused_framing_total{listener="` + listener + `"} ` + want; !strings.Contains(m, line) {
			t.Errorf("metrics lack %q", line)
		}
	}
	// Keep-alive still works for well-framed requests.
	resps, _, _ := rawResponses(t, adminAddr, hidden+hidden)
	if len(resps) != 2 || resps[0].StatusCode != 200 || resps[1].StatusCode != 200 {
		t.Fatalf("two well-framed requests on one admin connection: %d responses", len(resps))
	}
}

// TestPartnerTLSListenerServesAS2AndRefusesSmuggling: with tls.cert and
// tls.key the guard terminates TLS itself: an AS2 message over HTTPS is
// processed (HTTP/1.1), and a smuggling shape sent inside TLS is refused
// with 400 and the connection closed.
func TestPartnerTLSListenerServesAS2AndRefusesSmuggling(t *testing.T) {
	cfg := demoConfig(t)
	key := testpki.RSAKey(t, 0)
	cert := testpki.SelfSigned(t, key, testpki.Cert{CommonName: "gateway"})
	cfg.TLS.Cert, cfg.TLS.Key = testpki.WriteKeyPair(t, t.TempDir(), "https", cert, key)
	s, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	partner, _ := serveBoth(t, s)
	addr := strings.TrimPrefix(partner, "http://")

	pk, gw := demoAS2KeyPairs(t)
	var proto string
	client := &http.Client{Timeout: 30 * time.Second, Transport: &protoRecorder{proto: &proto, rt: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true}}}
	c := &as2client.Client{URL: "https://" + addr + "/as2", From: "DEMO", To: "GATEWAY", SignCert: pk.Cert, SignKey: pk.Key,
		SignDigest: "sha256", RecipientCerts: []*x509.Certificate{gw.Cert}, Cipher: "aes128-cbc", MDN: as2client.MDNSync, SignedMDN: true,
		MDNCerts: []*x509.Certificate{gw.Cert}, HTTP: client}
	msg, err := c.Prepare([]byte("UNB+UNOA:2+DEMO:14+GATEWAY:14+261204:1200+TLS1'UNH+1+INVOIC:D:96A:UN'UNT+2+1'UNZ+1+TLS1'"), "application/edifact", "invoice.edi")
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Send(context.Background(), msg)
	if err != nil || res.MDN == nil || !strings.HasSuffix(res.MDN.Disposition.String(), "; processed") {
		t.Fatalf("AS2 over HTTPS: %v %+v", err, res)
	}
	if proto != "HTTP/1.1" {
		t.Errorf("protocol %q, want HTTP/1.1", proto)
	}

	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(conn, "POST /as2 HTTP/1.1\r\nHost: gateway\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /as2 HTTP/1.1\r\nHost: gateway\r\n\r\n")
	b, _ := io.ReadAll(conn)
	if !strings.HasPrefix(string(b), "HTTP/1.1 400 ") || strings.Count(string(b), "HTTP/1.1 ") != 1 || !strings.Contains(string(b), "Content-Length together with Transfer-Encoding") {
		t.Fatalf("smuggling inside TLS: %q", b)
	}
}

// protoRecorder notes the protocol of the responses.
type protoRecorder struct {
	proto *string
	rt    http.RoundTripper
}

func (p *protoRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := p.rt.RoundTrip(r)
	if err == nil {
		*p.proto = resp.Proto
	}
	return resp, err
}
