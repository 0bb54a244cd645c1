package webhooks_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/memstore"
)

// slotStore runs a hook on the scheduler's goroutine between its read of
// the due consumers and its handling of them, once.
type slotStore struct {
	*memstore.Store
	mu   sync.Mutex
	hook func()
}

func (s *slotStore) DueConsumers(ctx context.Context, now time.Time, limit int) ([]*webhooks.Consumer, error) {
	due, err := s.Store.DueConsumers(ctx, now, limit)
	s.mu.Lock()
	hook := s.hook
	if len(due) > 0 {
		s.hook = nil
	}
	s.mu.Unlock()
	if len(due) > 0 && hook != nil {
		hook()
	}
	return due, err
}

// TestAttemptOfStaleSnapshotGoesThroughItsLane checks that a consumer
// that becomes due for a delivery after the scheduler read it in another
// state is sent through its host's lane and gives its place back. A LIVE
// consumer whose liveness timeout passed is read; before the scheduler
// handles it, a done callback with pending work starts a new wake, whose
// attempt the scheduler then sends. Deciding what the attempt holds from
// the stale snapshot once made it release a delivery slot it never took;
// a lane that counts a POST it never started, or misses one, leaks
// delivery capacity, and a POST nobody waits for outlives Stop.
func TestAttemptOfStaleSnapshotGoesThroughItsLane(t *testing.T) {
	store := &slotStore{Store: memstore.New()}
	h := &harness{t: t, clock: newMockClock(), store: store.Store, source: newFakeSource(), recv: newReceiver(t)}
	e, err := webhooks.New(store, h.source,
		webhooks.WithClock(h.clock),
		webhooks.WithCallbackBaseURL(callbackBase),
		webhooks.WithWebhookPolicy(webhooks.WebhookPolicy{AllowLoopback: true}),
		webhooks.WithMaxConcurrentDeliveries(1),
	)
	require.NoError(t, err)
	webhooks.SignalProgress(e, h.signals())
	h.engine, h.handler = e, apiHandler(t, e)
	require.NoError(t, e.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		_ = e.Stop(ctx)
	})

	d1 := h.wake("s1", "/agents/*", agentA)
	h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive })
	h.appendTo(agentA, 5) // pending work for the next wake

	doneStatus := make(chan int, 1)
	store.mu.Lock()
	store.hook = func() {
		rec := h.do(http.MethodPost, "/callback/"+agentAID, `{"epoch":1,"done":true}`,
			"Authorization", "Bearer "+d1.n.Token, "Content-Type", "application/json")
		doneStatus <- rec.Code
	}
	store.mu.Unlock()
	h.clock.Add(webhooks.DefaultLivenessTimeout + time.Second)

	select {
	case code := <-doneStatus:
		require.Equal(t, http.StatusOK, code)
	case <-time.After(waitFor):
		t.Fatal("the scheduler never read the LIVE consumer as due")
	}
	d2 := h.nextDelivery()
	require.EqualValues(t, 2, d2.n.Epoch)
	h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive && c.Epoch == 2 })
	require.True(t, h.waitProgress(func() bool { return webhooks.FaultSlotsInUse(h.engine) == 0 }), "a delivery's place in its lane was never given back")

	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(t, e.Stop(ctx), "a delivery goroutine outlived Stop")
}
