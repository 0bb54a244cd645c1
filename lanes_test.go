package webhooks

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamhooks/webhooks/internal/mockclock"
)

// laneRig drives lanes by hand: started attempts are collected, not sent.
type laneRig struct {
	t       *testing.T
	clock   *mockclock.Clock
	ls      *lanes
	started []*attempt
	n       int
	ran     int // the attempt number of the attempt run last
}

func newLaneRig(t *testing.T, maxTotal, maxPerHost int) *laneRig {
	r := &laneRig{t: t, clock: mockclock.New()}
	r.clock.Set(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	r.ls = newLanes(r.clock, maxTotal, maxPerHost, func(a *attempt) { r.started = append(r.started, a) })
	// The adaptive limits bind from the first POST; TestLanesSpareCapacity
	// covers the spare capacity.
	r.ls.spare = 0
	return r
}

// enqueue queues an attempt of a new consumer on host, due to time out
// after the default WAKING timeout, and returns the consumer's ID.
func (r *laneRig) enqueue(host string) string {
	r.n++
	id := fmt.Sprintf("c%d", r.n)
	r.enqueueAttempt(host, id, 1)
	return id
}

// enqueueAttempt queues attempt attemptNo of consumer id on host; running
// it sets r.ran to attemptNo.
func (r *laneRig) enqueueAttempt(host, id string, attemptNo int) {
	r.ls.enqueue(host, &attempt{ctx: context.Background(), key: id, deadline: r.clock.Now().Add(DefaultWakingTimeout),
		run: func(context.Context, func(string)) { r.ran = attemptNo }})
}

// take returns the attempts started since the last take.
func (r *laneRig) take() []*attempt {
	out := r.started
	r.started = nil
	return out
}

// inFlight counts the attempts started on host and not finished.
func (r *laneRig) inFlight(host string) int {
	r.ls.mu.Lock()
	defer r.ls.mu.Unlock()
	if l := r.ls.byKey[host]; l != nil {
		return l.inFlight
	}
	return 0
}

func (r *laneRig) finishAll(as []*attempt, outcome laneOutcome) {
	for _, a := range as {
		r.ls.finish(a, outcome)
	}
}

func hosts(as []*attempt) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.lane.key)
	}
	return out
}

func TestLaneKey(t *testing.T) {
	require.Equal(t, "hooks.example.com:443", laneKey("https://Hooks.Example.COM/a"))
	require.Equal(t, "hooks.example.com:443", laneKey("https://hooks.example.com:443/b?x=1"))
	require.Equal(t, "hooks.example.com:80", laneKey("http://hooks.example.com/a"))
	require.Equal(t, "hooks.example.com:8080", laneKey("http://hooks.example.com:8080/a"))
	require.Equal(t, "[::1]:9000", laneKey("http://[::1]:9000/a"))
}

// A new lane starts at laneStartLimit and gains one POST per success, up
// to the per-host maximum.
func TestLaneGrowsOnSuccessUpToPerHostMax(t *testing.T) {
	const perHost = laneStartLimit + 3
	r := newLaneRig(t, 1000, perHost)
	for range 50 {
		r.enqueue("a")
	}
	first := r.take()
	require.Len(t, first, laneStartLimit)
	r.ls.finish(first[0], laneSuccess)
	require.Len(t, r.take(), 2, "a success frees one POST and allows one more")
	require.Equal(t, laneStartLimit+1, r.inFlight("a"))
	r.finishAll(first[1:3], laneSuccess)
	require.Len(t, r.take(), 4)
	require.Equal(t, perHost, r.inFlight("a"))
	r.ls.finish(first[3], laneSuccess)
	require.Len(t, r.take(), 1, "the limit stops at the per-host maximum")
	r.finishAll(first[4:], laneSuccess)
	require.Equal(t, perHost, r.inFlight("a"))
}

// A timeout or connection failure drops the lane to one POST, a probe,
// A failure halves the lane's limit once per window: failures of POSTs
// started before the last cut do not cut it again. Down at one, a failed
// probe is followed by one more, and a success lifts the limit.
func TestLaneHalvesOncePerWindowOnFailure(t *testing.T) {
	r := newLaneRig(t, 1000, 100)
	for range 50 {
		r.enqueue("a")
	}
	first := r.take()
	require.Len(t, first, laneStartLimit)
	r.ls.finish(first[0], laneAnswered)
	next := r.take()
	require.Len(t, next, 1, "a non-2xx answer frees its POST and allows no more")
	r.ls.finish(first[1], laneFailure)
	require.Empty(t, r.take(), "the limit is cut to 4 with 7 in flight")
	r.ls.finish(first[2], laneFailure)
	r.finishAll(first[3:], laneAnswered)
	require.Equal(t, 4, r.inFlight("a"))
	window := r.take()
	require.Len(t, window, 3, "the failures of one window cut the limit once, to 4")
	r.ls.finish(next[0], laneFailure)
	more := r.take()
	require.Len(t, more, 1, "a POST started before the cut does not cut again: the limit stays 4")
	r.ls.finish(window[0], laneFailure)
	require.Empty(t, r.take(), "a failure of the new window cuts the limit to 2, with 3 in flight")
	r.ls.finish(window[1], laneFailure)
	r.ls.finish(window[2], laneFailure)
	r.ls.finish(more[0], laneAnswered)
	second := r.take()
	require.Len(t, second, 2, "still 2: those failures were of the cut window")
	r.ls.finish(second[0], laneFailure)
	require.Empty(t, r.take(), "cut to one, with one in flight")
	r.ls.finish(second[1], laneAnswered)
	probe := r.take()
	require.Len(t, probe, 1, "cut to one, a probe")
	r.ls.finish(probe[0], laneFailure)
	probe = r.take()
	require.Len(t, probe, 1, "a failed probe is followed by one more")
	r.ls.finish(probe[0], laneSuccess)
	require.Len(t, r.take(), 2, "a success lifts the limit to two")
}

// A lane whose last POST succeeded may start one with the global cap taken
// by others, up to twice the cap in all; a lane never answered or failing
// may not.
func TestLaneHealthyFloorPastGlobalCap(t *testing.T) {
	r := newLaneRig(t, 2, 100)
	r.enqueue("good")
	r.finishAll(r.take(), laneSuccess)
	r.enqueue("bad")
	r.ls.finish(r.take()[0], laneFailure)

	for range 5 {
		r.enqueue("hang")
	}
	require.Len(t, r.take(), 2, "the global cap holds")
	r.enqueue("new")
	r.enqueue("bad")
	require.Empty(t, r.take(), "a new lane, or one failing, waits for the global cap")
	r.enqueue("good")
	r.enqueue("good")
	good := r.take()
	require.Equal(t, []string{"good"}, hosts(good), "a healthy lane with nothing in flight starts one past the cap")

	r2 := newLaneRig(t, 1, 100)
	for _, h := range []string{"g1", "g2", "g3"} {
		r2.enqueue(h)
		r2.finishAll(r2.take(), laneSuccess)
	}
	r2.enqueue("hang")
	r2.enqueue("g1")
	r2.enqueue("g2")
	r2.enqueue("g3")
	require.Equal(t, []string{"hang", "g1"}, hosts(r2.take()), "no more than twice the cap in flight")
}

// A lane holds one waiting attempt per consumer, the newest, in the place
// of the first.
func TestLaneOneWaitingAttemptPerConsumer(t *testing.T) {
	r := newLaneRig(t, 1000, 1)
	r.enqueue("a")
	r.enqueueAttempt("a", "x", 1)
	r.enqueueAttempt("a", "y", 1)
	r.enqueueAttempt("a", "x", 2)
	first := r.take()
	require.Len(t, first, 1)
	require.Equal(t, 3, r.ls.pending())
	r.ls.finish(first[0], laneAnswered)
	next := r.take()
	require.Len(t, next, 1)
	require.Equal(t, "x", next[0].key)
	next[0].run(context.Background(), nil)
	require.Equal(t, 2, r.ran, "the newer attempt replaced the older")
	r.ls.finish(next[0], laneAnswered)
	require.Equal(t, "y", r.take()[0].key)
}

// A waiting attempt whose WAKING timeout has passed is dropped when its
// turn comes: the scheduler retries it on the backoff schedule.
func TestLaneDropsTimedOutAttempts(t *testing.T) {
	r := newLaneRig(t, 1000, 1)
	r.enqueue("a")
	first := r.take()
	stale := r.enqueue("a")
	r.clock.Add(DefaultWakingTimeout)
	fresh := r.enqueue("a")
	r.ls.finish(first[0], laneAnswered)
	next := r.take()
	require.Len(t, next, 1)
	require.Equal(t, fresh, next[0].key, "%s timed out while it waited", stale)
	r.ls.finish(next[0], laneAnswered)
	require.Equal(t, 0, r.ls.pending())
}

// A waiting attempt without a deadline, a pull-wake's wake event, which
// is sent at most once, is never dropped, however long it waits.
func TestLaneKeepsAttemptsWithoutDeadline(t *testing.T) {
	r := newLaneRig(t, 1000, 1)
	r.enqueue("a")
	first := r.take()
	r.ls.enqueue("a", &attempt{ctx: context.Background(), key: "__ds/s"})
	r.clock.Add(365 * 24 * time.Hour)
	r.ls.finish(first[0], laneAnswered)
	next := r.take()
	require.Len(t, next, 1, "the attempt without a deadline was dropped")
	require.Equal(t, "__ds/s", next[0].key)
}

// Lanes with nothing waiting or in flight are forgotten once idle for
// laneIdleTTL, and only then.
func TestLanesForgetIdleLanes(t *testing.T) {
	r := newLaneRig(t, 1000, 100)
	for i := range 100 {
		r.enqueue(fmt.Sprintf("h%d", i))
	}
	started := r.take()
	r.finishAll(started[:50], laneSuccess)
	r.clock.Add(laneIdleTTL / 2)
	r.finishAll(started[50:99], laneSuccess)
	r.clock.Add(laneIdleTTL / 2)
	r.enqueue("new")
	require.Len(t, r.ls.byKey, 51, "the lanes idle for the TTL are gone, those idle for less stay")
	require.NotContains(t, r.ls.byKey, "h0")
	require.Contains(t, r.ls.byKey, "h50")
	r.clock.Add(laneIdleTTL)
	r.enqueue("new")
	require.Len(t, r.ls.byKey, 2, "the busy lanes stay")
	require.Contains(t, r.ls.byKey, "h99")
	require.Contains(t, r.ls.byKey, "new")
}

// Lanes held back by the global cap get its freed capacity in turn, one
// attempt each.
func TestLanesServeWaitingLanesRoundRobin(t *testing.T) {
	r := newLaneRig(t, 1, 100)
	r.enqueue("x")
	inFlight := r.take()
	for _, h := range []string{"a", "a", "a", "b", "b", "c"} {
		r.enqueue(h)
	}
	require.Empty(t, r.take())
	var order []string
	for range 6 {
		r.finishAll(inFlight, laneAnswered)
		inFlight = r.take()
		require.Len(t, inFlight, 1)
		order = append(order, inFlight[0].lane.key)
	}
	require.Equal(t, []string{"a", "b", "c", "a", "b", "a"}, order)
}

// Below spare POSTs in flight, a lane is held only to the per-host maximum,
// even after a failure; from there on, to its adaptive limit.
func TestLanesSpareCapacity(t *testing.T) {
	r := newLaneRig(t, 100, 40)
	r.ls.spare = 50
	for range 60 {
		r.enqueue("slow")
	}
	first := r.take()
	require.Len(t, first, 40, "up to the per-host maximum")
	r.ls.finish(first[0], laneFailure)
	require.Len(t, r.take(), 1, "a failure does not hold it back while capacity is spare")
	for range 30 {
		r.enqueue("other")
	}
	require.Len(t, r.take(), 10, "up to spare; from there a lane new to the engine is held to its start limit")
	for range 5 {
		r.enqueue("third")
	}
	require.Len(t, r.take(), 5)
	r.ls.finish(first[1], laneAnswered)
	require.Empty(t, r.take(), "past spare, a failed lane is held to one POST")
}
