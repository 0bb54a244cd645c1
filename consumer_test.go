package webhooks

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// wakeSub is a wake subscription, active.
var wakeSub = &Subscription{ID: "s", Delivery: DeliveryWake}

func testMachine() *cursorMachine {
	return &cursorMachine{
		wakingTimeout:   DefaultWakingTimeout,
		livenessTimeout: DefaultLivenessTimeout,
		failureGCAfter:  DefaultFailureGCAfter,
		backoff:         func(n int) time.Duration { return time.Duration(n) * time.Second },
	}
}

func TestCompareOffsets(t *testing.T) {
	a, b := "0000000000000000_0000000000000005", "0000000000000000_0000000000000010"
	require.Equal(t, -1, compareOffsets(a, b))
	require.Equal(t, 1, compareOffsets(b, a))
	require.Equal(t, 0, compareOffsets(a, a))
	require.Equal(t, -1, compareOffsets(OffsetNone, a))
	require.Equal(t, 1, compareOffsets(a, OffsetNone))
	// OffsetNone sorts first even against offsets that sort below '-'.
	require.Equal(t, -1, compareOffsets(OffsetNone, "!"))
}

func TestHasPending(t *testing.T) {
	tail := StreamInfo{Tail: "0000000000000000_0000000000000010"}
	require.True(t, hasPending("0000000000000000_0000000000000005", tail))
	require.False(t, hasPending(tail.Tail, tail))
	require.True(t, hasPending(OffsetNone, tail))
	// An empty stream's tail is its zero offset, past OffsetNone.
	require.True(t, hasPending(OffsetNone, StreamInfo{Tail: "0000000000000000_0000000000000000"}))
}

func TestWakeIfPendingOnlyFromIdle(t *testing.T) {
	m := testMachine()
	tl := tails{"/a": {Path: "/a", Tail: "0000000000000000_0000000000000010"}}
	for _, st := range []ConsumerState{StateWaking, StateLive} {
		c := newConsumer("s", "/a", OffsetNone, t0)
		c.State = st
		require.Equal(t, noChange, m.wakeIfPending(c, wakeSub, tl, t0), st)
		require.Zero(t, c.Epoch)
	}
	c := newConsumer("s", "/a", OffsetNone, t0)
	require.Equal(t, changeSend, m.wakeIfPending(c, wakeSub, tl, t0), "the wake starts an attempt to send")
	require.Equal(t, StateWaking, c.State)
	require.Equal(t, int64(1), c.Epoch)
	require.Equal(t, 1, c.Attempt, "the wake starts its first attempt")
	require.True(t, c.InFlight)
	require.Equal(t, t0.Add(DefaultWakingTimeout), c.Deadline)
	require.Equal(t, []StreamOffset{{Path: "/a", Offset: "0000000000000000_0000000000000010"}}, c.WakeTails)
}

func TestStartAttemptIsExclusive(t *testing.T) {
	m := testMachine()
	c := newConsumer("s", "/a", OffsetNone, t0)
	m.wake(c, wakeSub, tails{}, nil, t0)
	require.Equal(t, 1, c.Attempt)
	require.Equal(t, t0.Add(DefaultWakingTimeout), c.Deadline)
	require.Equal(t, noChange, m.onDue(c, wakeSub, nil, t0), "no engine may send the attempt the wake started")
	require.Equal(t, changeSave, m.onDue(c, wakeSub, nil, c.Deadline), "the WAKING timeout")
	retry := c.Deadline
	require.Equal(t, changeSend, m.onDue(c, wakeSub, nil, retry))
	require.Equal(t, 2, c.Attempt)
	require.Equal(t, retry.Add(DefaultWakingTimeout), c.Deadline)
	require.Equal(t, noChange, m.onDue(c, wakeSub, nil, retry), "a second engine must not send the same attempt")
	require.Equal(t, 2, c.Attempt)
}

func TestStaleFailureIsIgnored(t *testing.T) {
	m := testMachine()
	c := newConsumer("s", "/a", OffsetNone, t0)
	m.wake(c, wakeSub, tails{}, nil, t0)
	r := attemptResult{epoch: c.Epoch, deliveryID: c.WakeID, attempt: 1, failure: statusFailure(503)}
	// Attempt 1 timed out; attempt 2 is in flight when attempt 1's failure
	// finally arrives: it must not count twice.
	require.Equal(t, changeSave, m.onDue(c, wakeSub, nil, t0.Add(DefaultWakingTimeout)))
	require.Equal(t, 1, c.Failures)
	require.Equal(t, changeSend, m.onDue(c, wakeSub, nil, c.Deadline))
	require.Equal(t, noChange, m.applyWake(c, wakeSub, r, nil, c.Deadline))
	require.Equal(t, 1, c.Failures)
}

func TestOnDueIgnoresFutureDeadlines(t *testing.T) {
	m := testMachine()
	c := newConsumer("s", "/a", OffsetNone, t0)
	c.State = StateLive
	c.Deadline = t0.Add(time.Second)
	require.Equal(t, noChange, m.onDue(c, wakeSub, nil, t0))
	require.Equal(t, StateLive, c.State)
}

func TestFinishToIdleDropsWhatOnlyTheWakeReads(t *testing.T) {
	m := testMachine()
	tl := tails{"/a": {Path: "/a", Tail: "0000000000000000_0000000000000010"}}
	c := newConsumer("s", "/a", OffsetNone, t0)
	require.Equal(t, changeSend, m.wakeIfPending(c, wakeSub, tl, t0))
	wakeID := c.WakeID
	require.Equal(t, changeSave, m.applyWake(c, wakeSub, attemptResult{epoch: 1, deliveryID: wakeID, attempt: 1, done: true}, tl, t0))
	require.Equal(t, StateIdle, c.State)
	require.Nil(t, c.WakeTails)
	require.Nil(t, c.TriggeredBy)
	require.Equal(t, wakeID, c.WakeID, "the ended cycle's callbacks are told apart by it")

	// A finish that wakes again keeps them, for the new cycle.
	c.State = StateLive
	tl["/a"] = StreamInfo{Path: "/a", Tail: "0000000000000000_0000000000000020"}
	require.Equal(t, changeSend, m.finish(c, wakeSub, tl, t0), "the new wake's attempt is to send")
	require.Equal(t, StateWaking, c.State)
	require.Equal(t, []string{"/a"}, c.TriggeredBy)
	require.Equal(t, []StreamOffset{{Path: "/a", Offset: "0000000000000000_0000000000000020"}}, c.WakeTails)
}
