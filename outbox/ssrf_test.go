package outbox

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/edigateway/gateway/audit"
)

func TestNonPublic(t *testing.T) {
	for _, c := range []struct {
		addr string
		want string // a word of the reason; "" for public
	}{
		{"8.8.8.8", ""},
		{"93.184.215.14", ""},
		{"2606:4700::1111", ""},
		{"2a00:1450:4001:82b::200e", ""},
		{"::ffff:8.8.8.8", ""},
		{"64:ff9b::808:808", ""}, // NAT64 of 8.8.8.8
		{"2002:808:808::1", ""},  // 6to4 of 8.8.8.8
		{"127.0.0.1", "loopback"},
		{"127.255.255.254", "loopback"},
		{"::1", "loopback"},
		{"::ffff:127.0.0.1", "IPv4-mapped loopback"},
		{"::ffff:7f00:1", "IPv4-mapped loopback"},
		{"0.0.0.0", "this network"},
		{"0.1.2.3", "this network"},
		{"::", "unspecified"},
		{"10.1.2.3", "private"},
		{"172.16.0.1", "private"},
		{"172.31.255.255", "private"},
		{"192.168.1.1", "private"},
		{"::ffff:192.168.1.1", "IPv4-mapped private"},
		{"::ffff:10.0.0.1", "IPv4-mapped private"},
		{"fc00::1", "unique local"},
		{"fd12:3456::1", "unique local"},
		{"169.254.169.254", "link-local"}, // cloud metadata
		{"fe80::1", "link-local"},
		{"fe80::1%eth0", "link-local"},
		{"::ffff:169.254.169.254", "IPv4-mapped link-local"},
		{"100.64.0.1", "CGNAT"},
		{"100.127.255.255", "CGNAT"},
		{"224.0.0.1", "multicast"},
		{"239.255.255.250", "multicast"},
		{"ff02::1", "multicast"},
		{"ff05::2", "multicast"},
		{"255.255.255.255", "broadcast"},
		{"240.0.0.1", "reserved"},
		{"192.0.2.1", "documentation"},
		{"198.51.100.7", "documentation"},
		{"203.0.113.9", "documentation"},
		{"2001:db8::1", "documentation"},
		{"198.18.0.1", "benchmarking"},
		{"192.0.0.8", "IETF"},
		{"2001::1", "Teredo"},
		{"64:ff9b::7f00:1", "NAT64 of a loopback"},
		{"64:ff9b::a00:1", "NAT64 of a private"},
		{"64:ff9b:1::1", "local-use NAT64"},
		{"2002:7f00:1::1", "6to4 of a loopback"},
		{"2002:c0a8:101::1", "6to4 of a private"},
		{"::127.0.0.1", "outside 2000::/3"}, // IPv4-compatible (deprecated)
		{"::a00:1", "outside 2000::/3"},
		{"100::1", "discard"},
		{"fec0::1", "site-local"},
		{"4000::1", "outside 2000::/3"},
	} {
		a, err := netip.ParseAddr(c.addr)
		if err != nil {
			t.Fatal(err)
		}
		got := NonPublic(a)
		if (got == "") != (c.want == "") || !strings.Contains(got, c.want) {
			t.Errorf("NonPublic(%s) = %q, want %q", c.addr, got, c.want)
		}
	}
	if NonPublic(netip.Addr{}) == "" {
		t.Error("the zero Addr counts as public")
	}
}

func TestPermitControl(t *testing.T) {
	p := Permit{Private: []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16")}}
	for addr, ok := range map[string]bool{
		"8.8.8.8:443": true, "10.20.1.2:443": true, "[::ffff:10.20.1.2]:443": true, "10.21.0.1:443": false,
		"127.0.0.1:80": false, "[::1]:80": false, "[::ffff:127.0.0.1]:80": false, "[fe80::1%lo]:80": false, "garbage": false,
	} {
		err := p.control("tcp", addr, nil)
		var r *RefusedError
		if (err == nil) != ok || err != nil && !errors.As(err, &r) {
			t.Errorf("control(%s) = %v, want allowed %v", addr, err, ok)
		}
	}
}

// listenOn starts a counting MDN receiver on one loopback address; the
// statuses are answered in turn, then 200.
func listenOn(t *testing.T, addr string, statuses ...int) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	var hits atomic.Int64
	var mu sync.Mutex
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		hits.Add(1)
		mu.Lock()
		st := 200
		if len(statuses) > 0 {
			st, statuses = statuses[0], statuses[1:]
		}
		mu.Unlock()
		w.WriteHeader(st)
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &hits
}

// Without a Permit for them, loopback, mapped and name-resolved loopback
// addresses are refused: the delivery is given up at the first attempt,
// no request reaches the server, and the refusal is audited.
func TestDispatcherRefusesNonPublicAddresses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := newClock()
	st := NewMemory(MemoryClock(clk.Now))
	srv, hits := listenOn(t, "127.0.0.1:0")
	port := srv.Listener.Addr().(*net.TCPAddr).AddrPort().Port()
	p := func(host string) string { return "http://" + net.JoinHostPort(host, itoa(port)) + "/mdn" }
	urls := map[string]string{"literal": p("127.0.0.1"), "mapped": p("::ffff:127.0.0.1"), "name": p("localhost")}
	for id, u := range urls {
		d := delivery(id)
		d.URL = u
		if err := st.Enqueue(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	var logs logBuf
	sink := &audit.Memory{}
	disp := newDispatcher(st, clk, &logs)
	disp.Authorize, disp.Audit = nil, sink
	disp.MaxAttempts = 12
	if n, err := disp.RunOnce(ctx); err != nil || n != 3 {
		t.Fatalf("RunOnce: %d %v", n, err)
	}
	for id := range urls {
		got, s, _ := st.Get(ctx, id)
		if s != GaveUp || got.Attempts != 1 || !strings.Contains(got.LastError, "refused") || !strings.Contains(got.LastError, "loopback") {
			t.Errorf("%s: state %s, attempts %d, last error %q; want gave-up after 1 attempt, refused as loopback", id, s, got.Attempts, got.LastError)
		}
	}
	if hits.Load() != 0 {
		t.Fatalf("%d requests reached the loopback server", hits.Load())
	}
	if n := strings.Count(logs.String(), "delivery refused"); n != 3 {
		t.Errorf("%d refusal log lines:\n%s", n, logs.String())
	}
	recs := sink.Records()
	if len(recs) != 3 {
		t.Fatalf("%d audit records", len(recs))
	}
	for _, r := range recs {
		if r.Step != audit.StepDelivery || r.Decision != "refused" || r.Partner != "acme" || !strings.Contains(r.Error, "loopback") {
			t.Errorf("audit record %+v", r)
		}
	}
}

// A name the Permit allows (a listed private network) is resolved and
// checked at every attempt: when its answer changes to loopback between
// attempts, the second attempt is refused and nothing reaches loopback.
func TestDispatcherChecksEveryAttemptsDNSAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := newClock()
	st := NewMemory(MemoryClock(clk.Now))
	listed, listedHits := listenOn(t, "127.0.0.2:0", http.StatusServiceUnavailable)
	port := listed.Listener.Addr().(*net.TCPAddr).AddrPort().Port()
	_, loopHits := listenOn(t, "127.0.0.1:"+itoa(port))
	var answer atomic.Value
	answer.Store(netip.MustParseAddr("127.0.0.2"))
	var lookups atomic.Int64
	d := delivery("a")
	d.URL = "http://mdn.acme.example:" + itoa(port) + "/mdn"
	if err := st.Enqueue(ctx, d); err != nil {
		t.Fatal(err)
	}
	disp := newDispatcher(st, clk, io.Discard)
	disp.MaxAttempts = 12
	disp.Authorize = func(context.Context, Delivery) (Permit, error) {
		return Permit{Private: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}}, nil
	}
	disp.LookupNetIP = func(_ context.Context, host string) ([]netip.Addr, error) {
		if host != "mdn.acme.example" {
			return nil, errors.New("no such host")
		}
		lookups.Add(1)
		return []netip.Addr{answer.Load().(netip.Addr)}, nil
	}
	disp.RunOnce(ctx)
	got, s, _ := st.Get(ctx, "a")
	if s != Pending || got.Attempts != 1 || listedHits.Load() != 1 || !strings.Contains(got.LastError, "503") {
		t.Fatalf("first attempt: %s %+v, %d hits", s, got, listedHits.Load())
	}
	answer.Store(netip.MustParseAddr("127.0.0.1"))
	clk.Advance(DefaultMaxBackoff)
	disp.RunOnce(ctx)
	got, s, _ = st.Get(ctx, "a")
	if s != GaveUp || got.Attempts != 2 || !strings.Contains(got.LastError, "127.0.0.1 (loopback)") {
		t.Fatalf("second attempt: %s %+v", s, got)
	}
	if loopHits.Load() != 0 || listedHits.Load() != 1 || lookups.Load() != 2 {
		t.Fatalf("loopback hits %d, listed hits %d, lookups %d", loopHits.Load(), listedHits.Load(), lookups.Load())
	}
}

// Authorize is asked before every attempt; its error refuses the delivery
// without a request.
func TestDispatcherAuthorizeRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := newClock()
	st := NewMemory(MemoryClock(clk.Now))
	rcv := newReceiver(t, http.StatusInternalServerError)
	d := delivery("a")
	d.URL = rcv.srv.URL + "/mdn"
	st.Enqueue(ctx, d)
	disp := newDispatcher(st, clk, io.Discard)
	var allow atomic.Bool
	allow.Store(true)
	disp.Authorize = func(ctx context.Context, del Delivery) (Permit, error) {
		if !allow.Load() {
			return Permit{}, errors.New("the URL no longer matches as2.async_mdn_urls of partner acme")
		}
		return allowLoopback(ctx, del)
	}
	sink := &audit.Memory{}
	disp.Audit = sink
	disp.RunOnce(ctx)
	allow.Store(false)
	clk.Advance(DefaultMaxBackoff)
	disp.RunOnce(ctx)
	got, s, _ := st.Get(ctx, "a")
	if s != GaveUp || got.Attempts != 2 || !strings.Contains(got.LastError, "no longer matches") || len(rcv.got()) != 1 {
		t.Fatalf("%s %+v, %d requests", s, got, len(rcv.got()))
	}
	if recs := sink.Records(); len(recs) != 1 || !strings.Contains(recs[0].Error, "no longer matches") {
		t.Fatalf("audit %+v", recs)
	}
}

func itoa(n uint16) string { return strconv.Itoa(int(n)) }
