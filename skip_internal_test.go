package webhooks

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// skipSetup is an events consumer of a subscription that skips after one
// attempt, with its batch in flight.
func skipSetup(t *testing.T) (*cursorMachine, *Subscription, *Consumer, StreamInfo) {
	m := testMachine()
	m.requestTimeout = time.Second
	sub := &Subscription{Delivery: DeliveryEvents, Events: &EventsOptions{MaxBatchEvents: 2},
		Retry: &RetryPolicy{MaxAttempts: 1, OnExhausted: ExhaustedSkip}}
	tail := StreamInfo{Path: "/a", Tail: "0000000000000000_0000000000000005"}
	c := newConsumer("s", "/a", OffsetNone, t0)
	require.Equal(t, changeSend, pushMech.start(m, c, sub, tails{"/a": tail}, t0))
	return m, sub, c, tail
}

// A batch whose end no attempt read, as when the engine that sent its
// last attempt died, cannot be skipped without skipping unread events: its
// consumer stops instead.
func TestSkipWithoutTheBatchEndStops(t *testing.T) {
	m, sub, c, _ := skipSetup(t)
	require.Equal(t, changeSave, m.onDue(c, sub, nil, c.Deadline), "the attempt times out")
	require.Equal(t, StateFailed, c.State)
	require.Empty(t, c.Skipped)
	require.Equal(t, OffsetNone, c.Streams[0].Offset)
}

// A consumer holding MaxSkippedBatches records stops rather than skip
// without a record; with room it skips to the end the attempt read.
func TestSkipNeedsRoomForItsRecord(t *testing.T) {
	m, sub, c, _ := skipSetup(t)
	c.Skipped = make([]SkippedBatch, MaxSkippedBatches)
	const end = "0000000000000000_0000000000000002"
	r := attemptResult{epoch: c.Epoch, deliveryID: c.WakeID, attempt: 1, failure: statusFailure(500), next: end}
	require.Equal(t, changeSave, m.applyBatch(c, sub, r, nil, t0))
	require.Equal(t, StateFailed, c.State, "no room: a dead letter")
	require.Equal(t, OffsetNone, c.Streams[0].Offset)

	m, sub, c, _ = skipSetup(t)
	c.Skipped = make([]SkippedBatch, MaxSkippedBatches-1)
	r = attemptResult{epoch: c.Epoch, deliveryID: c.WakeID, attempt: 1, failure: statusFailure(500), next: end}
	require.Equal(t, changeSave, m.applyBatch(c, sub, r, nil, t0))
	require.Equal(t, StateIdle, c.State)
	require.Equal(t, end, c.Streams[0].Offset)
	require.Len(t, c.Skipped, MaxSkippedBatches)
	require.Equal(t, t0, c.Deadline, "what follows starts at once")
}

// A wake consumer never skips, whatever its policy says: it stops.
func TestWakeNeverSkips(t *testing.T) {
	m := testMachine()
	sub := &Subscription{Retry: &RetryPolicy{MaxAttempts: 1, OnExhausted: ExhaustedSkip}}
	c := newConsumer("s", "/a", OffsetNone, t0)
	c.State, c.Attempt, c.InFlight, c.BatchEnd = stateDelivering, 1, true, "x"
	require.Equal(t, changeSave, m.fail(c, sub, statusFailure(500), t0))
	require.Equal(t, StateFailed, c.State)
	require.Empty(t, c.Skipped)
}
