package storetest

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
)

// reopener opens the store kept in one directory and closes it again.
type reopener struct {
	t    *testing.T
	open func(t *testing.T, dir string) webhooks.Store
	dir  string
	cur  webhooks.Store
}

// reopen closes the open store, if any, and opens the directory again.
func (r *reopener) reopen() webhooks.Store {
	r.t.Helper()
	r.close()
	s := r.open(r.t, r.dir)
	require.NotNil(r.t, s, "open returned a nil Store")
	if _, ok := s.(io.Closer); !ok {
		r.t.Fatalf("storetest: RunDurable needs a Store that implements io.Closer, and %T does not", s)
	}
	r.cur = s
	return s
}

func (r *reopener) close() {
	r.t.Helper()
	if r.cur == nil {
		return
	}
	c := r.cur.(io.Closer)
	r.cur = nil
	require.NoError(r.t, c.Close(), "closing the store")
}

type durableTest struct {
	name string
	fn   func(t *testing.T, r *reopener)
}

var durableTests = []durableTest{
	{"Empty", testDurableEmpty},
	{"Everything", testDurableEverything},
	{"Updates", testDurableUpdates},
	{"SubscriptionUpdate", testDurableSubscriptionUpdate},
	{"Deletes", testDurableDeletes},
	{"HealthAndDeliveryLog", testDurableHealthAndLog},
	{"WebhookKeys", testDurableWebhookKeys},
	{"DS", testDurableDS},
}

// durableFixture is what testDurableEverything and testDurableDeletes
// store: two subscriptions, a consumer with every field set, one with none
// set but its identity, and scheduled consumers on a shared stream.
type durableFixture struct {
	subs      []*webhooks.Subscription
	consumers []*webhooks.Consumer
	key       []byte
}

func newDurableFixture() *durableFixture {
	f := &durableFixture{
		subs: []*webhooks.Subscription{newSub("s"), newSub("t")},
		consumers: []*webhooks.Consumer{
			fullConsumer("s", "/full"),
			{ID: webhooks.ConsumerID("s", "/bare"), SubscriptionID: "s", PrimaryStream: "/bare", State: webhooks.StateIdle},
		},
		key: []byte("durable key\x00\xff"),
	}
	for i, sub := range []string{"s", "t", "t"} {
		c := newConsumer(sub, []string{"/x", "/x", "/y"}[i])
		c.State = webhooks.StateLive
		c.Epoch = int64(i + 1)
		c.Deadline = at(time.Duration(i+1)*time.Second + time.Nanosecond)
		c.Streams = append(c.Streams, webhooks.StreamOffset{Path: "/shared", Offset: "7"})
		f.consumers = append(f.consumers, c)
	}
	return f
}

func (f *durableFixture) store(t *testing.T, s webhooks.Store) {
	t.Helper()
	mustCreateSub(t, s, f.subs...)
	mustCreate(t, s, f.consumers...)
	key, err := s.LoadOrStoreSigningKey(t.Context(), f.key)
	require.NoError(t, err)
	require.Equal(t, f.key, key)
}

func testDurableEmpty(t *testing.T, r *reopener) {
	s := r.reopen()
	subs, err := s.ListSubscriptions(t.Context())
	require.NoError(t, err)
	require.Empty(t, subs)
	requireNext(t, s, time.Time{})
	requireCounts(t, s, nil)
	key, err := s.LoadOrStoreSigningKey(t.Context(), []byte("late key"))
	require.NoError(t, err)
	require.Equal(t, []byte("late key"), key, "an empty store reopened stores the first key it is given")
}

func testDurableEverything(t *testing.T, r *reopener) {
	f := newDurableFixture()
	requireAllSet(t, f.subs[0], subHealthApart)
	requireAllSet(t, f.consumers[0])
	f.store(t, r.cur)
	for range 2 {
		s := r.reopen()
		ctx := t.Context()
		subs, err := s.ListSubscriptions(ctx)
		require.NoError(t, err)
		requireSubs(t, f.subs, subs, "subscriptions, secrets included, survive a restart")
		for _, want := range f.consumers {
			requireConsumer(t, want, mustGet(t, s, want.ID), "consumers survive a restart")
		}
		sx, tx, ty := f.consumers[2].ID, f.consumers[3].ID, f.consumers[4].ID
		require.Equal(t, []string{f.consumers[0].ID}, byStream(t, s, "/other/stream ü'\""), "the stream index survives")
		require.Equal(t, []string{sx, tx}, byStream(t, s, "/x"))
		require.Equal(t, []string{sx, tx, ty}, byStream(t, s, "/shared"))
		require.Equal(t, []string{sx, tx, ty, f.consumers[0].ID}, due(t, s, at(time.Hour), 10), "the deadline order survives")
		requireNext(t, s, f.consumers[2].Deadline)
		requireCounts(t, s, map[webhooks.ConsumerState]int{webhooks.StateWaking: 1, webhooks.StateIdle: 1, webhooks.StateLive: 3})
		key, err := s.LoadOrStoreSigningKey(ctx, []byte("another key"))
		require.NoError(t, err)
		require.Equal(t, f.key, key, "the signing key survives a restart")

		require.ErrorIs(t, s.CreateSubscription(ctx, newSub("s")), webhooks.ErrSubscriptionExists)
		require.ErrorIs(t, s.CreateConsumer(ctx, newConsumer("s", "/x")), webhooks.ErrConsumerExists)
	}
}

// testDurableUpdates saves changes to every field over several restarts.
func testDurableUpdates(t *testing.T, r *reopener) {
	mustCreateSub(t, r.cur, newSub("s"))
	want := newConsumer("s", "/a")
	mustCreate(t, r.cur, want)
	for i := range 3 {
		next := fullConsumer("s", "/a")
		next.Epoch += int64(i)
		next.State = modelState[i]
		next.Streams[0].Offset = string(rune('a' + i))
		next.Streams[1].Path = []string{"/p", "/q", "/r"}[i]
		next.Deadline = at(time.Duration(i) * time.Hour)
		// Set fields become zero and zero ones set again.
		if i == 1 {
			next.FailingSince = time.Time{}
			next.WakeTails = nil
		}
		if i == 2 {
			next.Deadline = time.Time{}
		}
		got, err := r.cur.UpdateConsumer(t.Context(), want.ID, func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
			assertConsumer(t, want, c, "fn gets the consumer as stored before the restart")
			*c = *next.Clone()
			return webhooks.UpdateSave, nil
		})
		require.NoError(t, err)
		requireConsumer(t, next, got)
		want = next

		s := r.reopen()
		requireConsumer(t, want, mustGet(t, s, want.ID), "an update survives a restart")
		require.Equal(t, []string{want.ID}, byStream(t, s, want.Streams[1].Path))
		for _, p := range []string{"/p", "/q", "/r"} {
			if p != want.Streams[1].Path {
				require.Empty(t, byStream(t, s, p), "a path the update removed is unindexed after a restart")
			}
		}
		requireNext(t, s, want.Deadline)
		requireCounts(t, s, map[webhooks.ConsumerState]int{want.State: 1})
	}
}

// testDurableSubscriptionUpdate checks that an update of a subscription
// survives a restart.
func testDurableSubscriptionUpdate(t *testing.T, r *reopener) {
	mustCreateSub(t, r.cur, newSub("s"))
	_, err := r.cur.UpdateSubscription(t.Context(), "s", func(sub *webhooks.Subscription) error {
		*sub = *changedSub("s")
		return nil
	})
	require.NoError(t, err)
	got, err := r.reopen().GetSubscription(t.Context(), "s")
	require.NoError(t, err)
	requireSub(t, changedSub("s"), got, "an update survives a restart")
}

func testDurableDeletes(t *testing.T, r *reopener) {
	f := newDurableFixture()
	f.store(t, r.cur)
	ctx := t.Context()
	full, bare, sx, tx, ty := f.consumers[0], f.consumers[1], f.consumers[2], f.consumers[3], f.consumers[4]
	require.NoError(t, r.cur.DeleteSubscription(ctx, "s"))
	mustDelete(t, r.cur, ty.ID)

	for range 2 {
		s := r.reopen()
		for _, c := range []*webhooks.Consumer{full, bare, sx, ty} {
			requireGone(t, s, c.ID)
		}
		subs, err := s.ListSubscriptions(ctx)
		require.NoError(t, err)
		requireSubs(t, []*webhooks.Subscription{newSub("t")}, subs, "a deleted subscription stays deleted")
		_, err = s.GetSubscription(ctx, "s")
		require.ErrorIs(t, err, webhooks.ErrSubscriptionNotFound)
		require.ErrorIs(t, s.CreateConsumer(ctx, newConsumer("s", "/z")), webhooks.ErrSubscriptionNotFound)
		requireConsumer(t, tx, mustGet(t, s, tx.ID))
		require.Equal(t, []string{tx.ID}, byStream(t, s, "/x"))
		require.Equal(t, []string{tx.ID}, byStream(t, s, "/shared"))
		require.Empty(t, byStream(t, s, "/y"))
		require.Empty(t, byStream(t, s, "/full"))
		require.Equal(t, []string{tx.ID}, due(t, s, at(time.Hour), 10))
		requireNext(t, s, tx.Deadline)
		requireCounts(t, s, map[webhooks.ConsumerState]int{webhooks.StateLive: 1})
	}

	// Deleted IDs are free after a restart, and reuse starts clean.
	s := r.cur
	mustCreateSub(t, s, newSub("s"))
	mustCreate(t, s, newConsumer("s", "/full"), newConsumer("t", "/y"))
	s = r.reopen()
	requireConsumer(t, newConsumer("s", "/full"), mustGet(t, s, full.ID))
	requireConsumer(t, newConsumer("t", "/y"), mustGet(t, s, ty.ID))
	require.Empty(t, byStream(t, s, "/other/stream ü'\""))
	require.Equal(t, []string{tx.ID}, due(t, s, at(time.Hour), 10))
}

// testDurableHealthAndLog checks that health and, if the store keeps one,
// the delivery log survive a restart, and their deletes too.
func testDurableHealthAndLog(t *testing.T, r *reopener) {
	ctx := t.Context()
	mustCreateSub(t, r.cur, newSub("s"), newSub("t"))
	c, d := newConsumer("s", "/c"), newConsumer("t", "/d")
	mustCreate(t, r.cur, c, d)
	for _, id := range []string{"s", "t"} {
		_, err := r.cur.UpdateHealth(ctx, id, func(h *webhooks.SubscriptionHealth) { *h = fullHealth() })
		require.NoError(t, err)
	}
	_, logged := r.cur.(webhooks.DeliveryLog)
	as := []*webhooks.DeliveryAttempt{fullAttempt(c.ID, 1), fullAttempt(d.ID, 2), fullAttempt(c.ID, 3), {ConsumerID: d.ID}}
	if logged {
		require.NoError(t, r.cur.(webhooks.DeliveryLog).AppendAttempts(ctx, as, 10))
	}

	s := r.reopen()
	requireHealth(t, s, "s", fullHealth(), "health survives a restart")
	h, err := s.UpdateHealth(ctx, "s", func(h *webhooks.SubscriptionHealth) { h.ConsecutiveFailures++ })
	require.NoError(t, err)
	require.Equal(t, fullHealth().ConsecutiveFailures+1, h.ConsecutiveFailures, "UpdateHealth reads the health stored before the restart")
	if logged {
		l := s.(webhooks.DeliveryLog)
		requireAttempts(t, l, c.ID, 10, newest(as, c.ID, 10), "the delivery log survives a restart")
		requireAttempts(t, l, d.ID, 10, newest(as, d.ID, 10))
	}
	require.NoError(t, s.DeleteSubscription(ctx, "t"))

	s = r.reopen()
	mustCreateSub(t, s, newSub("t"))
	mustCreate(t, s, newConsumer("t", "/d"))
	requireHealth(t, s, "t", webhooks.SubscriptionHealth{}, "deleted health stays deleted")
	if logged {
		requireAttempts(t, s.(webhooks.DeliveryLog), d.ID, 10, nil, "a deleted log stays deleted")
	}
}
