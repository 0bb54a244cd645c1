package netguard

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
)

func TestCheckHostLists(t *testing.T) {
	p := Policy{
		AllowHosts: []string{"hooks.example.com", "*.partner.example", "203.0.113.7", "2001:db8::1"},
		DenyHosts:  []string{"bad.partner.example", "*.internal.partner.example"},
	}
	for host, ok := range map[string]bool{
		"hooks.example.com":           true,
		"HOOKS.Example.COM.":          true,
		"a.partner.example":           true,
		"a.b.partner.example":         true,
		"partner.example":             false, // *. is below the name only
		"bad.partner.example":         false, // denied wins
		"x.internal.partner.example":  false,
		"internal.partner.example":    true, // not below *.internal…
		"hooks.example.com.evil.test": false,
		"evilhooks.example.com":       false,
		"203.0.113.7":                 true,
		"203.0.113.8":                 false,
		"2001:db8:0::1":               true, // compared canonical
		"[2001:db8::1]":               true,
		"xpartner.example":            false,
		"a.partner.example.evil.test": false,
	} {
		if err := p.CheckHost(host); (err == nil) != ok {
			t.Errorf("CheckHost(%q) = %v, want ok = %v", host, err, ok)
		} else if err != nil && !errors.Is(err, ErrBlocked) {
			t.Errorf("CheckHost(%q) = %v, not ErrBlocked", host, err)
		}
	}
	// Without an allowlist every host is allowed but the denied ones.
	deny := Policy{DenyHosts: []string{"bad.example"}}
	if deny.CheckHost("good.example") != nil || deny.CheckHost("Bad.Example.") == nil {
		t.Error("a denylist alone")
	}
	// CheckURL applies the lists.
	if _, err := p.CheckURL("https://bad.partner.example/hook"); !errors.Is(err, ErrBlocked) {
		t.Errorf("CheckURL of a denied host: %v", err)
	}
	if _, err := p.CheckURL("https://a.partner.example/hook"); err != nil {
		t.Errorf("CheckURL of an allowed host: %v", err)
	}
}

func TestCheckHostPattern(t *testing.T) {
	for _, ok := range []string{"example.com", "*.example.com", "EXAMPLE.com.", "10.0.0.1", "::1", "hooks_1.example"} {
		if err := CheckHostPattern(ok); err != nil {
			t.Errorf("CheckHostPattern(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "*", "*.", "a.*.example", "https://example.com", "example.com:443", "exa mple.com", "*.10.0.0.1x/", "a..b"} {
		if err := CheckHostPattern(bad); err == nil {
			t.Errorf("CheckHostPattern(%q) accepted", bad)
		}
	}
}

// TestTransportChecksHostsAtDial: the default transport refuses a denied
// name at dial, before it resolves, so a URL accepted before the host
// was denied reaches nothing.
func TestTransportChecksHostsAtDial(t *testing.T) {
	recv := newDialReceiver(t, "127.0.0.1")
	lo := netip.MustParseAddr("127.0.0.1")
	table := map[string][]netip.Addr{"denied.test": {lo}, "allowed.test": {lo}}
	var passed []string
	p := Policy{AllowLoopback: true, DenyHosts: []string{"denied.test"}}
	c := dialClient(t, p, table, &passed)
	_, err := c.Get("http://denied.test:" + recv.port + "/")
	if !errors.Is(err, ErrBlocked) || len(passed) != 0 || recv.conns.Load() != 0 {
		t.Fatalf("denied host: err = %v, passed %v, %d connections", err, passed, recv.conns.Load())
	}
	resp, err := c.Get("http://allowed.test:" + recv.port + "/")
	if err != nil {
		t.Fatalf("allowed host: %v", err)
	}
	_ = resp.Body.Close()
	if recv.conns.Load() != 1 {
		t.Fatalf("allowed host: %d connections", recv.conns.Load())
	}
}

// recordingProxy is an HTTP proxy on loopback that records the targets
// it is asked for and refuses them all, so that nothing is dialed.
type recordingProxy struct {
	mu      sync.Mutex
	targets []string
	url     *url.URL
}

func newRecordingProxy(t *testing.T) *recordingProxy {
	t.Helper()
	rp := &recordingProxy{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rp.mu.Lock()
		rp.targets = append(rp.targets, r.Method+" "+r.Host)
		rp.mu.Unlock()
		http.Error(w, "refused by the test proxy", http.StatusForbidden)
	}))
	t.Cleanup(srv.Close)
	rp.url, _ = url.Parse(srv.URL)
	return rp
}

func (rp *recordingProxy) seen() []string {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return append([]string(nil), rp.targets...)
}

// TestProxy: with a proxy, the engine dials only the proxy, even on
// loopback, which the production policy would refuse as a webhook; the
// proxy gets the webhook's host to connect to, and the URL checks still
// keep a refused URL from reaching the proxy at all.
func TestProxy(t *testing.T) {
	rp := newRecordingProxy(t)
	p := Policy{DenyHosts: []string{"denied.example"}, Proxy: rp.url}
	tr := p.Transport()
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: p.Guard(tr)}

	_, err := c.Get("https://hooks.example/hook")
	if err == nil || errors.Is(err, ErrBlocked) {
		t.Fatalf("through the proxy: err = %v, want the proxy's refusal", err)
	}
	if got := rp.seen(); len(got) != 1 || got[0] != "CONNECT hooks.example:443" {
		t.Fatalf("proxy saw %q, want one CONNECT hooks.example:443", got)
	}
	for _, refused := range []string{"https://denied.example/hook", "https://10.0.0.1/hook", "http://hooks.example/hook", "https://169.254.169.254/latest"} {
		if _, err := c.Get(refused); !errors.Is(err, ErrBlocked) {
			t.Errorf("%s: err = %v, want ErrBlocked", refused, err)
		}
	}
	if got := rp.seen(); len(got) != 1 {
		t.Fatalf("refused URLs reached the proxy: %q", got)
	}
}

// TestGuard: a request Guard refuses never reaches the transport it
// wraps, whatever that transport would dial.
func TestGuard(t *testing.T) {
	var reached []string
	next := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		reached = append(reached, r.URL.String())
		return &http.Response{StatusCode: http.StatusNoContent, Body: http.NoBody, Request: r}, nil
	})
	c := &http.Client{Transport: Policy{AllowHosts: []string{"*.example.com"}}.Guard(next)}
	for _, refused := range []string{"https://other.example/", "https://10.0.0.1/", "https://a.example.com@evil.example/", "http://a.example.com/"} {
		if _, err := c.Post(refused, "application/json", strings.NewReader("{}")); !errors.Is(err, ErrBlocked) {
			t.Errorf("%s: err = %v, want ErrBlocked", refused, err)
		}
	}
	resp, err := c.Post("https://a.example.com/hook", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if len(reached) != 1 || reached[0] != "https://a.example.com/hook" {
		t.Fatalf("reached %q", reached)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
