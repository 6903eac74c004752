package limits

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"
)

// Defaults of BodyOptions.
const (
	// DefaultAmplification is the number of bytes a message holds in memory
	// per body byte while it is processed (the body, its transfer-decoded
	// and decrypted copies, the payload), as measured through the real
	// endpoints (server.TestMemoryBoundedUnderHostileInput with
	// GATEWAY_MEMREPORT=1): about 3 for a signed and encrypted AS2 message
	// and for a signed AS4 message, 1.75 for unauthenticated junk; 4 leaves
	// a margin.
	DefaultAmplification = 4
	// DefaultMemoryBudget is the process-wide default of limits.memory_budget.
	DefaultMemoryBudget = 1 << 30
	// DefaultStreamReserve is the most a streamed body reserves of the
	// budget: the fixed buffers of the streaming readers, decrypters and
	// hashes with a margin (see BodyOptions.StreamAbove).
	DefaultStreamReserve = 8 << 20
	// DefaultStreamBase is what a streamed body reserves before a byte of
	// it has arrived: the connection's and the spooling's buffers. It grows
	// towards StreamReserve with the bytes that arrive (StreamGrowth per
	// byte), since the streaming stages hold no more than what has
	// arrived: a body trickling in holds what it uses, not 8 MiB.
	DefaultStreamBase = 256 << 10
	// streamStep is the least a streamed body's reservation grows by.
	streamStep = 256 << 10
	// DefaultRetryAfter is the Retry-After of a 503 for an exhausted budget.
	DefaultRetryAfter = 10 * time.Second
	// chunkedStep is the unit (in body bytes) in which a body of unknown
	// length grows its reservation.
	chunkedStep = 1 << 20
)

// BodyOptions configure Handler.
type BodyOptions struct {
	// MaxBytes is the largest body (0: no limit): a larger Content-Length
	// is refused before reading, a longer chunked body as soon as it is.
	MaxBytes int64
	// MaxBytesFunc, when set, gives MaxBytes afresh for each request (a
	// limit that follows a reloaded configuration, e.g. the largest of
	// the partners' own limits).
	MaxBytesFunc func() int64
	// Budget is shared by every endpoint of the process (nil: unlimited).
	Budget *Budget
	// Amplification is the memory a body byte costs (0: DefaultAmplification).
	Amplification int64
	// MinRate is the slowest accepted body transfer in bytes per second
	// after Grace (0: no minimum). It is enforced with read deadlines that
	// move forward as bytes arrive.
	MinRate int64
	Grace   time.Duration
	// MaxDuration, when set, caps the read deadline the minimum rate moves
	// forward (the server's read timeout keeps applying).
	MaxDuration time.Duration
	// StreamAbove, when positive, is the body size above which the
	// endpoint streams the body through spool files instead of holding it:
	// such a body reserves StreamBase (0: DefaultStreamBase) instead of its
	// size × Amplification, grown by StreamGrowth (0: 1) bytes per body
	// byte read up to StreamReserve (0: DefaultStreamReserve), and a body
	// of unknown length stops growing its reservation once past
	// StreamAbove. The endpoint grows the reservation itself when it must
	// hold such a body after all.
	StreamAbove   int64
	StreamReserve int64
	StreamBase    int64
	StreamGrowth  int64
	// Source names the sender of a request for the budget's per-source
	// share (nil: the IP address of r.RemoteAddr).
	Source func(r *http.Request) string
	// Partner names the partner a request claims to come from before its
	// body is read (AS2-From), for the budget's per-partner share (nil or
	// "": not counted against a partner).
	Partner func(r *http.Request) string
	// Protocol names the endpoint in log lines.
	Protocol string
	Log      *slog.Logger
}

// Handler wraps next with the body limits of o. Before anything is read it
// refuses a Content-Length over MaxBytes (413) and reserves Content-Length
// × Amplification bytes of the budget, StreamBase for a streamed body,
// counted against the request's source address and claimed partner
// (Budget.SetShares): 413 when the whole budget or the share is too small,
// 503 with Retry-After while other requests hold it. It replaces r.Body
// with a reader that counts the bytes, grows the reservation of a body of
// unknown length, and of a streamed one, as it arrives, and enforces
// MinRate. Errors of
// that reader wrap ErrTooLarge, ErrBusy or ErrTooSlow; the endpoint answers
// them with Refuse. The reservation, also in r.Context() (ReservationFrom),
// is released when next returns.
func Handler(next http.Handler, o BodyOptions) http.Handler {
	if o.Amplification <= 0 {
		o.Amplification = DefaultAmplification
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.StreamReserve <= 0 {
		o.StreamReserve = DefaultStreamReserve
	}
	if o.StreamBase <= 0 {
		o.StreamBase = DefaultStreamBase
	}
	o.StreamBase = min(o.StreamBase, o.StreamReserve)
	if o.StreamGrowth <= 0 {
		o.StreamGrowth = 1
	}
	if o.Source == nil {
		o.Source = RemoteIP
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		lg := o.Log.With("protocol", o.Protocol, "remote", r.RemoteAddr, "content_length", r.ContentLength)
		o := o // per request: MaxBytesFunc
		if o.MaxBytesFunc != nil {
			o.MaxBytes = o.MaxBytesFunc()
		}
		if o.MaxBytes > 0 && r.ContentLength > o.MaxBytes {
			err := fmt.Errorf("Content-Length %d is over the limit of %d bytes: %w", r.ContentLength, o.MaxBytes, ErrTooLarge)
			lg.Warn("message refused before reading", "status", http.StatusRequestEntityTooLarge, "err", err)
			Refuse(w, err)
			return
		}
		var partner string
		if o.Partner != nil {
			partner = o.Partner(r)
		}
		res := o.Budget.ReserveFor(o.Source(r), partner)
		defer res.Release()
		streamed := o.StreamAbove > 0 && r.ContentLength > o.StreamAbove
		var need int64
		if r.ContentLength > 0 {
			need = r.ContentLength * o.Amplification
			if streamed {
				need = o.StreamBase
			}
			if err := res.Grow(need); err != nil {
				lg.Warn("message refused before reading: memory budget", "status", Status(err), "err", err,
					"budget", o.Budget.Total(), "budget_used", o.Budget.Used(), "partner_claimed", partner)
				Refuse(w, err)
				return
			}
		}
		b := &Body{r: r.Body, o: &o, res: res, known: r.ContentLength >= 0, streamed: streamed, reserved: need, start: start, lg: lg}
		if o.MinRate > 0 {
			b.rc = http.NewResponseController(w)
		}
		// WithContext copies the request: net/http still sees its own body
		// when it decides how to close the connection after a refusal.
		r = r.WithContext(WithReservation(r.Context(), res))
		r.Body = b
		next.ServeHTTP(w, r)
	})
}

// Body is the request body as Handler hands it on.
type Body struct {
	r     io.ReadCloser
	o     *BodyOptions
	res   *Reservation
	known bool
	// streamed: a body of known length above StreamAbove, whose
	// reservation grows with the bytes read up to StreamReserve; reserved
	// is what it reserved itself (the endpoint grows the same reservation
	// for its own needs: a parsed envelope, decompression).
	streamed bool
	reserved int64
	start    time.Time
	lg       *slog.Logger
	rc       *http.ResponseController

	mu  sync.Mutex
	n   int64
	err error
	dl  time.Time
}

// Read implements io.Reader.
func (b *Body) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return 0, b.err
	}
	if b.rc != nil {
		d := b.start.Add(b.o.Grace + time.Duration(float64(b.n)/float64(b.o.MinRate)*float64(time.Second)))
		if b.o.MaxDuration > 0 && d.After(b.start.Add(b.o.MaxDuration)) {
			d = b.start.Add(b.o.MaxDuration)
		}
		if !d.Equal(b.dl) {
			if err := b.rc.SetReadDeadline(d); err != nil {
				b.rc = nil // not supported by this connection: no minimum rate
			} else {
				b.dl = d
			}
		}
	}
	k, err := b.r.Read(p)
	b.n += int64(k)
	switch {
	case err != nil && errors.Is(err, os.ErrDeadlineExceeded) && b.rc != nil:
		rate := float64(b.n) / max(time.Since(b.start).Seconds(), 1e-3)
		err = fmt.Errorf("%d bytes in %s (%.0f bytes/s), the minimum is %d bytes/s after %s: %w",
			b.n, time.Since(b.start).Round(time.Millisecond), rate, b.o.MinRate, b.o.Grace, ErrTooSlow)
		b.lg.Warn("message refused: body too slow; closing the connection", "status", http.StatusRequestTimeout, "err", err)
	case b.o.MaxBytes > 0 && b.n > b.o.MaxBytes:
		err = fmt.Errorf("body over the limit of %d bytes: %w", b.o.MaxBytes, ErrTooLarge)
		k = 0
	case b.streamed && b.reserved < min(b.o.StreamReserve, b.o.StreamBase+b.n*b.o.StreamGrowth):
		need := min(max(b.o.StreamBase+b.n*b.o.StreamGrowth-b.reserved, streamStep), b.o.StreamReserve-b.reserved)
		if gerr := b.res.Grow(need); gerr != nil {
			err, k = gerr, 0
			b.lg.Warn("message refused while reading: memory budget", "status", Status(gerr), "err", gerr, "read", b.n,
				"budget", b.o.Budget.Total(), "budget_used", b.o.Budget.Used())
		} else {
			b.reserved += need
		}
	case !b.known && b.n*b.o.Amplification > b.res.Held() && (b.o.StreamAbove <= 0 || b.n <= b.o.StreamAbove):
		need := max(b.n*b.o.Amplification-b.res.Held(), chunkedStep*b.o.Amplification)
		if gerr := b.res.Grow(need); gerr != nil {
			err, k = gerr, 0
			b.lg.Warn("message refused while reading: memory budget", "status", Status(gerr), "err", gerr, "read", b.n,
				"budget", b.o.Budget.Total(), "budget_used", b.o.Budget.Used())
		}
	}
	if err == io.EOF && b.rc != nil {
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	if err != nil && err != io.EOF {
		b.err = err
	}
	return k, err
}

// RemoteIP is the IP address of r.RemoteAddr (r.RemoteAddr itself when it
// has no port): the default BodyOptions.Source.
func RemoteIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// Close implements io.Closer.
func (b *Body) Close() error { return b.r.Close() }

// Status is the HTTP status for an error of this package: 413, 503, 408,
// or 0 for other errors.
func Status(err error) int {
	switch {
	case errors.Is(err, ErrBusy):
		return http.StatusServiceUnavailable
	case errors.Is(err, ErrTooSlow):
		return http.StatusRequestTimeout
	case errors.Is(err, ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	}
	return 0
}

// Refuse answers a request refused by a limit of this package and reports
// whether err was one. The connection is closed (the body is unread).
func Refuse(w http.ResponseWriter, err error) bool {
	st := Status(err)
	if st == 0 {
		return false
	}
	h := w.Header()
	h.Set("Connection", "close")
	h.Set("Content-Type", "text/plain; charset=utf-8")
	var text string
	switch st {
	case http.StatusServiceUnavailable:
		h.Set("Retry-After", strconv.Itoa(int(DefaultRetryAfter/time.Second)))
		text = "the gateway is busy with other messages; retry later"
	case http.StatusRequestTimeout:
		text = "the message body arrived too slowly"
	default:
		text = "the message is larger than this gateway accepts"
	}
	w.WriteHeader(st)
	_, _ = io.WriteString(w, text+"\n")
	return true
}
