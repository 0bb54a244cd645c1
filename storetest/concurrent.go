package storetest

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
)

// testNoLostUpdate increments one consumer from many goroutines. fn yields
// between its read and its write, so a store that does not hold the consumer
// for the duration of fn loses increments.
func testNoLostUpdate(t *testing.T, s webhooks.Store) {
	mustCreateSub(t, s, newSub("s"))
	c := newConsumer("s", "/a")
	mustCreate(t, s, c)
	const workers, increments = 8, 50
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range increments {
				_, err := s.UpdateConsumer(t.Context(), c.ID, save(func(c *webhooks.Consumer) {
					n := c.Epoch
					runtime.Gosched()
					c.Epoch = n + 1
					c.Attempt++
					c.Streams[0].Offset = fmt.Sprint(n + 1)
				}))
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	got := mustGet(t, s, c.ID)
	require.EqualValues(t, workers*increments, got.Epoch, "lost updates")
	require.Equal(t, workers*increments, got.Attempt, "lost updates")
	require.Equal(t, fmt.Sprint(workers*increments), got.Streams[0].Offset)
}

// testConcurrentConsumers updates several consumers at once, changing the
// fields every index depends on, while a reader checks what must hold at any
// instant.
func testConcurrentConsumers(t *testing.T, s webhooks.Store) {
	mustCreateSub(t, s, newSub("s"))
	const consumers, workers, increments = 4, 4, 25
	states := []webhooks.ConsumerState{webhooks.StateIdle, webhooks.StateWaking, webhooks.StateLive}
	cids := make([]string, consumers)
	for k := range cids {
		c := newConsumer("s", fmt.Sprintf("/c%d", k))
		mustCreate(t, s, c)
		cids[k] = c.ID
	}
	// Consumer k's deadline at epoch n is n seconds plus k milliseconds, so
	// each state of the store has one right order.
	wake := func(k int) func(c *webhooks.Consumer) {
		return func(c *webhooks.Consumer) {
			c.Epoch++
			c.State = states[c.Epoch%3]
			c.Deadline = at(time.Duration(c.Epoch)*time.Second + time.Duration(k)*time.Millisecond)
			c.Streams = c.Streams[:1]
			if c.Epoch%2 == 1 {
				c.Streams = append(c.Streams, webhooks.StreamOffset{Path: "/shared", Offset: fmt.Sprint(c.Epoch)})
			}
		}
	}

	done := make(chan struct{})
	var readers sync.WaitGroup
	readers.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := concurrentInvariants(t, s, consumers); err != nil {
				t.Error(err)
				return
			}
		}
	})
	var wg sync.WaitGroup
	for k := range consumers {
		for range workers {
			wg.Go(func() {
				for range increments {
					if _, err := s.UpdateConsumer(t.Context(), cids[k], save(wake(k))); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(done)
	readers.Wait()

	const n = workers * increments
	for k, id := range cids {
		c := mustGet(t, s, id)
		require.EqualValues(t, n, c.Epoch, "lost updates of %s", id)
		require.True(t, c.Deadline.Equal(at(n*time.Second+time.Duration(k)*time.Millisecond)), id)
	}
	require.Equal(t, cids, due(t, s, at(time.Hour), consumers))
	requireNext(t, s, at(n*time.Second))
	requireCounts(t, s, map[webhooks.ConsumerState]int{states[n%3]: consumers})
	require.Empty(t, byStream(t, s, "/shared"), "even epochs leave /shared")
}

// concurrentInvariants checks, in one pass of reads, what holds while
// testConcurrentConsumers runs: the number of consumers is fixed and every
// list is ordered without duplicates.
func concurrentInvariants(t *testing.T, s webhooks.Store, consumers int) error {
	ctx := t.Context()
	counts, err := s.CountConsumers(ctx)
	if err != nil {
		return err
	}
	total := 0
	for _, n := range counts {
		total += n
	}
	if total != consumers {
		return fmt.Errorf("CountConsumers = %v, want %d consumers in all", counts, consumers)
	}
	shared, err := s.ConsumersByStream(ctx, "/shared")
	if err != nil {
		return err
	}
	if got := ids(shared); !slices.IsSortedFunc(got, strings.Compare) || len(slices.Compact(slices.Clone(got))) != len(got) {
		return fmt.Errorf("ConsumersByStream = %v, want IDs in order without duplicates", got)
	}
	for _, c := range shared {
		if !slices.ContainsFunc(c.Streams, func(so webhooks.StreamOffset) bool { return so.Path == "/shared" }) {
			return fmt.Errorf("ConsumersByStream(/shared) returned %s whose Streams are %v", c.ID, c.Streams)
		}
	}
	dueNow, err := s.DueConsumers(ctx, at(time.Hour), consumers+1)
	if err != nil {
		return err
	}
	if len(dueNow) > consumers || !slices.IsSortedFunc(dueNow, func(a, b *webhooks.Consumer) int { return a.Deadline.Compare(b.Deadline) }) {
		return fmt.Errorf("DueConsumers = %v, want at most %d in deadline order", ids(dueNow), consumers)
	}
	return nil
}

// testConcurrentDeleteCascade races deletes of a subscription against an
// update, a delete and creates of its consumers. Whatever the interleaving,
// exactly one delete wins and no consumer of the subscription survives it,
// in any index. The deletes yield first so that the others often start
// before them and finish after.
func testConcurrentDeleteCascade(t *testing.T, s webhooks.Store) {
	ctx := t.Context()
	const rounds, creates = 100, 4
	for i := range rounds {
		sub := fmt.Sprintf("r%d", i)
		a, b := newConsumer(sub, "/a"), newConsumer(sub, "/b")
		b.Deadline = at(time.Second)
		mustCreateSub(t, s, newSub(sub))
		mustCreate(t, s, a, b)
		all := []*webhooks.Consumer{a, b}
		for k := range creates {
			all = append(all, newConsumer(sub, fmt.Sprintf("/c%d", k)))
		}

		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			<-start
			_, err := s.UpdateConsumer(ctx, a.ID, save(func(c *webhooks.Consumer) {
				runtime.Gosched()
				c.Epoch++
				c.State = webhooks.StateWaking
				c.Deadline = at(0)
				c.Streams = append(c.Streams, webhooks.StreamOffset{Path: "/x", Offset: "0"})
			}))
			if err != nil && !errors.Is(err, webhooks.ErrConsumerNotFound) {
				t.Errorf("UpdateConsumer racing a delete: %v", err)
			}
		})
		wg.Go(func() {
			<-start
			_, err := s.UpdateConsumer(ctx, b.ID, deleteConsumer)
			if err != nil && !errors.Is(err, webhooks.ErrConsumerNotFound) {
				t.Errorf("UpdateConsumer(UpdateDelete) racing a delete: %v", err)
			}
		})
		for _, c := range all[2:] {
			wg.Go(func() {
				<-start
				err := s.CreateConsumer(ctx, c)
				if err != nil && !errors.Is(err, webhooks.ErrSubscriptionNotFound) {
					t.Errorf("CreateConsumer racing a delete: %v", err)
				}
			})
		}
		deleted := make(chan error, 2)
		for range 2 {
			wg.Go(func() {
				<-start
				runtime.Gosched()
				deleted <- s.DeleteSubscription(ctx, sub)
			})
		}
		close(start)
		wg.Wait()
		close(deleted)
		wins := 0
		for err := range deleted {
			if err == nil {
				wins++
			} else {
				require.ErrorIs(t, err, webhooks.ErrSubscriptionNotFound)
			}
		}
		require.Equal(t, 1, wins, "round %d: exactly one DeleteSubscription succeeds", i)

		for _, c := range all {
			requireGone(t, s, c.ID)
			require.Empty(t, byStream(t, s, c.PrimaryStream), "round %d: a consumer survived its subscription", i)
		}
		require.Empty(t, byStream(t, s, "/x"), "round %d: a consumer survived its subscription", i)
		requireNext(t, s, time.Time{}, fmt.Sprintf("round %d: a consumer survived its subscription", i))
		requireCounts(t, s, nil)
		require.ErrorIs(t, s.CreateConsumer(ctx, all[2]), webhooks.ErrSubscriptionNotFound)
	}
}

// testConcurrentCreate creates one subscription and one consumer from many
// goroutines at once: one create wins and the others see it.
func testConcurrentCreate(t *testing.T, s webhooks.Store) {
	const workers = 8
	subErrs := make([]error, workers)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			sub := newSub("s")
			sub.Webhook = fmt.Sprintf("https://example.com/%d", i)
			subErrs[i] = s.CreateSubscription(t.Context(), sub)
		})
	}
	wg.Wait()
	winner := requireOneWins(t, subErrs, webhooks.ErrSubscriptionExists)
	got, err := s.GetSubscription(t.Context(), "s")
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("https://example.com/%d", winner), got.Webhook, "the winner's subscription is stored")

	consErrs := make([]error, workers)
	for i := range workers {
		wg.Go(func() {
			c := newConsumer("s", "/a")
			c.Epoch = int64(i)
			consErrs[i] = s.CreateConsumer(t.Context(), c)
		})
	}
	wg.Wait()
	winner = requireOneWins(t, consErrs, webhooks.ErrConsumerExists)
	require.EqualValues(t, winner, mustGet(t, s, webhooks.ConsumerID("s", "/a")).Epoch, "the winner's consumer is stored")
	requireCounts(t, s, map[webhooks.ConsumerState]int{webhooks.StateIdle: 1})
	require.Len(t, byStream(t, s, "/a"), 1)
}

// requireOneWins checks that exactly one of errs is nil and the rest are
// lost, and returns the index of the nil one.
func requireOneWins(t *testing.T, errs []error, lost error) int {
	t.Helper()
	winner := -1
	for i, err := range errs {
		if err == nil {
			require.Equal(t, -1, winner, "two concurrent creates of one ID succeeded")
			winner = i
			continue
		}
		require.ErrorIs(t, err, lost)
	}
	require.NotEqual(t, -1, winner, "no create succeeded")
	return winner
}

// testConcurrentSigningKey races first calls of LoadOrStoreSigningKey: every
// caller must get the same key, or engines sharing the store would reject
// each other's tokens.
func testConcurrentSigningKey(t *testing.T, s webhooks.Store) {
	first := raceSigningKey(t, 16, s)
	k, err := s.LoadOrStoreSigningKey(t.Context(), []byte("later"))
	require.NoError(t, err)
	require.Equal(t, first, k)
}

// raceSigningKey makes workers first calls of LoadOrStoreSigningKey at once,
// spread over stores in turn, checks that all got one of the offered keys,
// the same one, and returns it.
func raceSigningKey(t *testing.T, workers int, stores ...webhooks.Store) []byte {
	keys := make([][]byte, workers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range workers {
		s := stores[i%len(stores)]
		wg.Go(func() {
			<-start
			k, err := s.LoadOrStoreSigningKey(t.Context(), fmt.Appendf(nil, "key-%d", i))
			if err != nil {
				t.Error(err)
			}
			keys[i] = k
		})
	}
	close(start)
	wg.Wait()
	require.Regexp(t, `^key-\d+$`, string(keys[0]))
	for _, k := range keys {
		require.Equal(t, keys[0], k, "callers got different keys")
	}
	return keys[0]
}
