package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/config"
)

// as2Head and as4Head are request heads from the demo partner.
func as2Head(id string, length int64) string {
	return fmt.Sprintf("POST /as2 HTTP/1.1\r\nHost: gw\r\nAS2-From: DEMO\r\nAS2-To: GATEWAY\r\nAS2-Version: 1.2\r\nMessage-ID: <%s@demo>\r\n"+
		"Disposition-Notification-To: mdn@demo\r\nContent-Type: application/pkcs7-mime; smime-type=enveloped-data\r\nContent-Length: %d\r\n\r\n", id, length)
}

func as4Head(length int64) string {
	return fmt.Sprintf("POST /as4 HTTP/1.1\r\nHost: gw\r\nContent-Type: multipart/related; boundary=b; type=\"application/soap+xml\"\r\nContent-Length: %d\r\n\r\n", length)
}

// rawExchange sends head, then body (if any) paced by delay per byte, and
// returns the answer's status and Retry-After; within limit, or fails.
func rawExchange(t *testing.T, addr, head string, body []byte, delay time.Duration, limit time.Duration) (int, string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	go func() {
		for _, c := range body {
			if delay > 0 {
				time.Sleep(delay)
			}
			if _, err := conn.Write([]byte{c}); err != nil {
				return
			}
		}
	}()
	conn.SetReadDeadline(time.Now().Add(limit))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer within %s: %v", limit, err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After")
}

// TestBodyLimitsOnBothEndpoints: on AS2 and AS4, a Content-Length over the
// limit is refused before the body is sent, and the memory budget is shared
// by both endpoints: while AS4 envelopes hold most of it, an AS4 (and an AS2)
// request that needs more gets 503 with Retry-After; once released, it is
// processed.
func TestBodyLimitsOnBothEndpoints(t *testing.T) {
	url := memoryServer(t, func(c *config.Config) {
		c.Limits.MemoryBudget = 50 << 20
		c.Limits.MaxBodyBytes = 200 << 20
		c.Limits.MinBodyRate = 0
		c.Limits.MemorySharePerSource, c.Limits.MemorySharePerPartner = 100, 100
	})
	addr := strings.TrimPrefix(url, "http://")
	// Both protocols stream: one cap, max_body_bytes.
	for name, head := range map[string]string{"as2": as2Head("big", 201<<20), "as4": as4Head(201 << 20)} {
		if st, _ := rawExchange(t, addr, head, nil, 0, 2*time.Second); st != http.StatusRequestEntityTooLarge {
			t.Errorf("%s: Content-Length over the limit: HTTP %d, want 413", name, st)
		}
	}

	// Hold 48 MiB of the budget with three AS4 envelopes that are not
	// finished, each just under max_envelope_bytes (held in memory: 4 MiB
	// × 4 each). Streamed bodies no longer hold a fixed 8 MiB before
	// their bytes arrive (issue 22 item 2), and one source address holds
	// at most its share: this test is about the whole budget, so the
	// shares are off.
	var holders []net.Conn
	for range 3 {
		hold, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		holders = append(holders, hold)
		io.WriteString(hold, strings.Replace(as4Head(4<<20-1), "multipart/related; boundary=b; type=\"application/soap+xml\"", "application/soap+xml", 1)+"<S:Envelope ")
	}
	time.Sleep(300 * time.Millisecond)
	// Wait until the holders' reservations are in place: then an AS4 and
	// an AS2 1 MiB request (held in memory: 4 MiB each), with 2 MiB left,
	// are refused before their body is read.
	junk := make([]byte, 8<<20)
	for name, path := range map[string]string{"as2": "/as2", "as4": "/as4"} {
		size := 1 << 20
		deadline := time.Now().Add(10 * time.Second)
		for {
			req, _ := http.NewRequest(http.MethodPost, url+path, strings.NewReader(string(make([]byte, size))))
			req.Header.Set("Content-Type", "multipart/related; boundary=b; type=\"application/soap+xml\"")
			for k, v := range map[string]string{"AS2-From": "DEMO", "AS2-To": "GATEWAY", "Message-Id": "<waiter@demo>"} {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			st, retry := 0, ""
			if err == nil {
				st, retry = resp.StatusCode, resp.Header.Get("Retry-After")
				resp.Body.Close()
			}
			if st == http.StatusServiceUnavailable && retry != "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: budget held by another request: HTTP %d Retry-After %q (%v), want 503 with Retry-After", name, st, retry, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for _, hold := range holders {
		hold.Close()
	}
	// Released when the holders' exchanges end: the AS4 request is read.
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Post(url+"/as4", "multipart/related; boundary=b; type=\"application/soap+xml\"", strings.NewReader(string(junk)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable && resp.StatusCode != http.StatusRequestEntityTooLarge {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("as4 after the budget was released: HTTP %d", resp.StatusCode)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSlowBodiesAreCutOff: a real client over loopback sending its body
// one byte every 50 ms, against limits.min_body_rate 1 KiB/s after 300 ms,
// is answered 408 and its connection closed within seconds (not after the
// one-minute read timeout), on both endpoints; no claim is taken.
func TestSlowBodiesAreCutOff(t *testing.T) {
	url := memoryServer(t, func(c *config.Config) {
		c.Limits.ReadTimeout = time.Minute
		c.Limits.MinBodyRate = 1 << 10
		c.Limits.MinBodyRateGrace = 300 * time.Millisecond
	})
	addr := strings.TrimPrefix(url, "http://")
	body := []byte(strings.Repeat("x", 100000))
	for name, head := range map[string]string{"as2": as2Head("slow", int64(len(body))), "as4": as4Head(int64(len(body)))} {
		start := time.Now()
		st, _ := rawExchange(t, addr, head, body, 50*time.Millisecond, 5*time.Second)
		if st != http.StatusRequestTimeout {
			t.Errorf("%s: slow body: HTTP %d, want 408", name, st)
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("%s: slow body held the connection for %s", name, took)
		}
	}
}
