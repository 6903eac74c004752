package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// progressMin: bodies smaller than this show no progress (they are sent
// before a bar would be seen).
const progressMin = 1 << 20

// progressBar draws one line on a terminal: what is done (preparing or
// sending), a bar, bytes done of the total, the rate and the time left.
// It redraws at most five times a second and ends its line when done.
type progressBar struct {
	w     io.Writer
	label string
	now   func() time.Time
	start time.Time
	last  time.Time
	ended bool
}

// newProgress returns a bar on w when w is a terminal (and not quiet),
// else nil: logs and pipes get no carriage-return animation.
func newProgress(w io.Writer, quiet bool) *progressBar {
	if quiet || !isTerminal(w) {
		return nil
	}
	return &progressBar{w: w, now: time.Now}
}

// phase starts a new line labelled label (the bar's clock restarts).
func (p *progressBar) phase(label string) {
	if p == nil {
		return
	}
	p.label, p.start, p.last, p.ended = label, p.now(), time.Time{}, false
}

// update draws done of total bytes; done == total ends the line.
func (p *progressBar) update(done, total int64) {
	if p == nil || p.ended || total < progressMin {
		return
	}
	now := p.now()
	final := done >= total
	if !final && now.Sub(p.last) < 200*time.Millisecond {
		return
	}
	p.last = now
	fmt.Fprint(p.w, "\r"+progressLine(p.label, done, total, now.Sub(p.start)))
	if final {
		p.ended = true
		fmt.Fprintln(p.w)
	}
}

// end ends a line left open (a send that failed half-way).
func (p *progressBar) end() {
	if p != nil && !p.ended && !p.last.IsZero() {
		p.ended = true
		fmt.Fprintln(p.w)
	}
}

// reader counts what is read from r against total.
func (p *progressBar) reader(r io.Reader, total int64) io.Reader {
	if p == nil {
		return r
	}
	return &countingReader{r: r, fn: func(n int64) { p.update(n, total) }}
}

// progressTransport shows the request body's progress on bar ("sending").
type progressTransport struct {
	bar  *progressBar
	next http.RoundTripper
}

func (p progressTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	next := p.next
	if next == nil {
		next = http.DefaultTransport
	}
	if req.Body == nil || req.ContentLength <= 0 {
		return next.RoundTrip(req)
	}
	p.bar.phase("sending")
	r := req.Clone(req.Context())
	r.Body = readCloser{p.bar.reader(req.Body, req.ContentLength), req.Body}
	resp, err := next.RoundTrip(r)
	p.bar.end()
	return resp, err
}

type readCloser struct {
	io.Reader
	io.Closer
}

type countingReader struct {
	r  io.Reader
	n  int64
	fn func(int64)
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	if n > 0 {
		c.fn(c.n)
	}
	return n, err
}

// progressLine is e.g. "sending   [#######.............]  35%  358.2 MiB / 1.0 GiB  61.3 MiB/s  ETA 0:11".
func progressLine(label string, done, total int64, elapsed time.Duration) string {
	const width = 20
	frac := float64(done) / float64(max(total, 1))
	frac = min(max(frac, 0), 1)
	filled := int(frac * width)
	bar := strings.Repeat("#", filled) + strings.Repeat(".", width-filled)
	rate := 0.0
	if elapsed > 0 {
		rate = float64(done) / elapsed.Seconds()
	}
	eta := "--:--"
	switch {
	case done >= total:
		eta = clock(elapsed) + " total"
	case rate > 0:
		eta = "ETA " + clock(time.Duration(float64(total-done)/rate*float64(time.Second)))
	}
	return fmt.Sprintf("%-9s [%s] %3.0f%%  %s / %s  %s/s  %s   ", label, bar, 100*frac, byteSize(done), byteSize(total), byteSize(int64(rate)), eta)
}

// clock is m:ss (or h:mm:ss).
func clock(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}

// byteSize is a byte count in B, KiB, MiB or GiB.
func byteSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// isTerminal reports whether w is a terminal device.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && fileIsTerminal(f)
}
