package endpoint_test

import (
	"bufio"
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
)

// A message whose eb:From names no trading partner is refused with
// EBMS:0010 as soon as its envelope part is read: its attachments are not
// read (nor spooled), so an unauthenticated stranger costs no more than an
// envelope. The test sends all but the last MiB of a message with a 2 MiB
// attachment and must get the signed error without sending the rest; a
// server that read on would wait for bytes that never come.
func TestUnknownSenderRefusedBeforeAttachments(t *testing.T) {
	k := getKeys(t)
	h := newHarness(t, harnessOptions{})
	m := testMessage("stranger-1@nobody")
	m.From = as4.PartyID{Value: "urn:nobody"}
	big := make([]byte, 2<<20)
	rand.Read(big)
	m.Payloads = []client.Payload{{MimeType: "application/octet-stream", Data: big}}
	out, err := rsaClient(k).Build(m)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(h.url)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	sent := len(out.Body) - 1<<20
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n",
		u.RequestURI(), u.Host, out.ContentType, len(out.Body))
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(out.Body[:sent]); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, h.url, nil)
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		t.Fatalf("no answer with %d of %d body bytes sent (the server waits for the attachment): %v", sent, len(out.Body), err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	code, _ := signalCode(t, k, &client.Response{Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"), Body: body})
	if code != as4.CodeProcessingModeMismatch || resp.StatusCode != http.StatusOK || h.handler.count() != 0 {
		t.Fatalf("unknown sender: HTTP %d, %s, handler ran %d times; want 200, EBMS:0010, none", resp.StatusCode, code, h.handler.count())
	}
}
