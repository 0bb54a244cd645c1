package storetest

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
)

// testUpdateHealth checks that health starts zero, is read and written
// whole, and lives apart from the subscription's other fields.
//
// That UpdateHealth does not notify the SubscriptionFeed is left to each
// store's own tests: the feed may call spuriously, and one extra call
// merges with the next real one in a polling store, so no test through the
// interface alone can tell.
func testUpdateHealth(t *testing.T, s webhooks.Store) {
	ctx := t.Context()
	_, err := s.UpdateHealth(ctx, "none", func(*webhooks.SubscriptionHealth) { t.Error("fn called for a missing subscription") })
	require.ErrorIs(t, err, webhooks.ErrSubscriptionNotFound)

	given := newSub("s")
	given.Health = fullHealth()
	mustCreateSub(t, s, given, newSub("t"))
	requireHealth(t, s, "s", webhooks.SubscriptionHealth{}, "CreateSubscription ignores the Health given")

	h, err := s.UpdateHealth(ctx, "s", func(h *webhooks.SubscriptionHealth) {
		assert.Equal(t, webhooks.SubscriptionHealth{}, *h, "health starts zero")
		*h = fullHealth()
	})
	require.NoError(t, err)
	require.Equal(t, normHealth(fullHealth()), normHealth(*h), "UpdateHealth returns what it stored")
	h.ConsecutiveFailures = 99 // the caller's
	requireHealth(t, s, "s", fullHealth())
	requireHealth(t, s, "t", webhooks.SubscriptionHealth{}, "other subscriptions' health is untouched")
	want := newSub("s")
	want.Health = fullHealth()
	list, err := s.ListSubscriptions(ctx)
	require.NoError(t, err)
	requireSubs(t, []*webhooks.Subscription{want, newSub("t")}, list, "ListSubscriptions returns health")

	// Set fields become zero.
	next := fullHealth()
	next.ConsecutiveFailures++
	next.FailingSince, next.LastFailureReason = time.Time{}, ""
	h, err = s.UpdateHealth(ctx, "s", func(h *webhooks.SubscriptionHealth) {
		assert.Equal(t, normHealth(fullHealth()), normHealth(*h), "fn gets the stored health")
		h.ConsecutiveFailures++
		h.FailingSince, h.LastFailureReason = time.Time{}, ""
	})
	require.NoError(t, err)
	require.Equal(t, normHealth(next), normHealth(*h))
	requireHealth(t, s, "s", next)

	// UpdateSubscription sees and returns health, and cannot change it.
	want = changedSub("s")
	want.Health = next
	got, err := s.UpdateSubscription(ctx, "s", func(sub *webhooks.Subscription) error {
		assert.Equal(t, normHealth(next), normHealth(sub.Health), "UpdateSubscription's fn gets the health")
		*sub = *changedSub("s")
		return nil
	})
	require.NoError(t, err)
	requireSub(t, want, got, "UpdateSubscription returns the health, which fn cannot change")
	got, err = s.GetSubscription(ctx, "s")
	require.NoError(t, err)
	requireSub(t, want, got)

	require.NoError(t, s.DeleteSubscription(ctx, "s"))
	_, err = s.UpdateHealth(ctx, "s", func(*webhooks.SubscriptionHealth) { t.Error("fn called for a deleted subscription") })
	require.ErrorIs(t, err, webhooks.ErrSubscriptionNotFound)
	mustCreateSub(t, s, newSub("s"))
	requireHealth(t, s, "s", webhooks.SubscriptionHealth{}, "a subscription created again starts with zero health")
}

// testConcurrentHealth increments one subscription's failures from many
// goroutines; fn yields between its read and its write.
func testConcurrentHealth(t *testing.T, s webhooks.Store) {
	mustCreateSub(t, s, newSub("s"))
	const workers, increments = 8, 25
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range increments {
				_, err := s.UpdateHealth(t.Context(), "s", func(h *webhooks.SubscriptionHealth) {
					n := h.ConsecutiveFailures
					runtime.Gosched()
					h.ConsecutiveFailures = n + 1
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	requireHealth(t, s, "s", webhooks.SubscriptionHealth{ConsecutiveFailures: workers * increments}, "lost health updates")
}

func requireHealth(t *testing.T, s webhooks.Store, id string, want webhooks.SubscriptionHealth, msgAndArgs ...any) {
	t.Helper()
	sub, err := s.GetSubscription(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, normHealth(want), normHealth(sub.Health), msgAndArgs...)
}
