package webhooks_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
)

// countingTransport answers every webhook POST 200 in memory, and counts
// them and the most it held at once.
type countingTransport struct {
	mu                  sync.Mutex
	posts, open, inMost int
}

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, req.Body)
	_ = req.Body.Close()
	c.mu.Lock()
	c.posts++
	c.open++
	c.inMost = max(c.inMost, c.open)
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.open--
		c.mu.Unlock()
	}()
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("")), Header: http.Header{}, Request: req}, nil
}

func (c *countingTransport) counts() (posts, inMost int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.posts, c.inMost
}

// A wake subscription created through the API has no rate limit: 10,000
// new streams under one pattern wake all 10,000 consumers at the pace of
// the lanes, with the clock standing still, rather than a minute's bucket
// at a time.
func TestWakeSubscriptionWakesEveryConsumerAtTheLanesPace(t *testing.T) {
	const consumers = 10_000
	rt := &countingTransport{}
	h := newHarness(t, webhooks.WithHTTPTransport(rt))
	h.subscribe("s1", "/agents/*")
	sub, err := h.store.GetSubscription(context.Background(), "s1")
	require.NoError(t, err)
	require.Zero(t, sub.RateLimit, "no limit by default")
	for i := range consumers {
		h.create(fmt.Sprintf("/agents/%d", i), 1)
	}
	// Once the scheduler waits and no POST runs, no more will be sent
	// without the clock moving: every wake must have been sent by then.
	idle := func() bool {
		return webhooks.SchedulerParked(h.engine) && webhooks.DeliveriesRunning(h.engine) == 0
	}
	guard := time.After(2 * time.Minute) // a hang, not a pace, fails here
	for !idle() {
		select {
		case <-h.signals():
		case <-guard:
			t.Fatal("the engine did not go idle")
		}
	}
	posts, inMost := rt.counts()
	require.Equal(t, consumers, posts, "every consumer woken, with the clock standing still")
	require.LessOrEqual(t, inMost, webhooks.DefaultMaxDeliveriesPerHost, "the host's lane bounds the POSTs in flight")
}
