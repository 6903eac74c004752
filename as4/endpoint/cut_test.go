package endpoint_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/as4/client"
	"github.com/edigateway/gateway/as4/endpoint"
)

// bigMessage is a message from from with a 2 MiB attachment of random
// bytes, built by the test partner.
func bigMessage(t *testing.T, k testKeys, id string, from as4.PartyID) (*client.Message, *client.Outgoing) {
	t.Helper()
	m := testMessage(id)
	if from.Value != "" {
		m.From = from
	}
	big := make([]byte, 2<<20)
	rand.Read(big)
	m.Payloads = []client.Payload{{MimeType: "application/octet-stream", Data: big}}
	out, err := rsaClient(k).Build(m)
	if err != nil {
		t.Fatal(err)
	}
	return m, out
}

// sendPart sends out's request head with its whole Content-Length but only
// the first n bytes of its body (closing the sending side after them when
// closeWrite is set), and returns the answer as the client sees it; it
// fails when none comes within 20 s.
func sendPart(t *testing.T, target string, out *client.Outgoing, n int, closeWrite bool) *client.Response {
	t.Helper()
	return sendRaw(t, target, out.ContentType, len(out.Body), out.Body[:n], len(out.Body), closeWrite)
}

// sendRaw sends a request head with contentLength and then body in writes
// of at most piece bytes (closing the sending side after them when
// closeWrite is set), and returns the answer as the client sees it; it
// fails when none comes within 20 s.
func sendRaw(t *testing.T, target, contentType string, contentLength int, body []byte, piece int, closeWrite bool) *client.Response {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n",
		u.RequestURI(), u.Host, contentType, contentLength)
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	for len(body) > 0 {
		n := min(piece, len(body))
		if _, err := conn.Write(body[:n]); err != nil {
			t.Fatal(err)
		}
		body = body[n:]
	}
	if closeWrite {
		conn.(*net.TCPConn).CloseWrite()
	}
	req, _ := http.NewRequest(http.MethodPost, target, nil)
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		t.Fatalf("no answer to a body of %d bytes: %v", contentLength, err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return &client.Response{Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"), Body: b}
}

// TestCutBodyRefused is the AS4 twin of AS2's TestStreamedBodyCutWhileUnwrapped:
// a known partner's message whose sender stops after most of its
// Content-Length (the attachment cut) is not taken for a complete one: it
// gets the signed EBMS:0007 MimeInconsistency error (AS4 answers errors as
// signals, where AS2 answers an unreadable body with 400), and the handler
// never runs; the same message sent whole is accepted.
func TestCutBodyRefused(t *testing.T) {
	k := getKeys(t)
	h := newHarness(t, harnessOptions{})
	m, out := bigMessage(t, k, "cut-1@acme.test", as4.PartyID{})
	arriving := endpoint.ArrivingAttachments.Load()
	resp := sendPart(t, h.url, out, len(out.Body)-1<<20, true)
	if code, ae := signalCode(t, k, resp); code != as4.CodeMimeInconsistency || h.handler.count() != 0 {
		t.Fatalf("cut body: HTTP %d, %s (%v), handler ran %d times; want EBMS:0007, none", resp.Status, code, ae, h.handler.count())
	}
	// The cut attachment was being decrypted while it arrived: the cut,
	// not the decryption of what had arrived, is the answer.
	if endpoint.ArrivingAttachments.Load() == arriving {
		t.Fatal("the attachment was not decrypted while it arrived")
	}
	if _, _, err := rsaClient(k).Send(context.Background(), h.url, m); err != nil {
		t.Fatalf("the whole message: %v", err)
	}
}

// TestArrivingAttachmentOverLimit: an attachment decrypted while it arrives
// that runs past the message size limit is answered 413 (what the body's
// reading found), not a decryption failure of what had arrived, and the
// handler does not run; a message within the limit is received.
func TestArrivingAttachmentOverLimit(t *testing.T) {
	k := getKeys(t)
	h := newHarness(t, harnessOptions{maxBody: 1 << 20})
	_, out := bigMessage(t, k, "over-1@acme.test", as4.PartyID{})
	arriving := endpoint.ArrivingAttachments.Load()
	// Chunked: a Content-Length over the limit is refused before the body.
	resp, err := http.Post(h.url, out.ContentType, struct{ io.Reader }{bytes.NewReader(out.Body)})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || h.handler.count() != 0 {
		t.Fatalf("over the limit: HTTP %d, handler ran %d times; want 413, none", resp.StatusCode, h.handler.count())
	}
	if endpoint.ArrivingAttachments.Load() == arriving {
		t.Fatal("the attachment was not decrypted while it arrived")
	}
	m := testMessage("within-1@acme.test")
	if _, _, err := rsaClient(k).Send(context.Background(), h.url, m); err != nil || h.handler.count() != 1 {
		t.Fatalf("within the limit: %v, handler ran %d times", err, h.handler.count())
	}
}
