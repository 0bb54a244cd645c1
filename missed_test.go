package webhooks_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/memstore"
)

// outageStore is a Store whose consumer reads and writes fail with
// ErrStoreUnavailable while it is down.
type outageStore struct {
	webhooks.Store
	down atomic.Bool
}

func (s *outageStore) unavailable() error {
	if s.down.Load() {
		return fmt.Errorf("test outage: %w", webhooks.ErrStoreUnavailable)
	}
	return nil
}

func (s *outageStore) ConsumersByStream(ctx context.Context, path string) ([]*webhooks.Consumer, error) {
	if err := s.unavailable(); err != nil {
		return nil, err
	}
	return s.Store.ConsumersByStream(ctx, path)
}

func (s *outageStore) DueConsumers(ctx context.Context, now time.Time, limit int) ([]*webhooks.Consumer, error) {
	if err := s.unavailable(); err != nil {
		return nil, err
	}
	return s.Store.DueConsumers(ctx, now, limit)
}

// More streams are missed in an outage than the engine keeps paths of:
// it sweeps every stream of the subscriptions it loaded at Start instead,
// so the stream created last, whose path it did not keep, still gets its
// consumer.
func TestStreamsMissedBeyondTheBoundAreSwept(t *testing.T) {
	store := &outageStore{Store: memstore.New()}
	h := newUnstartedHarness(t, store)
	require.NoError(t, store.CreateSubscription(context.Background(), &webhooks.Subscription{
		ID: "s1", Pattern: "/agents/*", Webhook: h.recv.url(), Secret: "whsec_test", CreatedAt: testStart,
	}))
	startForTest(t, h.engine)
	store.down.Store(true)
	for i := range 1100 {
		p := fmt.Sprintf("/other/%d", i)
		h.source.set(p, 1)
		require.ErrorIs(t, h.engine.StreamCreated(context.Background(), p), webhooks.ErrStoreUnavailable)
	}
	h.source.set(agentA, 10)
	require.ErrorIs(t, h.engine.StreamCreated(context.Background(), agentA), webhooks.ErrStoreUnavailable)

	store.down.Store(false)
	h.clock.Add(webhooks.DefaultPollInterval)
	d := h.nextDelivery()
	require.Equal(t, agentAID, d.n.ConsumerID)
}
