package server

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
)

// Without a token or client CA the admin listener trusts the loopback
// connection, so a web page must not reach it through the operator's
// browser: a DNS-rebinding Host (a name of the attacker's resolving to
// 127.0.0.1) and cross-origin posts are refused; loopback names work.
func TestAdminWithoutCredentialRefusesRebindingAndCrossOrigin(t *testing.T) {
	cfg := demoConfig(t)
	s, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: s.AdminHandler()}
	go srv.Serve(ln)
	defer srv.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	do := func(method, path, host string, header map[string]string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+ln.Addr().String()+path, strings.NewReader(""))
		req.Host = host
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "LOCALHOST", "[::1]:" + port, "127.9.9.9"} {
		if st, _ := do("GET", "/healthz", host, nil); st != http.StatusOK {
			t.Errorf("Host %s: /healthz %d, want 200", host, st)
		}
	}
	for _, path := range []string{"/console/", "/metrics", "/healthz"} {
		if st, body := do("GET", path, "evil.example:"+port, nil); st != http.StatusMisdirectedRequest || strings.Contains(body, "csrf") {
			t.Errorf("rebinding Host on %s: %d %.80q, want 421", path, st, body)
		}
	}
	if st, _ := do("POST", "/console/quarantine/discard", "127.0.0.1:"+port, map[string]string{"Origin": "https://evil.example"}); st != http.StatusForbidden {
		t.Errorf("cross-origin POST: %d, want 403", st)
	}
	if st, _ := do("POST", "/console/quarantine/discard", "127.0.0.1:"+port, map[string]string{"Sec-Fetch-Site": "cross-site"}); st != http.StatusForbidden {
		t.Errorf("cross-site POST: %d, want 403", st)
	}
	if st, _ := do("GET", "/console/", "127.0.0.1:"+port, map[string]string{"Origin": "http://localhost:" + port, "Sec-Fetch-Site": "same-origin"}); st != http.StatusOK {
		t.Errorf("same-origin console page: %d, want 200", st)
	}
}
