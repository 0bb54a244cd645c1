package webhooks_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
)

// connsReceiver is a webhook endpoint that counts the connections it
// accepts and holds every answer until the test opens the current gate.
type connsReceiver struct {
	srv      *httptest.Server
	accepted atomic.Int64
	arrived  chan struct{}

	mu   sync.Mutex
	gate chan struct{}
}

func newConnsReceiver(t *testing.T) *connsReceiver {
	r := &connsReceiver{arrived: make(chan struct{}, 64)}
	r.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		r.mu.Lock()
		gate := r.gate
		r.mu.Unlock()
		r.arrived <- struct{}{}
		select {
		case <-gate:
		case <-req.Context().Done():
			return
		}
		_, _ = io.WriteString(w, `{"done":true}`)
	}))
	r.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			r.accepted.Add(1)
		}
	}
	r.srv.Start()
	t.Cleanup(r.srv.Close)
	return r
}

// round wakes every stream at once, waits until all their deliveries are
// in flight together, answers them done and waits for the consumers to
// return to IDLE.
func (r *connsReceiver) round(h *harness, ids, paths []string) {
	h.t.Helper()
	gate := make(chan struct{})
	r.mu.Lock()
	r.gate = gate
	r.mu.Unlock()
	for _, p := range paths {
		h.appendTo(p, 10)
	}
	for range paths {
		select {
		case <-r.arrived:
		case <-time.After(waitFor):
			h.t.Fatal("not every delivery arrived")
		}
	}
	close(gate)
	for _, id := range ids {
		h.waitConsumer(id, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateIdle })
	}
}

// TestDeliveriesReuseConnections checks that the connections of concurrent
// deliveries to one webhook host are kept for the next ones. Every consumer
// of a subscription shares its webhook URL; keeping only Go's default of
// two idle connections per host would dial nearly every delivery anew
// under load, a TLS handshake each in production, and strand a TIME_WAIT
// socket per delivery on the engine's host.
func TestDeliveriesReuseConnections(t *testing.T) {
	const n = 16
	h := newHarness(t)
	r := newConnsReceiver(t)
	rec := h.do(http.MethodPut, "/reuse/*?subscription=reuse", fmt.Sprintf(`{"webhook":%q}`, r.srv.URL+"/hook"))
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	var ids, paths []string
	for i := range n {
		p := fmt.Sprintf("/reuse/s%d", i)
		h.create(p, 0)
		paths = append(paths, p)
		ids = append(ids, webhooks.ConsumerID("reuse", p))
	}

	r.round(h, ids, paths)
	require.EqualValues(t, n, r.accepted.Load(), "the first round needs a connection per delivery")
	r.round(h, ids, paths)
	// A connection can be back in the pool a moment after its consumer is
	// IDLE; allow a few of the second round to dial anyway.
	require.LessOrEqual(t, r.accepted.Load(), int64(n+n/4),
		"the second round dialed anew instead of reusing the first round's connections")
}
