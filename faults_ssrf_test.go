package webhooks_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/memstore"
	"github.com/streamhooks/webhooks/receiver"
)

// Webhook URLs the production policy refuses at subscription creation,
// with the reason the error message must give. Every one is refused before
// the engine sends a byte anywhere. The netguard tests check the same
// addresses at dial time, behind a name that resolves to them.
var faultSSRFURLs = []struct{ url, reason string }{
	// Private.
	{"https://10.0.0.1/hook", "10.0.0.1 is private (RFC 1918)"},
	{"https://10.255.255.254/hook", "is private (RFC 1918)"},
	{"https://172.16.0.1/hook", "is private (RFC 1918)"},
	{"https://172.31.255.254/hook", "is private (RFC 1918)"},
	{"https://192.168.0.1/hook", "is private (RFC 1918)"},
	{"https://[fc00::1]/hook", "is unique local"},
	{"https://[fdff:ffff::1]/hook", "is unique local"},
	// Loopback.
	{"https://127.0.0.1/hook", "127.0.0.1 is loopback"},
	{"https://127.255.255.254:8443/hook", "is loopback"},
	{"https://[::1]/hook", "::1 is loopback"},
	{"https://localhost/hook", "localhost is loopback"},
	{"https://LOCALHOST./hook", "is loopback"},
	{"https://api.localhost/hook", "is loopback"},
	// Link-local.
	{"https://169.254.0.1/hook", "is link-local"},
	{"https://[fe80::1]/hook", "is link-local"},
	{"https://[fe80::1%25eth0]/hook", "is link-local"},
	// Cloud metadata.
	{"https://169.254.169.254/latest/meta-data/", "169.254.169.254 is cloud metadata"},
	{"http://169.254.169.254/latest/meta-data/", `scheme "http"`},
	{"https://[fd00:ec2::254]/", "is cloud metadata"},
	// Unspecified.
	{"https://0.0.0.0/hook", "is unspecified"},
	{"https://[::]/hook", "is unspecified"},
	// IPv4-mapped IPv6, in several spellings.
	{"https://[::ffff:127.0.0.1]/hook", "is loopback"},
	{"https://[::ffff:7f00:1]/hook", "is loopback"},
	{"https://[::ffff:10.0.0.1]/hook", "10.0.0.1 is private (RFC 1918)"},
	{"https://[::ffff:a00:1]/hook", "10.0.0.1 is private (RFC 1918)"},
	{"https://[0:0:0:0:0:ffff:10.0.0.1]/hook", "10.0.0.1 is private (RFC 1918)"},
	{"https://[::FFFF:0A00:0001]/hook", "10.0.0.1 is private (RFC 1918)"},
	{"https://[::ffff:169.254.169.254]/hook", "169.254.169.254 is cloud metadata"},
	// IPv6 forms that embed an IPv4 address (here 127.0.0.1): Teredo,
	// local-use and well-known NAT64, 6to4. None is global unicast.
	{"https://[2001:0:4136:e378:8000:63bf:80ff:fffe]/hook", "is special-purpose (2001::/23)"},
	{"https://[64:ff9b:1::7f00:1]/hook", "is outside IPv6 global unicast (2000::/3)"},
	{"https://[64:ff9b::7f00:1]/hook", "is outside IPv6 global unicast (2000::/3)"},
	{"https://[2002:7f00:1::1]/hook", "is special-purpose (2002::/16)"},
	// Other special-purpose ranges of the IANA registries.
	{"https://192.0.2.1/hook", "is special-purpose (192.0.2.0/24)"},
	{"https://203.0.113.9/hook", "is special-purpose (203.0.113.0/24)"},
	{"https://192.88.99.1/hook", "is special-purpose (192.88.99.0/24)"},
	{"https://[2001:db8::1]/hook", "is special-purpose (2001:db8::/32)"},
	{"https://[3fff::1]/hook", "is special-purpose (3fff::/20)"},
	{"https://[100::1]/hook", "is outside IPv6 global unicast (2000::/3)"},
	// Decimal, octal, hex and short IPv4 spellings, which url.Parse lets
	// through and some resolvers read as addresses.
	{"https://2130706433/hook", "not a canonical IP address"},
	{"https://0x7f000001/hook", "not a canonical IP address"},
	{"https://0177.0.0.1/hook", "not a canonical IP address"},
	{"https://127.1/hook", "not a canonical IP address"},
	{"https://167772161/hook", "not a canonical IP address"},
	{"https://0xa9fea9fe/hook", "not a canonical IP address"},
	{"https://0251.0376.0251.0376/hook", "not a canonical IP address"},
	{"https://169.254.169.254./hook", "not a canonical IP address"},
	{"https://0/hook", "not a canonical IP address"},
	// Non-ASCII hosts that net/http would map to forbidden ones.
	{"https://127。0。0。1/hook", "not ASCII"},
	{"https://10.0.0.１/hook", "not ASCII"},
	// Schemes other than https.
	{"http://example.com/hook", `scheme "http"`},
	{"file:///etc/passwd", "has no host"},
	{"gopher://example.com:70/_x", `scheme "gopher"`},
	{"ftp://example.com/hook", `scheme "ftp"`},
	{"javascript:alert(1)", "has no host"},
	{"data:text/plain,hi", "has no host"},
	{"ws://example.com/hook", `scheme "ws"`},
	// Userinfo is refused outright: credentials would leak into logs, and
	// "https://good.example@evil.example" misleads whoever reads it.
	{"https://user:pass@example.com/hook", "userinfo"},
	{"https://example.com@10.0.0.1/hook", "userinfo"},
	{"https://@example.com/hook", "userinfo"},
	// Redirects are never followed: TestFaultRedirectsAreFailures.
}

// The subscription API refuses every forbidden webhook URL with 400
// INVALID_REQUEST and a message that says why, stores nothing and sends
// nothing.
func TestFaultSSRFRefusedAtCreation(t *testing.T) {
	e, calls := subStrictEngine(t)
	handler := apiHandler(t, e)
	for i, tc := range faultSSRFURLs {
		t.Run(tc.url, func(t *testing.T) {
			rec := subServe(handler, http.MethodPut, fmt.Sprintf("/agents/*?subscription=s%d", i), subBody(tc.url, ""))
			body := subRequireError(t, http.StatusBadRequest, receiver.CodeInvalidRequest, rec.Code, rec.Body.Bytes(), rec.Header().Get("Content-Type"))
			require.Contains(t, body.Message, "webhook URL rejected")
			require.Contains(t, body.Message, tc.reason)
		})
	}
	rec := subServe(handler, http.MethodGet, "/**?subscriptions", "")
	require.JSONEq(t, `{"subscriptions":[]}`, rec.Body.String())
	require.Zero(t, calls.Load())
}

// faultCountingServer accepts connections on addr and counts them and the
// bytes they send.
func faultCountingServer(t *testing.T, addr string) (port string, conns, bytes *atomic.Int64) {
	t.Helper()
	conns, bytes = new(atomic.Int64), new(atomic.Int64)
	srv := newFaultServerOn(t, addr, func(c net.Conn) {
		conns.Add(1)
		n, _ := io.Copy(io.Discard, c)
		bytes.Add(n)
	})
	_, port, _ = net.SplitHostPort(srv.ln.Addr().String())
	return port, conns, bytes
}

// The engine's own transport refuses forbidden addresses at dial time, after
// resolving names: subscriptions stored without the API's check (as if the
// policy had changed, or a name had resolved elsewhere at creation) fail
// their delivery, the error names the same reason, and the receivers see
// no connection.
func TestFaultSSRFRefusedAtDialTime(t *testing.T) {
	port4, conns4, bytes4 := faultCountingServer(t, "127.0.0.1")
	port6, conns6, bytes6 := faultCountingServer(t, "::1")
	for _, tc := range []struct {
		url, reason string
		dev         bool // engine in development mode: loopback allowed
	}{
		{"http://localhost:" + port4 + "/hook", "is loopback", false}, // resolved from /etc/hosts at dial time
		{"https://localhost:" + port4 + "/hook", "is loopback", false},
		{"http://127.0.0.1:" + port4 + "/hook", "127.0.0.1 is loopback", false},
		{"http://[::ffff:127.0.0.1]:" + port4 + "/hook", "127.0.0.1 is loopback", false},
		{"http://127。0。0。1:" + port4 + "/hook", "127.0.0.1 is loopback", false},
		{"http://[::1]:" + port6 + "/hook", "::1 is loopback", false},
		// Embedding 127.0.0.1 does not make an address loopback, even in
		// development: a gateway or tunnel, not this host, would answer.
		{"http://[2001:0:4136:e378:8000:63bf:80ff:fffe]:" + port4 + "/hook", "is special-purpose (2001::/23)", true},
		{"http://[64:ff9b:1::7f00:1]:" + port4 + "/hook", "is outside IPv6 global unicast", true},
		{"http://[64:ff9b::7f00:1]:" + port4 + "/hook", "is outside IPv6 global unicast", true},
		{"http://[2002:7f00:1::1]:" + port4 + "/hook", "is special-purpose (2002::/16)", true},
	} {
		t.Run(tc.url, func(t *testing.T) {
			store := memstore.New()
			require.NoError(t, store.CreateSubscription(context.Background(), &webhooks.Subscription{
				ID: "s1", Pattern: "/agents/*", Webhook: tc.url, Secret: "whsec_x",
			}))
			spans := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
			t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
			h := &harness{t: t, store: store, source: newFakeSource(), clock: newMockClock()}
			e, err := webhooks.New(store, h.source, webhooks.WithClock(h.clock), webhooks.WithCallbackBaseURL(callbackBase),
				webhooks.WithTracerProvider(tp), faultConstBackoff(time.Hour),
				webhooks.WithWebhookPolicy(webhooks.WebhookPolicy{AllowLoopback: tc.dev}))
			require.NoError(t, err)
			webhooks.SignalProgress(e, h.signals())
			h.engine = e
			require.NoError(t, e.Start(context.Background()))
			t.Cleanup(func() { require.NoError(t, e.Stop(context.Background())) })

			h.create(agentA, 10)
			h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.Failures == 1 && !c.InFlight })
			var reason string
			require.Eventually(t, func() bool {
				for _, s := range spans.Ended() {
					for _, kv := range s.Attributes() {
						if kv.Key == "webhooks.error" {
							reason = kv.Value.AsString()
							return true
						}
					}
				}
				return false
			}, waitFor, time.Millisecond)
			require.Contains(t, reason, "address not allowed")
			require.Contains(t, reason, tc.reason)
			h.faultRequireSettled(agentAID)
		})
	}
	require.Zero(t, conns4.Load()+conns6.Load(), "a forbidden address was dialed")
	require.Zero(t, bytes4.Load()+bytes6.Load())
}
