package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Sessions: a browser cannot send the admin listener's bearer token, so the
// console's login form takes the token once and sets a session cookie
// (HttpOnly, SameSite=Strict, Secure on TLS). Without a token (loopback, or
// mTLS where the connection itself is the credential) a session is created
// on the first page, only to carry the CSRF token.

const (
	cookieName  = "gateway_console"
	sessionTTL  = 8 * time.Hour
	maxSessions = 256
)

type session struct {
	who     string
	expires time.Time
}

type sessions struct {
	mu     sync.Mutex
	byID   map[string]session
	secret [32]byte
}

func newSessions() *sessions {
	s := &sessions{byID: map[string]session{}}
	if _, err := rand.Read(s.secret[:]); err != nil {
		panic("console: no randomness: " + err.Error())
	}
	return s
}

// create starts a session and returns its id. The oldest sessions go when
// there are too many, so memory stays bounded whoever logs in.
func (s *sessions) create(who string, now time.Time) string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("console: no randomness: " + err.Error())
	}
	id := hex.EncodeToString(b[:])
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range s.byID {
		if !now.Before(v.expires) {
			delete(s.byID, k)
		}
	}
	for len(s.byID) >= maxSessions {
		var oldest string
		var t time.Time
		for k, v := range s.byID {
			if oldest == "" || v.expires.Before(t) {
				oldest, t = k, v.expires
			}
		}
		delete(s.byID, oldest)
	}
	s.byID[id] = session{who: who, expires: now.Add(sessionTTL)}
	return id
}

func (s *sessions) get(id string, now time.Time) (session, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.byID[id]
	if !ok || !now.Before(v.expires) {
		delete(s.byID, id)
		return session{}, false
	}
	return v, true
}

func (s *sessions) drop(id string) {
	s.mu.Lock()
	delete(s.byID, id)
	s.mu.Unlock()
}

// csrf is the session's CSRF token: an HMAC of its id under the process
// secret, so that it is per session and needs no storage.
func (s *sessions) csrf(id string) string {
	m := hmac.New(sha256.New, s.secret[:])
	m.Write([]byte("csrf\x00" + id))
	return hex.EncodeToString(m.Sum(nil))
}

func (s *sessions) csrfOK(id, got string) bool {
	want := s.csrf(id)
	return len(got) == len(want) && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// caller is who made a request, as far as the console knows.
type caller struct {
	who string
	// sessionID is set for cookie sessions (the CSRF token derives from it).
	sessionID string
	// bearer: authenticated by the Authorization header (not a browser).
	bearer bool
}

func (c *Console) tokenOK(got string) bool {
	sum := sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare(sum[:], c.tokenSum[:]) == 1
}

// connectionWho names the credential of the connection itself: the client
// certificate's subject under mTLS, else the remote address.
func connectionWho(r *http.Request) string {
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		return "client certificate " + r.TLS.PeerCertificates[0].Subject.String()
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "unauthenticated admin listener client " + host
}

// authenticate returns the caller of an authenticated request. With an
// admin token, the bearer header or a session made by logging in is
// needed; without one the admin listener's own rule applies (loopback, or
// a verified client certificate), and a session is made on the way. A
// bearer token counts against the source's wrong tokens like the login
// form's: wait > 0 when the source has used them up (its token was not
// compared).
func (c *Console) authenticate(w http.ResponseWriter, r *http.Request) (who caller, ok bool, wait time.Duration) {
	now := c.now()
	if ck, err := r.Cookie(cookieName); err == nil {
		if s, ok := c.sessions.get(ck.Value, now); ok {
			return caller{who: s.who, sessionID: ck.Value}, true, 0
		}
	}
	if c.tokenSum != ([32]byte{}) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok {
			return caller{}, false, 0
		}
		src := SourceOf(r)
		if wait, blocked := c.throttle.Blocked(src, now); blocked {
			return caller{}, false, wait
		}
		if !c.tokenOK(got) {
			c.throttle.Failed(src, now)
			c.log.Warn("console: bearer token refused", "remote", r.RemoteAddr)
			return caller{}, false, 0
		}
		c.throttle.Succeeded(src)
		return caller{who: tokenWho(r), bearer: true}, true, 0
	}
	name := connectionWho(r)
	id := c.sessions.create(name, now)
	c.setCookie(w, r, id, int(sessionTTL/time.Second))
	return caller{who: name, sessionID: id}, true, 0
}

// tokenWho names a caller authenticated by the admin token, with its client
// certificate when there is one.
func tokenWho(r *http.Request) string {
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		return "admin token, client certificate " + r.TLS.PeerCertificates[0].Subject.String()
	}
	return "admin token"
}

func (c *Console) setCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: value, Path: "/console/", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
}
