package webhooks_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/memstore"
)

// healthStore fails NextDeadline while down is set, and holds DueConsumers
// while held is set, until release is closed.
type healthStore struct {
	*memstore.Store
	down    atomic.Bool
	held    atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func newHealthStore() *healthStore {
	return &healthStore{Store: memstore.New(), entered: make(chan struct{}, 1), release: make(chan struct{})}
}

func (s *healthStore) NextDeadline(ctx context.Context) (time.Time, bool, error) {
	if s.down.Load() {
		return time.Time{}, false, errors.New("connection refused")
	}
	return s.Store.NextDeadline(ctx)
}

func (s *healthStore) DueConsumers(ctx context.Context, now time.Time, limit int) ([]*webhooks.Consumer, error) {
	if s.held.Load() {
		select {
		case s.entered <- struct{}{}:
		default:
		}
		<-s.release
	}
	return s.Store.DueConsumers(ctx, now, limit)
}

// Ready is false before Start, true once started, false while the Store
// does not answer and true again after, and false after Stop.
func TestReadyFollowsTheStore(t *testing.T) {
	store := newHealthStore()
	h := newUnstartedHarness(t, store, webhooks.WithPollInterval(testPollInterval))
	ctx := context.Background()
	require.ErrorIs(t, h.engine.Ready(ctx), webhooks.ErrNotStarted)
	require.ErrorIs(t, h.engine.Live(), webhooks.ErrNotStarted)
	startForTest(t, h.engine)
	require.NoError(t, h.engine.Ready(ctx))

	store.down.Store(true)
	err := h.engine.Ready(ctx)
	require.ErrorContains(t, err, "store unreachable")
	require.ErrorContains(t, err, "connection refused")
	store.down.Store(false)
	require.NoError(t, h.engine.Ready(ctx))

	require.NoError(t, h.engine.Stop(ctx))
	require.ErrorIs(t, h.engine.Ready(ctx), webhooks.ErrStopped)
	require.ErrorIs(t, h.engine.Live(), webhooks.ErrStopped)
}

// Live is false while the scheduler has been stuck in one Store query for
// StalledAfter, and true again once the query returns.
func TestLiveReportsAStalledScheduler(t *testing.T) {
	store := newHealthStore()
	store.held.Store(true)
	h := newUnstartedHarness(t, store, webhooks.WithPollInterval(testPollInterval))
	startForTest(t, h.engine)
	receive(t, store.entered)
	require.NoError(t, h.engine.Live(), "stuck for no time yet")
	h.clock.Add(webhooks.StalledAfter - time.Second)
	require.NoError(t, h.engine.Live())
	h.clock.Add(2 * time.Second)
	require.ErrorIs(t, h.engine.Live(), webhooks.ErrStalled)

	store.held.Store(false)
	close(store.release)
	require.True(t, h.waitProgress(func() bool { return h.engine.Live() == nil }), "the scheduler went on, and Live did not say so")
	// Parked, it waits for its timer: no stall however long that is.
	h.clock.Add(2 * webhooks.StalledAfter)
	require.True(t, h.waitProgress(func() bool { return h.engine.Live() == nil }))
}
