// Package netguard keeps webhook deliveries away from internal networks
// (SSRF prevention). CheckURL refuses bad webhook URLs up front; the dialer
// hook of Transport checks every address actually dialed, after DNS
// resolution, so a hostname that resolves (or rebinds) to an internal
// address is refused too.
package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"code.dny.dev/ssrf"
)

// ErrBlocked is wrapped by every refusal of this package.
var ErrBlocked = errors.New("netguard: address not allowed")

// Policy says which destinations are allowed. The zero Policy is the
// production one: public addresses over HTTPS only.
type Policy struct {
	// AllowLoopback permits loopback addresses (127.0.0.0/8, ::1,
	// "localhost"), over plain HTTP too, for local development.
	AllowLoopback bool
	// AllowHosts, if not empty, are the only hosts a URL may name, and
	// DenyHosts hosts it may not; a host in both is denied. Each entry is
	// a host name or IP address, or "*.example.com" for every name under
	// example.com (not example.com itself). Names compare without case or
	// a trailing dot, addresses in their canonical form.
	AllowHosts, DenyHosts []string
	// Proxy, if set, is the HTTP proxy every request goes through, such as
	// smokescreen. The proxy then dials the destination, so the check of
	// the addresses a name resolves to is the proxy's to make: Transport
	// dials only the proxy, and Guard still checks every request's URL.
	Proxy *url.URL
}

// guardian decides which addresses are public. Its lists follow the IANA
// special-purpose registries, and it refuses IPv6 outside global unicast.
// Only its address check is used: webhooks may be on any port.
var guardian = ssrf.New()

// Well-known cloud metadata addresses, named in errors: the guardian
// refuses them as link-local and unique local.
var (
	metadataIPv4 = netip.MustParseAddr("169.254.169.254")
	metadataIPv6 = netip.MustParseAddr("fd00:ec2::254")
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
	if err := p.checkURL(u); err != nil {
		return nil, err
	}
	return u, nil
}

// checkURL is CheckURL of a parsed URL.
func (p Policy) checkURL(u *url.URL) error {
	raw := u.Redacted()
	if u.User != nil {
		// Credentials in a webhook URL would leak into logs, and
		// "https://good.example@evil.example" misleads readers.
		return fmt.Errorf("%w: URL has userinfo", ErrBlocked)
	}
	host := u.Hostname()
	if host == "" {
		return fmt.Errorf("%w: URL %q has no host", ErrBlocked, raw)
	}
	if strings.IndexFunc(host, func(r rune) bool { return r >= utf8.RuneSelf }) >= 0 {
		// net/http maps a non-ASCII host with IDNA before dialing, so
		// "127。0。0。1" would reach 127.0.0.1 unseen by the checks below.
		return fmt.Errorf("%w: host %q is not ASCII; use its xn-- (punycode) form", ErrBlocked, host)
	}
	if err := p.CheckHost(host); err != nil {
		return err
	}
	loopback, err := isLoopbackHost(host)
	if err != nil {
		return err
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && p.AllowLoopback && loopback:
	default:
		return fmt.Errorf("%w: scheme %q to host %q", ErrBlocked, u.Scheme, host)
	}
	if loopback && !p.AllowLoopback {
		return fmt.Errorf("%w: %s is loopback", ErrBlocked, host)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if err := p.CheckIP(ip); err != nil {
			return err
		}
	}
	return nil
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

// CheckIP refuses addresses a webhook must not reach: every address the
// IANA special-purpose registries do not mark global (private, loopback
// unless p.AllowLoopback, link-local, unspecified, multicast, CGNAT,
// documentation, ...) and every IPv6 address outside global unicast, which
// takes in NAT64. IPv4-mapped addresses are checked as the IPv4 address
// they are dialed as. Teredo, 6to4 and NAT64 addresses are refused whatever
// IPv4 address they embed, in development too: a gateway or tunnel, not
// this host, would answer for an embedded loopback address.
func (p Policy) CheckIP(ip netip.Addr) error {
	if !ip.IsValid() {
		return fmt.Errorf("%w: invalid IP address", ErrBlocked)
	}
	ip = ip.Unmap().WithZone("")
	if ip.IsLoopback() && p.AllowLoopback {
		return nil
	}
	if err := guardian.SafeAddr(ip); err != nil {
		return fmt.Errorf("%w: %s is %s", ErrBlocked, ip, kind(ip))
	}
	return nil
}

// kind names, for an error message, the kind of an address the guardian
// refuses: its common name, else the refused range it is in.
func kind(ip netip.Addr) string {
	switch {
	case ip.IsLoopback():
		return "loopback"
	case ip == metadataIPv4 || ip == metadataIPv6:
		return "cloud metadata"
	case ip.IsPrivate() && ip.Is4():
		return "private (RFC 1918)"
	case ip.IsPrivate():
		return "unique local"
	case ip.IsLinkLocalUnicast():
		return "link-local"
	case ip.IsUnspecified():
		return "unspecified"
	case ip.IsMulticast():
		return "multicast"
	case ip.Is6() && !ssrf.IPv6GlobalUnicast.Contains(ip):
		return fmt.Sprintf("outside IPv6 global unicast (%s)", ssrf.IPv6GlobalUnicast)
	}
	for _, r := range slices.Concat(ssrf.IPv4DeniedPrefixes, ssrf.IPv6DeniedPrefixes) {
		if r.Contains(ip) {
			return fmt.Sprintf("special-purpose (%s)", r)
		}
	}
	return "not public"
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

// CheckHost refuses a URL host that DenyHosts names, or that AllowHosts,
// if not empty, does not.
func (p Policy) CheckHost(host string) error {
	host = canonicalHost(host)
	if slices.ContainsFunc(p.DenyHosts, func(pattern string) bool { return hostMatches(pattern, host) }) {
		return fmt.Errorf("%w: host %s is denied", ErrBlocked, host)
	}
	if len(p.AllowHosts) > 0 && !slices.ContainsFunc(p.AllowHosts, func(pattern string) bool { return hostMatches(pattern, host) }) {
		return fmt.Errorf("%w: host %s is not allowed", ErrBlocked, host)
	}
	return nil
}

// CheckHostPattern refuses an entry of AllowHosts or DenyHosts that is not
// a host name, an IP address or "*." and a host name.
func CheckHostPattern(pattern string) error {
	name, wild := strings.CutPrefix(pattern, "*.")
	if _, err := netip.ParseAddr(name); err == nil && !wild {
		return nil
	}
	for _, label := range strings.Split(strings.TrimSuffix(name, "."), ".") {
		if label == "" || strings.Trim(strings.ToLower(label), "abcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
			return fmt.Errorf("host pattern %q is not a host name, an IP address or *. and a host name", pattern)
		}
	}
	return nil
}

// canonicalHost is host as the lists compare it: an IP address in its
// canonical form, a name in lower case without a trailing dot.
func canonicalHost(host string) string {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.String()
	}
	return strings.TrimSuffix(strings.ToLower(host), ".")
}

// hostMatches reports whether the canonical host matches pattern.
func hostMatches(pattern, host string) bool {
	if name, ok := strings.CutPrefix(pattern, "*."); ok {
		suffix := "." + canonicalHost(name)
		return len(host) > len(suffix) && strings.HasSuffix(host, suffix)
	}
	return canonicalHost(pattern) == host
}

// Guard returns rt checking each request's URL with p first (CheckURL),
// so that a request p refuses is never handed to rt. It is the check that
// holds whatever rt dials, and through a proxy.
func (p Policy) Guard(rt http.RoundTripper) http.RoundTripper {
	return guard{p: p, next: rt}
}

// guard is the RoundTripper Guard returns.
type guard struct {
	p    Policy
	next http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (g guard) RoundTrip(r *http.Request) (*http.Response, error) {
	if err := g.p.checkURL(r.URL); err != nil {
		if r.Body != nil {
			_ = r.Body.Close()
		}
		return nil, err
	}
	return g.next.RoundTrip(r)
}

// Transport returns a clone of http.DefaultTransport that dials only
// hosts and addresses p allows. Without p.Proxy it uses no proxy, for a
// proxy would make the connection to the destination itself, unchecked;
// with one it dials only the proxy, which must check the addresses.
func (p Policy) Transport() *http.Transport {
	return p.transport(&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second})
}

// transport is Transport dialing through d, whose Control becomes p's
// check. A Control already on d runs after the check, only on addresses it
// allows: tests set it, and d's Resolver, to see what the check lets
// through without dialing it.
func (p Policy) transport(d *net.Dialer) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	if p.Proxy != nil {
		t.Proxy = http.ProxyURL(p.Proxy)
		t.DialContext = d.DialContext
		return t
	}
	t.Proxy = nil
	next := d.Control
	d.Control = func(network, address string, c syscall.RawConn) error {
		if err := p.DialControl(network, address, c); err != nil || next == nil {
			return err
		}
		return next(network, address, c)
	}
	t.DialContext = func(ctx context.Context, network, address string) (net.Conn, error) {
		// The name, before it resolves: the lists name hosts.
		if host, _, err := net.SplitHostPort(address); err == nil {
			if err := p.CheckHost(host); err != nil {
				return nil, err
			}
		}
		return d.DialContext(ctx, network, address)
	}
	return t
}
