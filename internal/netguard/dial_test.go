package netguard

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// dialDNS is an in-memory DNS server behind one resolver connection: a
// name in table resolves to its addresses, any other name does not exist.
// The Go resolver speaks to a net.Conn that is not a PacketConn with TCP
// framing, so each message has a two-byte length prefix.
type dialDNS struct {
	table   map[string][]netip.Addr
	in, out bytes.Buffer
}

func (c *dialDNS) Write(b []byte) (int, error) {
	c.in.Write(b)
	for c.in.Len() >= 2 {
		n := int(binary.BigEndian.Uint16(c.in.Bytes()))
		if c.in.Len() < 2+n {
			break
		}
		resp, err := c.answer(c.in.Next(2 + n)[2:])
		if err != nil {
			return 0, err
		}
		_ = binary.Write(&c.out, binary.BigEndian, uint16(len(resp)))
		c.out.Write(resp)
	}
	return len(b), nil
}

func (c *dialDNS) Read(b []byte) (int, error) {
	if c.out.Len() == 0 {
		return 0, io.EOF
	}
	return c.out.Read(b)
}

// answer builds the response to one query.
func (c *dialDNS) answer(q []byte) ([]byte, error) {
	if len(q) < 12 {
		return nil, errors.New("dns: short query")
	}
	i := 12
	var labels []string
	for {
		if i >= len(q) {
			return nil, errors.New("dns: bad name")
		}
		n := int(q[i])
		i++
		if n == 0 {
			break
		}
		if i+n > len(q) {
			return nil, errors.New("dns: bad label")
		}
		labels = append(labels, string(q[i:i+n]))
		i += n
	}
	if i+4 > len(q) {
		return nil, errors.New("dns: short question")
	}
	qtype := binary.BigEndian.Uint16(q[i:])
	question := q[12 : i+4]
	addrs, known := c.table[strings.ToLower(strings.Join(labels, "."))]

	var answers [][]byte
	for _, a := range addrs {
		switch {
		case qtype == 1 && a.Is4(): // A
			b := a.As4()
			answers = append(answers, b[:])
		case qtype == 28 && !a.Is4(): // AAAA
			b := a.As16()
			answers = append(answers, b[:])
		}
	}
	flags := uint16(0x8180) // response, recursion desired and available
	if !known {
		flags |= 3 // NXDOMAIN
	}
	resp := binary.BigEndian.AppendUint16(nil, binary.BigEndian.Uint16(q))
	for _, v := range []uint16{flags, 1, uint16(len(answers)), 0, 0} {
		resp = binary.BigEndian.AppendUint16(resp, v)
	}
	resp = append(resp, question...)
	for _, rdata := range answers {
		resp = append(resp, 0xc0, 12) // the name, as a pointer to the question
		resp = binary.BigEndian.AppendUint16(resp, qtype)
		resp = binary.BigEndian.AppendUint16(resp, 1) // IN
		resp = binary.BigEndian.AppendUint32(resp, 60)
		resp = binary.BigEndian.AppendUint16(resp, uint16(len(rdata)))
		resp = append(resp, rdata...)
	}
	return resp, nil
}

func (c *dialDNS) Close() error                     { return nil }
func (c *dialDNS) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *dialDNS) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *dialDNS) SetDeadline(time.Time) error      { return nil }
func (c *dialDNS) SetReadDeadline(time.Time) error  { return nil }
func (c *dialDNS) SetWriteDeadline(time.Time) error { return nil }

// dialResolver resolves through table only: no query leaves the process.
func dialResolver(table map[string][]netip.Addr) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		return &dialDNS{table: table}, nil
	}}
}

// errDialSafety is what the test's own Control returns for a
// non-loopback address the policy let through: nothing here may dial one.
var errDialSafety = errors.New("test: refusing to dial a non-loopback address")

// dialClient returns a client whose transport is p's, resolving through
// table. Addresses p allows are recorded in passed, and only loopback
// ones are dialed.
func dialClient(t *testing.T, p Policy, table map[string][]netip.Addr, passed *[]string) *http.Client {
	t.Helper()
	d := &net.Dialer{
		Timeout:  5 * time.Second,
		Resolver: dialResolver(table),
		Control: func(_, address string, _ syscall.RawConn) error {
			*passed = append(*passed, address)
			if ap, err := netip.ParseAddrPort(address); err == nil && ap.Addr().Unmap().IsLoopback() {
				return nil
			}
			return errDialSafety
		},
	}
	tr := p.transport(d)
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// dialReceiver is a loopback HTTP server that counts the connections
// it accepts.
type dialReceiver struct {
	srv   *httptest.Server
	conns atomic.Int32
	port  string
}

func newDialReceiver(t *testing.T, addr string) *dialReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	r := &dialReceiver{}
	r.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r.srv.Listener = ln
	r.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			r.conns.Add(1)
		}
	}
	r.srv.Start()
	t.Cleanup(r.srv.Close)
	_, r.port, _ = net.SplitHostPort(ln.Addr().String())
	return r
}

// reason is the range CheckIP names in its refusal of ip: "is private
// (RFC 1918)", "is loopback", ...
func reason(t *testing.T, p Policy, ip netip.Addr) string {
	t.Helper()
	err := p.CheckIP(ip)
	if err == nil {
		return ""
	}
	_, what, ok := strings.Cut(err.Error(), " is ")
	if !ok {
		t.Fatalf("CheckIP(%s) = %v: names no range", ip, err)
	}
	return " is " + what
}

// TestRefusedAtCreationAndAtDial checks each forbidden address both ways:
// CheckURL refuses it as an IP literal, and the transport refuses it, for
// the same reason, when a host name resolves to it, before dialing. A
// loopback receiver stands at each loopback address: it must see no
// connection unless the policy allows loopback.
func TestRefusedAtCreationAndAtDial(t *testing.T) {
	recv := map[string]*dialReceiver{}
	for _, a := range []string{"127.0.0.1", "127.1.2.3", "::1"} {
		recv[a] = newDialReceiver(t, a)
	}
	receiverFor := func(ip netip.Addr) *dialReceiver {
		if ip.Unmap() == netip.MustParseAddr("127.0.0.1") {
			return recv["127.0.0.1"]
		}
		return recv[ip.String()]
	}
	for _, tt := range []struct {
		ip       string
		loopback bool
	}{
		{"10.0.0.1", false},
		{"10.255.255.254", false},
		{"172.16.0.1", false},
		{"172.31.255.254", false},
		{"192.168.0.1", false},
		{"192.168.255.254", false},
		{"fc00::1", false},
		{"fd12:3456:789a::1", false},
		{"127.0.0.1", true},
		{"127.1.2.3", true},
		{"::1", true},
		{"::ffff:127.0.0.1", true},
		{"169.254.0.1", false},
		{"169.254.255.254", false},
		{"fe80::1", false},
		{"febf::1", false},
		{"169.254.169.254", false},
		{"fd00:ec2::254", false},
		{"0.0.0.0", false},
		{"::", false},
		{"::ffff:10.0.0.1", false},
		{"::ffff:169.254.169.254", false},
		{"::ffff:192.168.1.1", false},
		{"::ffff:0.0.0.0", false},
		{"64:ff9b::a9fe:a9fe", false}, // NAT64 of 169.254.169.254
		{"2002:c0a8:101::1", false},   // 6to4 of 192.168.1.1
		// Forms embedding 127.0.0.1 are refused in development too, and
		// ranges the registries list that a hand-kept list had missed.
		{"2001:0:4136:e378:8000:63bf:80ff:fffe", false}, // Teredo
		{"64:ff9b:1::7f00:1", false},                    // local-use NAT64
		{"64:ff9b::7f00:1", false},                      // NAT64
		{"2002:7f00:1::1", false},                       // 6to4
		{"192.0.2.1", false},
		{"198.51.100.7", false},
		{"192.88.99.1", false},
		{"2001:db8::1", false},
		{"3fff::1", false},
		{"2620:4f:8000::1", false},
		{"100::1", false},
	} {
		ip := netip.MustParseAddr(tt.ip)
		for _, c := range []struct {
			name    string
			p       Policy
			allowed bool
		}{{"prod", prod, false}, {"dev", dev, tt.loopback}} {
			t.Run(c.name+" "+tt.ip, func(t *testing.T) {
				port := "443"
				r := receiverFor(ip)
				if r != nil {
					port = r.port
				}
				before := int32(0)
				if r != nil {
					before = r.conns.Load()
				}

				// At creation, as an IP literal.
				literal := "https://" + net.JoinHostPort(ip.String(), port) + "/hook"
				_, createErr := c.p.CheckURL(literal)

				// At dial time, behind a name.
				var passed []string
				client := dialClient(t, c.p, map[string][]netip.Addr{"victim.test": {ip}}, &passed)
				resp, dialErr := client.Post("http://victim.test:"+port+"/hook", "application/json", strings.NewReader("{}"))
				if resp != nil {
					_ = resp.Body.Close()
				}

				if c.allowed {
					if createErr != nil || dialErr != nil {
						t.Fatalf("allowed address refused: at creation %v, at dial %v", createErr, dialErr)
					}
					if n := r.conns.Load() - before; n != 1 {
						t.Fatalf("receiver got %d connections, want 1", n)
					}
					return
				}
				why := reason(t, c.p, ip)
				for when, err := range map[string]error{"creation": createErr, "dial": dialErr} {
					if !errors.Is(err, ErrBlocked) || !strings.Contains(err.Error(), why) {
						t.Errorf("at %s: %v, want ErrBlocked%s", when, err, why)
					}
				}
				if len(passed) != 0 {
					t.Errorf("the policy let %v through", passed)
				}
				if r != nil {
					if n := r.conns.Load() - before; n != 0 {
						t.Errorf("receiver got %d connections", n)
					}
				}
			})
		}
	}
}

// A name with several addresses is checked address by address: the
// forbidden ones are never dialed, an allowed one still is.
func TestDialChecksEveryResolvedAddress(t *testing.T) {
	r := newDialReceiver(t, "127.0.0.1")
	var passed []string
	table := map[string][]netip.Addr{"mixed.test": {
		netip.MustParseAddr("10.0.0.1"),
		netip.MustParseAddr("169.254.169.254"),
		netip.MustParseAddr("127.0.0.1"),
	}}
	resp, err := dialClient(t, dev, table, &passed).Get("http://mixed.test:" + r.port + "/")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if want := []string{"127.0.0.1:" + r.port}; fmt.Sprint(passed) != fmt.Sprint(want) {
		t.Fatalf("the policy let %v through, want %v", passed, want)
	}
	if n := r.conns.Load(); n != 1 {
		t.Fatalf("receiver got %d connections, want 1", n)
	}
}

// net/http maps a non-ASCII host with IDNA before it dials: such hosts
// are refused at creation, and what they map to is still checked at dial.
func TestNonASCIIHosts(t *testing.T) {
	r := newDialReceiver(t, "127.0.0.1")
	for _, host := range []string{"127。0。0。1", "127.0.0.１", "１２７.0.0.1"} {
		for _, scheme := range []string{"https", "http"} {
			u := scheme + "://" + host + "/hook"
			for _, p := range []Policy{prod, dev} {
				if _, err := p.CheckURL(u); !errors.Is(err, ErrBlocked) || !strings.Contains(err.Error(), "not ASCII") {
					t.Errorf("%+v CheckURL(%q) = %v, want ErrBlocked: not ASCII", p, u, err)
				}
			}
		}
		u := "http://" + host + ":" + r.port + "/hook"
		var passed []string
		resp, err := dialClient(t, prod, nil, &passed).Get(u)
		if resp != nil {
			_ = resp.Body.Close()
		}
		if !errors.Is(err, ErrBlocked) || !strings.Contains(err.Error(), "127.0.0.1 is loopback") {
			t.Errorf("prod GET %s = %v, want ErrBlocked: 127.0.0.1 is loopback", u, err)
		}
	}
	if n := r.conns.Load(); n != 0 {
		t.Fatalf("receiver got %d connections", n)
	}
	if _, err := prod.CheckURL("https://xn--bcher-kva.example/hook"); err != nil {
		t.Fatalf("an international name in its xn-- form is refused: %v", err)
	}
}

// Spellings of forbidden hosts that url.Parse lets through are refused
// at creation, by both policies.
func TestCheckURLSpellings(t *testing.T) {
	for _, u := range []string{
		// IPv4-mapped IPv6.
		"https://[::ffff:10.0.0.1]/",
		"https://[::ffff:a00:1]/",
		"https://[0:0:0:0:0:ffff:10.0.0.1]/",
		"https://[::FFFF:10.0.0.1]/",
		"https://[0000::ffff:0a00:0001]/",
		"https://[::ffff:169.254.169.254]/",
		"https://[::ffff:a9fe:a9fe]/",
		// Decimal, octal, hex and short IPv4 forms of 10.0.0.1,
		// 127.0.0.1 and 169.254.169.254.
		"https://167772161/",
		"https://0xa000001/",
		"https://012.0.0.1/",
		"https://10.1/",
		"https://2130706433/",
		"https://017700000001/",
		"https://0x7F.1/",
		"https://127.1/",
		"https://127.0.0.1./",
		"https://2852039166/",
		"https://0xa9fea9fe/",
		"https://0251.0376.0251.0376/",
		"https://169.254.169.254./",
		"https://0/",
		"https://0x0/",
		// Non-ASCII hosts that IDNA maps to forbidden ones.
		"https://10。0。0。1/",
		"https://ｌｏｃａｌｈｏｓｔ/",
		// Zones and metadata.
		"https://[fe80::1%25eth0]/",
		"https://[fd00:ec2::254]:80/",
		// Schemes other than http(s).
		"file:///etc/passwd",
		"gopher://example.com:70/_x",
		"ftp://example.com/",
		"javascript:alert(1)",
		"data:text/plain,hi",
		"ws://example.com/",
		"HTTP://example.com/",
		// Userinfo, even empty.
		"https://user@example.com/",
		"https://:@example.com/",
		"https://@example.com/",
		"https://127.0.0.1%2f@example.com/",
		"https://example.com@10.0.0.1/",
	} {
		for _, p := range []Policy{prod, dev} {
			if _, err := p.CheckURL(u); !errors.Is(err, ErrBlocked) {
				t.Errorf("%+v CheckURL(%q) = %v, want ErrBlocked", p, u, err)
			}
		}
	}
	// A fragment is not the host.
	for _, u := range []string{"https://example.com/#@10.0.0.1", "https://example.com:" + strconv.Itoa(8443) + "/"} {
		if _, err := prod.CheckURL(u); err != nil {
			t.Errorf("CheckURL(%q) = %v, want allowed", u, err)
		}
	}
}
