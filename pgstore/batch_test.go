package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/internal/combine/combinetest"
	"github.com/streamhooks/webhooks/internal/pgtest"
)

// consumers creates subscription "s" with a consumer on each of paths and
// returns their IDs.
func consumers(t *testing.T, s *Store, paths ...string) []string {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, s.CreateSubscription(ctx, &webhooks.Subscription{ID: "s", Pattern: "/**", Webhook: "https://example.com/s"}))
	ids := make([]string, len(paths))
	for i, p := range paths {
		c := &webhooks.Consumer{ID: webhooks.ConsumerID("s", p), SubscriptionID: "s", PrimaryStream: p, State: webhooks.StateIdle,
			Streams: []webhooks.StreamOffset{{Path: p, Offset: webhooks.OffsetNone}}}
		require.NoError(t, s.CreateConsumer(ctx, c))
		ids[i] = c.ID
	}
	return ids
}

// outcome is what an UpdateConsumer returned, or the value its fn
// panicked with.
type outcome struct {
	c        *webhooks.Consumer
	err      error
	panicked any
}

// goUpdate runs UpdateConsumer in a goroutine and returns a channel that
// receives its outcome.
func goUpdate(ctx context.Context, s *Store, id string, fn func(c *webhooks.Consumer) (webhooks.UpdateAction, error)) <-chan outcome {
	out := make(chan outcome, 1)
	go func() {
		var o outcome
		defer func() {
			o.panicked = recover()
			out <- o
		}()
		o.c, o.err = s.UpdateConsumer(ctx, id, fn)
	}()
	return out
}

func bump(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
	c.Attempt++
	return webhooks.UpdateSave, nil
}

// TestBatchSharesOneTransaction queues updates of several consumers, one
// of them twice, behind a held one: they run in one transaction, on one
// connection, each seeing what the updates before it did.
func TestBatchSharesOneTransaction(t *testing.T) {
	s := newStore(t)
	ids := consumers(t, s, "/a", "/b", "/c")
	release, queued := combinetest.Hold(t, &s.updates, &updateOp{ctx: t.Context()})
	acquired := s.pool.Stat().AcquireCount()
	var outs []<-chan outcome
	for _, id := range []string{ids[0], ids[1], ids[2], ids[0]} {
		outs = append(outs, goUpdate(t.Context(), s, id, bump))
		queued(len(outs))
	}
	release()
	var got []int
	for _, out := range outs {
		o := <-out
		require.NoError(t, o.err)
		got = append(got, o.c.Attempt)
	}
	require.Equal(t, []int{1, 1, 1, 2}, got, "the second update of /a saw the first")
	// The held update's batch and the queued ones' batch.
	require.EqualValues(t, 1, s.pool.Stat().AcquireCount()-acquired, "the queued updates took one connection")
	c, err := s.GetConsumer(t.Context(), ids[0])
	require.NoError(t, err)
	require.Equal(t, 2, c.Attempt)
}

// TestBatchFailedWriteFailsOnlyItsCaller puts a write that the database
// refuses in a batch: its caller gets the error, an update of the same
// consumer after it runs again alone, and the other consumers' updates
// commit.
func TestBatchFailedWriteFailsOnlyItsCaller(t *testing.T) {
	s := newStore(t)
	ids := consumers(t, s, "/a", "/b", "/c")
	_, err := s.pool.Exec(t.Context(), "ALTER TABLE streamhooks_consumers ADD CONSTRAINT no_live CHECK (state <> 'LIVE')")
	require.NoError(t, err)
	release, queued := combinetest.Hold(t, &s.updates, &updateOp{ctx: t.Context()})
	goLive := func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
		c.State = webhooks.StateLive
		return webhooks.UpdateSave, nil
	}
	remove := func(*webhooks.Consumer) (webhooks.UpdateAction, error) { return webhooks.UpdateDelete, nil }
	refused := goUpdate(t.Context(), s, ids[0], goLive)
	queued(1)
	after := goUpdate(t.Context(), s, ids[0], bump)
	queued(2)
	other := goUpdate(t.Context(), s, ids[1], bump)
	queued(3)
	deleted := goUpdate(t.Context(), s, ids[2], remove)
	queued(4)
	release()

	require.ErrorContains(t, (<-refused).err, "no_live")
	o := <-after
	require.NoError(t, o.err)
	require.Equal(t, webhooks.StateIdle, o.c.State, "the refused write is not under the next update")
	require.Equal(t, 1, o.c.Attempt)
	require.NoError(t, (<-other).err)
	require.NoError(t, (<-deleted).err)

	for id, want := range map[string]int{ids[0]: 1, ids[1]: 1} {
		c, err := s.GetConsumer(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, want, c.Attempt, id)
		require.Equal(t, webhooks.StateIdle, c.State, id)
	}
	_, err = s.GetConsumer(t.Context(), ids[2])
	require.ErrorIs(t, err, webhooks.ErrConsumerNotFound)
}

// TestBatchPanicFailsOnlyItsCaller panics in one fn of a batch: the panic
// reaches that caller alone, and the other update commits.
func TestBatchPanicFailsOnlyItsCaller(t *testing.T) {
	s := newStore(t)
	ids := consumers(t, s, "/a", "/b")
	release, queued := combinetest.Hold(t, &s.updates, &updateOp{ctx: t.Context()})
	panics := goUpdate(t.Context(), s, ids[0], func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
		c.Attempt = 9
		panic("boom")
	})
	queued(1)
	other := goUpdate(t.Context(), s, ids[1], bump)
	queued(2)
	release()
	require.Equal(t, "boom", (<-panics).panicked)
	o := <-other
	require.NoError(t, o.err)
	require.Nil(t, o.panicked)
	for id, want := range map[string]int{ids[0]: 0, ids[1]: 1} {
		c, err := s.GetConsumer(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, want, c.Attempt, id)
	}
}

// TestBatchCallerGivesUpWhileQueued cancels an update waiting for its
// batch: it returns at once, and its fn never runs.
func TestBatchCallerGivesUpWhileQueued(t *testing.T) {
	s := newStore(t)
	ids := consumers(t, s, "/a")
	release, queued := combinetest.Hold(t, &s.updates, &updateOp{ctx: t.Context()})
	defer release()
	ctx, cancel := context.WithCancel(t.Context())
	var ran atomic.Bool
	out := goUpdate(ctx, s, ids[0], func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
		ran.Store(true)
		return bump(c)
	})
	queued(1)
	cancel()
	require.ErrorIs(t, (<-out).err, context.Canceled)
	queued(0)
	release()
	c, err := s.UpdateConsumer(t.Context(), ids[0], bump)
	require.NoError(t, err)
	require.Equal(t, 1, c.Attempt)
	require.False(t, ran.Load())
}

// TestBatchesOfTwoStoresDoNotDeadlock updates random consumers from two
// stores on one database while the subscription that owns half of them is
// deleted. Its consumers are stored in the reverse of their ID order, so
// that a delete locking them as it finds them, while a batch locks them in
// ID order, would wait for the batch as it waits for the delete, which
// PostgreSQL would break by failing one of them. No update is lost.
func TestBatchesOfTwoStoresDoNotDeadlock(t *testing.T) {
	schema := pgtest.Schema(t)
	open := func() *Store {
		s, err := New(t.Context(), newPool(t, schema))
		require.NoError(t, err)
		return s
	}
	a, b := open(), open()
	ctx := t.Context()
	const n = 200
	var kept, doomed []string
	for _, sub := range []string{"keep", "doom"} {
		require.NoError(t, a.CreateSubscription(ctx, &webhooks.Subscription{ID: sub, Pattern: "/**", Webhook: "https://example.com/" + sub}))
		for i := n - 1; i >= 0; i-- {
			p := fmt.Sprintf("/%s/%03d", sub, i)
			c := &webhooks.Consumer{ID: webhooks.ConsumerID(sub, p), SubscriptionID: sub, PrimaryStream: p, State: webhooks.StateIdle,
				Streams: []webhooks.StreamOffset{{Path: p, Offset: webhooks.OffsetNone}}}
			require.NoError(t, a.CreateConsumer(ctx, c))
			if sub == "keep" {
				kept = append(kept, c.ID)
			} else {
				doomed = append(doomed, c.ID)
			}
		}
	}
	// The delete takes a while over each consumer, holding the ones it
	// has locked.
	_, err := a.pool.Exec(ctx, `CREATE FUNCTION slow_delete() RETURNS trigger LANGUAGE plpgsql AS
		$$ BEGIN PERFORM pg_sleep(0.001); RETURN OLD; END $$;
		CREATE TRIGGER slow_delete BEFORE DELETE ON streamhooks_consumers FOR EACH ROW EXECUTE FUNCTION slow_delete()`)
	require.NoError(t, err)
	all := append(append([]string(nil), kept...), doomed...)
	const workers = 16
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		bumps   = make(map[string]int)
		started sync.WaitGroup
		deleted = make(chan struct{})
	)
	started.Add(workers)
	for w := range workers {
		s := []*Store{a, b}[w%2]
		wg.Go(func() {
			for i := 0; ; i++ {
				if i == 10 {
					started.Done()
				}
				select {
				case <-deleted:
					if i > 10 {
						return
					}
				default:
				}
				id := all[rand.IntN(len(all))]
				_, err := s.UpdateConsumer(ctx, id, bump)
				if errors.Is(err, webhooks.ErrConsumerNotFound) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				bumps[id]++
				mu.Unlock()
			}
		})
	}
	started.Wait()
	err = b.DeleteSubscription(ctx, "doom")
	close(deleted)
	wg.Wait()
	require.NoError(t, err)
	for _, id := range kept {
		c, err := a.GetConsumer(ctx, id)
		require.NoError(t, err)
		require.Equal(t, bumps[id], c.Attempt, "updates of %s lost", id)
	}
	for _, id := range doomed {
		_, err := a.GetConsumer(ctx, id)
		require.ErrorIs(t, err, webhooks.ErrConsumerNotFound)
	}
}

// TestBatchRunsEachUpdateOnce makes many concurrent calls, as a busy
// engine does: each fn runs exactly once, since no write fails, and each
// caller gets back what its own fn stored.
func TestBatchRunsEachUpdateOnce(t *testing.T) {
	s := newStore(t)
	ids := consumers(t, s, "/a", "/b", "/c", "/d")
	const workers, calls = 32, 30
	var (
		runs atomic.Int64
		wg   sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			for i := range calls {
				id := ids[(w+i)%len(ids)]
				var mine int
				c, err := s.UpdateConsumer(t.Context(), id, func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
					runs.Add(1)
					c.Attempt++
					mine = c.Attempt
					return webhooks.UpdateSave, nil
				})
				if err != nil {
					t.Error(err)
					return
				}
				if c.Attempt != mine {
					t.Errorf("%s: stored attempt %d, returned %d", id, mine, c.Attempt)
					return
				}
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, workers*calls, runs.Load(), "fn runs")
	total := 0
	for _, id := range ids {
		c, err := s.GetConsumer(t.Context(), id)
		require.NoError(t, err)
		total += c.Attempt
	}
	require.Equal(t, workers*calls, total)
}

// TestBatchRunsConsumersAtOnce batches updates of two consumers whose fns
// each wait for the other to start: they run at once, as they would
// unbatched, so that slow StreamSource reads in a batch do not add up.
func TestBatchRunsConsumersAtOnce(t *testing.T) {
	s := newStore(t)
	ids := consumers(t, s, "/a", "/b")
	release, queued := combinetest.Hold(t, &s.updates, &updateOp{ctx: t.Context()})
	started := []chan struct{}{make(chan struct{}), make(chan struct{})}
	var outs []<-chan outcome
	for i, id := range ids {
		outs = append(outs, goUpdate(t.Context(), s, id, func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
			close(started[i])
			select {
			case <-started[1-i]:
			case <-time.After(10 * time.Second):
				return webhooks.UpdateNone, errors.New("the other update did not start meanwhile")
			}
			return bump(c)
		}))
		queued(len(outs))
	}
	release()
	for _, out := range outs {
		require.NoError(t, (<-out).err)
	}
}
