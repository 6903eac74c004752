package main

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

func TestProgressLine(t *testing.T) {
	for _, c := range []struct {
		done, total int64
		elapsed     time.Duration
		want        string
	}{
		{0, 1 << 30, 0, "sending   [....................]   0%  0 B / 1.0 GiB  0 B/s  --:--   "},
		{256 << 20, 1 << 30, 4 * time.Second, "sending   [#####...............]  25%  256.0 MiB / 1.0 GiB  64.0 MiB/s  ETA 0:12   "},
		{1 << 30, 1 << 30, 75 * time.Second, "sending   [####################] 100%  1.0 GiB / 1.0 GiB  13.7 MiB/s  1:15 total   "},
	} {
		if got := progressLine("sending", c.done, c.total, c.elapsed); got != c.want {
			t.Errorf("got  %q\nwant %q", got, c.want)
		}
	}
	if clock(3*time.Hour+2*time.Minute+5*time.Second) != "3:02:05" {
		t.Fatal(clock(3*time.Hour + 2*time.Minute + 5*time.Second))
	}
}

// TestIsTerminal: a pseudo-terminal is one; a pipe, /dev/null, a file and
// a buffer are not.
func TestIsTerminal(t *testing.T) {
	_, tty := openPTY(t)
	if !isTerminal(tty) {
		t.Fatal("a pty is not taken for a terminal")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	null, _ := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	defer null.Close()
	file, _ := os.Create(t.TempDir() + "/log")
	defer file.Close()
	for name, wr := range map[string]io.Writer{"pipe": w, "/dev/null": null, "file": file, "buffer": &bytes.Buffer{}} {
		if isTerminal(wr) {
			t.Errorf("%s taken for a terminal", name)
		}
	}
}

// TestSendProgressOnTerminalOnly: `gateway send` of a 3 MiB file draws
// its progress bar (preparing, then sending, up to 100 %) when stderr is a
// terminal, nothing with -quiet, and nothing when stderr is a pipe.
func TestSendProgressOnTerminalOnly(t *testing.T) {
	g := startDemoGateway(t)
	big := make([]byte, 3<<20)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range big {
		big[i] = byte(rng.Uint32())
	}
	file := writePayload(t, "big.bin", big)
	spool := t.TempDir()
	args := []string{"send", "-as2-from", "DEMO", "-as2-to", "GATEWAY",
		"-key", demoPath(t, "keys/demo-partner.key"), "-cert", demoPath(t, "partners/demo-partner.pem"),
		"-recipient-cert", demoPath(t, "keys/gateway.pem"), "-url", g.url, "-file", file, "-spool-dir", spool}
	progressOnTerminalOnly(t, args, "result:       OK", spool)
}

// progressOnTerminalOnly runs the send command args (which prints ok when
// it succeeds) with stderr a pseudo-terminal, which must show both bars up
// to 100 %; with -quiet, which must show none; and with stderr a pipe,
// which must get nothing. spool, its -spool-dir, must be empty afterwards.
func progressOnTerminalOnly(t *testing.T, args []string, ok, spool string) {
	t.Helper()
	// sendTo runs the command with stderr w and returns what came out of
	// the other end, r.
	sendTo := func(r io.Reader, w *os.File, extra ...string) string {
		return stderrOf(r, w, func() {
			var out bytes.Buffer
			// extra flags right after the command: send-as4's files come last.
			if code := run(append(append([]string{args[0]}, extra...), args[1:]...), &out, w); code != 0 {
				t.Fatalf("exit %d\n%s", code, out.String())
			}
			if !strings.Contains(out.String(), ok) {
				t.Fatalf("output:\n%s", out.String())
			}
		})
	}
	master, tty := openPTY(t)
	e := sendTo(master, tty)
	for _, want := range []string{"\rpreparing [", "\rsending   [", "] 100%  ", " total"} {
		if !strings.Contains(e, want) {
			t.Errorf("terminal lacks %q: %q", want, e)
		}
	}
	if e := sendTo(master, tty, "-quiet"); strings.Contains(e, "%") {
		t.Errorf("-quiet, and the terminal got %q", e)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if e := sendTo(r, w); e != "" {
		t.Errorf("a pipe got %q", e)
	}
	if left, _ := os.ReadDir(spool); len(left) != 0 {
		t.Errorf("-spool-dir keeps %d files after the sends", len(left))
	}
}

// stderrOf runs send, which writes to w, and returns what came out of the
// other end of w, r (a pseudo-terminal's master or a pipe's reader).
func stderrOf(r io.Reader, w *os.File, send func()) string {
	got := make(chan string)
	go func() {
		var b bytes.Buffer
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			b.Write(buf[:n])
			if err != nil || strings.Contains(b.String(), "\x00end") {
				break
			}
		}
		got <- b.String()
	}()
	send()
	w.Write([]byte("\x00end"))
	return strings.TrimSuffix(<-got, "\x00end")
}

// TestProgressTransport: send-as4's bar follows the request body through
// the HTTP client and the server receives the body unchanged.
func TestProgressTransport(t *testing.T) {
	master, tty := openPTY(t)
	body := bytes.Repeat([]byte("0123456789abcdef"), 1<<17) // 2 MiB
	var got []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got, _ = io.ReadAll(r.Body) }))
	defer srv.Close()
	hc := &http.Client{Transport: progressTransport{newProgress(tty, false), nil}}
	resp, err := hc.Post(srv.URL, "application/octet-stream", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	tty.Write([]byte("\x00end"))
	var b bytes.Buffer
	buf := make([]byte, 4096)
	for !strings.Contains(b.String(), "\x00end") {
		n, err := master.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	if !bytes.Equal(got, body) || !strings.Contains(b.String(), "\rsending   [####################] 100%  2.0 MiB / 2.0 MiB") {
		t.Fatalf("server got %d bytes; terminal %q", len(got), b.String())
	}
}
