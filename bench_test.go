package webhooks_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/memstore"
	"github.com/streamhooks/webhooks/receiver"
)

// BenchmarkStreamAppendedWake measures one state transition through the
// Store: an append that wakes an IDLE consumer (IDLE → WAKING), with the
// index lookup, the consumer lookup by stream, one UpdateConsumer on the
// memory store and the stream read inside it. The engine's one delivery
// slot is held by a POST that never ends, so nothing else is delivered;
// every iteration wakes a fresh consumer.
func BenchmarkStreamAppendedWake(b *testing.B) {
	ctx := context.Background()
	store := memstore.New()
	src := newFakeSource()
	e, err := webhooks.New(store, src, webhooks.WithClock(newMockClock()), webhooks.WithCallbackBaseURL(callbackBase),
		webhooks.WithMaxConcurrentDeliveries(1),
		webhooks.WithHTTPTransport(subRoundTripper(func(r *http.Request) (*http.Response, error) {
			<-r.Context().Done()
			return nil, r.Context().Err()
		})))
	require.NoError(b, err)
	startForTest(b, e)
	// Subscribed through the API after Start, so that the start-up sweep
	// has nothing to do, and streams set up after it, so that it adopts
	// none.
	rec := httptest.NewRecorder()
	e.SubscriptionHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodPut,
		"/tenants/*/events?subscription=s1", strings.NewReader(`{"webhook":"https://hooks.test/"}`)))
	require.Equal(b, http.StatusCreated, rec.Code, rec.Body.String())
	paths := make([]string, b.N)
	for i := range paths {
		paths[i] = "/tenants/" + strconv.Itoa(i) + "/events"
		src.set(paths[i], 10)
		require.NoError(b, store.CreateConsumer(ctx, &webhooks.Consumer{
			ID: webhooks.ConsumerID("s1", paths[i]), SubscriptionID: "s1", PrimaryStream: paths[i],
			State: webhooks.StateIdle, Streams: streamOffsets(paths[i], offset(0)),
		}))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := e.StreamAppended(ctx, paths[i]); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	counts, err := store.CountConsumers(ctx)
	require.NoError(b, err)
	require.Equal(b, b.N, counts[webhooks.StateWaking])
}

// BenchmarkWakeCycle measures one whole wake cycle on the mock-clock
// harness: an append, the webhook POST to a loopback receiver, and one
// callback that claims, acks and finishes. Its allocs/op are those of the
// cycle end to end, the receiver's HTTP server and the engine's HTTP
// client included.
func BenchmarkWakeCycle(b *testing.B) {
	h := newHarness(b)
	// The stream exists before the subscription: only appends wake it.
	h.source.set(agentA, 0)
	h.subscribe("s1", "/agents/*")
	b.ReportAllocs()
	for b.Loop() {
		tail := h.appendTo(agentA, 10)
		d := h.nextDelivery()
		r := h.callback(agentAID, d.n.Token, receiver.CallbackRequest{
			Epoch:  &d.n.Epoch,
			WakeID: d.n.WakeID,
			Acks:   streamOffsets(agentA, tail),
			Done:   true,
		})
		if !r.body.OK {
			b.Fatal(r.raw)
		}
	}
}
