package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
)

func testSubscriptions(t *testing.T, s webhooks.Store) {
	ctx := t.Context()
	list, err := s.ListSubscriptions(ctx)
	require.NoError(t, err)
	require.Empty(t, list)
	_, err = s.GetSubscription(ctx, "a")
	require.ErrorIs(t, err, webhooks.ErrSubscriptionNotFound)
	require.ErrorIs(t, s.DeleteSubscription(ctx, "a"), webhooks.ErrSubscriptionNotFound)

	// Created out of order, with "B" before "a" in byte order.
	in := newSub("b")
	mustCreateSub(t, s, in, newSub("c"), newSub("a"), newSub("B"))
	dup := newSub("b")
	dup.Webhook = "https://example.com/other"
	require.ErrorIs(t, s.CreateSubscription(ctx, dup), webhooks.ErrSubscriptionExists)

	in.Webhook = "mutated after create"
	in.Events.Headers["Authorization"] = "mutated after create"
	in.Events.Filter.Patterns[0] = "mutated after create"
	in.Events.Columns[0] = "mutated after create"
	got, err := s.GetSubscription(ctx, "b")
	require.NoError(t, err)
	requireSub(t, newSub("b"), got, "a failed create must not overwrite, and the store must copy what it is given")
	got.Webhook = "mutated after get"
	got.Events.Headers["Authorization"] = "mutated after get"
	got, err = s.GetSubscription(ctx, "b")
	require.NoError(t, err)
	requireSub(t, newSub("b"), got)

	list, err = s.ListSubscriptions(ctx)
	require.NoError(t, err)
	requireSubs(t, []*webhooks.Subscription{newSub("B"), newSub("a"), newSub("b"), newSub("c")}, list, "ordered by ID")
	list[1].Secret = "mutated after list"
	got, err = s.GetSubscription(ctx, "a")
	require.NoError(t, err)
	requireSub(t, newSub("a"), got)

	require.NoError(t, s.DeleteSubscription(ctx, "b"))
	_, err = s.GetSubscription(ctx, "b")
	require.ErrorIs(t, err, webhooks.ErrSubscriptionNotFound)
	require.ErrorIs(t, s.DeleteSubscription(ctx, "b"), webhooks.ErrSubscriptionNotFound)
	list, err = s.ListSubscriptions(ctx)
	require.NoError(t, err)
	requireSubs(t, []*webhooks.Subscription{newSub("B"), newSub("a"), newSub("c")}, list)

	// The ID is free again.
	mustCreateSub(t, s, newSub("b"))
}

// testUpdateSubscription changes every field of a subscription but those
// that never change.
func testUpdateSubscription(t *testing.T, s webhooks.Store) {
	ctx := t.Context()
	_, err := s.UpdateSubscription(ctx, "none", func(*webhooks.Subscription) error {
		t.Error("fn called for a missing subscription")
		return nil
	})
	require.ErrorIs(t, err, webhooks.ErrSubscriptionNotFound)

	mustCreateSub(t, s, newSub("s"), newSub("t"))
	errFn := errors.New("fn failed")
	_, err = s.UpdateSubscription(ctx, "s", func(sub *webhooks.Subscription) error {
		requireSub(t, newSub("s"), sub, "fn gets the subscription as stored")
		sub.Webhook = "https://example.com/lost"
		return errFn
	})
	require.ErrorIs(t, err, errFn)
	got, err := s.GetSubscription(ctx, "s")
	require.NoError(t, err)
	requireSub(t, newSub("s"), got, "fn's error changes nothing")

	want := changedSub("s")
	updated, err := s.UpdateSubscription(ctx, "s", func(sub *webhooks.Subscription) error {
		*sub = *changedSub("s")
		sub.ID, sub.Pattern, sub.CreatedAt = "other", "/other", at(time.Hour)
		return nil
	})
	require.NoError(t, err)
	requireSub(t, want, updated, "ID, Pattern and CreatedAt never change")
	updated.Events.Headers["Authorization"] = "mutated after update"
	got, err = s.GetSubscription(ctx, "s")
	require.NoError(t, err)
	requireSub(t, want, got)
	list, err := s.ListSubscriptions(ctx)
	require.NoError(t, err)
	requireSubs(t, []*webhooks.Subscription{want, newSub("t")}, list, "one subscription changed")

	back, err := s.UpdateSubscription(ctx, "s", func(sub *webhooks.Subscription) error {
		*sub = *newSub("s")
		return nil
	})
	require.NoError(t, err)
	requireSub(t, newSub("s"), back, "and changed back")
}

// changedSub is newSub(id) with every field that may change changed.
func changedSub(id string) *webhooks.Subscription {
	sub := newSub(id)
	sub.Webhook = "https://example.com/moved/" + id
	sub.Description = "moved ü"
	sub.Secret = "whsec_rotated_" + id
	sub.Status = webhooks.StatusDisabled
	sub.Signature = webhooks.SignatureStreamhooks
	sub.PreviousSecret = "whsec_previous_rotated_" + id
	sub.PreviousSecretExpiresAt = time.Time{}
	sub.Retry = &webhooks.RetryPolicy{MaxAttempts: 2}
	sub.RateLimit = 0
	sub.Events.MaxBatchEvents = 7
	sub.Events.Headers = map[string]string{"X-New": "1"}
	sub.Events.Filter = nil
	return sub
}

func testSubscriptionFields(t *testing.T, s webhooks.Store) {
	full := newSub("full")
	requireAllSet(t, full, subHealthApart, subAdopted)
	bare := &webhooks.Subscription{ID: "bare", Pattern: "/x", Webhook: "https://example.com/"}
	mustCreateSub(t, s, full, bare)
	for _, want := range []*webhooks.Subscription{full, bare} {
		got, err := s.GetSubscription(t.Context(), want.ID)
		require.NoError(t, err)
		requireSub(t, want, got, "a zero CreatedAt stays zero")
	}
	list, err := s.ListSubscriptions(t.Context())
	require.NoError(t, err)
	requireSubs(t, []*webhooks.Subscription{bare, full}, list)
}

func testCreateConsumer(t *testing.T, s webhooks.Store) {
	ctx := t.Context()
	require.ErrorIs(t, s.CreateConsumer(ctx, newConsumer("nope", "/a")), webhooks.ErrSubscriptionNotFound)
	_, err := s.GetConsumer(ctx, webhooks.ConsumerID("nope", "/a"))
	require.ErrorIs(t, err, webhooks.ErrConsumerNotFound, "a consumer refused for want of a subscription is not stored")

	mustCreateSub(t, s, newSub("s"))
	id := webhooks.ConsumerID("s", "/a")
	_, err = s.GetConsumer(ctx, id)
	require.ErrorIs(t, err, webhooks.ErrConsumerNotFound)
	mustCreate(t, s, newConsumer("s", "/a"))

	dup := fullConsumer("s", "/a")
	require.ErrorIs(t, s.CreateConsumer(ctx, dup), webhooks.ErrConsumerExists)
	requireConsumer(t, newConsumer("s", "/a"), mustGet(t, s, id), "a failed create must not overwrite")
	require.Equal(t, []string{id}, byStream(t, s, "/a"))
	require.Empty(t, byStream(t, s, "/other/stream ü'\""), "a failed create must not index")
	requireNext(t, s, time.Time{})
	requireCounts(t, s, map[webhooks.ConsumerState]int{webhooks.StateIdle: 1})
}

// testConsumerFields round-trips every field through every read.
func testConsumerFields(t *testing.T, s webhooks.Store) {
	full := fullConsumer("s", "/a")
	requireAllSet(t, full)
	bare := &webhooks.Consumer{ID: webhooks.ConsumerID("s", "/b"), SubscriptionID: "s", PrimaryStream: "/b", State: webhooks.StateIdle}
	mustCreateSub(t, s, newSub("s"))
	mustCreate(t, s, full, bare)

	requireConsumer(t, full, mustGet(t, s, full.ID))
	requireConsumer(t, bare, mustGet(t, s, bare.ID), "zero times and nil slices stay so")

	cs, err := s.ConsumersByStream(t.Context(), "/a")
	require.NoError(t, err)
	requireConsumers(t, []*webhooks.Consumer{full}, cs, "ConsumersByStream")
	cs, err = s.ConsumersByStream(t.Context(), "/other/stream ü'\"")
	require.NoError(t, err)
	requireConsumers(t, []*webhooks.Consumer{full}, cs, "ConsumersByStream by a secondary path")
	cs, err = s.DueConsumers(t.Context(), full.Deadline, 10)
	require.NoError(t, err)
	requireConsumers(t, []*webhooks.Consumer{full}, cs, "DueConsumers")
	requireNext(t, s, full.Deadline)

	// The same through UpdateConsumer: fn sees every field, and a save of
	// every field changed comes back whole.
	changed := fullConsumer("s", "/b")
	changed.State = webhooks.StateLive
	changed.Epoch = -(1 << 41)
	changed.Deadline = at(time.Hour + 11*time.Nanosecond)
	got, err := s.UpdateConsumer(t.Context(), bare.ID, func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
		assertConsumer(t, bare, c, "fn gets the stored consumer")
		*c = *changed.Clone()
		return webhooks.UpdateSave, nil
	})
	require.NoError(t, err)
	requireConsumer(t, changed, got, "UpdateConsumer returns what it stored")
	requireConsumer(t, changed, mustGet(t, s, bare.ID))
	got, err = s.UpdateConsumer(t.Context(), full.ID, func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
		assertConsumer(t, full, c, "fn gets the stored consumer")
		return webhooks.UpdateNone, nil
	})
	require.NoError(t, err)
	requireConsumer(t, full, got)
	cs, err = s.DueConsumers(t.Context(), changed.Deadline, 10)
	require.NoError(t, err)
	requireConsumers(t, []*webhooks.Consumer{full, changed}, cs)
	requireCounts(t, s, map[webhooks.ConsumerState]int{webhooks.StateWaking: 1, webhooks.StateLive: 1})
}

// testCallerOwnsConsumers mutates every value passed to or returned by the
// store and checks the stored consumer stays as it was.
func testCallerOwnsConsumers(t *testing.T, s webhooks.Store) {
	ctx := t.Context()
	mustCreateSub(t, s, newSub("s"))
	in := fullConsumer("s", "/a")
	want := in.Clone()
	mustCreate(t, s, in)
	scribble := func(c *webhooks.Consumer) {
		c.Epoch = 99
		c.Deadline = time.Time{}
		c.Streams[0].Offset = "scribbled"
		c.WakeTails[0].Offset = "scribbled"
		c.TriggeredBy[0] = "/scribbled"
		c.Streams = append(c.Streams[:1], webhooks.StreamOffset{Path: "/scribbled", Offset: "0"})
	}
	check := func(after string) {
		t.Helper()
		requireConsumer(t, want, mustGet(t, s, want.ID), "stored consumer changed after mutating the value %s", after)
	}

	scribble(in)
	check("passed to CreateConsumer")
	scribble(mustGet(t, s, want.ID))
	check("returned by GetConsumer")
	cs, err := s.ConsumersByStream(ctx, "/a")
	require.NoError(t, err)
	require.Len(t, cs, 1)
	scribble(cs[0])
	check("returned by ConsumersByStream")
	cs, err = s.DueConsumers(ctx, want.Deadline, 1)
	require.NoError(t, err)
	require.Len(t, cs, 1)
	scribble(cs[0])
	check("returned by DueConsumers")

	var kept *webhooks.Consumer
	_, err = s.UpdateConsumer(ctx, want.ID, func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
		scribble(c)
		return webhooks.UpdateNone, nil
	})
	require.NoError(t, err)
	check("fn was given, with UpdateNone")
	got, err := s.UpdateConsumer(ctx, want.ID, func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
		kept = c
		c.Attempt = 4
		return webhooks.UpdateSave, nil
	})
	require.NoError(t, err)
	want.Attempt = 4
	scribble(kept)
	check("fn was given, after the update")
	scribble(got)
	check("returned by UpdateConsumer")
	require.Equal(t, []string{want.ID}, byStream(t, s, "/other/stream ü'\""))
	require.Empty(t, byStream(t, s, "/scribbled"))
	requireNext(t, s, want.Deadline)
}

func testUpdateNotFound(t *testing.T, s webhooks.Store) {
	mustCreateSub(t, s, newSub("s"))
	mustCreate(t, s, newConsumer("s", "/b"))
	for _, id := range []string{webhooks.ConsumerID("s", "/a"), webhooks.ConsumerID("t", "/b"), ""} {
		got, err := s.UpdateConsumer(t.Context(), id, func(*webhooks.Consumer) (webhooks.UpdateAction, error) {
			t.Errorf("fn called for missing consumer %q", id)
			return webhooks.UpdateSave, nil
		})
		require.ErrorIs(t, err, webhooks.ErrConsumerNotFound, id)
		require.Nil(t, got)
	}
	requireGone(t, s, webhooks.ConsumerID("s", "/a"))
}

func testUpdateFnSeesStored(t *testing.T, s webhooks.Store) {
	mustCreateSub(t, s, newSub("s"))
	want := newConsumer("s", "/a")
	mustCreate(t, s, want)
	for i := range 3 {
		calls := 0
		_, err := s.UpdateConsumer(t.Context(), want.ID, func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
			calls++
			assertConsumer(t, want, c, "fn gets the consumer as last stored")
			c.Epoch++
			c.Streams[0].Offset = fmt.Sprint(i)
			return webhooks.UpdateSave, nil
		})
		require.NoError(t, err)
		require.Equal(t, 1, calls, "fn called once by an uncontended update")
		want.Epoch++
		want.Streams[0].Offset = fmt.Sprint(i)
	}
}

func testUpdateNone(t *testing.T, s webhooks.Store) {
	mustCreateSub(t, s, newSub("s"))
	want := fullConsumer("s", "/a")
	mustCreate(t, s, want)
	got, err := s.UpdateConsumer(t.Context(), want.ID, func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
		c.Epoch = 9
		c.State = webhooks.StateIdle
		c.Deadline = at(-time.Hour)
		c.Streams = append(c.Streams, webhooks.StreamOffset{Path: "/none", Offset: "0"})
		return webhooks.UpdateNone, nil
	})
	require.NoError(t, err)
	requireConsumer(t, want, got, "UpdateNone returns the stored consumer")
	requireConsumer(t, want, mustGet(t, s, want.ID))
	require.Empty(t, byStream(t, s, "/none"))
	requireNext(t, s, want.Deadline)
	requireCounts(t, s, map[webhooks.ConsumerState]int{webhooks.StateWaking: 1})
}

func testUpdateSave(t *testing.T, s webhooks.Store) {
	mustCreateSub(t, s, newSub("s"))
	mustCreate(t, s, newConsumer("s", "/a"), newConsumer("s", "/b"))
	id := webhooks.ConsumerID("s", "/a")
	want := newConsumer("s", "/a")
	want.State = webhooks.StateWaking
	want.Epoch = 1
	want.WakeID = "w1"
	want.Streams = append(want.Streams, webhooks.StreamOffset{Path: "/x", Offset: "3"})
	want.Deadline = at(time.Second)
	got := mustUpdate(t, s, id, func(c *webhooks.Consumer) {
		c.State = webhooks.StateWaking
		c.Epoch = 1
		c.WakeID = "w1"
		c.Streams = append(c.Streams, webhooks.StreamOffset{Path: "/x", Offset: "3"})
		c.Deadline = at(time.Second)
	})
	requireConsumer(t, want, got, "UpdateConsumer returns what it stored")
	requireConsumer(t, want, mustGet(t, s, id))
	require.Equal(t, []string{id}, byStream(t, s, "/x"), "a saved Streams change is indexed")
	require.Equal(t, []string{id}, due(t, s, at(time.Second), 10), "a saved Deadline is scheduled")
	requireNext(t, s, at(time.Second))
	requireCounts(t, s, map[webhooks.ConsumerState]int{webhooks.StateIdle: 1, webhooks.StateWaking: 1})
	requireConsumer(t, newConsumer("s", "/b"), mustGet(t, s, webhooks.ConsumerID("s", "/b")), "other consumers are untouched")
}

func testUpdateDelete(t *testing.T, s webhooks.Store) {
	mustCreateSub(t, s, newSub("s"))
	a, b := fullConsumer("s", "/a"), newConsumer("s", "/b")
	mustCreate(t, s, a, b)
	got, err := s.UpdateConsumer(t.Context(), a.ID, func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
		c.State = webhooks.StateIdle
		return webhooks.UpdateDelete, nil
	})
	require.NoError(t, err)
	require.Nil(t, got, "UpdateConsumer returns nil after UpdateDelete")

	requireGone(t, s, a.ID)
	require.Empty(t, byStream(t, s, "/a"))
	require.Empty(t, byStream(t, s, "/other/stream ü'\""))
	require.Empty(t, due(t, s, at(time.Hour), 10))
	requireNext(t, s, time.Time{})
	requireCounts(t, s, map[webhooks.ConsumerState]int{webhooks.StateIdle: 1})
	_, err = s.UpdateConsumer(t.Context(), a.ID, deleteConsumer)
	require.ErrorIs(t, err, webhooks.ErrConsumerNotFound)
	requireConsumer(t, b, mustGet(t, s, b.ID), "other consumers are untouched")

	// The ID is free again, and the new consumer starts from what is given.
	mustCreate(t, s, newConsumer("s", "/a"))
	requireConsumer(t, newConsumer("s", "/a"), mustGet(t, s, a.ID))
	require.Equal(t, []string{a.ID}, byStream(t, s, "/a"))
}

func testUpdateFnError(t *testing.T, s webhooks.Store) {
	mustCreateSub(t, s, newSub("s"))
	want := newConsumer("s", "/a")
	mustCreate(t, s, want)
	boom := errors.New("boom")
	for _, action := range []webhooks.UpdateAction{webhooks.UpdateNone, webhooks.UpdateSave, webhooks.UpdateDelete} {
		_, err := s.UpdateConsumer(t.Context(), want.ID, func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
			c.Epoch = 5
			c.State = webhooks.StateLive
			c.Deadline = at(0)
			c.Streams = append(c.Streams, webhooks.StreamOffset{Path: "/x", Offset: "0"})
			return action, fmt.Errorf("wrapped: %w", boom)
		})
		require.ErrorIs(t, err, boom, "UpdateConsumer returns fn's error (action %d)", action)
		requireConsumer(t, want, mustGet(t, s, want.ID), "fn's error leaves the consumer as it was (action %d)", action)
		require.Empty(t, byStream(t, s, "/x"))
		requireNext(t, s, time.Time{})
		requireCounts(t, s, map[webhooks.ConsumerState]int{webhooks.StateIdle: 1})
	}
}

func testConsumersByStream(t *testing.T, s webhooks.Store) {
	mustCreateSub(t, s, newSub("s"), newSub("B"), newSub("a"))
	// Created out of ID order; "B:…" sorts before "a:…" and "s:…".
	mustCreate(t, s, newConsumer("s", "/p"), newConsumer("a", "/p"), newConsumer("B", "/p"),
		newConsumer("s", "/p/q"), newConsumer("s", "/pq"))
	sp, ap, bp := webhooks.ConsumerID("s", "/p"), webhooks.ConsumerID("a", "/p"), webhooks.ConsumerID("B", "/p")
	spq := webhooks.ConsumerID("s", "/p/q")

	require.Equal(t, []string{bp, ap, sp}, byStream(t, s, "/p"), "ordered by ID; no prefix matches")
	require.Equal(t, []string{spq}, byStream(t, s, "/p/q"))
	require.Empty(t, byStream(t, s, "/x"))
	require.Empty(t, byStream(t, s, "/P"), "paths are case-sensitive")

	addX := func(c *webhooks.Consumer) {
		c.Streams = append(c.Streams, webhooks.StreamOffset{Path: "/x", Offset: "0"})
	}
	mustUpdate(t, s, sp, addX)
	mustUpdate(t, s, spq, addX)
	mustUpdate(t, s, bp, addX)
	require.Equal(t, []string{bp, sp, spq}, byStream(t, s, "/x"), "found by a secondary path, ordered by ID")
	mustUpdate(t, s, sp, addX)
	require.Equal(t, []string{bp, sp, spq}, byStream(t, s, "/x"), "a path listed twice finds the consumer once")
	mustUpdate(t, s, sp, func(c *webhooks.Consumer) {
		c.Streams = append(c.Streams, webhooks.StreamOffset{Path: "/p", Offset: "0"})
	})
	require.Equal(t, []string{bp, ap, sp}, byStream(t, s, "/p"), "a primary path also listed in Streams finds the consumer once")

	mustUpdate(t, s, sp, func(c *webhooks.Consumer) {
		c.Streams = slices.DeleteFunc(c.Streams, func(so webhooks.StreamOffset) bool { return so.Path == "/x" })
	})
	require.Equal(t, []string{bp, spq}, byStream(t, s, "/x"), "a path removed from Streams no longer finds the consumer")

	mustUpdate(t, s, sp, func(c *webhooks.Consumer) { c.Streams = nil })
	require.Equal(t, []string{bp, ap, sp}, byStream(t, s, "/p"), "the primary stream finds the consumer without Streams")
	mustUpdate(t, s, sp, func(c *webhooks.Consumer) { c.Streams = []webhooks.StreamOffset{{Path: "/y", Offset: "0"}} })
	require.Equal(t, []string{bp, ap, sp}, byStream(t, s, "/p"))
	require.Equal(t, []string{sp}, byStream(t, s, "/y"))

	mustDelete(t, s, bp)
	require.Equal(t, []string{ap, sp}, byStream(t, s, "/p"), "after UpdateDelete")
	require.Equal(t, []string{spq}, byStream(t, s, "/x"), "after UpdateDelete, by a secondary path")
	require.NoError(t, s.DeleteSubscription(t.Context(), "s"))
	require.Equal(t, []string{ap}, byStream(t, s, "/p"), "after DeleteSubscription")
	require.Empty(t, byStream(t, s, "/x"))
	require.Empty(t, byStream(t, s, "/y"))
	require.Empty(t, byStream(t, s, "/p/q"))

	// Any valid UTF-8 but control characters may be in a path, as the
	// primary stream or in Streams: quotes, what HTML and JavaScript
	// escape, and characters beyond the Basic Multilingual Plane.
	odd := "/\"q\"/\\/<b>&amp;/\u2028/é/😀/%41 +"
	mustCreate(t, s, newConsumer("a", odd))
	mustUpdate(t, s, ap, func(c *webhooks.Consumer) {
		c.Streams = append(c.Streams, webhooks.StreamOffset{Path: odd + "/2", Offset: "0"})
	})
	require.Equal(t, []string{webhooks.ConsumerID("a", odd)}, byStream(t, s, odd))
	require.Equal(t, []string{ap}, byStream(t, s, odd+"/2"))
}

func testDueConsumers(t *testing.T, s webhooks.Store) {
	mustCreateSub(t, s, newSub("s"))
	paths := []string{"/a", "/b", "/c", "/d", "/e"}
	id := make(map[string]string)
	for _, p := range paths {
		mustCreate(t, s, newConsumer("s", p))
		id[p] = webhooks.ConsumerID("s", p)
	}
	setDeadline := func(p string, d time.Time) { mustUpdate(t, s, id[p], func(c *webhooks.Consumer) { c.Deadline = d }) }

	require.Empty(t, due(t, s, at(time.Hour), 10), "zero deadlines are never due")
	// Created in an order that is neither by ID nor by deadline; the
	// deadlines are in different locations. "/e" stays unscheduled.
	setDeadline("/c", at(3*time.Second))
	setDeadline("/a", at(2*time.Second).UTC())
	setDeadline("/d", at(time.Second).In(time.FixedZone("west", -8*60*60)))
	setDeadline("/b", at(4*time.Second))

	now := at(3 * time.Second)
	require.Equal(t, []string{id["/d"], id["/a"], id["/c"]}, due(t, s, now, 10), "earliest first; a deadline equal to now is due")
	require.Equal(t, []string{id["/d"], id["/a"], id["/c"]}, due(t, s, now.UTC(), 10), "now's location does not matter")
	require.Equal(t, []string{id["/d"], id["/a"]}, due(t, s, now.Add(-time.Nanosecond), 10), "a deadline one nanosecond after now is not due")
	require.Equal(t, []string{id["/d"], id["/a"]}, due(t, s, at(time.Hour), 2), "limit respected")
	require.Equal(t, []string{id["/d"], id["/a"], id["/c"], id["/b"]}, due(t, s, at(time.Hour), 10))
	require.Empty(t, due(t, s, at(time.Second).Add(-time.Nanosecond), 10))

	setDeadline("/b", at(time.Millisecond))
	require.Equal(t, []string{id["/b"], id["/d"]}, due(t, s, at(time.Second), 10), "a moved deadline is re-sorted")
	setDeadline("/d", time.Time{})
	require.Equal(t, []string{id["/b"], id["/a"], id["/c"]}, due(t, s, at(time.Hour), 10), "a cleared deadline is not due")
	mustDelete(t, s, id["/a"])
	require.Equal(t, []string{id["/b"], id["/c"]}, due(t, s, at(time.Hour), 10), "a deleted consumer is not due")

	// Equal deadlines may come in any order, but the limit still holds and
	// the earlier deadline still comes first.
	setDeadline("/e", at(3*time.Second))
	setDeadline("/d", at(3*time.Second))
	got := due(t, s, at(time.Hour), 3)
	require.Len(t, got, 3)
	require.Equal(t, id["/b"], got[0])
	require.Subset(t, []string{id["/c"], id["/d"], id["/e"]}, got[1:])
	require.NotEqual(t, got[1], got[2])
	got = due(t, s, at(time.Hour), 10)
	require.Equal(t, id["/b"], got[0])
	require.ElementsMatch(t, []string{id["/c"], id["/d"], id["/e"]}, got[1:])
}

func testNextDeadline(t *testing.T, s webhooks.Store) {
	requireNext(t, s, time.Time{})
	mustCreateSub(t, s, newSub("s"), newSub("t"))
	a, b, c := newConsumer("s", "/a"), newConsumer("s", "/b"), newConsumer("t", "/c")
	b.Deadline = at(2 * time.Second)
	mustCreate(t, s, a, b, c)
	requireNext(t, s, at(2*time.Second))

	mustUpdate(t, s, a.ID, func(c *webhooks.Consumer) { c.Deadline = at(time.Second + time.Nanosecond) })
	requireNext(t, s, at(time.Second+time.Nanosecond))
	mustUpdate(t, s, c.ID, func(c *webhooks.Consumer) { c.Deadline = at(3 * time.Second) })
	requireNext(t, s, at(time.Second+time.Nanosecond))
	mustUpdate(t, s, a.ID, func(c *webhooks.Consumer) { c.Deadline = at(time.Hour) })
	requireNext(t, s, at(2*time.Second), "a deadline moved later")
	mustUpdate(t, s, b.ID, func(c *webhooks.Consumer) { c.Deadline = time.Time{} })
	requireNext(t, s, at(3*time.Second), "after a deadline is cleared")
	require.NoError(t, s.DeleteSubscription(t.Context(), "t"))
	requireNext(t, s, at(time.Hour), "after DeleteSubscription")
	mustDelete(t, s, a.ID)
	requireNext(t, s, time.Time{})
}

func testCountConsumers(t *testing.T, s webhooks.Store) {
	requireCounts(t, s, nil)
	mustCreateSub(t, s, newSub("s"), newSub("t"))
	live := newConsumer("t", "/d")
	live.State = webhooks.StateLive
	mustCreate(t, s, newConsumer("s", "/a"), newConsumer("s", "/b"), newConsumer("s", "/c"), live)
	requireCounts(t, s, map[webhooks.ConsumerState]int{webhooks.StateIdle: 3, webhooks.StateLive: 1})

	counts, err := s.CountConsumers(t.Context())
	require.NoError(t, err)
	counts[webhooks.StateIdle] = 100 // the map is the caller's
	setState := func(p string, st webhooks.ConsumerState) {
		mustUpdate(t, s, webhooks.ConsumerID("s", p), func(c *webhooks.Consumer) { c.State = st })
	}
	setState("/a", webhooks.StateWaking)
	setState("/b", webhooks.StateLive)
	requireCounts(t, s, map[webhooks.ConsumerState]int{webhooks.StateIdle: 1, webhooks.StateWaking: 1, webhooks.StateLive: 2})
	setState("/a", webhooks.StateLive)
	requireCounts(t, s, map[webhooks.ConsumerState]int{webhooks.StateIdle: 1, webhooks.StateLive: 3})
	mustDelete(t, s, webhooks.ConsumerID("s", "/c"))
	requireCounts(t, s, map[webhooks.ConsumerState]int{webhooks.StateLive: 3})
	require.NoError(t, s.DeleteSubscription(t.Context(), "s"))
	requireCounts(t, s, map[webhooks.ConsumerState]int{webhooks.StateLive: 1})
}

func testSigningKey(t *testing.T, s webhooks.Store) {
	ctx := t.Context()
	first := []byte("first key\x00\xff")
	got, err := s.LoadOrStoreSigningKey(ctx, first)
	require.NoError(t, err)
	require.Equal(t, []byte("first key\x00\xff"), got, "the first key is stored")
	first[0] = 'X'
	got[1] = 'X'

	got, err = s.LoadOrStoreSigningKey(ctx, []byte("second key"))
	require.NoError(t, err)
	require.Equal(t, []byte("first key\x00\xff"), got, "later calls return the stored key")
	got, err = s.LoadOrStoreSigningKey(ctx, []byte("third key"))
	require.NoError(t, err)
	require.Equal(t, []byte("first key\x00\xff"), got)
}

func testDeleteCascade(t *testing.T, s webhooks.Store) {
	ctx := t.Context()
	mustCreateSub(t, s, newSub("s"), newSub("t"))
	for _, sub := range []string{"s", "t"} {
		for _, p := range []string{"/a", "/b"} {
			c := newConsumer(sub, p)
			c.State = webhooks.StateWaking
			c.Deadline = at(time.Second)
			c.Streams = append(c.Streams, webhooks.StreamOffset{Path: "/shared", Offset: "0"})
			mustCreate(t, s, c)
		}
	}
	mustUpdate(t, s, webhooks.ConsumerID("s", "/a"), func(c *webhooks.Consumer) {
		c.Deadline = at(0)
		c.Streams = append(c.Streams, webhooks.StreamOffset{Path: "/only-s", Offset: "0"})
	})

	require.NoError(t, s.DeleteSubscription(ctx, "s"))

	ta, tb := webhooks.ConsumerID("t", "/a"), webhooks.ConsumerID("t", "/b")
	for _, p := range []string{"/a", "/b"} {
		requireGone(t, s, webhooks.ConsumerID("s", p))
		require.Equal(t, []string{webhooks.ConsumerID("t", p)}, byStream(t, s, p))
	}
	require.Equal(t, []string{ta, tb}, byStream(t, s, "/shared"))
	require.Empty(t, byStream(t, s, "/only-s"))
	require.ElementsMatch(t, []string{ta, tb}, due(t, s, at(time.Hour), 10))
	requireNext(t, s, at(time.Second))
	requireCounts(t, s, map[webhooks.ConsumerState]int{webhooks.StateWaking: 2})
	_, err := s.UpdateConsumer(ctx, webhooks.ConsumerID("s", "/a"), deleteConsumer)
	require.ErrorIs(t, err, webhooks.ErrConsumerNotFound)
	require.ErrorIs(t, s.CreateConsumer(ctx, newConsumer("s", "/c")), webhooks.ErrSubscriptionNotFound)
	requireGone(t, s, webhooks.ConsumerID("s", "/c"))

	// A new subscription under the old ID starts without consumers.
	mustCreateSub(t, s, newSub("s"))
	requireGone(t, s, webhooks.ConsumerID("s", "/a"))
	require.Equal(t, []string{ta, tb}, byStream(t, s, "/shared"))
	mustCreate(t, s, newConsumer("s", "/a"))
	require.Equal(t, []string{webhooks.ConsumerID("s", "/a"), ta}, byStream(t, s, "/a"))

	require.NoError(t, s.DeleteSubscription(ctx, "t"))
	require.NoError(t, s.DeleteSubscription(ctx, "s"))
	require.Empty(t, byStream(t, s, "/shared"))
	require.Empty(t, byStream(t, s, "/a"))
	requireNext(t, s, time.Time{})
	requireCounts(t, s, nil)
}
