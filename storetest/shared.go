package storetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
)

// RunShared checks that two handles on one database act as one Store, as
// the Stores of two engine processes sharing the database must: an update
// through one is never lost to an update through the other, a write through
// one is seen through the other, both share one signing key, and a lease
// granted through one is held for the other. openTwo returns two handles on
// a fresh, empty database; if they implement io.Closer, RunShared closes
// them when the subtest ends. A Store that lives in one process's memory
// cannot pass and need not run it.
//
// If the handles implement webhooks.SubscriptionFeed, the Feed subtests
// check that a subscription created or deleted through one is reported by
// the other's WatchSubscriptions, and that the watch ends with its
// context; otherwise they skip.
func RunShared(t *testing.T, openTwo func(t *testing.T) (webhooks.Store, webhooks.Store)) {
	for _, tc := range sharedTests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := openTwo(t)
			for _, s := range []webhooks.Store{a, b} {
				if c, ok := s.(io.Closer); ok {
					t.Cleanup(func() { require.NoError(t, c.Close(), "closing the store") })
				}
			}
			tc.fn(t, a, b)
		})
	}
}

var sharedTests = []struct {
	name string
	fn   func(t *testing.T, a, b webhooks.Store)
}{
	{"SeesWrites", testSharedSeesWrites},
	{"NoLostUpdate", testSharedNoLostUpdate},
	{"DeleteCascade", testSharedDeleteCascade},
	{"CreateSameID", testSharedCreateSameID},
	{"SigningKey", testSharedSigningKey},
	{"WebhookKeys", testSharedWebhookKeys},
	{"Lease", testSharedLease},
	{"Feed/Create", testFeedCreate},
	{"Feed/Update", testFeedUpdate},
	{"Feed/Delete", testFeedDelete},
	{"Feed/Cancel", testFeedCancel},
	{"Feed/DS", testFeedDS},
	{"DS/ClaimRace", testSharedDSClaimRace},
	{"DS/AckAndAppend", testSharedDSAckAndAppend},
}

// testSharedSeesWrites writes through each handle and reads through the
// other, by every read the engine makes.
func testSharedSeesWrites(t *testing.T, a, b webhooks.Store) {
	ctx := t.Context()
	mustCreateSub(t, a, newSub("s"))
	got, err := b.GetSubscription(ctx, "s")
	require.NoError(t, err)
	requireSub(t, newSub("s"), got, "a subscription created through one handle is seen through the other")

	full := fullConsumer("s", "/a")
	mustCreate(t, a, full)
	requireConsumer(t, full, mustGet(t, b, full.ID), "a consumer created through one handle is seen through the other")
	require.Equal(t, []string{full.ID}, byStream(t, b, "/other/stream ü'\""))
	require.Equal(t, []string{full.ID}, due(t, b, full.Deadline, 10))
	requireNext(t, b, full.Deadline)
	requireCounts(t, b, map[webhooks.ConsumerState]int{webhooks.StateWaking: 1})

	next := mustUpdate(t, b, full.ID, func(c *webhooks.Consumer) {
		c.State = webhooks.StateLive
		c.Deadline = at(time.Hour)
		c.Streams[1].Path = "/moved"
	})
	requireConsumer(t, next, mustGet(t, a, full.ID), "an update through one handle is seen through the other")
	require.Equal(t, []string{full.ID}, byStream(t, a, "/moved"))
	require.Empty(t, byStream(t, a, "/other/stream ü'\""))
	requireNext(t, a, at(time.Hour))
	requireCounts(t, a, map[webhooks.ConsumerState]int{webhooks.StateLive: 1})

	mustDelete(t, a, full.ID)
	requireGone(t, b, full.ID)
	require.ErrorIs(t, b.CreateSubscription(ctx, newSub("s")), webhooks.ErrSubscriptionExists)
}

// testSharedNoLostUpdate increments one consumer through both handles at
// once. fn yields between its read and its write, so a handle that locks
// the consumer only within its own process loses increments.
func testSharedNoLostUpdate(t *testing.T, a, b webhooks.Store) {
	mustCreateSub(t, a, newSub("s"))
	c := newConsumer("s", "/a")
	mustCreate(t, a, c)
	const workers, increments = 8, 25
	var wg sync.WaitGroup
	for i := range workers {
		s := []webhooks.Store{a, b}[i%2]
		wg.Go(func() {
			for range increments {
				_, err := s.UpdateConsumer(t.Context(), c.ID, save(func(c *webhooks.Consumer) {
					n := c.Epoch
					runtime.Gosched()
					c.Epoch = n + 1
				}))
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, s := range []webhooks.Store{a, b} {
		require.EqualValues(t, workers*increments, mustGet(t, s, c.ID).Epoch, "lost updates")
	}
}

// testSharedDeleteCascade deletes a subscription through one handle while
// the other updates and creates its consumers: none survives, as seen by
// either handle.
func testSharedDeleteCascade(t *testing.T, a, b webhooks.Store) {
	ctx := t.Context()
	const rounds = 20
	for i := range rounds {
		sub := fmt.Sprintf("r%d", i)
		x, y := newConsumer(sub, "/x"), newConsumer(sub, "/y")
		y.Deadline = at(time.Second)
		y.Streams = append(y.Streams, webhooks.StreamOffset{Path: "/shared", Offset: "0"})
		mustCreateSub(t, a, newSub(sub))
		mustCreate(t, a, x, y)
		late := newConsumer(sub, "/late")

		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			<-start
			_, err := a.UpdateConsumer(ctx, x.ID, save(func(c *webhooks.Consumer) {
				runtime.Gosched()
				c.Deadline = at(0)
			}))
			if err != nil && !errors.Is(err, webhooks.ErrConsumerNotFound) {
				t.Errorf("UpdateConsumer racing a delete: %v", err)
			}
		})
		wg.Go(func() {
			<-start
			if err := a.CreateConsumer(ctx, late); err != nil && !errors.Is(err, webhooks.ErrSubscriptionNotFound) {
				t.Errorf("CreateConsumer racing a delete: %v", err)
			}
		})
		wg.Go(func() {
			<-start
			runtime.Gosched()
			if err := b.DeleteSubscription(ctx, sub); err != nil {
				t.Errorf("DeleteSubscription: %v", err)
			}
		})
		close(start)
		wg.Wait()

		for _, s := range []webhooks.Store{a, b} {
			for _, c := range []*webhooks.Consumer{x, y, late} {
				requireGone(t, s, c.ID)
			}
			require.Empty(t, byStream(t, s, "/shared"), "round %d: a consumer survived its subscription", i)
			requireNext(t, s, time.Time{}, fmt.Sprintf("round %d: a consumer survived its subscription", i))
			requireCounts(t, s, nil)
			require.ErrorIs(t, s.CreateConsumer(ctx, newConsumer(sub, "/z")), webhooks.ErrSubscriptionNotFound)
		}
	}
}

// testSharedCreateSameID creates one consumer through both handles at once:
// one create wins.
func testSharedCreateSameID(t *testing.T, a, b webhooks.Store) {
	mustCreateSub(t, a, newSub("s"))
	const workers = 8
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for i := range workers {
		s := []webhooks.Store{a, b}[i%2]
		wg.Go(func() {
			c := newConsumer("s", "/a")
			c.Epoch = int64(i)
			errs[i] = s.CreateConsumer(t.Context(), c)
		})
	}
	wg.Wait()
	winner := requireOneWins(t, errs, webhooks.ErrConsumerExists)
	for _, s := range []webhooks.Store{a, b} {
		require.EqualValues(t, winner, mustGet(t, s, webhooks.ConsumerID("s", "/a")).Epoch, "the winner's consumer is stored")
	}
}

// testSharedSigningKey races the first LoadOrStoreSigningKey through both
// handles: both must get one key, or engines sharing the database would
// reject each other's tokens.
func testSharedSigningKey(t *testing.T, a, b webhooks.Store) {
	raceSigningKey(t, 8, a, b)
}

// feedWait bounds the wait for a change to be reported: a polling Store
// reports it within its poll interval, which must be well below this.
const feedWait = 5 * time.Second

// watcher runs a WatchSubscriptions and counts its calls.
type watcher struct {
	calls  atomic.Int64
	called chan struct{} // an element after each call
	cancel context.CancelFunc
	done   chan error
}

// watch starts watching through s, skipping the test if s has no feed, and
// waits for the first call, after which every change is reported.
func watch(t *testing.T, s webhooks.Store) *watcher {
	t.Helper()
	feed, ok := s.(webhooks.SubscriptionFeed)
	if !ok {
		t.Skip("the Store does not implement webhooks.SubscriptionFeed")
	}
	ctx, cancel := context.WithCancel(t.Context())
	w := &watcher{called: make(chan struct{}, 1), cancel: cancel, done: make(chan error, 1)}
	go func() {
		w.done <- feed.WatchSubscriptions(ctx, func() {
			w.calls.Add(1)
			select {
			case w.called <- struct{}{}:
			default:
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-w.done:
		case <-time.After(feedWait):
			t.Errorf("WatchSubscriptions did not return within %v of its context's end", feedWait)
		}
	})
	w.waitCalls(t, 1, "WatchSubscriptions did not call changed once it watched")
	return w
}

// waitCalls waits until changed has been called n times in all.
func (w *watcher) waitCalls(t *testing.T, n int64, msg string) {
	t.Helper()
	timeout := time.NewTimer(feedWait)
	defer timeout.Stop()
	for w.calls.Load() < n {
		select {
		case <-w.called:
		case err := <-w.done:
			w.done <- err
			t.Fatalf("%s: WatchSubscriptions returned %v", msg, err)
		case <-timeout.C:
			t.Fatalf("%s within %v", msg, feedWait)
		}
	}
}

// testFeedCreate creates a subscription through one handle: the other's
// watch reports it.
func testFeedCreate(t *testing.T, a, b webhooks.Store) {
	w := watch(t, b)
	n := w.calls.Load()
	mustCreateSub(t, a, newSub("s"))
	w.waitCalls(t, n+1, "a subscription created through the other handle was not reported")
}

// testFeedUpdate updates a subscription through one handle: the other
// sees it, and its watch reports it.
func testFeedUpdate(t *testing.T, a, b webhooks.Store) {
	mustCreateSub(t, a, newSub("s"))
	w := watch(t, b)
	n := w.calls.Load()
	_, err := a.UpdateSubscription(t.Context(), "s", func(sub *webhooks.Subscription) error {
		*sub = *changedSub("s")
		return nil
	})
	require.NoError(t, err)
	w.waitCalls(t, n+1, "a subscription updated through the other handle was not reported")
	got, err := b.GetSubscription(t.Context(), "s")
	require.NoError(t, err)
	requireSub(t, changedSub("s"), got)
}

// testFeedDelete deletes a subscription through one handle: the other's
// watch reports it.
func testFeedDelete(t *testing.T, a, b webhooks.Store) {
	mustCreateSub(t, a, newSub("s"))
	w := watch(t, b)
	n := w.calls.Load()
	require.NoError(t, a.DeleteSubscription(t.Context(), "s"))
	w.waitCalls(t, n+1, "a subscription deleted through the other handle was not reported")
}

// testFeedCancel ends a watch by its context: it returns the context's
// error.
func testFeedCancel(t *testing.T, _, b webhooks.Store) {
	w := watch(t, b)
	w.cancel()
	select {
	case err := <-w.done:
		w.done <- err
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(feedWait):
		t.Fatalf("WatchSubscriptions did not return within %v of its context's end", feedWait)
	}
}
