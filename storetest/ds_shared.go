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

// testSharedDSClaimRace races claims through two handles: one wins.
func testSharedDSClaimRace(t *testing.T, a, b webhooks.Store) {
	da, db := dsStore(t, a), dsStore(t, b)
	mustPutDS(t, da, newDSSub("s"), glob("events/a", 1))
	note(t, db, "events/a", 5, at(0))
	raceClaims(t, da, db)
}

// testSharedDSAckAndAppend acks, links and reports appends of the same
// links at once through two handles: no ack or tail is lost, and none
// deadlocks with another.
func testSharedDSAckAndAppend(t *testing.T, a, b webhooks.Store) {
	da, db := dsStore(t, a), dsStore(t, b)
	const streams, rounds = 4, 10
	var specs []webhooks.DSLinkSpec
	for i := range streams {
		specs = append(specs, glob(fmt.Sprintf("events/%d", i), 0))
	}
	mustPutDS(t, da, newDSSub("s"), specs...)
	mustPutDS(t, da, newDSSub("t"), specs...)
	gen := startWake(t, da, "s", "w1", time.Time{})
	var wg sync.WaitGroup
	for i := range streams {
		path := fmt.Sprintf("events/%d", i)
		wg.Go(func() {
			for r := 1; r <= rounds; r++ {
				if _, err := db.NoteDSAppend(t.Context(), &webhooks.NoteDSAppendParams{Path: path, Tail: off(2 * r), Now: at(time.Second)}); err != nil {
					t.Error(err)
					return
				}
			}
		})
		// An idle subscription takes its due time from an append while
		// its links are relinked: the append locks a link, then the
		// subscription; a link locks them the other way round unless the
		// Store orders its locks.
		wg.Go(func() {
			for range rounds {
				if _, err := da.UpdateDSCursor(t.Context(), "t", func(c *webhooks.DSCursor) error { c.DueAt = time.Time{}; return nil }); err != nil {
					t.Error(err)
					return
				}
				if err := da.LinkDSStreams(t.Context(), &webhooks.LinkDSStreamsParams{ID: "t", Links: []webhooks.DSLinkSpec{explicit(path, 0)}}); err != nil {
					t.Error(err)
					return
				}
			}
		})
		wg.Go(func() {
			for r := 1; r <= rounds; r++ {
				if _, err := da.AckDS(t.Context(), &webhooks.AckDSParams{ID: "s", Generation: gen, WakeID: "w1", Now: at(time.Second),
					Acks: []webhooks.DSAck{{Path: path, Offset: off(r)}}}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, id := range []string{"s", "t"} {
		ls, err := da.ListDSLinks(t.Context(), &webhooks.ListDSLinksParams{ID: id, Limit: streams})
		require.NoError(t, err)
		require.Len(t, ls, streams)
		for _, l := range ls {
			require.Equal(t, off(2*rounds), l.TailOffset, "%s %s: no tail lost", id, l.Path)
			if id == "s" {
				require.Equal(t, off(rounds), l.AckedOffset, "%s: no ack lost", l.Path)
			}
			require.True(t, l.Pending)
		}
	}
}

// testFeedDS creates and deletes a DS subscription through one handle:
// the other's watch reports both.
func testFeedDS(t *testing.T, a, b webhooks.Store) {
	da := dsStore(t, a)
	w := watch(t, b)
	n := w.calls.Load()
	mustPutDS(t, da, newDSSub("s"))
	w.waitCalls(t, n+1, "a __ds subscription created through the other handle was not reported")
	n = w.calls.Load()
	require.NoError(t, da.DeleteDSSubscription(t.Context(), "s"))
	w.waitCalls(t, n+1, "a __ds subscription deleted through the other handle was not reported")
}

// testDurableDS reopens a store with a DS subscription, its links, a wake
// in flight and a tombstone: all read back the same.
func testDurableDS(t *testing.T, r *reopener) {
	d := dsStore(t, r.cur)
	sub := newDSSub("s")
	mustPutDS(t, d, sub, glob("events/a", 1), explicit("manual/a", 2))
	mustLink(t, d, "s", explicit("events/a", 0))
	note(t, d, "events/a", 4, at(0))
	gen := startWake(t, d, "s", "w1", at(time.Minute))
	_, err := d.AckDS(t.Context(), &webhooks.AckDSParams{ID: "s", Generation: gen, WakeID: "w1", Now: at(time.Second),
		Acks: []webhooks.DSAck{{Path: "events/a", Offset: off(3)}}})
	require.NoError(t, err)
	want, err := d.GetDSSubscription(t.Context(), "s")
	require.NoError(t, err)
	wantLinks := links(t, d, "s", "events/a", "manual/a")
	mustPutDS(t, d, newDSSub("gone"))
	startWake(t, d, "gone", "w9", time.Time{})
	require.NoError(t, d.DeleteDSSubscription(t.Context(), "gone"))

	d = dsStore(t, r.reopen())
	got, err := d.GetDSSubscription(t.Context(), "s")
	require.NoError(t, err)
	requireDSSub(t, sub, got, "the configuration survives a restart")
	requireCursor(t, want.Cursor, got.Cursor, "the cursor survives a restart")
	require.Equal(t, wantLinks, links(t, d, "s", "events/a", "manual/a"), "the links survive a restart")
	_, err = d.AckDS(t.Context(), &webhooks.AckDSParams{ID: "s", Generation: gen - 1, WakeID: "w1", Now: at(2 * time.Second)})
	requireFenced(t, err, gen, "fencing after a restart")
	_, err = d.GetDSSubscription(t.Context(), "gone")
	require.ErrorIs(t, err, webhooks.ErrDSSubscriptionNotFound, "a tombstone survives a restart")
	again := mustPutDS(t, d, newDSSub("gone"))
	require.Equal(t, int64(1), again.Cursor.Generation, "its generation too")
	_, err = d.ReleaseDS(t.Context(), &webhooks.ReleaseDSParams{ID: "gone", Generation: 1, WakeID: "w9", Now: at(time.Second)})
	require.True(t, errors.Is(err, webhooks.ErrDSFenced), "the deleted subscription's wake does not apply to its successor: %v", err)
}
