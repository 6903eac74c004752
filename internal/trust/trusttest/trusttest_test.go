package trusttest

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestOCSPPortTaken: a responder whose port another process took fails at
// once with errPortTaken (not after the 10 s banner wait), and StartOCSP
// then serves on another port.
func TestOCSPPortTaken(t *testing.T) {
	ca := NewRoot(t, "Port Test CA")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := fmt.Sprintf("http://127.0.0.1:%d/", l.Addr().(*net.TCPAddr).Port)
	start := time.Now()
	if _, err := ca.startOCSP(t, nil, taken, 0); !errors.Is(err, errPortTaken) {
		t.Fatalf("err = %v, want errPortTaken", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("a taken port was noticed after %s", took)
	}
	o := ca.StartOCSP(t, nil, 0)
	resp, err := http.Get(o.URL + "MEMwQTA/MD0wOzAJBgUrDgMCGgUABBQ")
	if err != nil {
		t.Fatalf("responder at %s: %v", o.URL, err)
	}
	resp.Body.Close()
	o.Stop()
	o.Stop() // twice is fine
}
