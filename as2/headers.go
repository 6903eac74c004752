package as2

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/edigateway/gateway/internal/cms"
)

// ErrBadRequest is wrapped by header errors that make a request no AS2
// message at all (answered with HTTP 400, no MDN).
var ErrBadRequest = errors.New("as2: not an AS2 request")

// maxMessageIDLength bounds the Message-ID (RFC 5322 line length).
const maxMessageIDLength = 998

// Request is the AS2 transport header set of one inbound message.
type Request struct {
	// From and To are AS2-From and AS2-To with quoting removed (RFC 4130
	// §6.2: a token or a quoted-string).
	From, To string
	// MessageID is the Message-ID as sent (white space trimmed), with or
	// without angle brackets; it is echoed in Original-Message-ID.
	MessageID string
	Subject   string
	Version   string
	// MDN is what the sender asked for in return.
	MDN MDNRequest
}

// MDNRequest is the MDN a sender asked for (RFC 4130 §7.3).
type MDNRequest struct {
	// Requested is true when Disposition-Notification-To is present; To is
	// its value (any non-empty value requests an MDN).
	Requested bool
	To        string
	// Protocols are the signed-receipt-protocol values in order (lower
	// case); ProtocolRequired is true when their importance is "required".
	Protocols        []string
	ProtocolRequired bool
	// MICAlgs are the signed-receipt-micalg values in order, spelled as
	// sent; MICAlgRequired is true when their importance is "required".
	MICAlgs        []string
	MICAlgRequired bool
	// AsyncURL is the Receipt-Delivery-Option: where an asynchronous MDN
	// goes. Empty means a synchronous MDN on the HTTP response.
	AsyncURL string
}

// Signed reports whether a signed MDN was asked for: a signed-receipt-protocol
// naming pkcs7-signature.
func (m MDNRequest) Signed() bool {
	for _, p := range m.Protocols {
		if p == "pkcs7-signature" {
			return true
		}
	}
	return false
}

// Async reports whether the MDN goes to a Receipt-Delivery-Option URL.
func (m MDNRequest) Async() bool { return m.Requested && m.AsyncURL != "" }

// ParseHeaders reads the AS2 headers of a request. AS2-From, AS2-To and
// Message-ID are required; an error wraps ErrBadRequest and says which
// header is missing or why it is unusable.
func ParseHeaders(h http.Header) (*Request, error) {
	var r Request
	var err error
	if r.From, err = headerName(h, "AS2-From"); err != nil {
		return nil, err
	}
	if r.To, err = headerName(h, "AS2-To"); err != nil {
		return nil, err
	}
	id := strings.TrimSpace(h.Get("Message-Id"))
	switch {
	case id == "" || id == "<>":
		return nil, fmt.Errorf("%w: Message-ID header missing or empty", ErrBadRequest)
	case len(id) > maxMessageIDLength:
		return nil, fmt.Errorf("%w: Message-ID longer than %d characters", ErrBadRequest, maxMessageIDLength)
	case hasControl(id):
		return nil, fmt.Errorf("%w: Message-ID contains control characters", ErrBadRequest)
	}
	r.MessageID = id
	r.Subject = clean(h.Get("Subject"))
	r.Version = clean(h.Get("AS2-Version"))

	if to := strings.TrimSpace(h.Get("Disposition-Notification-To")); to != "" {
		r.MDN.Requested = true
		r.MDN.To = clean(to)
	}
	r.MDN.Protocols, r.MDN.ProtocolRequired, r.MDN.MICAlgs, r.MDN.MICAlgRequired = ParseDispositionOptions(h.Get("Disposition-Notification-Options"))
	if rdo := strings.TrimSpace(h.Get("Receipt-Delivery-Option")); rdo != "" && !hasControl(rdo) {
		r.MDN.AsyncURL = rdo
	}
	return &r, nil
}

func headerName(h http.Header, name string) (string, error) {
	v := h.Get(name)
	if strings.TrimSpace(v) == "" {
		return "", fmt.Errorf("%w: %s header missing or empty", ErrBadRequest, name)
	}
	n, err := ParseAS2Name(v)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w", ErrBadRequest, name, err)
	}
	return n, nil
}

// ParseAS2Name reads an AS2-From or AS2-To value (RFC 4130 §6.2): a
// quoted-string, whose quotes and backslash escapes are removed, or a bare
// name. Bare names with inner spaces, which some products send, are
// accepted. The result is 1-128 printable ASCII characters.
func ParseAS2Name(v string) (string, error) {
	v = strings.Trim(v, " \t")
	var name string
	if strings.HasPrefix(v, `"`) {
		var b strings.Builder
		closed := false
		for i := 1; i < len(v); i++ {
			c := v[i]
			if c == '\\' && i+1 < len(v) {
				i++
				b.WriteByte(v[i])
				continue
			}
			if c == '"' {
				if strings.Trim(v[i+1:], " \t") != "" {
					return "", fmt.Errorf("text after the closing quote in %q", v)
				}
				closed = true
				break
			}
			b.WriteByte(c)
		}
		if !closed {
			return "", fmt.Errorf("unterminated quoted-string %q", v)
		}
		name = b.String()
	} else {
		name = v
	}
	if name == "" {
		return "", errors.New("empty name")
	}
	if len(name) > 128 {
		return "", fmt.Errorf("name longer than 128 characters (RFC 4130 §6.2)")
	}
	for i := 0; i < len(name); i++ {
		if name[i] < 0x20 || name[i] > 0x7e {
			return "", fmt.Errorf("name has a character outside printable ASCII (RFC 4130 §6.2)")
		}
	}
	return name, nil
}

// ParseDispositionOptions reads Disposition-Notification-Options (RFC 4130
// §7.3):
//
//	signed-receipt-protocol=optional, pkcs7-signature; signed-receipt-micalg=optional, sha-256, sha1
//
// Parameter names and importance are case-insensitive; values keep their
// order (the sender's preference, honoured left to right) and micalg values
// their spelling. Unknown parameters and malformed pieces are ignored.
func ParseDispositionOptions(v string) (protocols []string, protocolRequired bool, micalgs []string, micalgRequired bool) {
	for _, param := range strings.Split(v, ";") {
		name, val, ok := strings.Cut(param, "=")
		if !ok {
			continue
		}
		name = strings.ToLower(strings.TrimSpace(name))
		items := strings.Split(val, ",")
		importance := strings.ToLower(unquote(items[0]))
		var values []string
		for _, it := range items[1:] {
			if it = unquote(it); it != "" && !hasControl(it) {
				values = append(values, it)
			}
		}
		switch name {
		case "signed-receipt-protocol":
			for _, p := range values {
				protocols = append(protocols, strings.ToLower(p))
			}
			protocolRequired = importance == "required"
		case "signed-receipt-micalg":
			micalgs = append(micalgs, values...)
			micalgRequired = importance == "required"
		}
	}
	return protocols, protocolRequired, micalgs, micalgRequired
}

func unquote(s string) string {
	s = strings.TrimSpace(s)
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = strings.TrimSpace(s[1 : len(s)-1])
	}
	return s
}

// micAlg is a MIC algorithm chosen for an MDN: the digest name of package
// cms and the spelling written into Received-Content-MIC.
type micAlg struct {
	digest  string // cms name, e.g. "sha256"
	spelled string // as the partner asked for it, e.g. "sha256" or "sha-256"
}

// chooseMICAlg picks the first signed-receipt-micalg the gateway supports
// and allow permits. ok is false when none qualifies.
func chooseMICAlg(algs []string, allow func(digest string) bool) (micAlg, bool) {
	for _, a := range algs {
		d, err := cms.NormalizeDigest(a)
		if err != nil || !allow(d) {
			continue
		}
		return micAlg{digest: d, spelled: a}, true
	}
	return micAlg{}, false
}

// asyncURL validates a Receipt-Delivery-Option for the dispatcher: an
// absolute http or https URL.
func asyncURL(v string) (string, error) {
	u, err := url.Parse(v)
	if err != nil {
		return "", fmt.Errorf("Receipt-Delivery-Option is not a URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return "", fmt.Errorf("Receipt-Delivery-Option %q is not an http(s) URL", redactURL(v))
	}
	return u.String(), nil
}

// redactURL keeps scheme, host and path of a URL for logs and texts.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User = nil
	u.RawQuery = ""
	u.Fragment = ""
	return u.String()
}

func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 && s[i] != '\t' || s[i] == 0x7f {
			return true
		}
	}
	return false
}

// clean trims a header value and drops control characters.
func clean(s string) string {
	s = strings.TrimSpace(s)
	if !hasControl(s) {
		return s
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, s)
}
