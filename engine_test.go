package webhooks_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/memstore"
	"github.com/streamhooks/webhooks/receiver"
)

const (
	agentA   = "/agents/a"
	agentAID = "s1:%2Fagents%2Fa"
)

func TestWakeNotificationIsCompleteAndSigned(t *testing.T) {
	h := newHarness(t)
	secret := h.subscribe("s1", "/agents/*")
	h.create(agentA, 0)
	h.appendTo(agentA, 10)
	d := h.nextDelivery()

	require.Equal(t, agentAID, d.n.ConsumerID)
	require.Equal(t, int64(1), d.n.Epoch)
	require.Regexp(t, `^w_[0-9a-f]{32}$`, d.n.WakeID)
	require.Equal(t, agentA, d.n.PrimaryStream)
	require.Equal(t, streamOffsets(agentA, webhooks.OffsetNone), d.n.Streams)
	require.Equal(t, []string{agentA}, d.n.TriggeredBy)
	require.Equal(t, callbackBase+"/callback/"+agentAID, d.n.Callback)
	require.NotEmpty(t, d.n.Token)
	require.Equal(t, "application/json", d.header.Get("Content-Type"))
	// S8: the signature verifies with the subscription's secret, over the
	// raw body, and not with another secret.
	sig := d.header.Get(receiver.SignatureHeader)
	require.Regexp(t, `^t=\d+,sha256=[0-9a-f]{64}$`, sig)
	require.NoError(t, verifySignature(secret, d.header, d.body, h.clock.Now(), receiver.DefaultTolerance))
	require.Error(t, verifySignature(secret+"x", d.header, d.body, h.clock.Now(), receiver.DefaultTolerance))
}

// A stream created after its subscription wakes its consumer at once, even
// while empty: the zero offset of its tail is past the acked "-1" (spec,
// Pending Work).
func TestEmptyStreamCreatedAfterSubscriptionWakes(t *testing.T) {
	h := newHarness(t)
	h.recv.queue(reply{status: http.StatusOK, body: `{"done":true}`})
	h.subscribe("s1", "/agents/*")
	h.create(agentA, 0)
	d := h.nextDelivery()
	require.Equal(t, int64(1), d.n.Epoch)
	require.Equal(t, streamOffsets(agentA, webhooks.OffsetNone), d.n.Streams)
	require.Equal(t, []string{agentA}, d.n.TriggeredBy)
	// The synchronous done acks up to the tail at the wake, the zero
	// offset, so the work is done: IDLE, not woken again.
	c := h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateIdle })
	require.Equal(t, streamOffsets(agentA, offset(0)), c.Streams)
	require.Equal(t, int64(1), c.Epoch)
	require.True(t, c.Deadline.IsZero())
	require.Empty(t, h.recv.deliveries)
}

// A new stream wakes its consumer once, even empty (RFC); a consumer that
// never acks is not woken again for events the stream does not have (spec
// 001, Pending Work), but is for events it has (L3).
func TestEmptyStreamIsWokenOnlyAtItsCreation(t *testing.T) {
	h := newHarness(t)
	h.subscribe("s1", "/agents/*")
	h.create(agentA, 0)
	d := h.nextDelivery()
	require.Equal(t, int64(1), d.n.Epoch, "the wake at creation")
	require.Equal(t, []string{agentA}, d.n.TriggeredBy)
	h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive })
	r := h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1), Done: true})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	c := h.consumer(agentAID)
	require.Equal(t, webhooks.StateIdle, c.State, "L2: an empty stream has no pending work")
	require.Equal(t, int64(1), c.Epoch)
	// Nor does a change that adds no event make any.
	require.NoError(t, h.engine.StreamAppended(context.Background(), agentA))
	c = h.consumer(agentAID)
	require.Equal(t, webhooks.StateIdle, c.State)
	require.Equal(t, int64(1), c.Epoch)
	require.Equal(t, streamOffsets(agentA, webhooks.OffsetNone), c.Streams)

	// Events are work: they wake it, and a done without an ack wakes it again.
	h.appendTo(agentA, 3)
	d = h.nextDelivery()
	require.Equal(t, int64(2), d.n.Epoch)
	h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive })
	r = h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(2), Done: true})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	d = h.nextDelivery()
	require.Equal(t, int64(3), d.n.Epoch, "L3")
}

// An empty stream that existed before the subscription is adopted at its
// tail: IDLE, woken only by new events.
func TestEmptyStreamBeforeSubscriptionStaysIdle(t *testing.T) {
	h := newHarness(t)
	h.source.set(agentA, 0)
	h.subscribe("s1", "/agents/*")
	c := h.consumer(agentAID)
	require.Equal(t, webhooks.StateIdle, c.State)
	require.Equal(t, streamOffsets(agentA, offset(0)), c.Streams)
	require.True(t, c.Deadline.IsZero())
	h.appendTo(agentA, 1)
	d := h.nextDelivery()
	require.Equal(t, int64(1), d.n.Epoch)
	require.Equal(t, streamOffsets(agentA, offset(0)), d.n.Streams)
}

func TestStreamCreatedWithBodyWakes(t *testing.T) {
	h := newHarness(t)
	h.subscribe("s1", "/agents/*")
	h.create(agentA, 5) // a PUT with an initial body
	d := h.nextDelivery()
	require.Equal(t, int64(1), d.n.Epoch)
	require.Equal(t, []string{agentA}, d.n.TriggeredBy)
}

func TestNonMatchingStreamGetsNoConsumer(t *testing.T) {
	h := newHarness(t)
	h.subscribe("s1", "/agents/*")
	h.create("/agents/a/deep", 5)
	h.create("/other", 5)
	for _, p := range []string{"/agents/a/deep", "/other"} {
		cs, err := h.store.ConsumersByStream(context.Background(), p)
		require.NoError(t, err)
		require.Empty(t, cs, p)
	}
}

func TestTwoXXMovesToLiveAndLivenessTimeoutToIdle(t *testing.T) {
	h := newHarness(t)
	h.wake("s1", "/agents/*", agentA)
	c := h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive })
	require.Equal(t, h.clock.Now().Add(webhooks.DefaultLivenessTimeout), c.Deadline)

	h.clock.Add(webhooks.DefaultLivenessTimeout - time.Second)
	require.Equal(t, webhooks.StateLive, h.consumer(agentAID).State)
	h.clock.Add(time.Second)
	// Nothing was acked, so the work is still pending: the timeout ends the
	// cycle and a new one starts (L1).
	d := h.nextDelivery()
	require.Equal(t, int64(2), d.n.Epoch)
}

func TestLivenessTimeoutWithoutPendingWorkGoesIdle(t *testing.T) {
	h := newHarness(t)
	d := h.wake("s1", "/agents/*", agentA)
	h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive })
	r := h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1), Acks: streamOffsets(agentA, offset(10))})
	require.Equal(t, http.StatusOK, r.status, r.raw)

	h.clock.Add(webhooks.DefaultLivenessTimeout)
	c := h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateIdle })
	require.Equal(t, int64(1), c.Epoch)
	require.True(t, c.Deadline.IsZero())
}

func TestWakeBatching(t *testing.T) {
	h := newHarness(t)
	h.subscribe("s1", "/agents/*")
	h.create(agentA, 1)
	first := offset(1)
	h.appendTo(agentA, 1)
	h.appendTo(agentA, 1)
	d := h.nextDelivery()
	require.Equal(t, int64(1), d.n.Epoch)
	h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive })
	// Appends while LIVE do not wake again.
	h.appendTo(agentA, 1)
	c := h.consumer(agentAID)
	require.Equal(t, int64(1), c.Epoch)
	require.Equal(t, webhooks.StateLive, c.State)
	require.Len(t, h.recv.deliveries, 0)
	// The wake's tails are those of the create that woke it.
	require.Equal(t, streamOffsets(agentA, first), c.WakeTails)
}

func TestSynchronousDoneAutoAcksToWakeTail(t *testing.T) {
	h := newHarness(t)
	h.recv.queue(reply{status: http.StatusOK, body: `{"done":true}`})
	d := h.wake("s1", "/agents/*", agentA)
	require.Equal(t, int64(1), d.n.Epoch)
	c := h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateIdle })
	require.Equal(t, streamOffsets(agentA, offset(10)), c.Streams)
	require.True(t, c.Deadline.IsZero())
	require.Equal(t, int64(1), c.Epoch)
}

func TestSynchronousDoneNeverAcksEventsAppendedDuringTheWake(t *testing.T) {
	h := newHarness(t)
	hold := make(chan struct{})
	h.recv.queue(reply{status: http.StatusOK, body: `{"done":true}`, hold: hold})
	h.wake("s1", "/agents/*", agentA)
	// Events arrive while the consumer handles the wake; it cannot have
	// seen them, so they must not be acked and must cause a new wake.
	h.appendTo(agentA, 7)
	close(hold)
	d := h.nextDelivery()
	require.Equal(t, int64(2), d.n.Epoch)
	require.Equal(t, streamOffsets(agentA, offset(10)), d.n.Streams)
	require.Equal(t, []string{agentA}, d.n.TriggeredBy)
}

func TestWakingTimeoutRetriesWithSameWakeID(t *testing.T) {
	h := newHarness(t, webhooks.WithBackoff(func(int) time.Duration { return time.Second }))
	hold := make(chan struct{})
	defer close(hold)
	h.recv.queue(reply{status: http.StatusOK, hold: hold})
	first := h.wake("s1", "/agents/*", agentA)

	h.clock.Add(webhooks.DefaultWakingTimeout - time.Millisecond)
	c := h.consumer(agentAID)
	require.True(t, c.InFlight)
	require.Zero(t, c.Failures)

	h.clock.Add(time.Millisecond)
	c = h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.Failures == 1 && !c.InFlight })
	require.Equal(t, webhooks.StateWaking, c.State)
	require.Equal(t, h.clock.Now().Add(time.Second), c.Deadline)

	h.clock.Add(time.Second)
	second := h.nextDelivery()
	require.Equal(t, first.n.WakeID, second.n.WakeID, "S2: retries reuse the wake_id")
	require.Equal(t, first.n.Epoch, second.n.Epoch)
	require.Equal(t, 2, h.consumer(agentAID).Attempt)
}

func TestFailedDeliveriesRetryOnTheBackoffSchedule(t *testing.T) {
	var retries []int
	backoff := func(n int) time.Duration {
		retries = append(retries, n) // only the scheduler calls it, serially
		return time.Duration(n) * time.Second
	}
	h := newHarness(t, webhooks.WithBackoff(backoff))
	h.recv.queue(reply{status: 500}, reply{status: 503}, reply{status: 302, body: "moved"})
	first := h.wake("s1", "/agents/*", agentA)
	for n := 1; n <= 3; n++ {
		c := h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.Failures == n && !c.InFlight })
		require.Equal(t, h.clock.Now().Add(time.Duration(n)*time.Second), c.Deadline)
		h.clock.Add(time.Duration(n)*time.Second - time.Millisecond)
		require.Len(t, h.recv.deliveries, 0, "retry %d came early", n)
		h.clock.Add(time.Millisecond)
		d := h.nextDelivery()
		require.Equal(t, first.n.WakeID, d.n.WakeID)
	}
	c := h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive })
	require.Zero(t, c.Failures, "a 2xx resets the failure count")
	require.True(t, c.FailingSince.IsZero())
	require.Equal(t, []int{1, 2, 3}, retries)
}

func TestFailureGCAfterContinuousFailure(t *testing.T) {
	h := newHarness(t, webhooks.WithBackoff(func(int) time.Duration { return 10 * time.Hour }))
	failing := reply{status: 500}
	h.recv.queue(failing, failing, failing, failing, failing, failing, failing, failing)
	h.wake("s1", "/agents/*", agentA)
	c := h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.Failures == 1 && !c.InFlight })
	since := c.FailingSince
	// Retry every 10h; the consumer survives until exactly 72h of failure.
	for h.clock.Now().Add(10 * time.Hour).Before(since.Add(webhooks.DefaultFailureGCAfter)) {
		n := c.Failures
		h.clock.Add(10 * time.Hour)
		h.nextDelivery()
		c = h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.Failures == n+1 && !c.InFlight })
	}
	require.Equal(t, since.Add(webhooks.DefaultFailureGCAfter), c.Deadline, "the next retry is capped at the GC time")
	h.clock.Set(since.Add(webhooks.DefaultFailureGCAfter).Add(-time.Second))
	require.Equal(t, webhooks.StateWaking, h.consumer(agentAID).State)
	h.clock.Add(time.Second)
	c = h.waitDead(agentAID)
	require.True(t, c.Deadline.IsZero(), "a dead letter schedules nothing")
	require.Equal(t, since, c.FailingSince)
}

func TestSuccessResetsTheFailureRun(t *testing.T) {
	h := newHarness(t, webhooks.WithBackoff(func(int) time.Duration { return 35 * time.Hour }))
	h.recv.queue(reply{status: 500}, reply{status: 500})
	h.wake("s1", "/agents/*", agentA)
	h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.Failures == 1 && !c.InFlight })
	h.clock.Add(35 * time.Hour)
	h.nextDelivery()
	h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.Failures == 2 && !c.InFlight })
	h.clock.Add(35 * time.Hour) // 70h of failure, then a 2xx
	d := h.nextDelivery()
	c := h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive })
	require.Zero(t, c.Failures)
	require.True(t, c.FailingSince.IsZero())
	r := h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1), Acks: streamOffsets(agentA, offset(10)), Done: true})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	// A later failure starts a new run: no GC three hours later.
	h.recv.queue(reply{status: 500})
	h.appendTo(agentA, 1)
	h.nextDelivery()
	c = h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.Failures == 1 && !c.InFlight })
	require.Equal(t, h.clock.Now(), c.FailingSince)
	h.clock.Add(3 * time.Hour)
	require.Equal(t, webhooks.StateWaking, h.consumer(agentAID).State)
}

func TestRequestTimeoutCancelsTheWebhookPOST(t *testing.T) {
	h := newHarness(t, webhooks.WithBackoff(func(int) time.Duration { return time.Hour }))
	hold := make(chan struct{})
	defer close(hold)
	h.recv.queue(reply{status: 200, hold: hold})
	d := h.wake("s1", "/agents/*", agentA)
	h.clock.Add(webhooks.DefaultRequestTimeout - time.Second)
	require.NoError(t, d.ctx.Err(), "the POST is still open before the request timeout")
	h.clock.Add(time.Second)
	select {
	case <-d.ctx.Done():
	case <-time.After(waitFor):
		t.Fatal("the POST was not cancelled at the request timeout")
	}
}

func TestHugeResponseBodyIsReadOnlyUpToTheLimit(t *testing.T) {
	h := newHarness(t)
	// The done flag lies beyond the read limit, so the engine cannot see it:
	// the response counts as a plain 2xx.
	pad := make([]byte, webhooks.MaxWebhookResponseBytes)
	for i := range pad {
		pad[i] = 'x'
	}
	h.recv.queue(reply{status: 200, body: `{"pad":"` + string(pad) + `","done":true}`})
	h.wake("s1", "/agents/*", agentA)
	h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive })
}

func TestRedirectsAreNotFollowed(t *testing.T) {
	h := newHarness(t, webhooks.WithBackoff(func(int) time.Duration { return time.Hour }))
	var hits atomic.Int32
	target := newReceiver(t)
	target.srv.Config.Handler = http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) })
	h.recv.srv.Config.Handler = http.RedirectHandler(target.url(), http.StatusTemporaryRedirect)
	h.subscribe("s1", "/agents/*")
	h.create(agentA, 10)
	h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.Failures == 1 && !c.InFlight })
	require.Zero(t, hits.Load())
}

func TestDialTimeSSRFGuardBlocksLoopback(t *testing.T) {
	// A subscription stored without the API's URL check, as if its host
	// had resolved elsewhere when it was created: the dial is still refused.
	store := memstore.New()
	recv := newReceiver(t)
	require.NoError(t, store.CreateSubscription(context.Background(), &webhooks.Subscription{
		ID: "s1", Pattern: "/agents/*", Webhook: recv.url(), Secret: "whsec_x",
	}))
	h := &harness{t: t, store: store, source: newFakeSource(), recv: recv}
	h.clock = newMockClock()
	e, err := webhooks.New(store, h.source, webhooks.WithClock(h.clock), webhooks.WithCallbackBaseURL(callbackBase),
		webhooks.WithBackoff(func(int) time.Duration { return time.Hour }))
	require.NoError(t, err)
	webhooks.SignalProgress(e, h.signals())
	h.engine = e
	require.NoError(t, e.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, e.Stop(context.Background())) })
	h.create(agentA, 10)
	h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.Failures == 1 && !c.InFlight })
	require.Len(t, recv.deliveries, 0)
}

func TestLateResponseOfEndedCycleChangesNothing(t *testing.T) {
	h := newHarness(t)
	hold := make(chan struct{})
	h.recv.queue(reply{status: 200, body: `{"done":true}`, hold: hold})
	d := h.wake("s1", "/agents/*", agentA)
	// The consumer claims, acks part of the stream and finishes by callback.
	r := h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1), WakeID: d.n.WakeID})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	r = h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1), Acks: streamOffsets(agentA, offset(4))})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	// New work arrives and starts epoch 2 after the consumer is done.
	r = h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1), Done: true})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	second := h.nextDelivery()
	require.Equal(t, int64(2), second.n.Epoch)
	before := h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive })

	// Now epoch 1's POST answers {"done":true}: it must not auto-ack epoch
	// 2's work or end epoch 2's cycle.
	close(hold)
	require.True(t, h.waitProgress(func() bool { return webhooks.DeliveriesRunning(h.engine) == 0 }), "epoch 1's POST never ended")
	after := h.consumer(agentAID)
	require.Equal(t, before.State, after.State)
	require.Equal(t, before.Epoch, after.Epoch)
	require.Equal(t, before.Streams, after.Streams)
}

func TestEpochIncreasesOnEveryWake(t *testing.T) {
	h := newHarness(t)
	h.subscribe("s1", "/agents/*")
	seen := map[string]bool{}
	var last int64
	for i := 0; i < 5; i++ {
		h.recv.queue(reply{status: 200, body: `{"done":true}`})
		if i == 0 {
			h.create(agentA, 0)
		} else {
			h.appendTo(agentA, 1)
		}
		d := h.nextDelivery()
		require.Greater(t, d.n.Epoch, last, "S1")
		require.False(t, seen[d.n.WakeID], "S2: a new wake_id per cycle")
		last, seen[d.n.WakeID] = d.n.Epoch, true
		h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateIdle })
	}
}

func TestStreamDeletionRemovesConsumers(t *testing.T) {
	h := newHarness(t)
	d := h.wake("s1", "/agents/*", agentA)
	// A second consumer subscribes to agentA as a secondary stream.
	h.create("/agents/b", 0)
	bID := "s1:%2Fagents%2Fb"
	h.appendTo("/agents/b", 3)
	db := h.nextDelivery()
	require.Equal(t, bID, db.n.ConsumerID)
	r := h.callback(bID, db.n.Token, receiver.CallbackRequest{Epoch: epoch(1), Subscribe: []string{agentA}})
	require.Equal(t, http.StatusOK, r.status, r.raw)

	h.source.remove(agentA)
	require.NoError(t, h.engine.StreamDeleted(context.Background(), agentA))
	h.waitGone(agentAID)
	r = h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1)})
	requireError(t, r, http.StatusGone, receiver.CodeConsumerGone) // S7
	require.Equal(t, []string{"/agents/b"}, sortedPaths(h.consumer(bID).Streams))
}

// restartEngine stops h's engine and starts another over the same store and
// source, as after a process restart.
func restartEngine(t *testing.T, h *harness) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(t, h.engine.Stop(ctx))
	h.startEngine()
}

// Appends and creations that happened while the engine was down, whose
// StreamAppended or StreamCreated never reached it, are found at start-up
// (L1 across a crash). A stream created meanwhile wakes its consumer even if
// empty, as if StreamCreated had arrived.
func TestStartSweepsMissedStreamEvents(t *testing.T) {
	h := newHarness(t)
	// Streams from before the subscription: adopted IDLE at their tails.
	h.source.set("/agents/t1", 0)
	h.source.set("/agents/t2", 0)
	h.source.set("/agents/quiet", 0)
	h.subscribe("s1", "/agents/*")
	id1 := webhooks.ConsumerID("s1", "/agents/t1")
	id2 := webhooks.ConsumerID("s1", "/agents/t2")
	quiet := webhooks.ConsumerID("s1", "/agents/quiet")
	for _, id := range []string{id1, id2, quiet} {
		require.Equal(t, webhooks.StateIdle, h.consumer(id).State)
	}

	// Consumer t2 unsubscribed from its primary stream and follows /other/x,
	// which no subscription matches; only /other/x gets an event.
	_, err := h.store.UpdateConsumer(context.Background(), id2, func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
		c.Streams = []webhooks.StreamOffset{{Path: "/other/x", Offset: offset(0)}}
		return webhooks.UpdateSave, nil
	})
	require.NoError(t, err)
	h.source.set("/other/x", 0)

	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(t, h.engine.Stop(ctx))
	h.source.grow("/agents/t1", 2)
	h.source.grow("/other/x", 1)
	h.source.set("/agents/new", 1)
	h.source.set("/agents/new-empty", 0)
	restartEngine(t, h)

	woken := map[string]bool{}
	for range 4 {
		d := h.nextDelivery()
		woken[d.n.ConsumerID] = true
	}
	require.Equal(t, map[string]bool{
		id1: true, id2: true,
		webhooks.ConsumerID("s1", "/agents/new"):       true,
		webhooks.ConsumerID("s1", "/agents/new-empty"): true,
	}, woken)
	require.Equal(t, webhooks.StateIdle, h.consumer(quiet).State, "a consumer without pending work stays asleep")
}

// A deadline that passed while the engine was down fires as soon as it
// starts, not one full timeout later.
func TestStartActsOnOverdueDeadlines(t *testing.T) {
	h := newHarness(t)
	d := h.wake("s1", "/agents/*", "/agents/t1")
	id := d.n.ConsumerID
	// LIVE with a liveness deadline, then the process dies.
	c := h.waitConsumer(id, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive && !c.InFlight })
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(t, h.engine.Stop(ctx))

	h.clock.Set(c.Deadline.Add(time.Second))
	restartEngine(t, h)
	again := h.nextDelivery()
	require.Equal(t, id, again.n.ConsumerID)
	require.Greater(t, again.n.Epoch, d.n.Epoch, "the expired cycle is fenced by a new epoch")
}

// gatedSource holds MatchStreams for the gated patterns until their gate
// is closed, and says on entered which pattern arrived.
type gatedSource struct {
	*fakeSource
	gates   map[string]chan struct{}
	entered chan string
}

func (s *gatedSource) MatchStreams(ctx context.Context, p *webhooks.Pattern) ([]webhooks.StreamInfo, error) {
	if gate, ok := s.gates[p.String()]; ok {
		s.entered <- p.String()
		<-gate
	}
	return s.fakeSource.MatchStreams(ctx, p)
}

// The start-up sweep covers the subscriptions that were in the Store when
// Start loaded them. One created since adopts its streams at their tails
// itself; the sweep spawning it at the start of a stream would replay the
// stream. Here the sweep reaches the stream after the new subscription is
// indexed and before it has adopted the stream.
func TestStartSweepSkipsSubscriptionsCreatedSinceStart(t *testing.T) {
	h := newHarness(t)
	h.subscribe("s1", "/a/*")
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(t, h.engine.Stop(ctx))
	h.source.set("/a/1", 3) // created while down: no StreamCreated

	src := &gatedSource{
		fakeSource: h.source,
		gates:      map[string]chan struct{}{"/a/*": make(chan struct{}), "/a/**": make(chan struct{})},
		entered:    make(chan string, 4),
	}
	e, err := webhooks.New(h.store, src,
		webhooks.WithClock(h.clock),
		webhooks.WithCallbackBaseURL(callbackBase),
		webhooks.WithWebhookPolicy(webhooks.WebhookPolicy{AllowLoopback: true}))
	require.NoError(t, err)
	webhooks.SignalProgress(e, h.signals())
	h.engine, h.handler = e, apiHandler(t, e)
	startForTest(t, e)
	created := make(chan int, 1)
	go func() {
		created <- h.do(http.MethodPut, "/a/**?subscription=s2", fmt.Sprintf(`{"webhook":%q}`, h.recv.url())).Code
	}()
	entered := map[string]bool{}
	for range 2 {
		select {
		case p := <-src.entered:
			entered[p] = true
		case <-time.After(waitFor):
			t.Fatalf("the sweep and the adoption did not both reach MatchStreams: %v", entered)
		}
	}
	close(src.gates["/a/*"]) // the sweep, with s2 already in the index
	d := h.nextDelivery()
	require.Equal(t, webhooks.ConsumerID("s1", "/a/1"), d.n.ConsumerID)
	close(src.gates["/a/**"]) // s2 adopts /a/1
	require.Equal(t, http.StatusCreated, <-created)

	c := h.consumer(webhooks.ConsumerID("s2", "/a/1"))
	require.Equal(t, webhooks.StateIdle, c.State)
	require.Equal(t, streamOffsets("/a/1", offset(3)), c.Streams, "adopted at the tail, not replayed")
}

// savesStore counts the UpdateConsumer calls that saved a consumer.
type savesStore struct {
	*memstore.Store
	saves atomic.Int64
}

func (s *savesStore) UpdateConsumer(ctx context.Context, id string, fn func(*webhooks.Consumer) (webhooks.UpdateAction, error)) (*webhooks.Consumer, error) {
	return s.Store.UpdateConsumer(ctx, id, func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
		action, err := fn(c)
		if err == nil && action == webhooks.UpdateSave {
			s.saves.Add(1)
		}
		return action, err
	})
}

// TestWakeStartsItsAttemptInOneWrite checks that a wake, from an append or
// from a callback's done with work pending (L3), starts its first attempt in
// the same Store write: a cycle answered 200 and finished by a callback
// costs three writes, the wake, the 2xx and the callback, and none by the
// scheduler.
func TestWakeStartsItsAttemptInOneWrite(t *testing.T) {
	store := &savesStore{Store: memstore.New()}
	h := newHarnessStore(t, store)
	h.subscribe("s1", "/agents/*")
	h.source.set(agentA, 10)
	require.NoError(t, h.engine.StreamAppended(context.Background(), agentA))
	d := h.nextDelivery()
	h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive })
	require.EqualValues(t, 2, store.saves.Load(), "the wake and the 2xx")

	tail := h.appendTo(agentA, 5)
	r := h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1), Acks: streamOffsets(agentA, offset(10)), Done: true})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	d = h.nextDelivery()
	require.EqualValues(t, 2, d.n.Epoch)
	h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive && c.Epoch == 2 })
	r = h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(2), Acks: streamOffsets(agentA, tail), Done: true})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	require.Equal(t, webhooks.StateIdle, h.consumer(agentAID).State)
	require.EqualValues(t, 5, store.saves.Load(), "per cycle: the wake (the first by the callback), the 2xx, the callback")
}
