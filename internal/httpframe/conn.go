package httpframe

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
)

// NonceHeader carries, in the request a connection delivers in place of a
// refused head, the connection's refusal nonce.
const NonceHeader = "X-Gateway-Framing-Refusal"

// Options configure a Listener.
type Options struct {
	// TLS, when set, is terminated here, so that the guard reads the
	// plaintext: the server then serves HTTP/1.1 on the connections as if
	// they were plain (Conn.TLS gives each one's state for r.TLS). Its
	// NextProtos should offer http/1.1 only.
	TLS *tls.Config
	// MaxHead limits a request head (0: DefaultMaxHead); a larger one is
	// refused with 431.
	MaxHead int
	// Log receives failed TLS handshakes at debug level (nil: none).
	Log *slog.Logger
}

// Listener guards every connection it accepts (see Conn).
type Listener struct {
	net.Listener
	opt Options
}

// NewListener wraps ln.
func NewListener(ln net.Listener, opt Options) *Listener { return &Listener{Listener: ln, opt: opt} }

// Accept returns the next connection, guarded.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return NewConn(c, l.opt), nil
}

// Conn follows the framing of the requests read from it and refuses a
// head a proxy could frame differently: in its place the server reads a
// request carrying the refusal's nonce and "Connection: close" (Refused
// finds the refusal), then end of input.
type Conn struct {
	net.Conn // as accepted, or its TLS server side
	tls      *tls.Conn
	log      *slog.Logger

	handshook bool
	f         *framer
	buf       []byte // read, not yet passed to the server
	ok        int    // buf[:ok] may pass
	rbuf      []byte
	err       error // sticky read error
	timeout   error // a deadline passed: returned once
	synthetic []byte
	eof       bool

	mu      sync.Mutex
	refusal *Refusal
	nonce   string
	state   *tls.ConnectionState
}

// NewConn guards c (terminating TLS with opt.TLS, if set).
func NewConn(c net.Conn, opt Options) *Conn {
	fc := &Conn{Conn: c, f: newFramer(opt.MaxHead), log: opt.Log}
	if opt.TLS != nil {
		fc.tls = tls.Server(c, opt.TLS)
		fc.Conn = fc.tls
	}
	return fc
}

// NetConn returns the connection under the guard (its TLS side, if any).
func (c *Conn) NetConn() net.Conn { return c.Conn }

// TLS returns the connection's TLS state once the handshake is done (nil
// without TLS).
func (c *Conn) TLS() *tls.ConnectionState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

// Refused returns the refusal r stands for, when r is the request the
// connection delivered in place of a refused head; nil otherwise.
func (c *Conn) Refused(r *http.Request) *Refusal {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refusal != nil && r.Header.Get(NonceHeader) == c.nonce {
		return c.refusal
	}
	return nil
}

// Read passes the bytes whose framing is followed: a request head only
// once it is complete and accepted.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if c.tls != nil && !c.handshook {
		if err := c.handshake(); err != nil {
			return 0, err
		}
	}
	for {
		switch {
		case c.ok > 0:
			n := copy(p, c.buf[:c.ok])
			c.buf, c.ok = c.buf[n:], c.ok-n
			if len(c.buf) == 0 {
				c.buf = nil
			}
			return n, nil
		case c.synthetic != nil:
			n := copy(p, c.synthetic)
			if c.synthetic = c.synthetic[n:]; len(c.synthetic) == 0 {
				c.synthetic, c.eof = nil, true
			}
			return n, nil
		case c.eof:
			return 0, io.EOF
		case c.err != nil:
			return 0, c.err
		case c.timeout != nil:
			err := c.timeout
			c.timeout = nil
			return 0, err
		}
		if len(c.buf) == 0 {
			// Straight into p; what may not pass yet is kept.
			n, err := c.Conn.Read(p)
			pass, ref, ferr := c.f.feed(p[:n])
			if pass == n && ref == nil && ferr == nil {
				return n, err
			}
			c.keep(p[pass:n], ref, ferr)
			c.readErr(err)
			if pass > 0 {
				return pass, nil
			}
			continue
		}
		if c.rbuf == nil {
			c.rbuf = make([]byte, 4096)
		}
		n, err := c.Conn.Read(c.rbuf)
		c.buf = append(c.buf, c.rbuf[:n]...)
		pass, ref, ferr := c.f.feed(c.buf)
		c.ok = pass
		c.keep(nil, ref, ferr)
		c.readErr(err)
	}
}

// keep holds rest (bytes not yet passed, after the head of b), or drops
// what follows a refusal or a framing error.
func (c *Conn) keep(rest []byte, ref *Refusal, ferr error) {
	switch {
	case ref != nil:
		c.buf = c.buf[:c.ok]
		c.refuse(ref)
	case ferr != nil:
		c.buf = c.buf[:c.ok]
		c.err = ferr
	case rest != nil:
		c.buf = append(c.buf[:0], rest...)
	}
}

func (c *Conn) readErr(err error) {
	if err == nil || c.err != nil || c.eof || c.synthetic != nil {
		return
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		c.timeout = err
		return
	}
	c.err = err
}

func (c *Conn) refuse(ref *Refusal) {
	var b [12]byte
	rand.Read(b[:])
	nonce := hex.EncodeToString(b[:])
	c.mu.Lock()
	c.refusal, c.nonce = ref, nonce
	c.mu.Unlock()
	c.synthetic = []byte("GET / HTTP/1.1\r\nHost: refused.invalid\r\nConnection: close\r\n" + NonceHeader + ": " + nonce + "\r\n\r\n")
}

// handshake runs the TLS handshake under the deadline the server set; a
// plain HTTP request gets the answer Go's server gives it.
func (c *Conn) handshake() error {
	c.handshook = true
	if err := c.tls.Handshake(); err != nil {
		var re tls.RecordHeaderError
		if errors.As(err, &re) && re.Conn != nil && looksLikeHTTP(re.RecordHeader[:]) {
			io.WriteString(re.Conn, "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
			re.Conn.Close()
		}
		if c.log != nil {
			c.log.Debug("TLS handshake failed", "remote", c.RemoteAddr().String(), "err", err)
		}
		c.eof = true // no reply: the server ends the connection
		return io.EOF
	}
	st := c.tls.ConnectionState()
	c.mu.Lock()
	c.state = &st
	c.mu.Unlock()
	return nil
}

func looksLikeHTTP(hdr []byte) bool {
	switch string(hdr) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO":
		return true
	}
	return false
}

type ctxKey struct{}

// ConnContext is an http.Server ConnContext that makes the guarded
// connection available to handlers (FromContext).
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if fc, ok := c.(*Conn); ok {
		return context.WithValue(ctx, ctxKey{}, fc)
	}
	return ctx
}

// FromContext returns the guarded connection of a request, nil if none.
func FromContext(ctx context.Context) *Conn {
	fc, _ := ctx.Value(ctxKey{}).(*Conn)
	return fc
}
