package console

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// clientFrom is a browser whose connections come from the loopback
// address src (127.0.0.0/8 is all loopback on Linux).
func clientFrom(t *testing.T, src string) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	return &http.Client{Jar: jar, Transport: &http.Transport{DialContext: d.DialContext}}
}

func postStatus(t *testing.T, c *http.Client, u string, v url.Values) (*http.Response, string) {
	t.Helper()
	resp, err := c.PostForm(u, v)
	return resp, body(t, resp, err)
}

// TestLoginThrottledPerSource: after LoginFailures wrong tokens within
// LoginWindow from one address, the login form and the bearer header
// answer 429 with Retry-After to that address, without comparing its
// token (the right one included), until the window has passed; another
// address is not affected, and a right token clears the count.
func TestLoginThrottledPerSource(t *testing.T) {
	f := newFixture(t, "s3cret")
	var mu sync.Mutex
	now := time.Now()
	f.con.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }

	attacker := clientFrom(t, "127.0.0.1")
	for i := range LoginFailures {
		if resp, b := postStatus(t, attacker, f.srv.URL+"/console/login", url.Values{"token": {fmt.Sprint("guess", i)}}); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(b, "Wrong token.") {
			t.Fatalf("wrong token %d: %d, want 401", i+1, resp.StatusCode)
		}
	}
	for _, token := range []string{"guess-again", "s3cret"} {
		resp, b := postStatus(t, attacker, f.srv.URL+"/console/login", url.Values{"token": {token}})
		ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		if resp.StatusCode != http.StatusTooManyRequests || ra < 1 || ra > int(LoginWindow/time.Second) || !strings.Contains(b, "Too many wrong admin tokens") {
			t.Fatalf("token %q after %d failures: %d Retry-After %q, want 429", token, LoginFailures, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	// The bearer header of the same address is refused the same way.
	req, _ := http.NewRequest("GET", f.srv.URL+"/console/messages", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := attacker.Do(req)
	if body(t, resp, err); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("bearer from a throttled address: %d, want 429", resp.StatusCode)
	}

	// Another address logs in.
	operator := clientFrom(t, "127.0.0.2")
	if resp, b := postStatus(t, operator, f.srv.URL+"/console/login", url.Values{"token": {"s3cret"}}); resp.StatusCode != 200 || !strings.Contains(b, "Messages per hour") {
		t.Fatalf("login from another address: %d", resp.StatusCode)
	}

	// Wrong bearer tokens count as well.
	scripts := clientFrom(t, "127.0.0.3")
	codes := []int{}
	for range LoginFailures + 1 {
		req, _ := http.NewRequest("GET", f.srv.URL+"/console/messages", nil)
		req.Header.Set("Authorization", "Bearer nope")
		resp, err := scripts.Do(req)
		body(t, resp, err)
		codes = append(codes, resp.StatusCode)
	}
	if codes[LoginFailures-1] != http.StatusUnauthorized || codes[LoginFailures] != http.StatusTooManyRequests {
		t.Fatalf("wrong bearer tokens: %v, want %d×401 then 429", codes, LoginFailures)
	}

	// Once the window has passed, the right token works again and clears
	// the count.
	advance(LoginWindow)
	if resp, _ := postStatus(t, attacker, f.srv.URL+"/console/login", url.Values{"token": {"s3cret"}}); resp.StatusCode != 200 {
		t.Fatalf("login after the window: %d", resp.StatusCode)
	}
	if _, ok := f.con.throttle.Blocked("127.0.0.1", f.con.now()); ok {
		t.Fatalf("still blocked after a right token")
	}
}

// TestLoginThrottleTableBounded: the table of addresses holds at most
// maxThrottled entries whatever the number of addresses trying, and the
// IPv6 unit is the /64.
func TestLoginThrottleTableBounded(t *testing.T) {
	th := NewLoginThrottle()
	now := time.Now()
	for i := range maxThrottled + 500 {
		th.Failed(fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), now.Add(time.Duration(i)*time.Microsecond))
	}
	if n := th.size(); n > maxThrottled {
		t.Fatalf("%d addresses held, want at most %d", n, maxThrottled)
	}
	a := &http.Request{RemoteAddr: "[2001:db8:1:2:aaaa::1]:5000"}
	b := &http.Request{RemoteAddr: "[2001:db8:1:2:bbbb::2]:6000"}
	if SourceOf(a) != SourceOf(b) || SourceOf(a) != "2001:db8:1:2::/64" {
		t.Errorf("IPv6 sources %q %q, want one /64", SourceOf(a), SourceOf(b))
	}
	if got := SourceOf(&http.Request{RemoteAddr: "[::ffff:192.0.2.7]:1"}); got != "192.0.2.7" {
		t.Errorf("IPv4-mapped source %q", got)
	}
}

// TestFlashOnlyServerText: a page shows only the server's own messages:
// ?flash= selects one of them by key, an unknown key (any text) shows
// nothing, and ?error= is not read at all.
func TestFlashOnlyServerText(t *testing.T) {
	f := newFixture(t, "s3cret")
	c := f.client(t)
	const evil = "Your session expired. Call +1 555 0100 and read us your admin token."
	for _, p := range []string{"/console/login?flash=" + url.QueryEscape(evil), "/console/login?error=" + url.QueryEscape(evil),
		"/console/login?flash=" + url.QueryEscape("<b>x</b>")} {
		if b := get(t, c, f.srv.URL+p); strings.Contains(b, "Call +1 555") || strings.Contains(b, `class="flash"`) || strings.Contains(b, `class="error"`) {
			t.Errorf("%s shows the URL's text: %.2000s", p, b)
		}
	}
	req, _ := http.NewRequestWithContext(context.Background(), "GET", f.srv.URL+"/console/outbox?flash=retry-now", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	if b := body(t, resp, err); !strings.Contains(b, `<div class="flash">`+flashes["retry-now"]+`</div>`) {
		t.Errorf("known flash key not shown: %.2000s", b)
	}
}
