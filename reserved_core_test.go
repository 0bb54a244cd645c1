package webhooks_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/memstore"
)

// forEachDSBackend runs fn for the memory Store and each shared backend
// (SQLite, PostgreSQL), as a subtest.
func forEachDSBackend(t *testing.T, fn func(t *testing.T, store webhooks.Store)) {
	t.Run("memory", func(t *testing.T) { fn(t, memstore.New()) })
	forEachBackend(t, func(t *testing.T, b instanceBackend) { fn(t, b.open(t, 1)[0].Store) })
}

// dsLinks are the link types of subscription id's links, by path.
func (h *harness) dsLinks(id string) map[string]string {
	h.t.Helper()
	r := h.ds(http.MethodGet, "subscriptions/"+id, nil, "")
	require.Equal(h.t, http.StatusOK, r.status, r.raw)
	out := map[string]string{}
	for _, s := range r.body["streams"].([]any) {
		l := s.(map[string]any)
		out[l["path"].(string)] = l["link_type"].(string)
	}
	return out
}

// A deleted stream loses its __ds links, glob and explicit: a wake in
// flight that listed it is acked without it, no later wake lists it, and a
// stream created again at its path starts fresh, from before its first
// event, although its offsets are below those acked on the deleted one.
func TestDSStreamDeletedUnlinks(t *testing.T) {
	forEachDSBackend(t, func(t *testing.T, store webhooks.Store) {
		h, _ := newDSHarnessStore(t, store)
		ctx := context.Background()
		h.create("/events/a", 10)
		h.dsPut("s1", map[string]any{"type": "webhook", "pattern": "events/*", "streams": []string{"events/a"},
			"webhook": map[string]string{"url": h.recv.url()}, "lease_ttl_ms": 1000})
		require.Equal(t, map[string]string{"events/a": "explicit"}, h.dsLinks("s1"))

		hold := make(chan struct{})
		h.recv.queue(reply{status: http.StatusOK, body: `{"done":true}`, hold: hold}, reply{status: http.StatusOK, body: `{"done":true}`})
		h.create("/events/b", 4)
		w1, _ := h.nextDSWake()
		require.Len(t, w1.Streams, 1)
		require.Equal(t, "events/b", w1.Streams[0].Path)
		h.appendTo("/events/a", 5) // pending on a while b's wake is in flight
		h.source.remove("/events/b")
		require.NoError(t, h.engine.StreamDeleted(ctx, "/events/b"))
		h.source.remove("/events/a")
		require.NoError(t, h.engine.StreamDeleted(ctx, "/events/a"))
		require.Empty(t, h.dsLinks("s1"), "the deleted streams are still linked")
		close(hold) // done: the snapshot's ack names a stream no longer linked
		require.True(t, h.waitProgress(func() bool {
			sub, err := store.(webhooks.DSStore).GetDSSubscription(ctx, "s1")
			require.NoError(t, err)
			return sub.Cursor.WakeID == ""
		}), "the wake whose snapshot listed a deleted stream never ended")

		h.create("/events/a", 3) // offsets below the 15 acked before
		w2, _ := h.nextDSWake()
		require.Greater(t, w2.Generation, w1.Generation)
		require.Len(t, w2.Streams, 1, "a wake lists a deleted stream")
		require.Equal(t, "events/a", w2.Streams[0].Path)
		require.Equal(t, "glob", w2.Streams[0].LinkType, "the explicit link went with the stream")
		require.Equal(t, webhooks.OffsetNone, w2.Streams[0].AckedOffset, "the new stream starts fresh")
		require.Equal(t, offset(3), w2.Streams[0].TailOffset)
		require.True(t, h.waitProgress(func() bool { return h.dsAcked("s1", "events/a") == offset(3) }))
	})
}

// A __ds webhook attempt takes its host's lane, as every attempt does:
// with one POST per host, it waits for a seed-001 wake-up's POST to the
// same host, and goes once that one is answered. Its span is the
// pipeline's, named for its mechanism, with the attempt's identity.
func TestDSWebhookSharesTheHostLane(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
	h, _ := newDSHarness(t, webhooks.WithMaxDeliveriesPerHost(1), webhooks.WithTracerProvider(tp))
	hold := make(chan struct{})
	h.recv.queue(reply{status: http.StatusOK, hold: hold}, reply{status: http.StatusOK, body: `{"done":true}`})
	h.subscribe("seed", "/agents/*")
	h.create("/agents/a", 1)
	seed := h.nextDelivery()
	require.NotEmpty(t, seed.n.ConsumerID, "the seed-001 wake-up goes first")

	h.dsPut("s1", webhookSub(h, "events/*"))
	h.create("/events/a", 10)
	require.True(t, h.waitProgress(func() bool { return webhooks.LanesPending(h.engine) == 2 }),
		"the __ds attempt does not wait in the host's lane")
	select {
	case d := <-h.recv.deliveries:
		t.Fatalf("a second POST to the host while one is in flight: %s", d.body)
	default:
	}
	close(hold)
	w, _ := h.nextDSWake()
	require.Equal(t, "s1", w.SubscriptionID)
	require.True(t, h.waitProgress(func() bool { return h.dsAcked("s1", "events/a") == offset(10) }))

	require.True(t, h.waitProgress(func() bool {
		for _, s := range spans.Ended() {
			if s.Name() == "webhooks.ds.webhook" {
				attrs := attribute.NewSet(s.Attributes()...)
				id, _ := attrs.Value("webhooks.consumer_id")
				wake, _ := attrs.Value("webhooks.wake_id")
				outcome, _ := attrs.Value("webhooks.outcome")
				return id.AsString() == "__ds/s1" && wake.AsString() == w.WakeID && outcome.AsString() == "done"
			}
		}
		return false
	}), "no span of the __ds attempt")
}

// Stop lets a __ds POST in flight end and applies its answer, as it does
// for every attempt: a {"done": true} that arrives while the engine stops
// acks the wake's snapshot, so no other engine sends the wake again.
func TestDSStopRecordsAttemptsInFlight(t *testing.T) {
	h, _ := newDSHarness(t)
	stopping := make(chan struct{}, 1)
	hold := make(chan struct{})
	h.recv.queue(reply{status: http.StatusOK, body: `{"done":true}`, hold: hold})
	h.dsPut("s1", webhookSub(h, "events/*"))
	// Another engine on the Store, whose Stop is the test's, sends the
	// wake: the harness's stops, so that it sends none.
	require.NoError(t, h.engine.Stop(context.Background()))
	e, err := webhooks.New(h.store, h.source, webhooks.WithClock(h.clock), webhooks.WithCallbackBaseURL(callbackBase),
		webhooks.WithWebhookPolicy(webhooks.WebhookPolicy{AllowLoopback: true}), webhooks.WithPollInterval(testPollInterval))
	require.NoError(t, err)
	webhooks.SignalStopping(e, stopping)
	require.NoError(t, e.Start(context.Background()))
	h.source.set("/events/a", 10)
	require.NoError(t, e.StreamCreated(context.Background(), "/events/a"))
	w, d := h.nextDSWake()

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
	ds := h.store.(webhooks.DSStore)
	sub, err := ds.GetDSSubscription(context.Background(), "s1")
	require.NoError(t, err)
	require.Empty(t, sub.Cursor.WakeID, "the done answer did not end wake %s", w.WakeID)
	links, err := ds.ListDSLinks(context.Background(), &webhooks.ListDSLinksParams{ID: "s1", Paths: []string{"events/a"}})
	require.NoError(t, err)
	require.Len(t, links, 1)
	require.Equal(t, offset(10), links[0].AckedOffset, "the done answer did not ack the snapshot")
}

// Each __ds attempt goes in the delivery log, under the subscription's
// DSDeliveryLogKey, as every attempt does: operators read it with
// DSDeliveryLog.
func TestDSDeliveryLog(t *testing.T) {
	h, _ := newDSHarness(t)
	ctx := context.Background()
	h.recv.queue(reply{status: http.StatusInternalServerError, body: "busy"}, reply{status: http.StatusOK, body: `{"done":true}`})
	h.dsPut("s1", webhookSub(h, "events/*"))
	h.create("/events/a", 10)
	w1, _ := h.nextDSWake()
	ds := h.store.(webhooks.DSStore)
	var sub *webhooks.DSSubscription
	require.True(t, h.waitProgress(func() bool {
		var err error
		sub, err = ds.GetDSSubscription(ctx, "s1")
		require.NoError(t, err)
		return sub.Cursor.Status == webhooks.DSFailed
	}))
	h.flushLog()
	h.clock.Set(sub.Cursor.DueAt)
	h.nextDSWake()
	require.True(t, h.waitProgress(func() bool { return h.dsAcked("s1", "events/a") == offset(10) }))
	h.flushLog()
	var log []*webhooks.DeliveryAttempt
	require.True(t, h.waitProgress(func() bool {
		var err error
		log, err = h.engine.DSDeliveryLog(ctx, "s1", 10)
		require.NoError(t, err)
		return len(log) == 2
	}), "log: %v", log)
	require.Equal(t, webhooks.DSDeliveryLogKey("s1"), log[0].ConsumerID)
	require.Equal(t, 200, log[0].StatusCode)
	require.Equal(t, 2, log[0].Attempt, "newest first")
	require.Equal(t, w1.WakeID, log[0].DeliveryID)
	require.Equal(t, 500, log[1].StatusCode)
	require.Equal(t, "status_5xx", log[1].ErrorClass)
	require.Equal(t, "busy", log[1].ResponseBody)

	_, err := h.engine.DSDeliveryLog(ctx, "absent", 10)
	require.ErrorIs(t, err, webhooks.ErrDSSubscriptionNotFound)
}

// dsReloadStore is a memstore whose subscription feed is the test's: the
// engine's changed function is sent on watching. While hold is set, each
// ListDSSubscriptions takes its list, says so on listed, and returns it
// only when release is sent.
type dsReloadStore struct {
	*memstore.Store
	watching chan func()
	hold     atomic.Bool
	listed   chan struct{}
	release  chan struct{}
}

func (s *dsReloadStore) WatchSubscriptions(ctx context.Context, changed func()) error {
	s.watching <- changed
	<-ctx.Done()
	return ctx.Err()
}

func (s *dsReloadStore) ListDSSubscriptions(ctx context.Context) ([]*webhooks.DSSubscription, error) {
	subs, err := s.Store.ListDSSubscriptions(ctx)
	if !s.hold.Load() {
		return subs, err
	}
	if err := holdList(ctx, s.listed, s.release); err != nil {
		return nil, err
	}
	return subs, err
}

// A __ds subscription created through this engine while a reload of the
// subscription feed reads the subscriptions is not dropped by that reload,
// whose read predates it: a stream created next is linked and woken.
func TestDSSubscriptionCreatedDuringAReloadIsKept(t *testing.T) {
	s := &dsReloadStore{Store: memstore.New(), watching: make(chan func(), 1), listed: make(chan struct{}), release: make(chan struct{})}
	h, _ := newDSHarnessStore(t, s)
	reloaded := make(chan struct{}, 1)
	webhooks.SignalReloaded(h.engine, reloaded)
	changed := receive(t, s.watching)
	s.hold.Store(true)
	changed()
	receive(t, s.listed)
	s.hold.Store(false)
	h.dsPut("s1", webhookSub(h, "events/*"))
	s.release <- struct{}{}
	receive(t, reloaded)
	h.create("/events/a", 1)
	w, _ := h.nextDSWake()
	require.Len(t, w.Streams, 1)
	require.Equal(t, "events/a", w.Streams[0].Path)
}
