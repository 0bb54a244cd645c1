package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
)

// The lease cases run only for a Store that implements webhooks.Leaser.

// leaser returns s as a webhooks.Leaser, or skips the test.
func leaser(t *testing.T, s webhooks.Store) webhooks.Leaser {
	l, ok := s.(webhooks.Leaser)
	if !ok {
		t.Skipf("%T does not implement webhooks.Leaser", s)
	}
	return l
}

// tryLease asks l for the lease name for holder at now, until until.
func tryLease(t *testing.T, l webhooks.Leaser, name, holder string, now, until time.Time) bool {
	t.Helper()
	ok, err := l.TryLease(t.Context(), name, holder, now, until)
	require.NoError(t, err)
	return ok
}

func releaseLease(t *testing.T, l webhooks.Leaser, name, holder string) {
	t.Helper()
	require.NoError(t, l.ReleaseLease(t.Context(), name, holder))
}

func testLeaseGrant(t *testing.T, s webhooks.Store) {
	l := leaser(t, s)
	require.True(t, tryLease(t, l, "metrics", "a", at(0), at(time.Minute)), "a free lease is granted")
	require.True(t, tryLease(t, l, "other", "b", at(0), at(time.Minute)), "a lease of another name is free")
}

func testLeaseHeldByAnother(t *testing.T, s webhooks.Store) {
	l := leaser(t, s)
	require.True(t, tryLease(t, l, "metrics", "a", at(0), at(time.Minute)))
	for _, now := range []time.Time{at(0), at(30 * time.Second), at(time.Minute - time.Nanosecond)} {
		require.False(t, tryLease(t, l, "metrics", "b", now, now.Add(time.Minute)), "a lease held by another is refused at %v", now)
	}
	require.True(t, tryLease(t, l, "metrics", "a", at(time.Second), at(time.Minute)), "the refusals did not take it from its holder")
}

func testLeaseRenew(t *testing.T, s webhooks.Store) {
	l := leaser(t, s)
	require.True(t, tryLease(t, l, "metrics", "a", at(0), at(time.Minute)))
	require.True(t, tryLease(t, l, "metrics", "a", at(30*time.Second), at(90*time.Second)), "the holder renews its lease")
	require.False(t, tryLease(t, l, "metrics", "b", at(time.Minute), at(2*time.Minute)), "a renewal extends the term")
	require.True(t, tryLease(t, l, "metrics", "a", at(2*time.Minute), at(3*time.Minute)), "the holder renews a lapsed lease no one took")
}

func testLeaseExpiry(t *testing.T, s webhooks.Store) {
	l := leaser(t, s)
	require.True(t, tryLease(t, l, "metrics", "a", at(0), at(time.Minute)))
	require.False(t, tryLease(t, l, "metrics", "b", at(time.Minute-time.Nanosecond), at(2*time.Minute)), "a lease is held to the nanosecond")
	require.True(t, tryLease(t, l, "metrics", "b", at(time.Minute), at(2*time.Minute)), "a lease whose term ended is granted to another")
	require.False(t, tryLease(t, l, "metrics", "a", at(time.Minute), at(2*time.Minute)), "the former holder is refused")
}

func testLeaseRelease(t *testing.T, s webhooks.Store) {
	l := leaser(t, s)
	releaseLease(t, l, "metrics", "a") // a lease never granted
	require.True(t, tryLease(t, l, "metrics", "a", at(0), at(time.Minute)))
	releaseLease(t, l, "metrics", "b")
	require.False(t, tryLease(t, l, "metrics", "b", at(0), at(time.Minute)), "only the holder releases a lease")
	releaseLease(t, l, "metrics", "a")
	require.True(t, tryLease(t, l, "metrics", "b", at(0), at(time.Minute)), "a released lease is granted at once")
	releaseLease(t, l, "metrics", "a")
	require.False(t, tryLease(t, l, "metrics", "a", at(0), at(time.Minute)), "a former holder's release leaves the new holder's lease")
}

func testLeaseConcurrent(t *testing.T, s webhooks.Store) {
	raceLease(t, 16, leaser(t, s))
}

// testSharedLease races holders for one lease through both handles: one
// wins, and each handle sees the other's lease and its release.
func testSharedLease(t *testing.T, a, b webhooks.Store) {
	la, lb := leaser(t, a), leaser(t, b)
	winner := raceLease(t, 8, la, lb)
	ls := []webhooks.Leaser{la, lb}
	mine, other := ls[winner%2], ls[(winner+1)%2]
	holder := fmt.Sprint("holder-", winner)
	require.False(t, tryLease(t, other, "metrics", "late", at(time.Second), at(time.Minute)), "the lease granted through one handle is held for the other")
	require.True(t, tryLease(t, other, "metrics", holder, at(time.Second), at(time.Minute)), "the holder renews through the other handle")
	releaseLease(t, mine, "metrics", holder)
	require.True(t, tryLease(t, other, "metrics", "late", at(time.Second), at(time.Minute)), "a release through one handle frees the lease for the other")
}

// raceLease makes workers holders ask for one free lease at once, spread
// over leasers in turn, checks that exactly one got it, and returns its
// number; worker i is holder "holder-i".
func raceLease(t *testing.T, workers int, leasers ...webhooks.Leaser) int {
	won := make([]bool, workers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range workers {
		l := leasers[i%len(leasers)]
		wg.Go(func() {
			<-start
			ok, err := l.TryLease(t.Context(), "metrics", fmt.Sprint("holder-", i), at(0), at(time.Minute))
			if err != nil {
				t.Error(err)
			}
			won[i] = ok
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, ok := range won {
		if ok {
			require.Equal(t, -1, winner, "holders %d and %d were both granted the lease", winner, i)
			winner = i
		}
	}
	require.NotEqual(t, -1, winner, "no holder was granted a free lease")
	return winner
}
