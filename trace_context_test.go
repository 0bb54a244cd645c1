package webhooks_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/receiver"
)

// A wake and a batch carry the W3C traceparent of the span that sent them.
func TestTraceContextOnWebhooks(t *testing.T) {
	th := newTelHarness(t, webhooks.WithPropagator(propagation.TraceContext{}))
	d := th.wake("s1", "/agents/*", "/agents/t1")
	span := th.telDeliverSpan(d.n.ConsumerID, 1, "ok")
	sc := span.SpanContext()
	require.Equal(t, "00-"+sc.TraceID().String()+"-"+sc.SpanID().String()+"-01", d.header.Get("Traceparent"))

	th.subscribeEvents("s2", "/orders/*", `"batch":{"max_wait_ms":0}`)
	th.push("/orders/1", numbered(1, 1)...)
	b, _ := th.nextBatch()
	require.True(t, th.waitProgress(func() bool { return len(th.telEnded("webhooks.push")) == 1 }))
	sc = th.telEnded("webhooks.push")[0].SpanContext()
	require.Equal(t, "00-"+sc.TraceID().String()+"-"+sc.SpanID().String()+"-01", b.header.Get("Traceparent"))
}

// WithPropagator(nil) sends no trace context, nor does the default while
// the global propagator is the no-op one.
func TestTraceContextOff(t *testing.T) {
	for name, opts := range map[string][]webhooks.Option{
		"nil":     {webhooks.WithPropagator(nil)},
		"default": nil,
	} {
		t.Run(name, func(t *testing.T) {
			th := newTelHarness(t, opts...)
			d := th.wake("s1", "/agents/*", "/agents/t1")
			require.NotEmpty(t, d.header.Get(receiver.SignatureHeader))
			require.Empty(t, d.header.Get("Traceparent"))
			require.Empty(t, d.header.Values("Tracestate"))
		})
	}
}
