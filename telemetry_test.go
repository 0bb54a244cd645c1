package webhooks_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/receiver"
)

// telHarness is a harness whose engine reports to a span recorder and a
// manual metric reader.
type telHarness struct {
	*harness
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
}

func newTelHarness(t *testing.T, opts ...webhooks.Option) *telHarness {
	t.Helper()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() {
		// Runs after the harness's Stop: cleanups run last-in first-out.
		require.NoError(t, tp.Shutdown(context.Background()))
		require.NoError(t, mp.Shutdown(context.Background()))
	})
	h := newHarness(t, append(opts, webhooks.WithTracerProvider(tp), webhooks.WithMeterProvider(mp))...)
	return &telHarness{harness: h, spans: spans, reader: reader}
}

// telEnded returns the ended spans named name.
func (th *telHarness) telEnded(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range th.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// telAttrs returns a span's attributes by key.
func telAttrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	out := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		out[kv.Key] = kv.Value
	}
	return out
}

// telDeliverSpan waits for the ended "webhooks.deliver" span of consumer id
// at epoch with the given outcome.
func (th *telHarness) telDeliverSpan(id string, epoch int64, outcome string) sdktrace.ReadOnlySpan {
	th.t.Helper()
	var found sdktrace.ReadOnlySpan
	require.Eventually(th.t, func() bool {
		for _, s := range th.telEnded("webhooks.deliver") {
			a := telAttrs(s)
			if a["webhooks.consumer_id"].AsString() == id && a["webhooks.epoch"].AsInt64() == epoch &&
				a["webhooks.outcome"].AsString() == outcome {
				found = s
				return true
			}
		}
		return false
	}, waitFor, time.Millisecond, "no webhooks.deliver span for %s epoch %d outcome %s", id, epoch, outcome)
	return found
}

// telCollect reads every metric, by name.
func (th *telHarness) telCollect() map[string]metricdata.Metrics {
	th.t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(th.t, th.reader.Collect(context.Background(), &rm))
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != "github.com/streamhooks/webhooks" {
			continue
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// telInt64Points returns the points of an int64 sum or gauge keyed by the
// value of attribute key ("" for points without it), summing duplicates.
func telInt64Points(t *testing.T, m metricdata.Metrics, key string) map[string]int64 {
	t.Helper()
	var points []metricdata.DataPoint[int64]
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		require.True(t, d.IsMonotonic, "%s is a counter", m.Name)
		points = d.DataPoints
	case metricdata.Gauge[int64]:
		points = d.DataPoints
	default:
		t.Fatalf("%s has data of type %T", m.Name, m.Data)
	}
	out := map[string]int64{}
	for _, p := range points {
		v, _ := p.Attributes.Value(attribute.Key(key))
		out[v.AsString()] += p.Value
	}
	return out
}

func TestTelemetrySpansAndMetrics(t *testing.T) {
	th := newTelHarness(t)
	ctx := context.Background()

	// A subscription PUT.
	th.subscribe("s1", "/agents/*")
	puts := th.telEnded("webhooks.subscription.put")
	require.Len(t, puts, 1)
	require.Equal(t, int64(http.StatusCreated), telAttrs(puts[0])["http.response.status_code"].AsInt64())
	require.NotEqual(t, codes.Error, puts[0].Status().Code)
	require.Equal(t, "github.com/streamhooks/webhooks", puts[0].InstrumentationScope().Name)

	// A wake answered 2xx.
	id1 := webhooks.ConsumerID("s1", "/agents/t1")
	th.create("/agents/t1", 0)
	th.appendTo("/agents/t1", 10)
	d1 := th.nextDelivery()
	require.Equal(t, id1, d1.n.ConsumerID)
	th.waitConsumer(id1, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive && !c.InFlight })
	span := th.telDeliverSpan(id1, 1, "ok")
	a := telAttrs(span)
	require.Equal(t, d1.n.WakeID, a["webhooks.wake_id"].AsString())
	require.Equal(t, int64(1), a["webhooks.attempt"].AsInt64())
	require.NotEqual(t, codes.Error, span.Status().Code)

	// A wake answered 500.
	id2 := webhooks.ConsumerID("s1", "/agents/t2")
	th.recv.queue(reply{status: http.StatusInternalServerError})
	th.create("/agents/t2", 10)
	d2 := th.nextDelivery()
	require.Equal(t, id2, d2.n.ConsumerID)
	span = th.telDeliverSpan(id2, 1, "http_error")
	a = telAttrs(span)
	require.Equal(t, id2, a["webhooks.consumer_id"].AsString())
	require.Equal(t, d2.n.WakeID, a["webhooks.wake_id"].AsString())
	require.Equal(t, int64(1), a["webhooks.attempt"].AsInt64())
	require.Equal(t, codes.Error, span.Status().Code)
	th.waitConsumer(id2, func(c *webhooks.Consumer) bool { return c.Failures == 1 && !c.InFlight })

	// A wake finished synchronously with {"done": true}.
	id3 := webhooks.ConsumerID("s1", "/agents/t3")
	th.recv.queue(reply{status: http.StatusOK, body: `{"done":true}`})
	th.create("/agents/t3", 10)
	th.nextDelivery()
	th.telDeliverSpan(id3, 1, "done")
	th.waitConsumer(id3, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateIdle })

	// A callback that succeeds and two that fail.
	r := th.callback(id1, d1.n.Token, receiver.CallbackRequest{Epoch: epoch(1), Acks: streamOffsets("/agents/t1", offset(5))})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	r = th.callback(id1, d1.n.Token, receiver.CallbackRequest{Epoch: epoch(0)})
	requireError(t, r, http.StatusConflict, receiver.CodeStaleEpoch)
	r = th.callback(id1, "not-a-token", receiver.CallbackRequest{Epoch: epoch(1)})
	requireError(t, r, http.StatusUnauthorized, receiver.CodeTokenInvalid)

	callbacks := th.telEnded("webhooks.callback")
	require.Len(t, callbacks, 3)
	var gotCodes []string
	for _, s := range callbacks {
		gotCodes = append(gotCodes, telAttrs(s)["webhooks.code"].AsString())
		if telAttrs(s)["webhooks.code"].AsString() == "OK" {
			require.NotEqual(t, codes.Error, s.Status().Code)
		} else {
			require.Equal(t, codes.Error, s.Status().Code)
		}
	}
	require.Equal(t, []string{"OK", "STALE_EPOCH", "TOKEN_INVALID"}, gotCodes)

	// Metrics. Each delivery's span has ended above, after its metrics were
	// recorded, and every consumer has settled.
	m := th.telCollect()
	require.Contains(t, m, "webhooks.wakes")
	require.Equal(t, map[string]int64{"": 3}, telInt64Points(t, m["webhooks.wakes"], ""))

	require.Contains(t, m, "webhooks.delivery.attempts")
	require.Equal(t, map[string]int64{"ok": 1, "http_error": 1, "done": 1},
		telInt64Points(t, m["webhooks.delivery.attempts"], "outcome"))

	require.Contains(t, m, "webhooks.delivery.duration")
	hist, ok := m["webhooks.delivery.duration"].Data.(metricdata.Histogram[float64])
	require.True(t, ok, "webhooks.delivery.duration is a float64 histogram: %T", m["webhooks.delivery.duration"].Data)
	require.Equal(t, "s", m["webhooks.delivery.duration"].Unit)
	counts := map[string]uint64{}
	for _, p := range hist.DataPoints {
		v, _ := p.Attributes.Value("outcome")
		counts[v.AsString()] += p.Count
		require.GreaterOrEqual(t, p.Sum, 0.0)
	}
	require.Equal(t, map[string]uint64{"ok": 1, "http_error": 1, "done": 1}, counts)

	require.Contains(t, m, "webhooks.callbacks")
	require.Equal(t, map[string]int64{"OK": 1, "STALE_EPOCH": 1, "TOKEN_INVALID": 1},
		telInt64Points(t, m["webhooks.callbacks"], "code"))

	require.Contains(t, m, "webhooks.consumers")
	require.Equal(t, map[string]int64{"IDLE": 1, "WAKING": 1, "LIVE": 1, "FAILED": 0},
		telInt64Points(t, m["webhooks.consumers"], "state"))

	// The gauge follows the store: after a done callback and the removal of
	// the failing consumer's stream, one LIVE consumer fewer and no WAKING.
	r = th.callback(id1, d1.n.Token, receiver.CallbackRequest{Epoch: epoch(1), Acks: streamOffsets("/agents/t1", offset(10)), Done: true})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	th.source.remove("/agents/t2")
	require.NoError(t, th.engine.StreamDeleted(ctx, "/agents/t2"))
	m = th.telCollect()
	require.Equal(t, map[string]int64{"IDLE": 2, "WAKING": 0, "LIVE": 0, "FAILED": 0},
		telInt64Points(t, m["webhooks.consumers"], "state"))
}

// Event push counts batches, not wakes; a push attempt has its span, and a
// consumer stopped after its last attempt shows in the gauge as FAILED.
func TestTelemetryEventPush(t *testing.T) {
	th := newTelHarness(t)
	th.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0},"retry":{"max_attempts":1}`)
	th.recv.queue(reply{status: http.StatusInternalServerError})
	th.push("/orders/1", numbered(1, 1)...)
	th.nextBatch()
	th.waitConsumer(ordersID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateFailed })
	th.push("/orders/2", numbered(1, 1)...)
	th.nextBatch()
	th.waitCursor(webhooks.ConsumerID("s1", "/orders/2"), offset(1))
	// A span ends with its attempt.
	require.True(t, th.waitProgress(func() bool { return webhooks.DeliveriesRunning(th.engine) == 0 }))
	require.Len(t, th.telEnded("webhooks.push"), 2)

	m := th.telCollect()
	require.Equal(t, map[string]int64{"": 2}, telInt64Points(t, m["webhooks.batches"], ""))
	require.NotContains(t, m, "webhooks.wakes", "no wake cycle")
	require.Equal(t, map[string]int64{"ok": 1, "http_error": 1},
		telInt64Points(t, m["webhooks.delivery.attempts"], "outcome"))
	require.Equal(t, map[string]int64{"IDLE": 1, "WAKING": 0, "LIVE": 0, "FAILED": 1},
		telInt64Points(t, m["webhooks.consumers"], "state"))
}

// A retry is a new attempt of the same wake: same epoch and wake_id, the
// attempt number grows, and wakes are counted once.
func TestTelemetryRetryAttempts(t *testing.T) {
	th := newTelHarness(t)
	th.recv.queue(reply{status: http.StatusBadGateway})
	d := th.wake("s1", "/agents/*", "/agents/t1")
	id := d.n.ConsumerID
	th.telDeliverSpan(id, 1, "http_error")
	c := th.waitConsumer(id, func(c *webhooks.Consumer) bool { return c.Failures == 1 && !c.InFlight })

	th.clock.Add(c.Deadline.Sub(th.clock.Now()))
	d2 := th.nextDelivery()
	require.Equal(t, d.n.WakeID, d2.n.WakeID)
	span := th.telDeliverSpan(id, 1, "ok")
	a := telAttrs(span)
	require.Equal(t, int64(2), a["webhooks.attempt"].AsInt64())
	require.Equal(t, d.n.WakeID, a["webhooks.wake_id"].AsString())
	th.waitConsumer(id, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive && !c.InFlight })

	m := th.telCollect()
	require.Equal(t, map[string]int64{"": 1}, telInt64Points(t, m["webhooks.wakes"], ""))
	require.Equal(t, map[string]int64{"ok": 1, "http_error": 1},
		telInt64Points(t, m["webhooks.delivery.attempts"], "outcome"))
	require.Equal(t, map[string]int64{"IDLE": 0, "WAKING": 0, "LIVE": 1, "FAILED": 0},
		telInt64Points(t, m["webhooks.consumers"], "state"))
}

// Other subscription API operations get their own spans.
func TestTelemetrySubscriptionSpans(t *testing.T) {
	th := newTelHarness(t)
	th.subscribe("s1", "/agents/*")
	require.Equal(t, http.StatusOK, th.do(http.MethodGet, "/**?subscription=s1", "").Code)
	require.Equal(t, http.StatusOK, th.do(http.MethodGet, "/**?subscriptions", "").Code)
	require.Equal(t, http.StatusNoContent, th.do(http.MethodDelete, "/**?subscription=s1", "").Code)
	require.Len(t, th.telEnded("webhooks.subscription.put"), 1)
	require.Len(t, th.telEnded("webhooks.subscription.get"), 2)
	dels := th.telEnded("webhooks.subscription.delete")
	require.Len(t, dels, 1)
	require.Equal(t, int64(http.StatusNoContent), telAttrs(dels[0])["http.response.status_code"].AsInt64())
}

// A refused subscription request is an error span that records the status
// the client got.
func TestTelemetrySubscriptionErrorStatus(t *testing.T) {
	th := newTelHarness(t)
	for _, tc := range []struct {
		method, target, body string
		status               int
	}{
		{http.MethodPut, "/agents/*?subscription=bad", `{"webhook":"ftp://x"}`, http.StatusBadRequest},
		{http.MethodGet, "/**?subscription=nope", "", http.StatusNotFound},
		{http.MethodPost, "/**?subscription=nope", "", http.StatusMethodNotAllowed},
	} {
		th.spans.Reset()
		rec := th.do(tc.method, tc.target, tc.body)
		require.Equal(t, tc.status, rec.Code, rec.Body.String())
		ended := th.spans.Ended()
		require.Len(t, ended, 1)
		require.Equal(t, codes.Error, ended[0].Status().Code, "%s %s", tc.method, tc.target)
		require.Equal(t, int64(tc.status), telAttrs(ended[0])["http.response.status_code"].AsInt64(), "%s %s", tc.method, tc.target)
	}
}

// Operator actions are counted by operation, and their requests' spans
// name it.
func TestTelemetryOperations(t *testing.T) {
	th := newTelHarness(t)
	th.subscribe("s1", "/agents/*")
	require.Equal(t, http.StatusOK, th.do(http.MethodPatch, "/**?subscription=s1", `{"status":"paused"}`).Code)
	require.Equal(t, http.StatusOK, th.do(http.MethodPatch, "/**?subscription=s1", `{"status":"active"}`).Code)
	require.Equal(t, http.StatusOK, th.do(http.MethodPost, "/**?subscription=s1&rewind", `{"offset":"-1"}`).Code)
	require.Equal(t, http.StatusOK, th.do(http.MethodPost, "/**?subscription=s1&rotate", "").Code)
	require.Equal(t, http.StatusOK, th.do(http.MethodGet, "/**?subscription=s1&consumers", "").Code)
	require.Equal(t, map[string]int64{"pause": 1, "resume": 1, "rewind": 1, "rotate": 1},
		telInt64Points(t, th.telCollect()["webhooks.operations"], "operation"))
	var ops []string
	for _, s := range th.spans.Ended() {
		if v, ok := telAttrs(s)["webhooks.operation"]; ok {
			ops = append(ops, v.AsString())
		}
	}
	require.ElementsMatch(t, []string{"rewind", "rotate", "consumers"}, ops)
}

// A subscription the engine disables is counted, once.
func TestTelemetryDisabledSubscription(t *testing.T) {
	th := newTelHarness(t, faultConstBackoff(time.Hour))
	hold := make(chan struct{})
	th.recv.queue(reply{status: http.StatusGone, hold: hold}, reply{status: http.StatusGone, hold: hold})
	th.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0}`)
	th.push("/orders/1", numbered(1, 1)...)
	th.push("/orders/2", numbered(1, 1)...)
	th.nextDelivery()
	th.nextDelivery()
	close(hold) // both answer 410: two disables, one of which changes the status
	require.True(t, th.waitProgress(func() bool {
		sub, err := th.store.GetSubscription(context.Background(), "s1")
		require.NoError(t, err)
		return sub.Health.ConsecutiveFailures == 2
	}))
	th.waitIdle()
	m := th.telCollect()["webhooks.subscriptions.disabled"]
	require.Equal(t, int64(1), m.Data.(metricdata.Sum[int64]).DataPoints[0].Value)
}
