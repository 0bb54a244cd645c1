package memstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func newSub(id string) *webhooks.Subscription {
	return &webhooks.Subscription{ID: id, Pattern: "/**", Webhook: "https://example.com/" + id, Secret: "s", CreatedAt: t0}
}

func newConsumer(sub, path string) *webhooks.Consumer {
	return &webhooks.Consumer{
		ID:             webhooks.ConsumerID(sub, path),
		SubscriptionID: sub,
		PrimaryStream:  path,
		State:          webhooks.StateIdle,
		Streams:        []webhooks.StreamOffset{{Path: path, Offset: webhooks.OffsetNone}},
		CreatedAt:      t0,
		UpdatedAt:      t0,
	}
}

// setup returns a store holding subscription "s" and consumers on paths.
func setup(t testing.TB, paths ...string) *Store {
	t.Helper()
	s := New()
	ctx := context.Background()
	require.NoError(t, s.CreateSubscription(ctx, newSub("s")))
	for _, p := range paths {
		require.NoError(t, s.CreateConsumer(ctx, newConsumer("s", p)))
	}
	return s
}

func save(fn func(c *webhooks.Consumer)) func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
	return func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
		fn(c)
		return webhooks.UpdateSave, nil
	}
}

func ids(cs []*webhooks.Consumer) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.ID
	}
	return out
}

func TestSubscriptions(t *testing.T) {
	ctx := context.Background()
	s := New()

	_, err := s.GetSubscription(ctx, "a")
	require.ErrorIs(t, err, webhooks.ErrSubscriptionNotFound)
	require.ErrorIs(t, s.DeleteSubscription(ctx, "a"), webhooks.ErrSubscriptionNotFound)

	in := newSub("b")
	require.NoError(t, s.CreateSubscription(ctx, in))
	require.ErrorIs(t, s.CreateSubscription(ctx, newSub("b")), webhooks.ErrSubscriptionExists)
	require.NoError(t, s.CreateSubscription(ctx, newSub("c")))
	require.NoError(t, s.CreateSubscription(ctx, newSub("a")))

	in.Webhook = "mutated after create"
	got, err := s.GetSubscription(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, newSub("b"), got)
	got.Webhook = "mutated after get"
	got, err = s.GetSubscription(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, newSub("b"), got)

	list, err := s.ListSubscriptions(ctx)
	require.NoError(t, err)
	require.Equal(t, []*webhooks.Subscription{newSub("a"), newSub("b"), newSub("c")}, list)
	list[0].Webhook = "mutated after list"
	got, err = s.GetSubscription(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, newSub("a"), got)

	require.NoError(t, s.DeleteSubscription(ctx, "b"))
	_, err = s.GetSubscription(ctx, "b")
	require.ErrorIs(t, err, webhooks.ErrSubscriptionNotFound)
	require.ErrorIs(t, s.DeleteSubscription(ctx, "b"), webhooks.ErrSubscriptionNotFound)
	list, err = s.ListSubscriptions(ctx)
	require.NoError(t, err)
	require.Equal(t, []*webhooks.Subscription{newSub("a"), newSub("c")}, list)
}

func TestCreateAndGetConsumer(t *testing.T) {
	ctx := context.Background()
	s := setup(t)

	require.ErrorIs(t, s.CreateConsumer(ctx, newConsumer("nope", "/a")), webhooks.ErrSubscriptionNotFound)
	_, err := s.GetConsumer(ctx, webhooks.ConsumerID("s", "/a"))
	require.ErrorIs(t, err, webhooks.ErrConsumerNotFound)

	in := newConsumer("s", "/a")
	in.WakeTails = []webhooks.StreamOffset{{Path: "/a", Offset: "5"}}
	in.TriggeredBy = []string{"/a"}
	want := in.Clone()
	require.NoError(t, s.CreateConsumer(ctx, in))
	require.ErrorIs(t, s.CreateConsumer(ctx, newConsumer("s", "/a")), webhooks.ErrConsumerExists)

	in.Streams[0].Offset = "mutated"
	in.WakeTails[0].Offset = "mutated"
	in.TriggeredBy[0] = "mutated"
	got, err := s.GetConsumer(ctx, want.ID)
	require.NoError(t, err)
	require.Equal(t, want, got)

	got.Streams[0].Offset = "mutated"
	got.WakeTails[0].Offset = "mutated"
	got.TriggeredBy[0] = "mutated"
	got, err = s.GetConsumer(ctx, want.ID)
	require.NoError(t, err)
	require.Equal(t, want, got)
}

func TestUpdateConsumer(t *testing.T) {
	ctx := context.Background()
	id := webhooks.ConsumerID("s", "/a")

	t.Run("not found does not call fn", func(t *testing.T) {
		s := setup(t)
		_, err := s.UpdateConsumer(ctx, id, func(*webhooks.Consumer) (webhooks.UpdateAction, error) {
			t.Fatal("fn called")
			return webhooks.UpdateNone, nil
		})
		require.ErrorIs(t, err, webhooks.ErrConsumerNotFound)
	})

	t.Run("none keeps the stored consumer", func(t *testing.T) {
		s := setup(t, "/a")
		got, err := s.UpdateConsumer(ctx, id, func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
			c.Epoch = 9
			c.Streams[0].Offset = "9"
			return webhooks.UpdateNone, nil
		})
		require.NoError(t, err)
		require.Equal(t, newConsumer("s", "/a"), got)
		stored, err := s.GetConsumer(ctx, id)
		require.NoError(t, err)
		require.Equal(t, newConsumer("s", "/a"), stored)
	})

	t.Run("save stores a private copy", func(t *testing.T) {
		s := setup(t, "/a")
		var kept *webhooks.Consumer
		got, err := s.UpdateConsumer(ctx, id, func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
			c.Epoch = 1
			c.State = webhooks.StateWaking
			c.Streams[0].Offset = "1"
			kept = c
			return webhooks.UpdateSave, nil
		})
		require.NoError(t, err)
		want := newConsumer("s", "/a")
		want.Epoch = 1
		want.State = webhooks.StateWaking
		want.Streams[0].Offset = "1"
		require.Equal(t, want, got)

		kept.Streams[0].Offset = "kept"
		got.Streams[0].Offset = "returned"
		stored, err := s.GetConsumer(ctx, id)
		require.NoError(t, err)
		require.Equal(t, want, stored)
	})

	t.Run("fn sees a private copy", func(t *testing.T) {
		s := setup(t, "/a")
		_, err := s.UpdateConsumer(ctx, id, func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
			c.Streams[0].Offset = "changed"
			return webhooks.UpdateNone, nil
		})
		require.NoError(t, err)
		_, err = s.UpdateConsumer(ctx, id, func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
			require.Equal(t, newConsumer("s", "/a"), c)
			return webhooks.UpdateNone, nil
		})
		require.NoError(t, err)
	})

	t.Run("fn error changes nothing", func(t *testing.T) {
		s := setup(t, "/a")
		boom := errors.New("boom")
		got, err := s.UpdateConsumer(ctx, id, func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
			c.Epoch = 5
			c.Deadline = t0
			return webhooks.UpdateDelete, fmt.Errorf("wrapped: %w", boom)
		})
		require.ErrorIs(t, err, boom)
		require.Nil(t, got)
		stored, err := s.GetConsumer(ctx, id)
		require.NoError(t, err)
		require.Equal(t, newConsumer("s", "/a"), stored)
		_, ok, err := s.NextDeadline(ctx)
		require.NoError(t, err)
		require.False(t, ok)
	})

	t.Run("delete removes the consumer everywhere", func(t *testing.T) {
		s := setup(t, "/a", "/b")
		_, err := s.UpdateConsumer(ctx, id, save(func(c *webhooks.Consumer) {
			c.Deadline = t0
			c.Streams = append(c.Streams, webhooks.StreamOffset{Path: "/b", Offset: "0"})
		}))
		require.NoError(t, err)
		got, err := s.UpdateConsumer(ctx, id, func(*webhooks.Consumer) (webhooks.UpdateAction, error) {
			return webhooks.UpdateDelete, nil
		})
		require.NoError(t, err)
		require.Nil(t, got)

		_, err = s.GetConsumer(ctx, id)
		require.ErrorIs(t, err, webhooks.ErrConsumerNotFound)
		for _, p := range []string{"/a", "/b"} {
			cs, err := s.ConsumersByStream(ctx, p)
			require.NoError(t, err)
			require.NotContains(t, ids(cs), id)
		}
		_, ok, err := s.NextDeadline(ctx)
		require.NoError(t, err)
		require.False(t, ok)
		counts, err := s.CountConsumers(ctx)
		require.NoError(t, err)
		require.Equal(t, map[webhooks.ConsumerState]int{webhooks.StateIdle: 1}, counts)
		// The ID is free again.
		require.NoError(t, s.CreateConsumer(ctx, newConsumer("s", "/a")))
	})

	t.Run("identity changes are rejected", func(t *testing.T) {
		s := setup(t, "/a")
		for _, change := range []func(c *webhooks.Consumer){
			func(c *webhooks.Consumer) { c.ID = "s:other" },
			func(c *webhooks.Consumer) { c.SubscriptionID = "other" },
			func(c *webhooks.Consumer) { c.PrimaryStream = "/other" },
		} {
			_, err := s.UpdateConsumer(ctx, id, save(change))
			require.Error(t, err)
		}
		stored, err := s.GetConsumer(ctx, id)
		require.NoError(t, err)
		require.Equal(t, newConsumer("s", "/a"), stored)
	})

	t.Run("unknown action is rejected", func(t *testing.T) {
		s := setup(t, "/a")
		_, err := s.UpdateConsumer(ctx, id, func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
			c.Epoch = 3
			return webhooks.UpdateAction(42), nil
		})
		require.Error(t, err)
		stored, err := s.GetConsumer(ctx, id)
		require.NoError(t, err)
		require.Equal(t, newConsumer("s", "/a"), stored)
	})
}

func TestUpdateConsumerNoLostUpdate(t *testing.T) {
	ctx := context.Background()
	s := setup(t, "/a")
	id := webhooks.ConsumerID("s", "/a")
	const workers, increments = 8, 500
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range increments {
				_, err := s.UpdateConsumer(ctx, id, save(func(c *webhooks.Consumer) { c.Epoch++ }))
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	got, err := s.GetConsumer(ctx, id)
	require.NoError(t, err)
	require.EqualValues(t, workers*increments, got.Epoch)
}

// TestDeleteSubscriptionRace races two deletes of a subscription against a
// save and a create of its consumers: afterwards no consumer may remain, in the store or
// in any index.
func TestDeleteSubscriptionRace(t *testing.T) {
	ctx := context.Background()
	id := webhooks.ConsumerID("s", "/a")
	for range 300 {
		s := setup(t, "/a")
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Go(func() {
			<-start
			_, err := s.UpdateConsumer(ctx, id, save(func(c *webhooks.Consumer) {
				c.Epoch++
				c.Deadline = t0
				c.Streams = append(c.Streams, webhooks.StreamOffset{Path: "/x", Offset: "0"})
			}))
			if err != nil && !errors.Is(err, webhooks.ErrConsumerNotFound) {
				t.Error(err)
			}
		})
		wg.Go(func() {
			<-start
			err := s.CreateConsumer(ctx, newConsumer("s", "/b"))
			if err != nil && !errors.Is(err, webhooks.ErrSubscriptionNotFound) {
				t.Error(err)
			}
		})
		var deletes atomic.Int32
		for range 2 {
			wg.Go(func() {
				<-start
				err := s.DeleteSubscription(ctx, "s")
				if err == nil {
					deletes.Add(1)
				} else if !errors.Is(err, webhooks.ErrSubscriptionNotFound) {
					t.Error(err)
				}
			})
		}
		close(start)
		wg.Wait()
		require.EqualValues(t, 1, deletes.Load(), "exactly one delete succeeds")

		requireEmpty(t, s, "/a", "/b", "/x")
	}
}

// TestDeleteSubscriptionWaitsForUpdate deletes a subscription while an update
// of its consumer is inside fn: the update commits, then the delete removes
// it.
func TestDeleteSubscriptionWaitsForUpdate(t *testing.T) {
	ctx := context.Background()
	s := setup(t, "/a")
	id := webhooks.ConsumerID("s", "/a")
	deleted := make(chan error)
	got, err := s.UpdateConsumer(ctx, id, save(func(c *webhooks.Consumer) {
		go func() { deleted <- s.DeleteSubscription(ctx, "s") }()
		c.Epoch = 7
	}))
	require.NoError(t, err)
	require.EqualValues(t, 7, got.Epoch)
	require.NoError(t, <-deleted)
	requireEmpty(t, s, "/a")
}

func requireEmpty(t *testing.T, s *Store, paths ...string) {
	t.Helper()
	ctx := context.Background()
	for _, p := range paths {
		cs, err := s.ConsumersByStream(ctx, p)
		require.NoError(t, err)
		require.Empty(t, cs, p)
		_, err = s.GetConsumer(ctx, webhooks.ConsumerID("s", p))
		require.ErrorIs(t, err, webhooks.ErrConsumerNotFound)
	}
	_, ok, err := s.NextDeadline(ctx)
	require.NoError(t, err)
	require.False(t, ok)
	counts, err := s.CountConsumers(ctx)
	require.NoError(t, err)
	require.Empty(t, counts)
}

func TestConsumersByStream(t *testing.T) {
	ctx := context.Background()
	s := setup(t, "/b", "/a")
	a, b := webhooks.ConsumerID("s", "/a"), webhooks.ConsumerID("s", "/b")
	byStream := func(path string) []string {
		t.Helper()
		cs, err := s.ConsumersByStream(ctx, path)
		require.NoError(t, err)
		return ids(cs)
	}
	update := func(id string, fn func(c *webhooks.Consumer)) {
		t.Helper()
		_, err := s.UpdateConsumer(ctx, id, save(fn))
		require.NoError(t, err)
	}
	addX := func(c *webhooks.Consumer) {
		c.Streams = append(c.Streams, webhooks.StreamOffset{Path: "/x", Offset: "0"})
	}

	require.Equal(t, []string{a}, byStream("/a"))
	require.Empty(t, byStream("/x"))

	update(b, addX)
	update(a, addX)
	require.Equal(t, []string{a, b}, byStream("/x"), "ordered by ID")
	// A path listed twice is indexed once.
	update(a, addX)
	require.Equal(t, []string{a, b}, byStream("/x"))

	update(a, func(c *webhooks.Consumer) {
		c.Streams = slices.DeleteFunc(c.Streams, func(so webhooks.StreamOffset) bool { return so.Path == "/x" })
	})
	require.Equal(t, []string{b}, byStream("/x"))

	// Unsubscribed from its primary stream, a consumer is still found by it.
	update(a, func(c *webhooks.Consumer) { c.Streams = nil })
	require.Equal(t, []string{a}, byStream("/a"))
	update(a, func(c *webhooks.Consumer) { c.Streams = []webhooks.StreamOffset{{Path: "/y", Offset: "0"}} })
	require.Equal(t, []string{a}, byStream("/a"))
	require.Equal(t, []string{a}, byStream("/y"))

	cs, err := s.ConsumersByStream(ctx, "/x")
	require.NoError(t, err)
	cs[0].Streams[0].Offset = "mutated"
	got, err := s.GetConsumer(ctx, b)
	require.NoError(t, err)
	require.Equal(t, webhooks.OffsetNone, got.Streams[0].Offset)
}

func TestDeadlines(t *testing.T) {
	ctx := context.Background()
	s := setup(t, "/a", "/b", "/c", "/d", "/e")
	id := func(p string) string { return webhooks.ConsumerID("s", p) }
	setDeadline := func(p string, d time.Time) {
		t.Helper()
		_, err := s.UpdateConsumer(ctx, id(p), save(func(c *webhooks.Consumer) { c.Deadline = d }))
		require.NoError(t, err)
	}
	due := func(now time.Time, limit int) []string {
		t.Helper()
		cs, err := s.DueConsumers(ctx, now, limit)
		require.NoError(t, err)
		return ids(cs)
	}
	next := func() time.Time {
		t.Helper()
		d, ok, err := s.NextDeadline(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		return d
	}

	_, ok, err := s.NextDeadline(ctx)
	require.NoError(t, err)
	require.False(t, ok)
	require.Empty(t, due(t0.Add(time.Hour), 10))

	setDeadline("/c", t0.Add(3*time.Second))
	setDeadline("/b", t0.Add(1*time.Second))
	setDeadline("/d", t0.Add(2*time.Second))
	setDeadline("/a", t0.Add(1*time.Second))
	// "/e" has no deadline and is never due.

	require.Equal(t, t0.Add(time.Second), next())
	require.Equal(t, []string{id("/a"), id("/b"), id("/d")}, due(t0.Add(2*time.Second), 10), "deadline not after now, then by ID")
	require.Equal(t, []string{id("/a"), id("/b")}, due(t0.Add(time.Hour), 2))
	require.Empty(t, due(t0.Add(time.Hour), 0))
	require.Empty(t, due(t0, 10))

	setDeadline("/c", t0.Add(time.Millisecond))
	require.Equal(t, t0.Add(time.Millisecond), next())
	require.Equal(t, []string{id("/c"), id("/a"), id("/b")}, due(t0.Add(time.Second), 10))

	setDeadline("/c", time.Time{})
	require.Equal(t, []string{id("/a"), id("/b"), id("/d")}, due(t0.Add(time.Hour), 10))

	_, err = s.UpdateConsumer(ctx, id("/a"), func(*webhooks.Consumer) (webhooks.UpdateAction, error) {
		return webhooks.UpdateDelete, nil
	})
	require.NoError(t, err)
	require.Equal(t, []string{id("/b"), id("/d")}, due(t0.Add(time.Hour), 10))

	cs, err := s.DueConsumers(ctx, t0.Add(time.Hour), 1)
	require.NoError(t, err)
	cs[0].Deadline = time.Time{}
	require.Equal(t, t0.Add(time.Second), next())
}

// TestDeadlinesRandom checks DueConsumers and NextDeadline against a sort of
// all consumers after random schedule changes, exercising every heap path.
func TestDeadlinesRandom(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 300
	paths := make([]string, n)
	for i := range paths {
		paths[i] = fmt.Sprintf("/p%d", i)
	}
	s := setup(t, paths...)
	want := make(map[string]time.Time) // consumer ID -> deadline, zero if unscheduled
	for _, p := range paths {
		want[webhooks.ConsumerID("s", p)] = time.Time{}
	}
	for step := range 3000 {
		id := webhooks.ConsumerID("s", paths[rng.IntN(n)])
		if _, ok := want[id]; !ok {
			continue
		}
		switch r := rng.IntN(10); {
		case r == 0:
			_, err := s.UpdateConsumer(ctx, id, func(*webhooks.Consumer) (webhooks.UpdateAction, error) {
				return webhooks.UpdateDelete, nil
			})
			require.NoError(t, err)
			delete(want, id)
		default:
			var d time.Time
			if r > 2 {
				d = t0.Add(time.Duration(rng.IntN(50)) * time.Second) // few values, many ties
			}
			_, err := s.UpdateConsumer(ctx, id, save(func(c *webhooks.Consumer) { c.Deadline = d }))
			require.NoError(t, err)
			want[id] = d
		}
		if step%50 != 0 {
			continue
		}
		now := t0.Add(time.Duration(rng.IntN(60)) * time.Second)
		limit := rng.IntN(n)
		var sched, dueIDs []string
		for cid, d := range want {
			if !d.IsZero() {
				sched = append(sched, cid)
			}
		}
		slices.SortFunc(sched, func(a, b string) int {
			if c := want[a].Compare(want[b]); c != 0 {
				return c
			}
			return strings.Compare(a, b)
		})
		for _, cid := range sched {
			if len(dueIDs) < limit && !want[cid].After(now) {
				dueIDs = append(dueIDs, cid)
			}
		}
		cs, err := s.DueConsumers(ctx, now, limit)
		require.NoError(t, err)
		require.Equal(t, dueIDs, nilIfEmpty(ids(cs)))
		next, ok, err := s.NextDeadline(ctx)
		require.NoError(t, err)
		require.Equal(t, len(sched) > 0, ok)
		if ok {
			require.Equal(t, want[sched[0]], next)
		}
	}
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

func TestDeleteSubscriptionCascades(t *testing.T) {
	ctx := context.Background()
	s := New()
	require.NoError(t, s.CreateSubscription(ctx, newSub("s")))
	require.NoError(t, s.CreateSubscription(ctx, newSub("t")))
	for _, sub := range []string{"s", "t"} {
		for _, p := range []string{"/a", "/b"} {
			c := newConsumer(sub, p)
			c.Deadline = t0
			c.Streams = append(c.Streams, webhooks.StreamOffset{Path: "/shared", Offset: "0"})
			require.NoError(t, s.CreateConsumer(ctx, c))
		}
	}

	require.NoError(t, s.DeleteSubscription(ctx, "s"))

	tIDs := []string{webhooks.ConsumerID("t", "/a"), webhooks.ConsumerID("t", "/b")}
	for _, p := range []string{"/a", "/b"} {
		_, err := s.GetConsumer(ctx, webhooks.ConsumerID("s", p))
		require.ErrorIs(t, err, webhooks.ErrConsumerNotFound)
		cs, err := s.ConsumersByStream(ctx, p)
		require.NoError(t, err)
		require.Equal(t, []string{webhooks.ConsumerID("t", p)}, ids(cs))
	}
	cs, err := s.ConsumersByStream(ctx, "/shared")
	require.NoError(t, err)
	require.Equal(t, tIDs, ids(cs))
	cs, err = s.DueConsumers(ctx, t0, 10)
	require.NoError(t, err)
	require.Equal(t, tIDs, ids(cs))
	counts, err := s.CountConsumers(ctx)
	require.NoError(t, err)
	require.Equal(t, map[webhooks.ConsumerState]int{webhooks.StateIdle: 2}, counts)

	require.ErrorIs(t, s.CreateConsumer(ctx, newConsumer("s", "/c")), webhooks.ErrSubscriptionNotFound)
	// A new subscription under the old ID starts without consumers.
	require.NoError(t, s.CreateSubscription(ctx, newSub("s")))
	_, err = s.GetConsumer(ctx, webhooks.ConsumerID("s", "/a"))
	require.ErrorIs(t, err, webhooks.ErrConsumerNotFound)
	require.NoError(t, s.CreateConsumer(ctx, newConsumer("s", "/a")))
	require.NoError(t, s.DeleteSubscription(ctx, "s"))
}

func TestCountConsumers(t *testing.T) {
	ctx := context.Background()
	s := setup(t, "/a", "/b", "/c")
	counts, err := s.CountConsumers(ctx)
	require.NoError(t, err)
	require.Equal(t, map[webhooks.ConsumerState]int{webhooks.StateIdle: 3}, counts)

	counts[webhooks.StateIdle] = 100 // the map is the caller's
	for p, st := range map[string]webhooks.ConsumerState{"/a": webhooks.StateWaking, "/b": webhooks.StateLive} {
		_, err := s.UpdateConsumer(ctx, webhooks.ConsumerID("s", p), save(func(c *webhooks.Consumer) { c.State = st }))
		require.NoError(t, err)
	}
	counts, err = s.CountConsumers(ctx)
	require.NoError(t, err)
	require.Equal(t, map[webhooks.ConsumerState]int{
		webhooks.StateIdle: 1, webhooks.StateWaking: 1, webhooks.StateLive: 1,
	}, counts)

	_, err = s.UpdateConsumer(ctx, webhooks.ConsumerID("s", "/a"), save(func(c *webhooks.Consumer) { c.State = webhooks.StateLive }))
	require.NoError(t, err)
	counts, err = s.CountConsumers(ctx)
	require.NoError(t, err)
	require.Equal(t, map[webhooks.ConsumerState]int{webhooks.StateIdle: 1, webhooks.StateLive: 2}, counts)
}

func TestLoadOrStoreSigningKey(t *testing.T) {
	ctx := context.Background()
	s := New()
	_, err := s.LoadOrStoreSigningKey(ctx, nil)
	require.Error(t, err)

	first := []byte("first key")
	got, err := s.LoadOrStoreSigningKey(ctx, first)
	require.NoError(t, err)
	require.Equal(t, []byte("first key"), got)
	first[0] = 'X'
	got[1] = 'X'

	got, err = s.LoadOrStoreSigningKey(ctx, []byte("second key"))
	require.NoError(t, err)
	require.Equal(t, []byte("first key"), got)
}

func BenchmarkUpdateConsumer(b *testing.B) {
	ctx := context.Background()
	const n = 1024
	paths := make([]string, n)
	for i := range paths {
		paths[i] = fmt.Sprintf("/stream/%d", i)
	}
	s := setup(b, paths...)
	ids := make([]string, n)
	for i, p := range paths {
		ids[i] = webhooks.ConsumerID("s", p)
	}
	// A wake-like update: new epoch, state and deadline, so the deadline heap
	// and state counts are maintained on every call.
	wake := save(func(c *webhooks.Consumer) {
		c.Epoch++
		c.State = webhooks.StateWaking
		c.Deadline = t0.Add(time.Duration(c.Epoch) * time.Second)
	})

	b.Run("serial", func(b *testing.B) {
		i := 0
		for b.Loop() {
			if _, err := s.UpdateConsumer(ctx, ids[i%n], wake); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			i := rand.IntN(n)
			for pb.Next() {
				if _, err := s.UpdateConsumer(ctx, ids[i%n], wake); err != nil {
					b.Error(err)
					return
				}
				i++
			}
		})
	})
}

// BenchmarkIdleConsumerMemory reports the live heap per idle consumer with one
// stream, counting the consumer's own strings and every index.
func BenchmarkIdleConsumerMemory(b *testing.B) {
	const n = 100_000
	ctx := context.Background()
	var perConsumer float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s := New()
		require.NoError(b, s.CreateSubscription(ctx, newSub("s")))
		for i := range n {
			require.NoError(b, s.CreateConsumer(ctx, newConsumer("s", fmt.Sprintf("/tenants/%07d/events", i))))
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(s)
		perConsumer = float64(after.HeapAlloc-before.HeapAlloc) / n
	}
	b.ReportMetric(perConsumer, "B/consumer")
}
