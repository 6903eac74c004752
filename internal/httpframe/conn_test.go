package httpframe

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/internal/testpki"
)

// guarded serves handler-answers on a guarded listener: a refused head
// gets 400 with its reason, other requests their body and whether r.TLS is
// set.
func guarded(t *testing.T, tc *tls.Config) (addr string, handled *int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	hs := &http.Server{ConnContext: ConnContext, ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fc := FromContext(r.Context())
			if ref := fc.Refused(r); ref != nil {
				w.Header().Set("Connection", "close")
				http.Error(w, ref.Reason, ref.Status)
				return
			}
			n++
			if st := fc.TLS(); st != nil {
				r.TLS = st
			}
			b, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "%s tls=%v", b, r.TLS != nil)
		})}
	go hs.Serve(NewListener(ln, Options{TLS: tc}))
	t.Cleanup(func() { hs.Close() })
	return ln.Addr().String(), &n
}

// exchange writes raw to c and reads every response until the connection
// closes.
func exchange(t *testing.T, c net.Conn, raw string) (statuses []int, bodies []string, closed bool) {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return statuses, bodies, err == io.EOF || err == io.ErrUnexpectedEOF || strings.Contains(err.Error(), "reset")
		}
		b, _ := io.ReadAll(resp.Body)
		statuses, bodies = append(statuses, resp.StatusCode), append(bodies, string(b))
	}
}

func TestGuardedServerRefusesSmugglingAndCloses(t *testing.T) {
	addr, handled := guarded(t, nil)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	good := "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nok"
	bad := "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
	statuses, bodies, closed := exchange(t, c, good+bad+hidden)
	if len(statuses) != 2 || statuses[0] != 200 || statuses[1] != 400 || !strings.Contains(bodies[1], "Content-Length together with Transfer-Encoding") || !closed {
		t.Fatalf("statuses %v, bodies %q, closed %v: want 200 then 400 and the connection closed", statuses, bodies, closed)
	}
	if *handled != 1 {
		t.Fatalf("handler saw %d requests, want 1 (the hidden request must never reach it)", *handled)
	}
}

func TestGuardedTLSServerKeepsTLSState(t *testing.T) {
	key := testpki.RSAKey(t, 0)
	cert := testpki.SelfSigned(t, key, testpki.Cert{CommonName: "gateway"})
	tc := &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{cert.Raw}, PrivateKey: key}}, NextProtos: []string{"http/1.1"}}
	addr, handled := guarded(t, tc)
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	good := "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"
	bad := "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n"
	statuses, bodies, closed := exchange(t, c, good+bad+hidden)
	if len(statuses) != 2 || bodies[0] != "ok tls=true" || statuses[1] != 400 || !closed || *handled != 1 {
		t.Fatalf("statuses %v, bodies %q, closed %v, handled %d", statuses, bodies, closed, *handled)
	}
	// Plain HTTP to the TLS port gets Go's usual answer.
	p, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(p, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	b, _ := io.ReadAll(p)
	if !strings.Contains(string(b), "400 Bad Request") || !strings.Contains(string(b), "HTTPS server") {
		t.Fatalf("plain HTTP to the TLS listener: %q", b)
	}
}

func TestSlowHeadStillPasses(t *testing.T) {
	addr, _ := guarded(t, nil)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
	for i := 0; i < len(req); i += 7 {
		io.WriteString(c, req[i:min(i+7, len(req))])
		time.Sleep(2 * time.Millisecond)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(b) != "hello tls=false" {
		t.Fatalf("%d %q", resp.StatusCode, b)
	}
}
