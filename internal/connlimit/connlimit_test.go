package connlimit

import (
	"errors"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// served is a Listener on loopback with its accepted connections.
type served struct {
	l        *Listener
	accepted chan net.Conn
}

func serve(t *testing.T, opt Options) *served {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &served{l: New(ln, opt), accepted: make(chan net.Conn, 100)}
	go func() {
		for {
			c, err := s.l.Accept()
			if err != nil {
				return
			}
			s.accepted <- c
		}
	}()
	t.Cleanup(func() { s.l.Close() })
	return s
}

// dial connects from the loopback address from (127.0.0.x) and waits for
// the listener to admit or refuse the connection.
func (s *served) dial(t *testing.T, from string) (client net.Conn, server net.Conn) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", s.l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	select {
	case sc := <-s.accepted:
		return c, sc
	case <-time.After(300 * time.Millisecond):
		return c, nil // refused (or not accepted yet)
	}
}

// closedByServer reports whether the server closed c within wait.
func closedByServer(c net.Conn, wait time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(wait))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

func TestPerAddressLimitRefusesOnlyThatAddress(t *testing.T) {
	s := serve(t, Options{Max: 10, PerAddress: 2})
	for i := 0; i < 2; i++ {
		if _, sc := s.dial(t, "127.0.0.2"); sc == nil {
			t.Fatalf("connection %d from 127.0.0.2 not admitted", i+1)
		}
	}
	c, sc := s.dial(t, "127.0.0.2")
	if sc != nil || !closedByServer(c, time.Second) {
		t.Fatal("third connection from 127.0.0.2 admitted, want closed at once")
	}
	if _, sc := s.dial(t, "127.0.0.3"); sc == nil {
		t.Fatal("connection from another address refused")
	}
	if st := s.l.Stats(); st.Open != 3 || st.Refused != 1 {
		t.Fatalf("stats %+v, want 3 open, 1 refused", st)
	}
}

func TestLimitClosesTheLongestIdleConnectionForANewOne(t *testing.T) {
	s := serve(t, Options{Max: 3, NewGrace: time.Millisecond, IdleUnderPressure: time.Hour})
	var clients, servers []net.Conn
	for i := 0; i < 3; i++ {
		c, sc := s.dial(t, "127.0.0.1")
		if sc == nil {
			t.Fatal("not admitted")
		}
		clients, servers = append(clients, c), append(servers, sc)
	}
	// 0 answers a request, 1 went idle before 2.
	s.l.ConnState(servers[0], http.StateActive)
	s.l.ConnState(servers[1], http.StateIdle)
	time.Sleep(5 * time.Millisecond)
	s.l.ConnState(servers[2], http.StateIdle)
	c, sc := s.dial(t, "127.0.0.1")
	if sc == nil {
		t.Fatal("new connection refused although idle ones could make room")
	}
	if !closedByServer(clients[1], time.Second) {
		t.Fatal("the longest idle connection is still open")
	}
	for _, i := range []int{0, 2} {
		if closedByServer(clients[i], 100*time.Millisecond) {
			t.Fatalf("connection %d closed, want the longest idle one only", i)
		}
	}
	// Every connection answering a request: a new one is refused.
	s.l.ConnState(servers[2], http.StateActive)
	s.l.ConnState(sc, http.StateActive)
	c2, sc2 := s.dial(t, "127.0.0.1")
	if sc2 != nil || !closedByServer(c2, time.Second) {
		t.Fatal("connection admitted over the limit with no idle connection to close")
	}
	_ = c
	if st := s.l.Stats(); st.Open != 3 || st.Evicted != 1 || st.Refused != 1 || st.Peak != 3 {
		t.Fatalf("stats %+v", st)
	}
}

func TestNewConnectionSparedDuringItsGrace(t *testing.T) {
	s := serve(t, Options{Max: 1, NewGrace: time.Hour})
	if _, sc := s.dial(t, "127.0.0.1"); sc == nil {
		t.Fatal("not admitted")
	}
	c, sc := s.dial(t, "127.0.0.1")
	if sc != nil || !closedByServer(c, time.Second) {
		t.Fatal("a connection that has not yet sent a request was closed for a new one inside its grace")
	}
}

func TestPressureClosesIdleConnectionsAndEnds(t *testing.T) {
	var mu sync.Mutex
	var calls []bool
	s := serve(t, Options{Max: 4, HighWater: 2, LowWater: 1, IdleUnderPressure: 100 * time.Millisecond,
		OnPressure: func(on bool) { mu.Lock(); calls = append(calls, on); mu.Unlock() }})
	c1, sc1 := s.dial(t, "127.0.0.1")
	c2, sc2 := s.dial(t, "127.0.0.1")
	if sc1 == nil || sc2 == nil {
		t.Fatal("not admitted")
	}
	s.l.ConnState(sc1, http.StateActive) // answering a request: kept
	s.l.ConnState(sc2, http.StateIdle)
	if !closedByServer(c2, 2*time.Second) {
		t.Fatal("idle connection not closed under pressure")
	}
	if closedByServer(c1, 200*time.Millisecond) {
		t.Fatal("active connection closed under pressure")
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		mu.Lock()
		got := append([]bool(nil), calls...)
		mu.Unlock()
		if len(got) == 2 && got[0] && !got[1] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("OnPressure calls %v, want [true false]", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st := s.l.Stats(); st.Pressure || st.Open != 1 || st.Evicted != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestClosedConnectionFreesItsPlace(t *testing.T) {
	s := serve(t, Options{Max: 1, PerAddress: 1})
	_, sc := s.dial(t, "127.0.0.1")
	if sc == nil {
		t.Fatal("not admitted")
	}
	sc.Close()
	sc.Close() // twice: counted once
	if _, sc := s.dial(t, "127.0.0.1"); sc == nil {
		t.Fatal("place not freed by Close")
	}
	if st := s.l.Stats(); st.Open != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestSplitNOFILE(t *testing.T) {
	for _, c := range []struct{ nofile, admin, partner, reserve int }{
		{256, 32, 160, 64}, {1024, 32, 736, 256}, {65536, 32, MaxAutoConnections, 16384}, {0, 32, MaxAutoConnections, 0}, {64, 32, 8, 64},
	} {
		b := SplitNOFILE(c.nofile, c.admin)
		if b.Partner != c.partner || b.Reserve != c.reserve {
			t.Errorf("nofile %d: %+v, want partner %d reserve %d", c.nofile, b, c.partner, c.reserve)
		}
		if c.nofile > 0 && b.Partner > 8 && b.Partner+b.Admin+b.Reserve > c.nofile {
			t.Errorf("nofile %d: %+v exceeds the limit", c.nofile, b)
		}
	}
	if NOFILE() < 0 {
		t.Fatal("negative NOFILE")
	}
}

func TestPerAddressLimitClosesThatAddressesIdleConnection(t *testing.T) {
	s := serve(t, Options{Max: 10, PerAddress: 2, NewGrace: time.Millisecond, IdleUnderPressure: time.Hour})
	other, otherSrv := s.dial(t, "127.0.0.3")
	c1, sc1 := s.dial(t, "127.0.0.2")
	_, sc2 := s.dial(t, "127.0.0.2")
	if sc1 == nil || sc2 == nil || otherSrv == nil {
		t.Fatal("not admitted")
	}
	s.l.ConnState(otherSrv, http.StateIdle) // idle the longest, but of another address
	time.Sleep(5 * time.Millisecond)
	s.l.ConnState(sc1, http.StateIdle)
	s.l.ConnState(sc2, http.StateActive)
	if _, sc := s.dial(t, "127.0.0.2"); sc == nil {
		t.Fatal("refused although the address has an idle connection to close")
	}
	if !closedByServer(c1, time.Second) {
		t.Fatal("the address's idle connection is still open")
	}
	if closedByServer(other, 100*time.Millisecond) {
		t.Fatal("another address's connection was closed")
	}
}
