package partners

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// URLPattern is one entry of as2.async_mdn_urls: where a partner's
// asynchronous MDNs may be posted. The syntax is scheme://host[:port][/path]:
//
//   - scheme is http or https (case-insensitive) and must equal the URL's.
//   - host is a DNS name (ASCII letters, digits and '-', compared
//     case-insensitively, one trailing dot ignored), an IPv4 address or an
//     IPv6 address in brackets (no zone). A DNS name may start with "*.",
//     which stands for exactly one label: "*.acme.example" matches
//     "as2.acme.example", not "acme.example" nor "a.b.acme.example". The
//     rest of a wildcard name needs at least two labels. No other
//     wildcards are allowed in the host. An IP host matches only that
//     address (IPv4-mapped IPv6 spellings of an IPv4 address included).
//   - port is a decimal number; without it, the scheme's default (80 for
//     http, 443 for https). The URL's port, explicit or default, must be
//     equal: "https://h/" and "https://h:443/" are the same.
//   - path (default "/") is a glob over the URL's escaped path, compared
//     case-sensitively: '*' matches any run of characters other than '/'
//     (so "/as2/*" matches "/as2/mdn" but neither "/as2/x/y" nor "/as2");
//     every other character stands for itself. "**" is refused.
//
// A pattern has no user information, query or fragment. A URL's query is
// not part of the match; a URL with user information, a %-escaped host or a
// "." or ".." path segment matches no pattern.
type URLPattern struct {
	// Raw is the pattern as written.
	Raw    string
	Scheme string
	// Host is the lower-case DNS name without its wildcard label ("" when
	// Addr is set); Wildcard says the pattern started with "*.".
	Host     string
	Wildcard bool
	// Addr is the IP address of an IP host (unmapped).
	Addr netip.Addr
	Port int
	Path string
}

func defaultPort(scheme string) int {
	if scheme == "https" {
		return 443
	}
	return 80
}

// ParseURLPattern parses one async MDN URL pattern (see URLPattern).
func ParseURLPattern(s string) (*URLPattern, error) {
	if s == "" {
		return nil, errors.New("empty pattern")
	}
	if len(s) > 2048 {
		return nil, errors.New("pattern is longer than 2048 characters")
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= 0x20 || c >= 0x7f {
			return nil, fmt.Errorf("pattern %q has a space, control or non-ASCII character", s)
		}
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return nil, fmt.Errorf("pattern %q is not scheme://host[:port][/path]", s)
	}
	p := &URLPattern{Raw: s, Scheme: strings.ToLower(scheme)}
	if p.Scheme != "http" && p.Scheme != "https" {
		return nil, fmt.Errorf("pattern %q: scheme %q is not http or https", s, scheme)
	}
	authority, path := rest, "/"
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		authority, path = rest[:i], rest[i:]
	}
	if strings.ContainsAny(authority, "@%?#") {
		return nil, fmt.Errorf("pattern %q: the host part has user information, a %%-escape, a query or a fragment", s)
	}
	host, port := authority, ""
	if strings.HasPrefix(authority, "[") {
		end := strings.IndexByte(authority, ']')
		if end < 0 {
			return nil, fmt.Errorf("pattern %q: unterminated IPv6 address", s)
		}
		host, port = authority[1:end], authority[end+1:]
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return nil, fmt.Errorf("pattern %q: %q is not an IPv6 address without zone", s, host)
		}
		p.Addr = a.Unmap()
		if port != "" {
			if port[0] != ':' {
				return nil, fmt.Errorf("pattern %q: unexpected %q after the IPv6 address", s, port)
			}
			port = port[1:]
			if port == "" {
				return nil, fmt.Errorf("pattern %q: empty port", s)
			}
		}
	} else {
		if i := strings.LastIndexByte(authority, ':'); i >= 0 {
			host, port = authority[:i], authority[i+1:]
			if port == "" {
				return nil, fmt.Errorf("pattern %q: empty port", s)
			}
		}
		if a, err := netip.ParseAddr(host); err == nil && a.Is4() {
			p.Addr = a
		} else {
			name := strings.ToLower(host)
			if strings.HasPrefix(name, "*.") {
				p.Wildcard, name = true, name[2:]
			}
			name = strings.TrimSuffix(name, ".")
			if err := checkDNSName(name); err != nil {
				return nil, fmt.Errorf("pattern %q: host: %w", s, err)
			}
			if p.Wildcard && !strings.Contains(name, ".") {
				return nil, fmt.Errorf("pattern %q: a wildcard needs at least two labels after \"*.\"", s)
			}
			p.Host = name
		}
	}
	p.Port = defaultPort(p.Scheme)
	if port != "" {
		n, err := parsePort(port)
		if err != nil {
			return nil, fmt.Errorf("pattern %q: %w", s, err)
		}
		p.Port = n
	}
	if strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("pattern %q: a pattern has no query or fragment", s)
	}
	if strings.Contains(path, "**") {
		return nil, fmt.Errorf("pattern %q: \"**\" is not supported; '*' matches within one path segment", s)
	}
	p.Path = path
	return p, nil
}

func parsePort(s string) (int, error) {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("port %q is not a number", s)
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("port %q is not in 1-65535", s)
	}
	return n, nil
}

// checkDNSName accepts lower-case LDH names: labels of 1-63 letters,
// digits and '-' (not at either end), 253 characters at most, and a last
// label that is not all digits (so that "127.1" is no name).
func checkDNSName(name string) error {
	if name == "" {
		return errors.New("empty host")
	}
	if len(name) > 253 {
		return fmt.Errorf("%q is longer than 253 characters", name)
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 {
			return fmt.Errorf("%q has an empty label or one longer than 63 characters", name)
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return fmt.Errorf("%q has a label starting or ending with '-'", name)
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return fmt.Errorf("%q is not a DNS name of letters, digits and '-' (IDNs in their xn-- form)", name)
			}
		}
	}
	last := labels[len(labels)-1]
	if strings.Trim(last, "0123456789") == "" {
		return fmt.Errorf("%q is neither a DNS name nor an IP address", name)
	}
	return nil
}

// String is the pattern as written.
func (p *URLPattern) String() string { return p.Raw }

// Match reports whether the URL is one the pattern allows.
func (p *URLPattern) Match(u *url.URL) bool {
	if u == nil || u.Opaque != "" || u.User != nil || u.Host == "" || strings.ToLower(u.Scheme) != p.Scheme {
		return false
	}
	if strings.Contains(u.Host, "%") {
		return false
	}
	port := defaultPort(p.Scheme)
	if s := u.Port(); s != "" {
		n, err := parsePort(s)
		if err != nil {
			return false
		}
		port = n
	} else if strings.HasSuffix(u.Host, ":") {
		return false
	}
	if port != p.Port {
		return false
	}
	host := strings.ToLower(u.Hostname())
	if p.Addr.IsValid() {
		a, err := netip.ParseAddr(host)
		if err != nil || a.Zone() != "" || a.Unmap() != p.Addr {
			return false
		}
	} else {
		host = strings.TrimSuffix(host, ".")
		if checkDNSName(host) != nil {
			return false
		}
		if p.Wildcard {
			label, ok := strings.CutSuffix(host, "."+p.Host)
			if !ok || label == "" || strings.Contains(label, ".") {
				return false
			}
		} else if host != p.Host {
			return false
		}
	}
	for _, seg := range strings.Split(u.Path, "/") {
		if seg == "." || seg == ".." {
			return false
		}
	}
	path := u.EscapedPath()
	if path == "" {
		path = "/"
	}
	return globMatch(p.Path, path)
}

// globMatch matches s against a pattern whose '*' stands for any run of
// characters other than '/'.
func globMatch(pattern, s string) bool {
	// Iterative matching with one backtracking point per star: a star is
	// retried with one more character only while that character is not '/'.
	pi, si := 0, 0
	star, mark := -1, 0
	for si < len(s) {
		switch {
		case pi < len(pattern) && pattern[pi] == '*':
			star, mark = pi, si
			pi++
		case pi < len(pattern) && pattern[pi] == s[si]:
			pi++
			si++
		case star >= 0 && s[mark] != '/':
			mark++
			si = mark
			pi = star + 1
		default:
			return false
		}
	}
	for pi < len(pattern) && pattern[pi] == '*' {
		pi++
	}
	return pi == len(pattern)
}

// parsePrivateNetwork reads one async_mdn_private_networks entry: a CIDR
// prefix without host bits, or a single address.
func parsePrivateNetwork(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("%q is not an address or a CIDR prefix", s)
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a CIDR prefix", s)
	}
	if p != p.Masked() {
		return netip.Prefix{}, fmt.Errorf("%q has host bits set (did you mean %s?)", s, p.Masked())
	}
	if p.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("%q: write IPv4 networks in IPv4 form", s)
	}
	return p, nil
}

// AsyncMDNPolicy is what a partner agreement allows for one async MDN URL.
type AsyncMDNPolicy struct {
	// Listed is true when the partner has an async_mdn_urls list.
	Listed bool
	// Pattern is the pattern the URL matched (nil: none, or no list).
	Pattern *URLPattern
	// Private are the non-public addresses the delivery may connect to: the
	// address of a matched IP pattern, and async_mdn_private_networks for a
	// matched name pattern. Every other address must be public.
	Private []netip.Prefix
}

// Allowed reports whether the URL may be used: it matched the list, or the
// partner has none (then only public addresses, and only for authenticated
// messages — the caller decides that).
func (p AsyncMDNPolicy) Allowed() bool { return !p.Listed || p.Pattern != nil }

// AsyncMDN applies the partner's async_mdn_urls and
// async_mdn_private_networks to a Receipt-Delivery-Option URL.
func (a *AS2) AsyncMDN(u *url.URL) AsyncMDNPolicy {
	if len(a.asyncPatterns) == 0 {
		return AsyncMDNPolicy{}
	}
	pol := AsyncMDNPolicy{Listed: true}
	for _, p := range a.asyncPatterns {
		if p.Match(u) {
			pol.Pattern = p
			break
		}
	}
	if pol.Pattern == nil {
		return pol
	}
	if pol.Pattern.Addr.IsValid() {
		pol.Private = []netip.Prefix{netip.PrefixFrom(pol.Pattern.Addr, pol.Pattern.Addr.BitLen())}
	} else {
		pol.Private = append([]netip.Prefix(nil), a.privateNets...)
	}
	return pol
}
