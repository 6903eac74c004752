package as2

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/internal/testbomb"
	"github.com/edigateway/gateway/mdn"
)

// TestNestedCompressionBombIsRefused: the request (two nested zlib
// CompressedData layers of a few KiB, 4 GiB inflated, known AS2-From, no
// signature needed because the compressed layer is outermost) gets
// decompression-failed, the handler never runs, and the process allocates
// little while refusing it.
func TestNestedCompressionBombIsRefused(t *testing.T) {
	e := newEnv(t, envOptions{partnerYAML: "  require_signature: true\n"})
	c := e.client()
	m := prepare(t, c, "x")
	h := m.Header.Clone()
	h.Set("Content-Type", testbomb.ContentType)
	h.Del("Content-Transfer-Encoding")
	bomb := testbomb.NestedAS2(4 << 30)
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	resp, body := e.post(t, h, bomb)
	runtime.ReadMemStats(&b)
	expectMDN(t, resp, body, mdn.DispDecompressionFailed)
	if n := b.TotalAlloc - a.TotalAlloc; n > 64<<20 {
		t.Fatalf("refusing a %d-byte bomb allocated %d MiB", len(bomb), n>>20)
	}
	if n := e.handler.count(m.ID); n != 0 {
		t.Fatalf("handler ran %d times", n)
	}
}

// rawRequest sends a request head (no body) over a fresh connection and
// returns the status of the answer, failing if none comes within 2 s: the
// endpoint must answer without waiting for the body.
func rawRequest(t *testing.T, addr string, head string) int {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(head)); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer before the body was sent: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestRefusedBeforeTheBodyIsRead: a Content-Length over the limit gets 413
// and an unknown AS2-From its negative MDN before any body byte is sent.
func TestRefusedBeforeTheBodyIsRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{maxBody: 1 << 20})
	addr := e.srv.Listener.Addr().String()
	head := func(from string, length int64) string {
		return fmt.Sprintf("POST /as2 HTTP/1.1\r\nHost: gw\r\nAS2-From: %s\r\nAS2-To: GATEWAY\r\nMessage-ID: <%s-%d@test>\r\n"+
			"AS2-Version: 1.2\r\nDisposition-Notification-To: x@y\r\nContent-Type: application/pkcs7-mime; smime-type=enveloped-data\r\n"+
			"Content-Length: %d\r\n\r\n", from, strings.ToLower(from), length, length)
	}
	if st := rawRequest(t, addr, head("ACME", 99<<20)); st != http.StatusRequestEntityTooLarge {
		t.Errorf("Content-Length over the limit: HTTP %d, want 413", st)
	}
	if st := rawRequest(t, addr, head("NOBODY", 50000)); st != http.StatusOK {
		t.Errorf("unknown AS2-From: HTTP %d, want 200 with a negative MDN", st)
	}
}

// TestStreamedBodyCutWhileUnwrapped: a message whose sender stops after
// half of its Content-Length gets the answer of a body that could not be
// read (400), not whatever the unwrap made of the half, both when it is
// unwrapped as a stream while it arrives and when it is unwrapped in
// memory (where the cut body used to be taken for a complete one); the
// handler never runs. The same message sent whole is accepted.
func TestStreamedBodyCutWhileUnwrapped(t *testing.T) {
	t.Parallel()
	for _, threshold := range []int64{1, -1} {
		t.Run(fmt.Sprintf("stream_threshold=%d", threshold), func(t *testing.T) {
			t.Parallel()
			cutBody(t, newEnv(t, envOptions{streamThreshold: threshold}))
		})
	}
}

func cutBody(t *testing.T, e *env) {
	c := e.client()
	m := prepare(t, c, strings.Repeat("ISA*00*PO-LINE*0001~\n", 20000))
	conn, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
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
	if err != nil {
		t.Fatalf("no answer to a cut body: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("cut body: HTTP %d, want 400", resp.StatusCode)
	}
	if n := e.handler.count(m.ID); n != 0 {
		t.Fatalf("handler ran %d times for a cut body", n)
	}
	if r, err := c.Send(context.Background(), m); err != nil || !r.OK() {
		t.Fatalf("the whole message: %v %+v", err, r)
	}
}
