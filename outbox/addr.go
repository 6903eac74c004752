package outbox

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
)

// Permit is what the partner agreement allows for one delivery, decided
// afresh at every attempt (Dispatcher.Authorize): the delivery may connect
// to public unicast addresses, and to non-public ones only inside Private.
type Permit struct {
	// Private are the non-public networks the operator listed explicitly
	// for this delivery's URL.
	Private []netip.Prefix
}

// RefusedError is a delivery refused by the partner agreement or by the
// address check. It is not retried: the delivery is given up at once.
type RefusedError struct{ Reason string }

func (e *RefusedError) Error() string { return "refused: " + e.Reason }

// special are the IANA special-purpose ranges that are not public unicast
// (RFC 6890 and its updates), with the reason a delivery to them is refused.
var special = []struct {
	prefix netip.Prefix
	why    string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "\"this network\" (0.0.0.0/8)"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private (RFC 1918)"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared address space / CGNAT (RFC 6598)"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private (RFC 1918)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments (192.0.0.0/24)"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation (TEST-NET-1)"},
	{netip.MustParsePrefix("192.88.99.0/24"), "6to4 relay anycast (deprecated)"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private (RFC 1918)"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking (RFC 2544)"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation (TEST-NET-2)"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation (TEST-NET-3)"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved or broadcast (240.0.0.0/4)"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local-use NAT64 (RFC 8215)"},
	{netip.MustParsePrefix("100::/64"), "discard-only (RFC 6666)"},
	{netip.MustParsePrefix("2001::/32"), "Teredo (RFC 4380)"},
	{netip.MustParsePrefix("2001::/23"), "IETF protocol assignments (2001::/23)"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation (RFC 3849)"},
	{netip.MustParsePrefix("3fff::/20"), "documentation (RFC 9637)"},
	{netip.MustParsePrefix("5f00::/16"), "SRv6 SIDs (RFC 9602)"},
	{netip.MustParsePrefix("fc00::/7"), "unique local (private, RFC 4193)"},
	{netip.MustParsePrefix("fec0::/10"), "site-local (deprecated)"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
	global6   = netip.MustParsePrefix("2000::/3")
)

// NonPublic says why an address is not a public unicast address, or ""
// when it is one. IPv4-mapped IPv6 addresses are judged as the IPv4
// address they carry, and so are the IPv4 addresses embedded in NAT64
// (64:ff9b::/96) and 6to4 (2002::/16) addresses.
func NonPublic(a netip.Addr) string {
	if !a.IsValid() {
		return "not an IP address"
	}
	a = a.WithZone("")
	if a.Is4In6() {
		if why := NonPublic(a.Unmap()); why != "" {
			return "IPv4-mapped " + why
		}
		return ""
	}
	if a.Is6() {
		b := a.As16()
		switch {
		case nat64.Contains(a):
			if why := NonPublic(netip.AddrFrom4([4]byte(b[12:16]))); why != "" {
				return "NAT64 of a " + why + " address"
			}
			return ""
		case sixToFour.Contains(a):
			if why := NonPublic(netip.AddrFrom4([4]byte(b[2:6]))); why != "" {
				return "6to4 of a " + why + " address"
			}
			return ""
		}
	}
	for _, s := range special {
		if s.prefix.Contains(a) {
			return s.why
		}
	}
	if a.Is6() && !global6.Contains(a) {
		return "not IPv6 global unicast (outside 2000::/3)"
	}
	return ""
}

// refusal says why the permit does not allow connecting to a ("" when it
// does).
func (p Permit) refusal(a netip.Addr) string {
	a = a.WithZone("").Unmap()
	for _, n := range p.Private {
		if n.Contains(a) {
			return ""
		}
	}
	return NonPublic(a)
}

// control is the net.Dialer Control function: it checks the address the
// socket is about to connect to, after every resolution.
func (p Permit) control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &RefusedError{Reason: fmt.Sprintf("cannot check the address %q", address)}
	}
	if why := p.refusal(ap.Addr()); why != "" {
		return &RefusedError{Reason: fmt.Sprintf("address %s is %s and not listed for this partner", ap.Addr(), why)}
	}
	return nil
}

type permitKey struct{}

func withPermit(ctx context.Context, p Permit) context.Context {
	return context.WithValue(ctx, permitKey{}, p)
}

func (d *Dispatcher) lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	if d.LookupNetIP != nil {
		return d.LookupNetIP(ctx, host)
	}
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// dialContext is the transport's dialer: it resolves the host itself,
// skips the addresses the delivery's Permit does not allow, and connects to
// an allowed one with a Control function that checks the address once more
// at the socket. When every address is refused the error is a
// RefusedError.
func (d *Dispatcher) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	permit, _ := ctx.Value(permitKey{}).(Permit) // none: public addresses only
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("port %q: %w", portText, err)
	}
	var addrs []netip.Addr
	literal := false
	if a, err := netip.ParseAddr(host); err == nil {
		addrs, literal = []netip.Addr{a}, true
	} else if addrs, err = d.lookup(ctx, host); err != nil {
		return nil, err
	}
	var refused []string
	var lastErr error
	for _, a := range addrs {
		if why := permit.refusal(a); why != "" {
			refused = append(refused, a.String()+" ("+why+")")
			continue
		}
		dialer := &net.Dialer{Control: permit.control}
		c, err := dialer.DialContext(ctx, network, netip.AddrPortFrom(a.WithZone(""), uint16(port)).String())
		if err == nil {
			return c, nil
		}
		lastErr = err
	}
	if lastErr != nil {
		return nil, lastErr
	}
	if len(refused) == 0 {
		return nil, fmt.Errorf("%s has no address", host)
	}
	if literal {
		return nil, &RefusedError{Reason: fmt.Sprintf("address %s is not public and not listed for this partner", refused[0])}
	}
	return nil, &RefusedError{Reason: fmt.Sprintf("%s resolves only to addresses not allowed for this partner: %s", host, strings.Join(refused, ", "))}
}
