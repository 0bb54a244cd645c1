package webhooks_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/memstore"
	"github.com/streamhooks/webhooks/receiver"
)

// Liveness across instances (issue 27, L1): an acknowledged append always
// wakes its consumers, whatever fails on the way.

// flakySource is a fakeSource whose Stream fails, with an error that is
// neither ErrStreamNotFound nor ErrStoreUnavailable, while it is down: a
// dropped database connection of the host.
type flakySource struct {
	*fakeSource
	down atomic.Bool
}

// flakyDetail is in the source's error; clients must never see it.
const flakyDetail = "conn 10.0.0.7:5432 reset by peer"

func (s *flakySource) Stream(ctx context.Context, path string) (webhooks.StreamInfo, error) {
	if s.down.Load() {
		return webhooks.StreamInfo{}, errors.New(flakyDetail)
	}
	return s.fakeSource.Stream(ctx, path)
}

// requireRetryLater checks a 503 SERVICE_UNAVAILABLE with Retry-After
// that does not echo the source's error.
func requireRetryLater(t *testing.T, status int, header http.Header, body string) {
	t.Helper()
	require.Equal(t, http.StatusServiceUnavailable, status, body)
	secs, err := strconv.Atoi(header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", header.Get("Retry-After"))
	require.Positive(t, secs)
	require.Contains(t, body, `"SERVICE_UNAVAILABLE"`)
	require.NotContains(t, body, flakyDetail)
}

// A stream read that fails is retried, never dropped: the append whose
// wake-up it failed is delivered once the source answers again, and the
// requests it failed meanwhile are answered 503 with Retry-After, as the
// docs say, not 500.
func TestFailedStreamReadIsRetried(t *testing.T) {
	src := &flakySource{}
	h := newHarnessWrapped(t, func(f *fakeSource) webhooks.StreamSource { src.fakeSource = f; return src })
	h.subscribe("s1", "/agents/*")
	h.create(agentA, 10)
	d := h.nextDelivery()
	h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive })

	src.down.Store(true)
	for _, body := range []string{
		fmt.Sprintf(`{"epoch":1,"acks":[{"path":%q,"offset":%q}]}`, agentA, offset(10)),
		`{"epoch":1,"done":true}`,
	} {
		rec := h.do(http.MethodPost, "/callback/"+agentAID, body, "Authorization", "Bearer "+d.n.Token, "Content-Type", "application/json")
		requireRetryLater(t, rec.Code, rec.Header(), rec.Body.String())
	}
	rec := h.do(http.MethodGet, "/agents/*?subscription=s1&consumers", "")
	requireRetryLater(t, rec.Code, rec.Header(), rec.Body.String())

	src.down.Store(false)
	r := h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1), Acks: streamOffsets(agentA, offset(10)), Done: true})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateIdle })

	src.down.Store(true)
	h.source.grow(agentA, 5)
	require.ErrorIs(t, h.engine.StreamAppended(context.Background(), agentA), webhooks.ErrStoreUnavailable)
	src.down.Store(false)
	// The scheduler retries at its poll, or a second after a retry it
	// made while the source was down: each step ends at one of them, so
	// no POST's timeout passes while it is sent.
	h.waitIdle()
	h.clock.Add(time.Second)
	h.waitIdle()
	h.clock.Add(testPollInterval - time.Second)
	again := h.nextDelivery()
	require.Equal(t, agentAID, again.n.ConsumerID)
	require.Equal(t, []string{agentA}, again.n.TriggeredBy)
}

// An empty stream created while the source read fails still gets its
// consumer's creation wake, once: the retry of the missed StreamCreated
// owes it as the call did, and neither a later poll nor a stream sweep
// wakes the consumer again after it says done.
func TestFailedCreationReadStillWakesOnce(t *testing.T) {
	src := &flakySource{}
	h := newHarnessWrapped(t, func(f *fakeSource) webhooks.StreamSource { src.fakeSource = f; return src })
	h.recv.queue(reply{status: http.StatusOK, body: `{"done":true}`})
	h.subscribe("s1", "/agents/*")

	src.down.Store(true)
	h.source.set(agentA, 0)
	require.ErrorIs(t, h.engine.StreamCreated(context.Background(), agentA), webhooks.ErrStoreUnavailable)
	src.down.Store(false)
	// As in TestFailedStreamReadIsRetried: each step ends at a retry of
	// the scheduler, so no POST's timeout passes while it is sent.
	h.waitIdle()
	h.clock.Add(time.Second)
	h.waitIdle()
	h.clock.Add(testPollInterval - time.Second)
	d := h.nextDelivery()
	require.Equal(t, agentAID, d.n.ConsumerID)
	require.Equal(t, int64(1), d.n.Epoch)
	require.Equal(t, streamOffsets(agentA, webhooks.OffsetNone), d.n.Streams)
	require.Equal(t, []string{agentA}, d.n.TriggeredBy)
	c := h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateIdle })
	require.Equal(t, streamOffsets(agentA, offset(0)), c.Streams)

	// Past a poll and the default stream sweep (60 polls): no other wake.
	for range 61 {
		h.waitIdle()
		h.clock.Add(testPollInterval)
	}
	h.waitIdle()
	require.Empty(t, h.recv.deliveries)
	require.Equal(t, int64(1), h.consumer(agentAID).Epoch)
}

// changedMsg is logged when a reload finds subscriptions that another
// engine changed.
const changedMsg = "webhooks: subscriptions changed through another engine"

// healthAfterLoad is a feedStore on which another engine records a failed
// delivery of s1 (Store.UpdateHealth) just after each ListSubscriptions:
// between an engine's load at Start and its feed's first reload, and
// before every later reload.
type healthAfterLoad struct{ feedStore }

func (s healthAfterLoad) ListSubscriptions(ctx context.Context) ([]*webhooks.Subscription, error) {
	subs, err := s.feedStore.ListSubscriptions(ctx)
	if err == nil {
		_, err = s.UpdateHealth(ctx, "s1", func(h *webhooks.SubscriptionHealth) { h.ConsecutiveFailures++ })
	}
	return subs, err
}

// An engine whose feed's first reload finds the subscriptions it loaded
// at Start logs no change, though their health moved meanwhile: health is
// no change of a subscription. A subscription created through another
// engine is logged, and alone.
func TestStartLogsNoSubscriptionChange(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b instanceBackend) {
		logs, logger := newLogCapture()
		c := newCluster(t, b.open(t, 2))
		c.start(0)
		c.subscribe(0, "s1", "/agents/*", "http://127.0.0.1:1/hook")
		c.subscribe(0, "s2", "/orders/*", "http://127.0.0.1:1/hook")
		// The Store itself: sharedStore hides its feed.
		store := healthAfterLoad{c.stores[1].Store.(feedStore)}
		e, err := webhooks.New(store, c.source,
			webhooks.WithClock(c.clock), webhooks.WithCallbackBaseURL(callbackBase),
			webhooks.WithWebhookPolicy(webhooks.WebhookPolicy{AllowLoopback: true}),
			webhooks.WithPollInterval(testPollInterval), webhooks.WithLogger(logger))
		require.NoError(t, err)
		reloaded := make(chan struct{}, 1)
		webhooks.SignalReloaded(e, reloaded)
		c.engines[1] = e
		c.handlers[1] = e.Handler(http.NotFoundHandler())
		c.start(1)
		awaitSignal(t, reloaded, "the first reload")
		require.Empty(t, logs.lines(t, changedMsg), "nothing changed")
		require.Equal(t, 1, webhooks.LoadedSubscription(e, "s1").Health.ConsecutiveFailures, "the reload takes the health as it is")

		c.subscribe(0, "s3", "/users/*", "http://127.0.0.1:1/hook")
		for !slices.Contains(webhooks.KnownSubscriptions(e), "s3") {
			awaitSignal(t, reloaded, "a reload with s3")
		}
		lines := logs.lines(t, changedMsg)
		require.Len(t, lines, 1)
		require.Equal(t, []any{"s3"}, lines[0]["added"])
	})
}

// awaitSignal waits for a token on ch.
func awaitSignal(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitFor):
		t.Fatalf("waited in vain for %s", what)
	}
}

// sweepInterval is the stream sweep's interval in the liveness tests.
const sweepInterval = time.Minute

// sweepCluster is a cluster whose engines sweep every sweepInterval and
// see the streams through one flakySource, with a signal per engine for
// each sweep it ends.
type sweepCluster struct {
	*cluster
	src      *flakySource
	swept    []chan struct{}
	reloaded []chan struct{}
}

// knownEverywhere waits until every engine has loaded subscription id.
func (c *sweepCluster) knownEverywhere(id string) {
	for i, e := range c.engines {
		for !slices.Contains(webhooks.KnownSubscriptions(e), id) {
			awaitSignal(c.t, c.reloaded[i], "a reload with "+id)
		}
	}
}

func newSweepCluster(t *testing.T, stores []sharedStore) *sweepCluster {
	t.Helper()
	c := &sweepCluster{cluster: &cluster{t: t, clock: newMockClock(), source: newFakeSource(), stores: stores, progressed: make(chan struct{}, 1)}}
	c.src = &flakySource{fakeSource: c.source}
	for _, s := range stores {
		// The Store itself, with its feed, which sharedStore hides: a
		// survivor must know the subscriptions created through the dead.
		e, err := webhooks.New(s.Store, c.src,
			webhooks.WithClock(c.clock),
			webhooks.WithCallbackBaseURL(callbackBase),
			webhooks.WithWebhookPolicy(webhooks.WebhookPolicy{AllowLoopback: true}),
			webhooks.WithPollInterval(testPollInterval),
			webhooks.WithSweepInterval(sweepInterval))
		require.NoError(t, err)
		webhooks.SignalProgress(e, c.progressed)
		swept, reloaded := make(chan struct{}, 1), make(chan struct{}, 1)
		webhooks.SignalSwept(e, swept)
		webhooks.SignalReloaded(e, reloaded)
		c.reloaded = append(c.reloaded, reloaded)
		c.swept = append(c.swept, swept)
		c.engines = append(c.engines, e)
		c.handlers = append(c.handlers, e.Handler(http.NotFoundHandler()))
	}
	return c
}

// startAll starts every engine and waits for their start-up sweeps: what
// is appended afterwards only a stream sweep can find.
func (c *sweepCluster) startAll() {
	for i := range c.engines {
		c.start(i)
		awaitSignal(c.t, c.swept[i], "the start-up sweep")
	}
}

// An acknowledged append wakes its consumers though the engine that was to
// wake them died: a survivor's stream sweep finds it within an interval,
// without a restart. Both faults of the audit: a failed stream read
// that its engine queued for a retry it did not live to make, and a host
// killed between its append and StreamAppended.
func TestInstancesSweepFindsStrandedAppends(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b instanceBackend) {
		c := newSweepCluster(t, b.open(t, 3))
		hook := newHookServer(t, func(_ post, w http.ResponseWriter) { _, _ = w.Write([]byte(`{"done":true}`)) })
		c.startAll()
		c.subscribe(0, "s1", "/agents/*", hook.url())
		c.knownEverywhere("s1")
		idleAt := func(n int) func(*webhooks.Consumer) bool {
			return func(co *webhooks.Consumer) bool {
				return co.State == webhooks.StateIdle && co.Streams[0].Offset == offset(n)
			}
		}
		c.source.set(agentA, 1)
		require.NoError(t, c.engines[0].StreamCreated(context.Background(), agentA))
		require.EqualValues(t, 1, hook.next(t).n.Epoch)
		c.waitConsumer(2, agentAID, idleAt(1))

		// The read fails, so engine 0 keeps the append to retry; it dies
		// first.
		c.src.down.Store(true)
		c.source.grow(agentA, 1)
		require.ErrorIs(t, c.engines[0].StreamAppended(context.Background(), agentA), webhooks.ErrStoreUnavailable)
		c.crash(0)
		c.src.down.Store(false)
		c.stepTo(2, c.clock.Now().Add(sweepInterval))
		p := hook.next(t)
		require.EqualValues(t, 2, p.n.Epoch)
		require.Equal(t, []string{agentA}, p.n.TriggeredBy)
		c.waitConsumer(2, agentAID, idleAt(2))

		// The host dies between its append and StreamAppended, and its
		// engine with it.
		c.source.grow(agentA, 1)
		c.crash(1)
		c.stepTo(2, c.clock.Now().Add(sweepInterval))
		require.EqualValues(t, 3, hook.next(t).n.Epoch)
		c.waitConsumer(2, agentAID, idleAt(3))

		counts := checkSafety(t, hook.recorded())
		for k, n := range counts {
			require.Equal(t, 1, n, "%v got %d POSTs", k, n)
		}
	})
}

// A stream created after a subscription's adoption scan, through an engine
// that did not know the subscription yet, gets its consumer from a
// survivor's next sweep, before its first event, though its tail never
// moves again; a stream the subscription adopted at its tail is not
// replayed. Before the sweeps waited for the adoption's mark, the sweep
// that first listed such a stream filtered out the subscription it did not
// know, kept the stream's tail, and never looked at it again.
func TestInstancesSweepGivesStreamsCreatedInTheFeedsWindowTheirConsumers(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b instanceBackend) {
		c := newSweepCluster(t, b.open(t, 2))
		hook := newHookServer(t, func(_ post, w http.ResponseWriter) { _, _ = w.Write([]byte(`{"done":true}`)) })
		const old, oldID = "/agents/old", "s1:%2Fagents%2Fold"
		c.source.set(old, 3)
		c.startAll()
		c.subscribe(0, "s1", "/agents/*", hook.url())
		c.knownEverywhere("s1")
		require.Equal(t, offset(3), c.consumer(1, oldID).Streams[0].Offset, "adopted at its tail")

		// Created through an engine that had not reloaded s1: its
		// StreamCreated spawned no consumer of s1. Engine 0 dies.
		c.source.set(agentA, 2)
		c.crash(0)
		c.stepTo(1, c.clock.Now().Add(sweepInterval))
		p := hook.next(t)
		require.Equal(t, agentAID, p.n.ConsumerID)
		require.Equal(t, []string{agentA}, p.n.TriggeredBy)
		c.waitConsumer(1, agentAID, func(co *webhooks.Consumer) bool {
			return co.State == webhooks.StateIdle && co.Streams[0].Offset == offset(2)
		})
		awaitSignal(t, c.swept[1], "the sweep")
		c.stepTo(1, c.clock.Now().Add(sweepInterval))
		awaitSignal(t, c.swept[1], "the next sweep")
		require.Equal(t, offset(3), c.consumer(1, oldID).Streams[0].Offset, "not replayed")
		require.Len(t, hook.recorded(), 1, "only the stream created in the window is woken")

		// A subscription whose creator has not finished adopting its
		// streams (it has not marked them adopted) gets none from the
		// sweep: it would replay the streams the adoption has not reached.
		// The sweep keeps the new stream's tail meanwhile; once the mark
		// is set, the next sweep looks at the stream again and gives it
		// its consumer, before its first event.
		const task, taskID = "/tasks/1", "s2:%2Ftasks%2F1"
		require.NoError(t, c.stores[1].CreateSubscription(context.Background(),
			&webhooks.Subscription{ID: "s2", Pattern: "/tasks/*", Webhook: hook.url(), Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}))
		for !slices.Contains(webhooks.KnownSubscriptions(c.engines[1]), "s2") {
			awaitSignal(t, c.reloaded[1], "a reload with s2")
		}
		c.source.set(task, 2)
		c.stepTo(1, c.clock.Now().Add(sweepInterval))
		awaitSignal(t, c.swept[1], "a sweep that knows s2")
		_, err := c.stores[1].GetConsumer(context.Background(), taskID)
		require.ErrorIs(t, err, webhooks.ErrConsumerNotFound, "no consumer before the adoption's mark")

		require.NoError(t, webhooks.MarkAdopted(context.Background(), c.stores[1].Store, "s2"))
		c.stepTo(1, c.clock.Now().Add(sweepInterval))
		p = hook.next(t)
		require.Equal(t, taskID, p.n.ConsumerID)
		require.Equal(t, []string{task}, p.n.TriggeredBy)
		c.waitConsumer(1, taskID, func(co *webhooks.Consumer) bool {
			return co.State == webhooks.StateIdle && co.Streams[0].Offset == offset(2)
		})
	})
}

// Stop lets the deliveries in flight end and records their outcomes: a
// wake-up its receiver answered 2xx while the engine stopped leaves the
// consumer LIVE, so the next engine on the Store does not time it out
// and send it again under the same wake_id.
func TestStopRecordsDeliveriesInFlight(t *testing.T) {
	store := memstore.New()
	h := newHarnessStore(t, store)
	stopping := make(chan struct{}, 1)
	hold := make(chan struct{})
	h.recv.queue(reply{status: http.StatusOK, hold: hold})
	// A second engine, whose Stop is the test's.
	e, err := webhooks.New(store, h.source, webhooks.WithClock(h.clock), webhooks.WithCallbackBaseURL(callbackBase),
		webhooks.WithWebhookPolicy(webhooks.WebhookPolicy{AllowLoopback: true}), webhooks.WithPollInterval(testPollInterval))
	require.NoError(t, err)
	webhooks.SignalStopping(e, stopping)
	h.subscribe("s1", "/agents/*") // before e loads the subscriptions
	require.NoError(t, e.Start(context.Background()))
	h.source.set(agentA, 10)
	require.NoError(t, e.StreamCreated(context.Background(), agentA))
	d := h.nextDelivery()

	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		stopped <- e.Stop(ctx)
	}()
	awaitSignal(t, stopping, "Stop")
	require.NoError(t, d.ctx.Err(), "the POST in flight goes on")
	close(hold)
	require.NoError(t, <-stopped)
	c := h.consumer(agentAID)
	require.Equal(t, webhooks.StateLive, c.State, "the 2xx is recorded")
	require.False(t, c.InFlight)
}

// A delivery still in flight when Stop's context ends is abandoned: its
// POST is cancelled, and Stop says why it returned.
func TestStopAbandonsDeliveriesPastItsContext(t *testing.T) {
	store := memstore.New()
	h := newHarnessStore(t, store)
	stopping := make(chan struct{}, 1)
	hold := make(chan struct{})
	defer close(hold)
	h.recv.queue(reply{status: http.StatusOK, hold: hold})
	e, err := webhooks.New(store, h.source, webhooks.WithClock(h.clock), webhooks.WithCallbackBaseURL(callbackBase),
		webhooks.WithWebhookPolicy(webhooks.WebhookPolicy{AllowLoopback: true}), webhooks.WithPollInterval(testPollInterval))
	require.NoError(t, err)
	webhooks.SignalStopping(e, stopping)
	h.subscribe("s1", "/agents/*") // before e loads the subscriptions
	require.NoError(t, e.Start(context.Background()))
	h.source.set(agentA, 10)
	require.NoError(t, e.StreamCreated(context.Background(), agentA))
	d := h.nextDelivery()

	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- e.Stop(ctx) }()
	awaitSignal(t, stopping, "Stop")
	cancel()
	require.ErrorIs(t, <-stopped, context.Canceled)
	select {
	case <-d.ctx.Done():
	case <-time.After(waitFor):
		t.Fatal("the POST in flight was not cancelled")
	}
	c := h.consumer(agentAID)
	require.True(t, c.State == webhooks.StateWaking && c.InFlight, "the attempt stays in flight, to time out")
}
