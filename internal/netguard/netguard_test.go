package netguard

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"sync/atomic"
	"testing"
)

var (
	prod = Policy{}
	dev  = Policy{AllowLoopback: true}
)

func TestCheckIP(t *testing.T) {
	tests := []struct {
		ip        string
		prod, dev bool // allowed under each policy
	}{
		{"93.184.215.14", true, true},
		{"8.8.8.8", true, true},
		{"2606:4700:4700::1111", true, true},
		{"172.32.0.1", true, true},           // just past 172.16.0.0/12
		{"100.128.0.1", true, true},          // just past 100.64.0.0/10
		{"192.0.3.1", true, true},            // just past 192.0.2.0/24
		{"2001:4860:4860::8888", true, true}, // just past 2001::/23
		{"2003::1", true, true},              // just past 2002::/16
		{"2001:db9::1", true, true},          // just past 2001:db8::/32

		{"127.0.0.1", false, true},
		{"127.255.255.254", false, true},
		{"::1", false, true},
		{"::ffff:127.0.0.1", false, true},

		{"10.0.0.1", false, false},
		{"172.16.0.1", false, false},
		{"172.31.255.255", false, false},
		{"192.168.1.1", false, false},
		{"fc00::1", false, false},
		{"fd12:3456::1", false, false},
		{"169.254.0.1", false, false},
		{"169.254.169.254", false, false},
		{"fe80::1", false, false},
		{"fe80::1%eth0", false, false},
		{"fd00:ec2::254", false, false},
		{"0.0.0.0", false, false},
		{"0.1.2.3", false, false},
		{"::", false, false},
		{"224.0.0.1", false, false},
		{"239.255.255.250", false, false},
		{"ff02::1", false, false},
		{"ff0e::1", false, false},
		{"100.64.0.1", false, false},
		{"100.127.255.255", false, false},
		{"255.255.255.255", false, false},
		{"240.0.0.1", false, false},
		{"198.18.0.1", false, false},
		{"192.0.0.170", false, false},
		{"fec0::1", false, false},
		{"::10.0.0.1", false, false}, // IPv4-compatible
		{"::ffff:10.0.0.1", false, false},
		{"::ffff:169.254.169.254", false, false},
		{"::ffff:0.0.0.0", false, false},
		{"64:ff9b::a9fe:a9fe", false, false}, // NAT64 of 169.254.169.254
		{"2002:a00:1::1", false, false},      // 6to4 of 10.0.0.1

		// Forms that embed an IPv4 address are not global unicast in
		// the registries, whatever they embed; an embedded loopback
		// address is refused in development too: it is not this host's.
		{"2001:0:4136:e378:8000:63bf:80ff:fffe", false, false}, // Teredo, client 127.0.0.1
		{"2001:0:7f00:1::1", false, false},                     // Teredo, server 127.0.0.1
		{"2001:0:808:808::1", false, false},                    // Teredo, server 8.8.8.8
		{"64:ff9b::7f00:1", false, false},                      // NAT64 of 127.0.0.1
		{"64:ff9b::808:808", false, false},                     // NAT64 of 8.8.8.8
		{"64:ff9b:1::7f00:1", false, false},                    // local-use NAT64 of 127.0.0.1
		{"64:ff9b:1:ffff::a00:1", false, false},                // local-use NAT64 of 10.0.0.1
		{"2002:7f00:1::1", false, false},                       // 6to4 of 127.0.0.1
		{"2002:808:808::1", false, false},                      // 6to4 of 8.8.8.8

		// Other special-purpose ranges of the IANA registries.
		{"192.0.2.1", false, false},       // documentation (TEST-NET-1)
		{"198.51.100.7", false, false},    // documentation (TEST-NET-2)
		{"203.0.113.9", false, false},     // documentation (TEST-NET-3)
		{"192.31.196.1", false, false},    // AS112-v4
		{"192.52.193.1", false, false},    // AMT
		{"192.88.99.1", false, false},     // deprecated 6to4 relay anycast
		{"192.175.48.1", false, false},    // AS112 direct delegation
		{"2001:db8::1", false, false},     // documentation
		{"3fff::1", false, false},         // documentation
		{"2001:2::1", false, false},       // benchmarking
		{"2001:20::1", false, false},      // ORCHIDv2
		{"2620:4f:8000::1", false, false}, // AS112-v6
		{"100::1", false, false},          // discard-only
		{"5f00::1", false, false},         // SRv6 SIDs
	}
	for _, tt := range tests {
		ip := netip.MustParseAddr(tt.ip)
		for _, c := range []struct {
			name string
			p    Policy
			want bool
		}{{"prod", prod, tt.prod}, {"dev", dev, tt.dev}} {
			err := c.p.CheckIP(ip)
			if (err == nil) != c.want {
				t.Errorf("%s CheckIP(%s) = %v, want allowed = %v", c.name, tt.ip, err, c.want)
			}
			if err != nil && !errors.Is(err, ErrBlocked) {
				t.Errorf("%s CheckIP(%s) = %v, does not wrap ErrBlocked", c.name, tt.ip, err)
			}
		}
	}
	if err := prod.CheckIP(netip.Addr{}); !errors.Is(err, ErrBlocked) {
		t.Errorf("CheckIP(zero Addr) = %v, want ErrBlocked", err)
	}
}

func TestCheckURL(t *testing.T) {
	tests := []struct {
		url       string
		prod, dev bool // allowed under each policy
	}{
		{"https://example.com/hook", true, true},
		{"HTTPS://Example.COM/hook", true, true},
		{"https://example.com:8443/hook?x=1", true, true},
		{"https://93.184.215.14/hook", true, true},
		{"https://[2606:4700:4700::1111]/hook", true, true},
		{"https://1.example/hook", true, true}, // numeric label, not last

		{"http://example.com/hook", false, false},
		{"http://93.184.215.14/hook", false, false},
		{"ftp://example.com/hook", false, false},
		{"file:///etc/passwd", false, false},
		{"gopher://example.com:70/", false, false},
		{"ws://example.com/", false, false},
		{"//example.com/hook", false, false},
		{"/hook", false, false},
		{"", false, false},
		{"https:example.com", false, false},
		{"https:///hook", false, false},
		{"https://user:pass@example.com/hook", false, false},
		{"https://example.com@evil.example/hook", false, false},
		{"https://exa mple.com/", false, false},
		{"https://example.com:port/", false, false},

		{"http://localhost:8080/hook", false, true},
		{"https://localhost/hook", false, true},
		{"http://LocalHost./hook", false, true},
		{"http://app.localhost/hook", false, true},
		{"http://127.0.0.1:8080/hook", false, true},
		{"http://127.1.2.3/hook", false, true},
		{"http://[::1]:8080/hook", false, true},
		{"http://[::ffff:127.0.0.1]/hook", false, true},
		{"http://localhost.example.com/hook", false, false},
		{"http://notlocalhost/hook", false, false},
		{"https://user@localhost/hook", false, false},

		{"https://10.0.0.1/hook", false, false},
		{"https://192.168.0.1/hook", false, false},
		{"https://169.254.169.254/latest/meta-data/", false, false},
		{"http://169.254.169.254/latest/meta-data/", false, false},
		{"https://[fd00:ec2::254]/", false, false},
		{"https://[fe80::1%25eth0]/", false, false},
		{"https://[::ffff:10.0.0.1]/", false, false},
		{"https://0.0.0.0/", false, false},
		{"https://100.64.0.1/", false, false},

		// Numeric hosts some resolvers read as 127.0.0.1.
		{"http://2130706433/", false, false},
		{"http://0x7f000001/", false, false},
		{"http://0x7f.1/", false, false},
		{"http://0177.0.0.1/", false, false},
		{"https://127.1/", false, false},
	}
	for _, tt := range tests {
		for _, c := range []struct {
			name string
			p    Policy
			want bool
		}{{"prod", prod, tt.prod}, {"dev", dev, tt.dev}} {
			u, err := c.p.CheckURL(tt.url)
			if (err == nil) != c.want {
				t.Errorf("%s CheckURL(%q) = %v, want allowed = %v", c.name, tt.url, err, c.want)
			}
			if err != nil && !errors.Is(err, ErrBlocked) {
				t.Errorf("%s CheckURL(%q) = %v, does not wrap ErrBlocked", c.name, tt.url, err)
			}
			if err == nil && u.String() == "" {
				t.Errorf("%s CheckURL(%q) returned an empty URL", c.name, tt.url)
			}
		}
	}
}

func TestDialControl(t *testing.T) {
	tests := []struct {
		address   string
		prod, dev bool
	}{
		{"93.184.215.14:443", true, true},
		{"[2606:4700:4700::1111]:443", true, true},
		{"127.0.0.1:80", false, true},
		{"[::1]:80", false, true},
		{"10.1.2.3:443", false, false},
		{"169.254.169.254:80", false, false},
		{"[::ffff:169.254.169.254]:80", false, false},
		{"[fe80::1%eth0]:443", false, false},
		{"[fd00:ec2::254]:80", false, false},
		{"0.0.0.0:80", false, false},
		{"example.com:443", false, false}, // unresolved: never expected here
		{"127.0.0.1", false, false},       // no port
		{"/run/app.sock", false, false},
	}
	for _, tt := range tests {
		for _, c := range []struct {
			name string
			p    Policy
			want bool
		}{{"prod", prod, tt.prod}, {"dev", dev, tt.dev}} {
			err := c.p.DialControl("tcp", tt.address, nil)
			if (err == nil) != c.want {
				t.Errorf("%s DialControl(%q) = %v, want allowed = %v", c.name, tt.address, err, c.want)
			}
			if err != nil && !errors.Is(err, ErrBlocked) {
				t.Errorf("%s DialControl(%q) = %v, does not wrap ErrBlocked", c.name, tt.address, err)
			}
		}
	}
}

// TestTransport dials only 127.0.0.1: the guard must refuse it before any
// request reaches the server, unless loopback is allowed.
func TestTransport(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
	}))
	defer srv.Close()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	// "localhost" resolves to loopback only at dial time, as a rebinding
	// name would: the check must happen there.
	byName := "http://localhost:" + u.Port()

	get := func(p Policy, target string) error {
		tr := p.Transport()
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr}).Get(target)
		if err != nil {
			return err
		}
		return resp.Body.Close()
	}

	for _, target := range []string{srv.URL, byName} {
		if err := get(prod, target); !errors.Is(err, ErrBlocked) {
			t.Errorf("prod GET %s = %v, want ErrBlocked", target, err)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("server got %d requests through a refusing transport", n)
	}
	for _, target := range []string{srv.URL, byName} {
		if err := get(dev, target); err != nil {
			t.Errorf("dev GET %s: %v", target, err)
		}
	}
	if n := hits.Load(); n != 2 {
		t.Fatalf("server got %d requests, want 2", n)
	}
}

// A proxy would connect to the destination itself, past DialControl.
func TestTransportUsesNoProxy(t *testing.T) {
	if prod.Transport().Proxy != nil {
		t.Fatal("Transport uses a proxy")
	}
}
