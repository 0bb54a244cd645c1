package memstore

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

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

func TestConformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) webhooks.Store { return New() })
}

// TestUpdateConsumerRejects covers what the Store contract leaves to the
// implementation: memstore refuses to save a changed identity or an unknown
// action.
func TestUpdateConsumerRejects(t *testing.T) {
	ctx := context.Background()
	id := webhooks.ConsumerID("s", "/a")

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

// UpdateConsumer hands back fn's copy, not another, so it must look as
// every other read does: empty lists nil.
func TestUpdateConsumerReturnsAsStored(t *testing.T) {
	s := setup(t, "/a")
	id := webhooks.ConsumerID("s", "/a")
	got, err := s.UpdateConsumer(context.Background(), id, func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
		c.WakeTails, c.TriggeredBy = []webhooks.StreamOffset{}, []string{}
		c.Attempt = 1
		return webhooks.UpdateSave, nil
	})
	require.NoError(t, err)
	stored, err := s.GetConsumer(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, stored, got)
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
	require.Empty(t, counts, "states without consumers are left out")
}

// TestDueConsumersTies checks what memstore adds to the contract: equal
// deadlines come in ID order, and a limit below one returns nothing.
func TestDueConsumersTies(t *testing.T) {
	ctx := context.Background()
	paths := []string{"/e", "/b", "/d", "/a", "/c", "/f"}
	s := setup(t, paths...)
	for i, p := range paths {
		_, err := s.UpdateConsumer(ctx, webhooks.ConsumerID("s", p), save(func(c *webhooks.Consumer) {
			c.Deadline = t0.Add(time.Duration(i%2) * time.Second)
		}))
		require.NoError(t, err)
	}
	// "/e", "/d", "/c" are due at t0; "/b", "/a", "/f" a second later.
	want := []string{"/c", "/d", "/e", "/a", "/b", "/f"}
	for i, p := range want {
		want[i] = webhooks.ConsumerID("s", p)
	}
	for limit := range len(want) + 1 {
		cs, err := s.DueConsumers(ctx, t0.Add(time.Second), limit)
		require.NoError(t, err)
		require.Equal(t, want[:limit], ids(cs), "limit %d", limit)
	}
	cs, err := s.DueConsumers(ctx, t0.Add(time.Second), -1)
	require.NoError(t, err)
	require.Empty(t, cs)
}

func TestEmptySigningKeyRejected(t *testing.T) {
	ctx := context.Background()
	s := New()
	_, err := s.LoadOrStoreSigningKey(ctx, nil)
	require.Error(t, err)
	_, err = s.LoadOrStoreSigningKey(ctx, []byte{})
	require.Error(t, err)
	key, err := s.LoadOrStoreSigningKey(ctx, []byte("k"))
	require.NoError(t, err)
	require.Equal(t, []byte("k"), key, "a rejected empty key is not stored")
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

// TestUpdateHealthDoesNotNotify checks that a health update leaves the
// watchers alone, where a subscription update wakes them.
func TestUpdateHealthDoesNotNotify(t *testing.T) {
	s := setup(t)
	changed := s.subsChanged
	_, err := s.UpdateHealth(t.Context(), "s", func(h *webhooks.SubscriptionHealth) { h.ConsecutiveFailures++ })
	require.NoError(t, err)
	select {
	case <-changed:
		t.Fatal("UpdateHealth woke the subscription watchers")
	default:
	}
	_, err = s.UpdateSubscription(t.Context(), "s", func(*webhooks.Subscription) error { return nil })
	require.NoError(t, err)
	select {
	case <-changed:
	default:
		t.Fatal("UpdateSubscription did not wake the subscription watchers")
	}
}

func BenchmarkListConsumers(b *testing.B) {
	storetest.BenchmarkListConsumers(b, New())
}

// TestListConsumersAcrossChunks pages through more consumers than one
// chunk of an idList holds, as they are created, moved between states and
// deleted, against a sorted list of IDs.
func TestListConsumersAcrossChunks(t *testing.T) {
	ctx := context.Background()
	s := setup(t)
	want := make(map[string]webhooks.ConsumerState)
	for i := range 5 * maxChunk {
		// Created out of order: 7 and the count are coprime.
		c := newConsumer("s", fmt.Sprintf("/%05d", i*7%(5*maxChunk)))
		require.NoError(t, s.CreateConsumer(ctx, c))
		want[c.ID] = c.State
	}
	check := func(state webhooks.ConsumerState) {
		t.Helper()
		var ids []string
		for id, st := range want {
			if state == "" || st == state {
				ids = append(ids, id)
			}
		}
		slices.Sort(ids)
		var got []string
		p := &webhooks.ListConsumersParams{SubscriptionID: "s", State: state, Limit: 97}
		for {
			page, err := s.ListConsumers(ctx, p)
			require.NoError(t, err)
			for _, c := range page {
				got = append(got, c.ID)
			}
			if len(page) < p.Limit {
				break
			}
			p.After = page[len(page)-1].ID
		}
		require.Equal(t, ids, got, "state %q", state)
	}
	check("")
	i := 0
	for id := range want {
		switch i % 3 {
		case 0:
			_, err := s.UpdateConsumer(ctx, id, func(*webhooks.Consumer) (webhooks.UpdateAction, error) { return webhooks.UpdateDelete, nil })
			require.NoError(t, err)
			delete(want, id)
		case 1:
			_, err := s.UpdateConsumer(ctx, id, save(func(c *webhooks.Consumer) { c.State = webhooks.StateLive }))
			require.NoError(t, err)
			want[id] = webhooks.StateLive
		}
		i++
	}
	check("")
	check(webhooks.StateIdle)
	check(webhooks.StateLive)
}

func BenchmarkDSCost(b *testing.B) {
	storetest.BenchmarkDSCost(b, New())
}

func BenchmarkDSCostRatio(b *testing.B) {
	storetest.BenchmarkDSCostRatio(b, New())
}

// liveHeap returns the live heap after a GC.
func liveHeap() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// A consumer's delivery log after one successful attempt, the state of
// every consumer woken once, costs about 100 bytes: a slice of
// DeliveryAttempt in a map by consumer took about 200, a fifth of the
// memory of such a consumer.
func TestDeliveryLogOfOneAttemptIsSmall(t *testing.T) {
	const n = 10_000
	ctx := context.Background()
	s := New()
	require.NoError(t, s.CreateSubscription(ctx, newSub("s")))
	for i := range n {
		require.NoError(t, s.CreateConsumer(ctx, newConsumer("s", fmt.Sprintf("/t/%05d", i))))
	}
	before := liveHeap()
	for i := range n {
		id := webhooks.ConsumerID("s", fmt.Sprintf("/t/%05d", i))
		a := &webhooks.DeliveryAttempt{ConsumerID: id, At: t0, DeliveryID: fmt.Sprintf("w_%026d", i), Attempt: 1,
			StatusCode: 200, Latency: time.Millisecond, ResponseBody: `{"done":true}`}
		require.NoError(t, s.AppendAttempts(ctx, []*webhooks.DeliveryAttempt{a}, 10))
	}
	per := float64(liveHeap()-before) / n
	runtime.KeepAlive(s)
	require.LessOrEqual(t, per, 120.0, "bytes per consumer")
	got, err := s.ListAttempts(ctx, webhooks.ConsumerID("s", "/t/00042"), 10)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, `{"done":true}`, got[0].ResponseBody)
}

// A consumer's wake and its return to IDLE rewrite its encoding in the
// slice it was created with: what a woken consumer keeps is then not
// allocated among the wake's garbage, where it would pin partly empty
// memory that the GC cannot give back (the RSS per woken consumer was
// twice its heap).
func TestWakeRewritesConsumerInPlace(t *testing.T) {
	ctx := context.Background()
	path := "/tenants/0000042/agents/0000007/events"
	s := setup(t, path)
	id := webhooks.ConsumerID("s", path)
	data := unsafe.SliceData(s.consumers[id].data)
	tail := "0000000000000042"
	_, err := s.UpdateConsumer(ctx, id, save(func(c *webhooks.Consumer) {
		c.State, c.Epoch, c.WakeID = webhooks.StateWaking, c.Epoch+1, "w_0123456789abcdef0123456789abcdef"
		c.WakeTails = []webhooks.StreamOffset{{Path: path, Offset: tail}}
		c.TriggeredBy = []string{path}
		c.Attempt, c.InFlight, c.Deadline, c.UpdatedAt = 1, true, t0.Add(time.Minute), t0.Add(time.Second)
	}))
	require.NoError(t, err)
	require.Same(t, data, unsafe.SliceData(s.consumers[id].data), "the wake")
	got, err := s.UpdateConsumer(ctx, id, save(func(c *webhooks.Consumer) {
		c.State, c.InFlight, c.Deadline = webhooks.StateIdle, false, time.Time{}
		c.Streams[0].Offset, c.WakeTails, c.TriggeredBy = tail, nil, nil
	}))
	require.NoError(t, err)
	require.Same(t, data, unsafe.SliceData(s.consumers[id].data), "the return to IDLE")
	stored, err := s.GetConsumer(ctx, id)
	require.NoError(t, err)
	require.Equal(t, got, stored)
	require.Equal(t, tail, stored.Streams[0].Offset)
	require.Equal(t, "w_0123456789abcdef0123456789abcdef", stored.WakeID)
}
