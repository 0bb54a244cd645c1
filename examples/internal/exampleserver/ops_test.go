package exampleserver_test

import (
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamhooks/webhooks/examples/internal/exampleserver"
	"github.com/streamhooks/webhooks/internal/pgtest"
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
