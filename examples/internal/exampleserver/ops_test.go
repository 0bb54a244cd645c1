package exampleserver_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/examples/internal/exampleserver"
	"github.com/streamhooks/webhooks/internal/pgtest"
	"github.com/streamhooks/webhooks/openapi"
)

// pgProxy forwards TCP connections to a PostgreSQL server until cut, which
// drops those open and refuses new ones until mend: an outage of the
// database for this test alone, as the shared server keeps running.
type pgProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]bool
}

func newPGProxy(t *testing.T, target string) *pgProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &pgProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	go p.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut()
	})
	return p
}

func (p *pgProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		if down {
			_ = c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = true, true
		p.mu.Unlock()
		go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
		go func() { _, _ = io.Copy(c, up); _ = c.Close() }()
	}
}

func (p *pgProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

func (p *pgProxy) mend() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}

// via returns dsn with its host replaced by the proxy's address.
func (p *pgProxy) via(t *testing.T, dsn string) string {
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	u.Host = p.ln.Addr().String()
	return u.String()
}

// TestReadyzFollowsPostgres: /readyz answers 503 while the database is
// unreachable and 200 again once it is back; /healthz needs no token.
func TestReadyzFollowsPostgres(t *testing.T) {
	dsn := pgtest.SchemaDSN(t)
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	proxy := newPGProxy(t, u.Host)
	c, _ := startServer(t, exampleserver.Config{APIToken: "secret-token", Postgres: proxy.via(t, dsn)})

	status := func(path string) int {
		resp, body := c.do(t, http.MethodGet, path, "", "", nil)
		if resp.StatusCode == http.StatusOK {
			require.JSONEq(t, `{"status":"ok"}`, string(body))
		}
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, status(exampleserver.HealthzPath))
	require.Equal(t, http.StatusOK, status(exampleserver.ReadyzPath))

	proxy.cut()
	require.Equal(t, http.StatusServiceUnavailable, status(exampleserver.ReadyzPath))
	require.Equal(t, http.StatusOK, status(exampleserver.HealthzPath), "an outage is no reason to restart")

	proxy.mend()
	// The pool still holds connections the outage broke: each probe that
	// draws one discards it, as after a real outage, so a few probes in a
	// row, no more than the pool has connections, bring it back.
	ready := false
	for range 10 {
		if ready = status(exampleserver.ReadyzPath) == http.StatusOK; ready {
			break
		}
	}
	require.True(t, ready, "/readyz stayed 503 once the database was back")
}

// TestMetricsCountDeliveries scrapes /metrics, without the API token,
// after an event-push subscription has delivered two batches, one of them
// after a failed attempt, and finds them counted under its label.
func TestMetricsCountDeliveries(t *testing.T) {
	var calls atomic.Int32
	batches := make(chan struct{}, 4)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("down"))
			return
		}
		batches <- struct{}{}
	}))
	defer hook.Close()
	const token = "secret-token"
	c, _ := startServer(t, exampleserver.Config{Dev: true, APIToken: token, SubscriptionMetrics: 5,
		EngineOptions: []webhooks.Option{webhooks.WithBackoff(func(int) time.Duration { return 0 })}})
	resp, body := c.do(t, http.MethodPut, "/orders/*?subscription=orders", "application/json", token,
		[]byte(`{"webhook":"`+hook.URL+`","delivery":"events","batch":{"max_wait_ms":0}}`))
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", body)
	resp, body = c.do(t, http.MethodPut, "/orders/1", "application/json", token, []byte(`[{"n":1},{"n":2}]`))
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", body)
	<-batches
	resp, body = c.do(t, http.MethodPost, "/orders/1", "application/json", token, []byte(`{"n":3}`))
	require.Equal(t, http.StatusNoContent, resp.StatusCode, "%s", body)
	<-batches

	// The receiver has answered; the engine counts the outcome just after.
	var scrape string
	require.Eventually(t, func() bool {
		resp, body := c.do(t, http.MethodGet, exampleserver.MetricsPath, "", "", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
		scrape = string(body)
		for _, want := range wanted {
			if !strings.Contains(scrape, want) {
				return false
			}
		}
		return true
	}, wait, 10*time.Millisecond, "the scrape lacks a line of %q:\n%s", wanted, scrape)
}

// wanted are lines, or their starts, of the scrape in TestMetricsCountDeliveries.
var wanted = []string{
	`webhooks_batches_total{otel_scope_name="github.com/streamhooks/webhooks"`,
	`webhooks_delivery_attempts_total{otel_scope_name="github.com/streamhooks/webhooks",otel_scope_schema_url="",otel_scope_version="",outcome="http_error",subscription_id="orders"} 1`,
	`webhooks_delivery_attempts_total{otel_scope_name="github.com/streamhooks/webhooks",otel_scope_schema_url="",otel_scope_version="",outcome="ok",subscription_id="orders"} 2`,
	`webhooks_delivery_retries_total{otel_scope_name="github.com/streamhooks/webhooks",otel_scope_schema_url="",otel_scope_version="",subscription_id="orders"} 1`,
	`webhooks_batch_events_sum{otel_scope_name="github.com/streamhooks/webhooks",otel_scope_schema_url="",otel_scope_version="",subscription_id="orders"} 3`,
	`webhooks_subscriptions{otel_scope_name="github.com/streamhooks/webhooks",otel_scope_schema_url="",otel_scope_version="",status="active"} 1`,
	`webhooks_consumers{otel_scope_name="github.com/streamhooks/webhooks",otel_scope_schema_url="",otel_scope_version="",state="IDLE"} 1`,
	`webhooks_pending_oldest_age_seconds{`,
}

// TestOpenAPIServed: /openapi.json is the committed document, without a
// token.
func TestOpenAPIServed(t *testing.T) {
	c, _ := startServer(t, exampleserver.Config{APIToken: "secret-token"})
	resp, body := c.do(t, http.MethodGet, exampleserver.OpenAPIPath, "", "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	require.Equal(t, openapi.Document, body)
}

// TestJWKSIsPublic: the JWKS is served at the stream root's __ds prefix
// without the API token, as receivers fetch it.
func TestJWKSIsPublic(t *testing.T) {
	c, _ := startServer(t, exampleserver.Config{APIToken: "secret-token"})
	resp, body := c.do(t, http.MethodGet, exampleserver.JWKSPath, "", "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Equal(t, "application/jwk-set+json", resp.Header.Get("Content-Type"))
	require.Regexp(t, `^\{"keys":\[\{"kty":"OKP","crv":"Ed25519","kid":"ds_[A-Za-z0-9_-]{43}"`, string(body))
}
