package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
)

// The DS cases run only for a Store that implements webhooks.DSStore.

// dsStore returns s as a webhooks.DSStore, or skips the test.
func dsStore(t testing.TB, s webhooks.Store) webhooks.DSStore {
	d, ok := s.(webhooks.DSStore)
	if !ok {
		t.Skipf("%T does not implement webhooks.DSStore", s)
	}
	return d
}

// off is the offset of stream position n.
func off(n int) string { return fmt.Sprintf("%016d_%016d", 0, n) }

func newDSSub(id string) *webhooks.DSSubscription {
	return &webhooks.DSSubscription{
		ID:          id,
		Type:        webhooks.DSPullWake,
		Pattern:     "events/**",
		Streams:     []string{"manual/a", "manual/b"},
		WebhookURL:  "https://worker.example/hooks",
		WakeStream:  "wake/pool",
		LeaseTTL:    30 * time.Second,
		Description: "event processor",
		ConfigHash:  "hash-1",
		CreatedAt:   at(0),
	}
}

func glob(path string, n int) webhooks.DSLinkSpec {
	return webhooks.DSLinkSpec{Path: path, Type: webhooks.DSLinkGlob, Offset: off(n)}
}

func explicit(path string, n int) webhooks.DSLinkSpec {
	return webhooks.DSLinkSpec{Path: path, Type: webhooks.DSLinkExplicit, Offset: off(n)}
}

func mustPutDS(t testing.TB, d webhooks.DSStore, sub *webhooks.DSSubscription, links ...webhooks.DSLinkSpec) *webhooks.DSSubscription {
	t.Helper()
	got, created, err := d.PutDSSubscription(t.Context(), &webhooks.PutDSSubscriptionParams{Subscription: sub, Links: links})
	require.NoError(t, err)
	require.True(t, created, "subscription %s created", sub.ID)
	return got
}

func mustLink(t testing.TB, d webhooks.DSStore, id string, links ...webhooks.DSLinkSpec) {
	t.Helper()
	require.NoError(t, d.LinkDSStreams(t.Context(), &webhooks.LinkDSStreamsParams{ID: id, Links: links}))
}

// links returns the links of paths of subscription id, by path.
func links(t testing.TB, d webhooks.DSStore, id string, paths ...string) map[string]webhooks.DSLink {
	t.Helper()
	ls, err := d.ListDSLinks(t.Context(), &webhooks.ListDSLinksParams{ID: id, Paths: paths})
	require.NoError(t, err)
	out := make(map[string]webhooks.DSLink, len(ls))
	for _, l := range ls {
		out[l.Path] = l
	}
	return out
}

func cursor(t testing.TB, d webhooks.DSStore, id string) webhooks.DSCursor {
	t.Helper()
	sub, err := d.GetDSSubscription(t.Context(), id)
	require.NoError(t, err)
	return sub.Cursor
}

// startWake starts a wake of id as the engine does, with a lease until
// leaseUntil (none if zero), and returns its generation.
func startWake(t testing.TB, d webhooks.DSStore, id, wakeID string, leaseUntil time.Time) int64 {
	t.Helper()
	c, err := d.UpdateDSCursor(t.Context(), id, func(c *webhooks.DSCursor) error {
		if c.WakeID != "" || c.Holder != "" {
			return errors.New("busy")
		}
		c.Generation++
		c.WakeID = wakeID
		c.LeaseExpiresAt, c.DueAt = leaseUntil, leaseUntil
		return nil
	})
	require.NoError(t, err)
	return c.Generation
}

func note(t testing.TB, d webhooks.DSStore, path string, n int, now time.Time) []webhooks.DSLinkedCursor {
	t.Helper()
	cs, err := d.NoteDSAppend(t.Context(), &webhooks.NoteDSAppendParams{Path: path, Tail: off(n), Now: now})
	require.NoError(t, err)
	return cs
}

func requireFenced(t *testing.T, err error, gen int64, msg string) {
	t.Helper()
	var fe *webhooks.DSFencedError
	require.ErrorAs(t, err, &fe, msg)
	require.ErrorIs(t, err, webhooks.ErrDSFenced, msg)
	require.Equal(t, gen, fe.Generation, "%s: the error carries the current generation", msg)
}

func testDSPut(t *testing.T, s webhooks.Store) {
	d := dsStore(t, s)
	_, err := d.GetDSSubscription(t.Context(), "sub-1")
	require.ErrorIs(t, err, webhooks.ErrDSSubscriptionNotFound)

	want := newDSSub("sub-1")
	got := mustPutDS(t, d, want, explicit("manual/a", 3))
	requireAllSet(t, want, "Cursor")
	require.Equal(t, int64(0), got.Cursor.Generation)
	require.Equal(t, webhooks.DSActive, got.Cursor.Status, "a new subscription is active")
	require.Empty(t, got.Cursor.WakeID)

	read, err := d.GetDSSubscription(t.Context(), "sub-1")
	require.NoError(t, err)
	requireDSSub(t, want, read)

	again, created, err := d.PutDSSubscription(t.Context(), &webhooks.PutDSSubscriptionParams{
		Subscription: newDSSub("sub-1"), Links: []webhooks.DSLinkSpec{glob("events/x", 5)},
	})
	require.NoError(t, err)
	require.False(t, created, "the same configuration re-confirms")
	requireDSSub(t, want, again)
	require.Len(t, links(t, d, "sub-1", "manual/a", "events/x"), 2, "a re-confirmation links its links too")

	other := newDSSub("sub-1")
	other.ConfigHash, other.Description = "hash-2", "changed"
	_, _, err = d.PutDSSubscription(t.Context(), &webhooks.PutDSSubscriptionParams{Subscription: other, Links: []webhooks.DSLinkSpec{glob("events/y", 1)}})
	require.ErrorIs(t, err, webhooks.ErrDSSubscriptionConflict)
	read, err = d.GetDSSubscription(t.Context(), "sub-1")
	require.NoError(t, err)
	requireDSSub(t, want, read, "a conflict changes nothing")
	require.Empty(t, links(t, d, "sub-1", "events/y"), "a conflict links nothing")

	mustPutDS(t, d, newDSSub("sub-0"))
	all, err := d.ListDSSubscriptions(t.Context())
	require.NoError(t, err)
	require.Len(t, all, 2)
	require.Equal(t, []string{"sub-0", "sub-1"}, []string{all[0].ID, all[1].ID}, "ordered by ID")
	requireDSSub(t, want, all[1])
}

// requireDSSub compares the configuration of two subscriptions.
func requireDSSub(t *testing.T, want, got *webhooks.DSSubscription, msg ...any) {
	t.Helper()
	w, g := *want.Clone(), *got.Clone()
	require.True(t, w.CreatedAt.Equal(g.CreatedAt), msg...)
	w.CreatedAt, g.CreatedAt = time.Time{}, time.Time{}
	w.Cursor, g.Cursor = webhooks.DSCursor{}, webhooks.DSCursor{}
	require.Equal(t, w, g, msg...)
}

func testDSTombstone(t *testing.T, s webhooks.Store) {
	d := dsStore(t, s)
	ctx := t.Context()
	mustPutDS(t, d, newDSSub("s"), glob("events/a", 1))
	gen := startWake(t, d, "s", "w1", at(time.Minute))
	note(t, d, "events/a", 2, at(0))

	require.NoError(t, d.DeleteDSSubscription(ctx, "s"))
	nf := webhooks.ErrDSSubscriptionNotFound
	require.ErrorIs(t, d.DeleteDSSubscription(ctx, "s"), nf, "a second delete")
	_, err := d.GetDSSubscription(ctx, "s")
	require.ErrorIs(t, err, nf)
	all, err := d.ListDSSubscriptions(ctx)
	require.NoError(t, err)
	require.Empty(t, all, "a tombstone is not listed")
	_, err = d.AckDS(ctx, &webhooks.AckDSParams{ID: "s", Generation: gen, WakeID: "w1", Acks: []webhooks.DSAck{{Path: "events/a", Offset: off(2)}}, Done: true, Now: at(time.Second)})
	require.ErrorIs(t, err, nf, "an in-flight ack of a deleted subscription fails")
	_, err = d.ReleaseDS(ctx, &webhooks.ReleaseDSParams{ID: "s", Generation: gen, WakeID: "w1", Now: at(time.Second)})
	require.ErrorIs(t, err, nf, "an in-flight release of a deleted subscription fails")
	_, err = d.ClaimDS(ctx, &webhooks.ClaimDSParams{ID: "s", Worker: "w", WakeID: "w2", Now: at(time.Second), LeaseUntil: at(time.Minute)})
	require.ErrorIs(t, err, nf)
	require.ErrorIs(t, d.LinkDSStreams(ctx, &webhooks.LinkDSStreamsParams{ID: "s", Links: []webhooks.DSLinkSpec{glob("events/b", 1)}}), nf)
	require.ErrorIs(t, d.UnlinkDSStream(ctx, &webhooks.UnlinkDSStreamParams{ID: "s", Path: "events/a"}), nf)
	_, err = d.ListDSLinks(ctx, &webhooks.ListDSLinksParams{ID: "s", Limit: 10})
	require.ErrorIs(t, err, nf)
	_, err = d.UpdateDSCursor(ctx, "s", func(*webhooks.DSCursor) error { t.Error("fn called on a tombstone"); return nil })
	require.ErrorIs(t, err, nf)
	require.Empty(t, note(t, d, "events/a", 3, at(time.Second)), "a tombstone links nothing")
	dueNow, err := d.DueDSSubscriptions(ctx, at(time.Hour), 10)
	require.NoError(t, err)
	require.Empty(t, dueNow, "a tombstone is never due")
	_, ok, err := d.NextDSDeadline(ctx)
	require.NoError(t, err)
	require.False(t, ok, "a tombstone has no deadline")

	again := mustPutDS(t, d, newDSSub("s"))
	require.GreaterOrEqual(t, again.Cursor.Generation, gen, "a successor continues the generations")
	require.Empty(t, again.Cursor.WakeID)
	require.Empty(t, links(t, d, "s", "events/a"), "a successor does not inherit links")
	next := startWake(t, d, "s", "w1", at(time.Minute))
	require.Greater(t, next, gen, "a successor's wake is not the deleted one's generation")
}

func testDSLinkIdempotent(t *testing.T, s webhooks.Store) {
	d := dsStore(t, s)
	mustPutDS(t, d, newDSSub("s"), glob("events/a", 5))
	gen := startWake(t, d, "s", "w1", time.Time{})
	_, err := d.AckDS(t.Context(), &webhooks.AckDSParams{ID: "s", Generation: gen, WakeID: "w1", Acks: []webhooks.DSAck{{Path: "events/a", Offset: off(7)}}, Now: at(0)})
	require.NoError(t, err)
	mustLink(t, d, "s", glob("events/a", 1), glob("events/a", 9))
	l := links(t, d, "s", "events/a")["events/a"]
	require.Equal(t, off(7), l.AckedOffset, "linking a linked stream moves no cursor")
	require.Equal(t, webhooks.DSLinkGlob, l.Type)
	mustLink(t, d, "s", explicit("events/a", 1))
	l = links(t, d, "s", "events/a")["events/a"]
	require.Equal(t, off(7), l.AckedOffset, "an explicit link of a glob-linked stream moves no cursor")
	require.Equal(t, webhooks.DSLinkGlob|webhooks.DSLinkExplicit, l.Type)

	mustLink(t, d, "s", explicit("events/new", 4))
	l = links(t, d, "s", "events/new")["events/new"]
	require.Equal(t, webhooks.DSLink{Path: "events/new", Type: webhooks.DSLinkExplicit, AckedOffset: off(4), TailOffset: off(4)}, l,
		"a new link starts acked at its offset, with no pending work")
	none := webhooks.DSLinkSpec{Path: "events/none", Type: webhooks.DSLinkGlob, Offset: webhooks.OffsetNone}
	mustLink(t, d, "s", none)
	l = links(t, d, "s", "events/none")["events/none"]
	require.Equal(t, webhooks.OffsetNone, l.AckedOffset)
	note(t, d, "events/none", 0, at(0))
	require.True(t, links(t, d, "s", "events/none")["events/none"].Pending, "the first offset is past OffsetNone")
}

func testDSExplicitGlob(t *testing.T, s webhooks.Store) {
	d := dsStore(t, s)
	ctx := t.Context()
	mustPutDS(t, d, newDSSub("s"), glob("events/both", 1), explicit("events/both", 1), explicit("manual/a", 1), explicit("events/late", 1))
	require.Equal(t, "explicit", links(t, d, "s", "events/both")["events/both"].Type.String(), "explicit wins when shown")

	unlink := func(path string, matches bool) {
		t.Helper()
		require.NoError(t, d.UnlinkDSStream(ctx, &webhooks.UnlinkDSStreamParams{ID: "s", Path: path, PatternMatches: matches}))
	}
	unlink("events/both", false)
	l, ok := links(t, d, "s", "events/both")["events/both"]
	require.True(t, ok, "removing the explicit link keeps the glob link")
	require.Equal(t, webhooks.DSLinkGlob, l.Type)
	require.Equal(t, "glob", l.Type.String())
	unlink("events/both", false)
	require.Contains(t, links(t, d, "s", "events/both"), "events/both", "removing an absent explicit link keeps the glob link")

	unlink("manual/a", false)
	require.NotContains(t, links(t, d, "s", "manual/a"), "manual/a", "an explicit-only link goes")
	unlink("manual/a", false) // absent: no error

	unlink("events/late", true)
	l, ok = links(t, d, "s", "events/late")["events/late"]
	require.True(t, ok, "a link the pattern matches stays")
	require.Equal(t, webhooks.DSLinkGlob, l.Type)

	cs := note(t, d, "manual/a", 5, at(0))
	require.Empty(t, cs, "an unlinked stream's appends concern no subscription")
}

// A deleted stream loses every link, glob and explicit, in every
// subscription, pending or not, and takes its pending work with it; other
// streams' links stay. A stream created again at the path is linked
// afresh.
func testDSDropStream(t *testing.T, s webhooks.Store) {
	d := dsStore(t, s)
	ctx := t.Context()
	mustPutDS(t, d, newDSSub("s"), glob("events/gone", 1), explicit("events/gone", 1), glob("events/kept", 1))
	mustPutDS(t, d, newDSSub("t"), explicit("events/gone", 1))
	note(t, d, "events/gone", 9, at(0))
	require.True(t, cursor(t, d, "s").Pending)

	require.NoError(t, d.DropDSStream(ctx, "events/gone"))
	for _, id := range []string{"s", "t"} {
		require.NotContains(t, links(t, d, id, "events/gone"), "events/gone", "%s still links the deleted stream", id)
		require.False(t, cursor(t, d, id).Pending, "%s keeps the deleted stream's pending work", id)
		pend, err := d.ListDSLinks(ctx, &webhooks.ListDSLinksParams{ID: id, Limit: 10, PendingOnly: true})
		require.NoError(t, err)
		require.Empty(t, pend, "a wake of %s would list the deleted stream", id)
	}
	require.Contains(t, links(t, d, "s", "events/kept"), "events/kept", "another stream's link stays")
	require.Empty(t, note(t, d, "events/gone", 10, at(time.Second)), "a deleted stream's append concerns no subscription")
	require.NoError(t, d.DropDSStream(ctx, "events/gone"), "dropping an unlinked stream is no error")

	mustLink(t, d, "s", webhooks.DSLinkSpec{Path: "events/gone", Type: webhooks.DSLinkGlob, Offset: webhooks.OffsetNone})
	l := links(t, d, "s", "events/gone")["events/gone"]
	require.Equal(t, webhooks.OffsetNone, l.AckedOffset, "the stream created again starts fresh")
	require.Equal(t, webhooks.DSLinkGlob, l.Type, "its old explicit link is gone")
}

func testDSPending(t *testing.T, s webhooks.Store) {
	d := dsStore(t, s)
	mustPutDS(t, d, newDSSub("s"), glob("events/a", 1), glob("events/b", 1))
	mustPutDS(t, d, newDSSub("t"), glob("events/a", 1))
	mustPutDS(t, d, newDSSub("u"), glob("events/c", 1))
	require.False(t, cursor(t, d, "s").Pending)

	cs := note(t, d, "events/a", 3, at(time.Second))
	require.Len(t, cs, 2, "both subscriptions that link the stream")
	require.Equal(t, "s", cs[0].ID)
	require.Equal(t, "t", cs[1].ID, "ordered by ID")
	for _, c := range cs {
		require.True(t, c.Cursor.Pending, "%s has pending work", c.ID)
		require.True(t, c.Cursor.DueAt.Equal(at(time.Second)), "idle %s is due at once, so a crash loses no wake", c.ID)
	}
	require.False(t, cursor(t, d, "u").Pending, "a subscription that does not link the stream is untouched")
	l := links(t, d, "s", "events/a", "events/b")
	require.True(t, l["events/a"].Pending)
	require.Equal(t, off(3), l["events/a"].TailOffset)
	require.False(t, l["events/b"].Pending)

	note(t, d, "events/a", 2, at(2*time.Second))
	require.Equal(t, off(3), links(t, d, "s", "events/a")["events/a"].TailOffset, "a stale tail does not move the tail back")
	require.True(t, cursor(t, d, "s").DueAt.Equal(at(time.Second)), "a later append keeps the earlier due time")

	gen := startWake(t, d, "s", "w1", time.Time{})
	note(t, d, "events/b", 4, at(3*time.Second))
	require.True(t, cursor(t, d, "s").DueAt.IsZero(), "an append does not schedule a subscription with a wake in flight")
	c, err := d.AckDS(t.Context(), &webhooks.AckDSParams{ID: "s", Generation: gen, WakeID: "w1", Now: at(4 * time.Second), Done: true,
		Acks: []webhooks.DSAck{{Path: "events/a", Offset: off(3)}}})
	require.NoError(t, err)
	require.True(t, c.Pending, "events/b is still pending: next_wake")
	require.True(t, c.DueAt.Equal(at(4*time.Second)), "done with pending work schedules the next wake")
	require.Empty(t, c.WakeID)

	gen = startWake(t, d, "s", "w2", time.Time{})
	c, err = d.AckDS(t.Context(), &webhooks.AckDSParams{ID: "s", Generation: gen, WakeID: "w2", Now: at(5 * time.Second), Done: true,
		Acks: []webhooks.DSAck{{Path: "events/b", Offset: off(4)}}})
	require.NoError(t, err)
	require.False(t, c.Pending, "everything is acked")
	require.True(t, c.DueAt.IsZero(), "nothing to schedule")
	pend, err := d.ListDSLinks(t.Context(), &webhooks.ListDSLinksParams{ID: "s", Limit: 10, PendingOnly: true})
	require.NoError(t, err)
	require.Empty(t, pend)
	require.True(t, cursor(t, d, "t").Pending, "acks of one subscription leave another's cursor alone")
}

func testDSFencing(t *testing.T, s webhooks.Store) {
	d := dsStore(t, s)
	ctx := t.Context()
	mustPutDS(t, d, newDSSub("s"), glob("events/a", 1), glob("events/b", 1))
	note(t, d, "events/a", 5, at(0))
	ack := func(gen int64, wakeID string, now time.Time, done bool) (*webhooks.DSCursor, error) {
		return d.AckDS(ctx, &webhooks.AckDSParams{ID: "s", Generation: gen, WakeID: wakeID, Now: now, Done: done,
			LeaseUntil: now.Add(time.Minute), Acks: []webhooks.DSAck{{Path: "events/a", Offset: off(5)}}})
	}
	requireUnmoved := func(msg string) {
		t.Helper()
		require.Equal(t, off(1), links(t, d, "s", "events/a")["events/a"].AckedOffset, msg)
	}

	_, err := ack(0, "", at(0), true)
	requireFenced(t, err, 0, "an ack with no wake in flight")
	requireUnmoved("a fenced ack moves no cursor")

	gen := startWake(t, d, "s", "w1", at(time.Minute))
	require.Equal(t, int64(1), gen)
	_, err = ack(gen-1, "w1", at(time.Second), false)
	requireFenced(t, err, gen, "a stale generation")
	_, err = ack(gen, "w0", at(time.Second), false)
	requireFenced(t, err, gen, "a stale wake id")
	_, err = ack(gen+1, "w1", at(time.Second), false)
	requireFenced(t, err, gen, "a future generation")
	_, err = d.ReleaseDS(ctx, &webhooks.ReleaseDSParams{ID: "s", Generation: gen, WakeID: "w0", Now: at(time.Second)})
	requireFenced(t, err, gen, "a stale release")
	_, err = ack(gen, "w1", at(time.Minute), false)
	requireFenced(t, err, gen, "an ack when the lease lapses")
	requireUnmoved("fenced acks move no cursor")
	c := cursor(t, d, "s")
	require.Equal(t, "w1", c.WakeID, "fenced requests leave the wake alone")
	require.True(t, c.LeaseExpiresAt.Equal(at(time.Minute)), "fenced requests leave the lease alone")

	c2, err := ack(gen, "w1", at(30*time.Second), false)
	require.NoError(t, err)
	require.True(t, c2.LeaseExpiresAt.Equal(at(90*time.Second)), "a heartbeat extends the lease")
	require.True(t, c2.DueAt.Equal(at(90*time.Second)), "and the due time of its expiry")
	require.Equal(t, "w1", c2.WakeID, "a heartbeat keeps the wake")
	require.Equal(t, off(5), links(t, d, "s", "events/a")["events/a"].AckedOffset, "a heartbeat applies its acks")
	_, err = ack(gen, "w1", at(80*time.Second), false)
	require.NoError(t, err, "the extended lease is live past the old expiry")

	_, err = d.AckDS(ctx, &webhooks.AckDSParams{ID: "s", Generation: gen, WakeID: "w1", Now: at(81 * time.Second),
		Acks: []webhooks.DSAck{{Path: "events/b", Offset: off(9)}, {Path: "events/x", Offset: off(9)}}})
	require.ErrorIs(t, err, webhooks.ErrDSNotLinked)
	require.Equal(t, off(1), links(t, d, "s", "events/b")["events/b"].AckedOffset, "an ack naming an unlinked stream moves nothing")

	_, err = d.ReleaseDS(ctx, &webhooks.ReleaseDSParams{ID: "s", Generation: gen, WakeID: "w1", Now: at(82 * time.Second)})
	require.NoError(t, err)
	_, err = ack(gen, "w1", at(83*time.Second), true)
	requireFenced(t, err, gen, "an ack after the release")
	_, err = d.ReleaseDS(ctx, &webhooks.ReleaseDSParams{ID: "s", Generation: gen, WakeID: "w1", Now: at(83 * time.Second)})
	requireFenced(t, err, gen, "a second release")

	// An ack never moves a cursor back.
	gen = startWake(t, d, "s", "w2", time.Time{})
	_, err = d.AckDS(ctx, &webhooks.AckDSParams{ID: "s", Generation: gen, WakeID: "w2", Now: at(84 * time.Second),
		Acks: []webhooks.DSAck{{Path: "events/a", Offset: off(2)}}})
	require.NoError(t, err)
	require.Equal(t, off(5), links(t, d, "s", "events/a")["events/a"].AckedOffset, "an older ack does not move the cursor back")
}

func testDSRelease(t *testing.T, s webhooks.Store) {
	d := dsStore(t, s)
	mustPutDS(t, d, newDSSub("s"), glob("events/a", 1))
	note(t, d, "events/a", 5, at(0))
	c, err := d.ClaimDS(t.Context(), &webhooks.ClaimDSParams{ID: "s", Worker: "w-1", WakeID: "k1", Now: at(time.Second), LeaseUntil: at(time.Minute)})
	require.NoError(t, err)
	c, err = d.ReleaseDS(t.Context(), &webhooks.ReleaseDSParams{ID: "s", Generation: c.Generation, WakeID: "k1", Now: at(2 * time.Second)})
	require.NoError(t, err)
	require.Empty(t, c.WakeID)
	require.Empty(t, c.Holder, "a release frees the claim")
	require.True(t, c.LeaseExpiresAt.IsZero())
	require.True(t, c.Pending)
	require.True(t, c.DueAt.Equal(at(2*time.Second)), "pending work after a release is due for a wake at once")
	require.Equal(t, off(1), links(t, d, "s", "events/a")["events/a"].AckedOffset, "a release acks nothing")
}

func testDSClaim(t *testing.T, s webhooks.Store) {
	d := dsStore(t, s)
	ctx := t.Context()
	mustPutDS(t, d, newDSSub("s"), glob("events/a", 1))
	note(t, d, "events/a", 5, at(0))
	claim := func(worker, wakeID string, now time.Time) (*webhooks.DSCursor, error) {
		return d.ClaimDS(ctx, &webhooks.ClaimDSParams{ID: "s", Worker: worker, WakeID: wakeID, Now: now, LeaseUntil: now.Add(time.Minute)})
	}

	// The wake event's generation is the one a claim takes.
	gen := startWake(t, d, "s", "k1", time.Time{})
	c, err := claim("w-1", "unused", at(time.Second))
	require.NoError(t, err)
	require.Equal(t, gen, c.Generation, "a claim takes the wake in flight")
	require.Equal(t, "k1", c.WakeID)
	require.Equal(t, "w-1", c.Holder)
	require.True(t, c.LeaseExpiresAt.Equal(at(61*time.Second)))
	require.True(t, c.DueAt.Equal(at(61*time.Second)), "the lease's expiry is due")

	_, err = claim("w-2", "k2", at(30*time.Second))
	var ce *webhooks.DSClaimedError
	require.ErrorAs(t, err, &ce, "a second worker is refused while the lease is live")
	require.ErrorIs(t, err, webhooks.ErrDSAlreadyClaimed)
	require.Equal(t, "w-1", ce.Holder, "the refusal names the holder")
	require.Equal(t, gen, ce.Generation)
	require.Equal(t, "w-1", cursor(t, d, "s").Holder, "a refused claim changes nothing")

	c, err = claim("w-1", "k2", at(40*time.Second))
	require.NoError(t, err, "the holder's claim extends its lease")
	require.Equal(t, gen, c.Generation)
	require.True(t, c.LeaseExpiresAt.Equal(at(100*time.Second)))

	// The lease lapses: the next claim is a new wake, and fences the old holder.
	c, err = claim("w-2", "k2", at(100*time.Second))
	require.NoError(t, err, "a lapsed lease can be claimed")
	require.Equal(t, gen+1, c.Generation, "a claim over a lapsed lease starts a new generation")
	require.Equal(t, "k2", c.WakeID)
	require.Equal(t, "w-2", c.Holder)
	_, err = d.AckDS(ctx, &webhooks.AckDSParams{ID: "s", Generation: gen, WakeID: "k1", Now: at(101 * time.Second), Done: true,
		Acks: []webhooks.DSAck{{Path: "events/a", Offset: off(5)}}})
	requireFenced(t, err, gen+1, "the old holder's ack")
	require.Equal(t, off(1), links(t, d, "s", "events/a")["events/a"].AckedOffset)

	c, err = d.AckDS(ctx, &webhooks.AckDSParams{ID: "s", Generation: gen + 1, WakeID: "k2", Now: at(102 * time.Second), Done: true,
		Acks: []webhooks.DSAck{{Path: "events/a", Offset: off(5)}}})
	require.NoError(t, err)
	require.Empty(t, c.Holder, "done frees the claim")
	require.False(t, c.Pending)
	c, err = claim("w-3", "k3", at(103*time.Second))
	require.NoError(t, err, "an idle subscription can be claimed")
	require.Equal(t, gen+2, c.Generation, "a claim with no wake in flight starts one")
	require.Equal(t, "k3", c.WakeID)
}

func testDSClaimRace(t *testing.T, s webhooks.Store) {
	d := dsStore(t, s)
	mustPutDS(t, d, newDSSub("s"), glob("events/a", 1))
	note(t, d, "events/a", 5, at(0))
	raceClaims(t, d, d)
}

// raceClaims has workers claim one subscription at once through a and b:
// one wins, the others are refused with the winner as holder.
func raceClaims(t *testing.T, a, b webhooks.DSStore) {
	const workers = 8
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		winners []string
		holders = map[string]int{}
	)
	start := make(chan struct{})
	for i := range workers {
		store := a
		if i%2 == 1 {
			store = b
		}
		wg.Go(func() {
			<-start
			worker := fmt.Sprintf("worker-%d", i)
			_, err := store.ClaimDS(t.Context(), &webhooks.ClaimDSParams{ID: "s", Worker: worker, WakeID: "k-" + worker, Now: at(time.Second), LeaseUntil: at(time.Minute)})
			mu.Lock()
			defer mu.Unlock()
			var ce *webhooks.DSClaimedError
			switch {
			case err == nil:
				winners = append(winners, worker)
			case errors.As(err, &ce):
				holders[ce.Holder]++
			default:
				t.Error(err)
			}
		})
	}
	close(start)
	wg.Wait()
	require.Len(t, winners, 1, "one claimer wins")
	require.Equal(t, map[string]int{winners[0]: workers - 1}, holders, "every other claimer is told the winner")
	c := cursor(t, a, "s")
	require.Equal(t, winners[0], c.Holder)
	require.Equal(t, int64(1), c.Generation, "the race started one wake")
	require.Equal(t, "k-"+winners[0], c.WakeID)
}

func testDSConcurrentAcks(t *testing.T, s webhooks.Store) {
	d := dsStore(t, s)
	const streams = 16
	var specs []webhooks.DSLinkSpec
	for i := range streams {
		specs = append(specs, glob(fmt.Sprintf("events/%02d", i), 0))
	}
	mustPutDS(t, d, newDSSub("s"), specs...)
	gen := startWake(t, d, "s", "w1", time.Time{})
	var wg sync.WaitGroup
	for i := range streams {
		wg.Go(func() {
			_, err := d.AckDS(t.Context(), &webhooks.AckDSParams{ID: "s", Generation: gen, WakeID: "w1", Now: at(time.Second),
				Acks: []webhooks.DSAck{{Path: fmt.Sprintf("events/%02d", i), Offset: off(i + 1)}}})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	ls, err := d.ListDSLinks(t.Context(), &webhooks.ListDSLinksParams{ID: "s", Limit: streams})
	require.NoError(t, err)
	require.Len(t, ls, streams)
	for i, l := range ls {
		require.Equal(t, off(i+1), l.AckedOffset, "no ack lost: %s", l.Path)
	}
}

func testDSLinksPaging(t *testing.T, s webhooks.Store) {
	d := dsStore(t, s)
	const n, page = 250, 40
	var specs []webhooks.DSLinkSpec
	for i := n - 1; i >= 0; i-- {
		specs = append(specs, glob(fmt.Sprintf("events/%04d", i), 1))
	}
	mustPutDS(t, d, newDSSub("s"), specs...)
	mustPutDS(t, d, newDSSub("t"), glob("events/0001", 1), glob("events/zzzz", 1))
	for i := 0; i < n; i += 3 {
		note(t, d, fmt.Sprintf("events/%04d", i), 2, at(0))
	}
	collect := func(pendingOnly bool) []string {
		var got []string
		after := ""
		for range n/page + 2 {
			ls, err := d.ListDSLinks(t.Context(), &webhooks.ListDSLinksParams{ID: "s", After: after, Limit: page, PendingOnly: pendingOnly})
			require.NoError(t, err)
			require.LessOrEqual(t, len(ls), page, "a page holds at most Limit links")
			for _, l := range ls {
				got = append(got, l.Path)
				if pendingOnly {
					require.True(t, l.Pending, "%s is pending", l.Path)
				}
			}
			if len(ls) < page {
				return got
			}
			require.Greater(t, ls[len(ls)-1].Path, after, "a page moves forward")
			after = ls[len(ls)-1].Path
		}
		t.Fatalf("the pages did not end")
		return nil
	}
	var want, wantPending []string
	for i := range n {
		want = append(want, fmt.Sprintf("events/%04d", i))
		if i%3 == 0 {
			wantPending = append(wantPending, fmt.Sprintf("events/%04d", i))
		}
	}
	require.Equal(t, want, collect(false), "pages cover every link once, in order, and no other subscription's")
	require.Equal(t, wantPending, collect(true), "pending pages cover the pending links")

	byPath, err := d.ListDSLinks(t.Context(), &webhooks.ListDSLinksParams{ID: "s", Paths: []string{"events/0200", "events/none", "events/0003"}})
	require.NoError(t, err)
	require.Len(t, byPath, 2, "only linked paths")
	require.Equal(t, "events/0003", byPath[0].Path, "ordered by path")
	require.True(t, byPath[0].Pending)
	require.Equal(t, "events/0200", byPath[1].Path)
	require.False(t, byPath[1].Pending)
}

func testDSUpdateCursor(t *testing.T, s webhooks.Store) {
	d := dsStore(t, s)
	mustPutDS(t, d, newDSSub("s"), glob("events/a", 1))
	boom := errors.New("boom")
	_, err := d.UpdateDSCursor(t.Context(), "s", func(c *webhooks.DSCursor) error {
		c.Generation = 9
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.Equal(t, int64(0), cursor(t, d, "s").Generation, "fn's error changes nothing")

	want := webhooks.DSCursor{Generation: 3, WakeID: "w3", Holder: "h", LeaseExpiresAt: at(time.Minute), DueAt: at(2 * time.Second),
		Attempt: 4, Status: webhooks.DSFailed}
	got, err := d.UpdateDSCursor(t.Context(), "s", func(c *webhooks.DSCursor) error {
		*c = want
		c.Pending = true
		return nil
	})
	require.NoError(t, err)
	requireAllSet(t, &want, "Pending")
	requireCursor(t, want, *got)
	requireCursor(t, want, cursor(t, d, "s"))
	require.False(t, got.Pending, "Pending is the Store's")
}

// requireCursor compares two cursors, their times by instant.
func requireCursor(t *testing.T, want, got webhooks.DSCursor, msg ...any) {
	t.Helper()
	require.True(t, want.LeaseExpiresAt.Equal(got.LeaseExpiresAt), msg...)
	require.True(t, want.DueAt.Equal(got.DueAt), msg...)
	want.LeaseExpiresAt, got.LeaseExpiresAt, want.DueAt, got.DueAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	require.Equal(t, want, got, msg...)
}

func testDSDue(t *testing.T, s webhooks.Store) {
	d := dsStore(t, s)
	ctx := t.Context()
	for _, id := range []string{"a", "b", "c", "d"} {
		mustPutDS(t, d, newDSSub(id))
	}
	_, ok, err := d.NextDSDeadline(ctx)
	require.NoError(t, err)
	require.False(t, ok, "nothing is due")
	setDue := func(id string, due time.Time) {
		_, err := d.UpdateDSCursor(ctx, id, func(c *webhooks.DSCursor) error { c.DueAt = due; return nil })
		require.NoError(t, err)
	}
	setDue("a", at(3*time.Second))
	setDue("b", at(time.Second))
	setDue("c", at(2*time.Second))
	next, ok, err := d.NextDSDeadline(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, next.Equal(at(time.Second)))
	got, err := d.DueDSSubscriptions(ctx, at(2*time.Second), 10)
	require.NoError(t, err)
	require.Len(t, got, 2, "only what is due by now")
	require.Equal(t, "b", got[0].ID, "earliest first")
	require.Equal(t, "c", got[1].ID)
	require.True(t, got[0].Cursor.DueAt.Equal(at(time.Second)))
	got, err = d.DueDSSubscriptions(ctx, at(time.Hour), 1)
	require.NoError(t, err)
	require.Len(t, got, 1, "at most limit")
	require.Equal(t, "b", got[0].ID)
	setDue("b", time.Time{})
	next, _, err = d.NextDSDeadline(ctx)
	require.NoError(t, err)
	require.True(t, next.Equal(at(2*time.Second)), "an unset due time leaves the index")
}

// A DSStore that is a DeliveryLog keeps each live DS subscription's
// attempts under its DSDeliveryLogKey, bounded like a consumer's, apart
// from a consumer of the same ID; the attempts of a subscription deleted
// or never created are dropped, and its delete deletes its log.
func testDSDeliveryLog(t *testing.T, s webhooks.Store) {
	d := dsStore(t, s)
	l := deliveryLog(t, s)
	ctx := t.Context()
	mustPutDS(t, d, newDSSub("s"))
	key := webhooks.DSDeliveryLogKey("s")
	id, ok := webhooks.DSDeliveryLogSubscription(key)
	require.True(t, ok)
	require.Equal(t, "s", id)
	_, ok = webhooks.DSDeliveryLogSubscription("s")
	require.False(t, ok, "a consumer's ID is no DS key")

	require.NoError(t, l.AppendAttempts(ctx, []*webhooks.DeliveryAttempt{
		fullAttempt(key, 1), fullAttempt(key, 2), fullAttempt(webhooks.DSDeliveryLogKey("absent"), 3), fullAttempt(key, 4),
	}, 2))
	got, err := l.ListAttempts(ctx, key, 10)
	require.NoError(t, err)
	require.Equal(t, normAttempts([]*webhooks.DeliveryAttempt{fullAttempt(key, 4), fullAttempt(key, 2)}), normAttempts(got), "the newest 2, newest first")
	got, err = l.ListAttempts(ctx, webhooks.DSDeliveryLogKey("absent"), 10)
	require.NoError(t, err)
	require.Empty(t, got, "a subscription that does not exist keeps no log")

	require.NoError(t, d.DeleteDSSubscription(ctx, "s"))
	require.NoError(t, l.AppendAttempts(ctx, []*webhooks.DeliveryAttempt{fullAttempt(key, 5)}, 2))
	mustPutDS(t, d, newDSSub("s"))
	got, err = l.ListAttempts(ctx, key, 10)
	require.NoError(t, err)
	require.Empty(t, got, "the delete deleted the log, and kept none after it")
}
