package webhooks_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	webhooks "github.com/streamhooks/webhooks"
)

// telPairs returns the points of an int64 counter keyed by the values of
// attributes a and b, joined by "/".
func telPairs(t *testing.T, m metricdata.Metrics, a, b string) map[string]int64 {
	t.Helper()
	d, ok := m.Data.(metricdata.Sum[int64])
	require.True(t, ok, "%s: %T", m.Name, m.Data)
	out := map[string]int64{}
	for _, p := range d.DataPoints {
		va, _ := p.Attributes.Value(attribute.Key(a))
		vb, _ := p.Attributes.Value(attribute.Key(b))
		out[va.AsString()+"/"+vb.AsString()] += p.Value
	}
	return out
}

// With WithSubscriptionMetrics(1), the first subscription to deliver gets a
// label of its own and the next is folded into "other"; retries and batch
// sizes carry the label too, and the subscriptions gauge counts by status.
func TestTelemetrySubscriptionLabels(t *testing.T) {
	th := newTelHarness(t, webhooks.WithSubscriptionMetrics(1))
	th.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0}`)
	th.recv.queue(reply{status: http.StatusInternalServerError})
	th.push("/orders/1", numbered(1, 3)...)
	th.nextBatch()
	c := th.waitConsumer(ordersID, func(c *webhooks.Consumer) bool { return c.Failures == 1 && !c.InFlight })
	th.waitIdle()
	th.clock.Add(c.Deadline.Sub(th.clock.Now()))
	th.nextBatch()
	th.waitCursor(ordersID, offset(3))

	th.subscribeEvents("s2", "/invoices/*", `"batch":{"max_wait_ms":0}`)
	th.push("/invoices/1", numbered(1, 2)...)
	th.nextBatch()
	th.waitCursor(webhooks.ConsumerID("s2", "/invoices/1"), offset(2))
	th.api(http.MethodPatch, "/**?subscription=s2", `{"status":"paused"}`, http.StatusOK, nil)
	require.True(t, th.waitProgress(func() bool { return webhooks.DeliveriesRunning(th.engine) == 0 }))

	m := th.telCollect()
	require.Equal(t, map[string]int64{"s1/http_error": 1, "s1/ok": 1, "other/ok": 1},
		telPairs(t, m["webhooks.delivery.attempts"], "subscription_id", "outcome"))
	require.Equal(t, map[string]int64{"s1": 1}, telInt64Points(t, m["webhooks.delivery.retries"], "subscription_id"))
	hist, ok := m["webhooks.batch.events"].Data.(metricdata.Histogram[int64])
	require.True(t, ok, "%T", m["webhooks.batch.events"].Data)
	sizes := map[string]int64{}
	for _, p := range hist.DataPoints {
		v, _ := p.Attributes.Value("subscription_id")
		sizes[v.AsString()] += p.Sum
		require.Equal(t, uint64(1), p.Count, "a batch is counted at its first attempt only")
	}
	require.Equal(t, map[string]int64{"s1": 3, "other": 2}, sizes)
	require.Equal(t, map[string]int64{"active": 1, "paused": 1, "disabled": 0, "pending": 0},
		telInt64Points(t, m["webhooks.subscriptions"], "status"))
	age, ok := m["webhooks.pending.oldest_age"].Data.(metricdata.Gauge[float64])
	require.True(t, ok, "%T", m["webhooks.pending.oldest_age"].Data)
	require.Len(t, age.DataPoints, 1)
	require.Zero(t, age.DataPoints[0].Value, "nothing is overdue")
}

// Without WithSubscriptionMetrics no metric carries a subscription.
func TestTelemetryNoSubscriptionLabels(t *testing.T) {
	th := newTelHarness(t)
	th.wake("s1", "/agents/*", "/agents/t1")
	require.True(t, th.waitProgress(func() bool { return webhooks.DeliveriesRunning(th.engine) == 0 }))
	m := th.telCollect()
	require.Equal(t, map[string]int64{"/ok": 1}, telPairs(t, m["webhooks.delivery.attempts"], "subscription_id", "outcome"))
}

// A labelled subscription's metrics carry its tenant beside its
// subscription_id, adding no series; "other" carries none, so that tenants
// do not multiply its series. Spans carry the tenant always.
func TestTelemetryTenantLabels(t *testing.T) {
	tenants := &tenantHost{}
	th := newTelHarness(t, webhooks.WithSubscriptionMetrics(1), webhooks.WithTenancy(tenants.tenancy(0)))
	events := fmt.Sprintf(`{"webhook":%q,"delivery":"events","batch":{"max_wait_ms":0}}`, th.recv.url())
	th.tenantDo("a", http.MethodPut, "/tenants/a/*?subscription=s1", events, http.StatusCreated)
	th.push("/tenants/a/1", numbered(1, 2)...)
	th.nextBatch()
	th.waitCursor(webhooks.ConsumerID("s1", "/tenants/a/1"), offset(2))
	th.tenantDo("b", http.MethodPut, "/tenants/b/*?subscription=s2", events, http.StatusCreated)
	th.push("/tenants/b/1", numbered(1, 2)...)
	th.nextBatch()
	th.waitCursor(webhooks.ConsumerID("s2", "/tenants/b/1"), offset(2))
	require.True(t, th.waitProgress(func() bool { return webhooks.DeliveriesRunning(th.engine) == 0 }))

	m := th.telCollect()
	require.Equal(t, map[string]int64{"s1/a": 1, "other/": 1},
		telPairs(t, m["webhooks.delivery.attempts"], "subscription_id", "tenant"))
	pushed := map[string]string{}
	for _, s := range th.telEnded("webhooks.push") {
		a := telAttrs(s)
		pushed[a["webhooks.consumer_id"].AsString()] = a["webhooks.tenant"].AsString()
	}
	require.Equal(t, map[string]string{webhooks.ConsumerID("s1", "/tenants/a/1"): "a", webhooks.ConsumerID("s2", "/tenants/b/1"): "b"}, pushed)
	var put []string
	for _, s := range th.telEnded("webhooks.subscription.put") {
		put = append(put, telAttrs(s)["webhooks.tenant"].AsString())
	}
	require.Equal(t, []string{"a", "b"}, put)
}
