// Package netguard keeps webhook deliveries away from internal networks
// (SSRF prevention). CheckURL refuses bad webhook URLs up front; the dialer
// hook of Transport checks every address actually dialed, after DNS
// resolution, so a hostname that resolves (or rebinds) to an internal
// address is refused too.
package netguard

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

// ErrBlocked is wrapped by every refusal of this package.
var ErrBlocked = errors.New("netguard: address not allowed")

// Policy says which destinations are allowed. The zero Policy is the
// production one: public addresses over HTTPS only.
type Policy struct {
	// AllowLoopback permits loopback addresses (127.0.0.0/8, ::1,
	// "localhost"), over plain HTTP too, for local development.
	AllowLoopback bool
}

// blockedRange is a range of addresses no webhook may reach.
type blockedRange struct {
	prefix netip.Prefix
	what   string
}

// blockedRanges lists the refused ranges, loopback aside. Where ranges
// nest, the narrower comes first so errors name it.
var blockedRanges = []blockedRange{
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified (\"this network\")"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private (RFC 1918)"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared address space (CGNAT)"},
	{netip.MustParsePrefix("169.254.169.254/32"), "cloud metadata"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private (RFC 1918)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private (RFC 1918)"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("255.255.255.255/32"), "broadcast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	// Deprecated IPv4-compatible addresses (::a.b.c.d); nothing public
	// lives there.
	{netip.MustParsePrefix("::/96"), "IPv4-compatible"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "cloud metadata"},
	{netip.MustParsePrefix("fc00::/7"), "unique local"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("fec0::/10"), "site-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

// Prefixes that embed an IPv4 address a gateway may forward to: NAT64
// (RFC 6052) in the last 32 bits, 6to4 (RFC 3056) in bits 16-47.
var (
	nat64Prefix = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour   = netip.MustParsePrefix("2002::/16")
)

// CheckURL parses a webhook URL and refuses it unless it is https, or
// http to a loopback host when p.AllowLoopback; has an ASCII host and no
// userinfo; and, if the host is an IP literal, CheckIP allows it. Host
// names are resolved only when dialed, where Transport checks them.
func (p Policy) CheckURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBlocked, err)
	}
	if u.User != nil {
		// Credentials in a webhook URL would leak into logs, and
		// "https://good.example@evil.example" misleads readers.
		return nil, fmt.Errorf("%w: URL has userinfo", ErrBlocked)
	}
	host := u.Hostname()
	if host == "" {
		return nil, fmt.Errorf("%w: URL %q has no host", ErrBlocked, raw)
	}
	if strings.IndexFunc(host, func(r rune) bool { return r >= utf8.RuneSelf }) >= 0 {
		// net/http maps a non-ASCII host with IDNA before dialing, so
		// "127。0。0。1" would reach 127.0.0.1 unseen by the checks below.
		return nil, fmt.Errorf("%w: host %q is not ASCII; use its xn-- (punycode) form", ErrBlocked, host)
	}
	loopback, err := isLoopbackHost(host)
	if err != nil {
		return nil, err
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && p.AllowLoopback && loopback:
	default:
		return nil, fmt.Errorf("%w: scheme %q to host %q", ErrBlocked, u.Scheme, host)
	}
	if loopback && !p.AllowLoopback {
		return nil, fmt.Errorf("%w: %s is loopback", ErrBlocked, host)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if err := p.CheckIP(ip); err != nil {
			return nil, err
		}
	}
	return u, nil
}

// isLoopbackHost reports whether a URL host is a loopback IP literal or a
// name under "localhost", which RFC 6761 reserves for loopback. It refuses
// numeric hosts that are not canonical IP literals ("2130706433",
// "0x7f.1"): some resolvers read them as IPv4 addresses.
func isLoopbackHost(host string) (bool, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.Unmap().IsLoopback(), nil
	}
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	labels := strings.Split(name, ".")
	if isNumericLabel(labels[len(labels)-1]) {
		return false, fmt.Errorf("%w: %q is not a canonical IP address", ErrBlocked, host)
	}
	return name == "localhost" || strings.HasSuffix(name, ".localhost"), nil
}

// isNumericLabel reports whether a host label is a number in the forms the
// WHATWG URL standard's IPv4 parser accepts: decimal, octal or 0x-hex.
func isNumericLabel(label string) bool {
	digits, isHex := strings.CutPrefix(label, "0x")
	if isHex {
		return strings.Trim(digits, "0123456789abcdef") == ""
	}
	return label != "" && strings.Trim(label, "0123456789") == ""
}

// CheckIP refuses addresses a webhook must not reach: loopback (unless
// p.AllowLoopback), private, unique-local, link-local, cloud metadata,
// unspecified, multicast, broadcast, CGNAT and other reserved ranges, also
// when wrapped as IPv4-mapped, NAT64 or 6to4 IPv6 addresses.
func (p Policy) CheckIP(ip netip.Addr) error {
	if !ip.IsValid() {
		return fmt.Errorf("%w: invalid IP address", ErrBlocked)
	}
	ip = ip.Unmap().WithZone("")
	if ip.IsLoopback() {
		if p.AllowLoopback {
			return nil
		}
		return fmt.Errorf("%w: %s is loopback", ErrBlocked, ip)
	}
	for _, r := range blockedRanges {
		if r.prefix.Contains(ip) {
			return fmt.Errorf("%w: %s is %s", ErrBlocked, ip, r.what)
		}
	}
	var embedded netip.Addr
	b := ip.As16()
	switch {
	case nat64Prefix.Contains(ip):
		embedded = netip.AddrFrom4([4]byte(b[12:16]))
	case sixToFour.Contains(ip):
		embedded = netip.AddrFrom4([4]byte(b[2:6]))
	default:
		return nil
	}
	if err := p.CheckIP(embedded); err != nil {
		return fmt.Errorf("%w (embedded in %s)", err, ip)
	}
	return nil
}

// DialControl is a net.Dialer Control function. It runs after DNS
// resolution, on the address about to be dialed, and refuses it unless
// CheckIP allows it: DNS rebinding cannot slip an internal address past it.
func (p Policy) DialControl(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: dialing %s %q: %v", ErrBlocked, network, address, err)
	}
	return p.CheckIP(ap.Addr())
}

// Transport returns a clone of http.DefaultTransport that dials only
// addresses p allows. It uses no proxy: a proxy would make the connection
// to the destination itself, unchecked.
func (p Policy) Transport() *http.Transport {
	return p.transport(&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second})
}

// transport is Transport dialing through d, whose Control becomes p's
// check. A Control already on d runs after the check, only on addresses it
// allows: tests set it, and d's Resolver, to see what the check lets
// through without dialing it.
func (p Policy) transport(d *net.Dialer) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	next := d.Control
	d.Control = func(network, address string, c syscall.RawConn) error {
		if err := p.DialControl(network, address, c); err != nil || next == nil {
			return err
		}
		return next(network, address, c)
	}
	t.DialContext = d.DialContext
	return t
}
