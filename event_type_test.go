package webhooks_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamhooks/webhooks/receiver"
)

// A batch whose events share one value at the filter's field carries it
// in Webhook-Event-Type (seed 002, section 4.2: Event-Type); a batch of
// mixed types, or a subscription that filters on no field, has none.
func TestPushEventTypeHeader(t *testing.T) {
	h := newHarness(t)
	h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0},"filter":{"field":"data.type","patterns":["order.*"]}`)
	tail := h.push("/orders/1", `{"data":{"type":"order.created"},"n":1}`, `{"data":{"type":"refund.created"}}`, `{"data":{"type":"order.created"},"n":2}`)
	d, p := h.nextBatch()
	require.Len(t, p.Events, 2)
	require.Equal(t, "order.created", d.header.Get(receiver.EventTypeHeader), "all events share it")
	h.waitCursor(ordersID, tail)

	tail = h.push("/orders/1", `{"data":{"type":"order.created"}}`, `{"data":{"type":"order.paid"}}`)
	d, _ = h.nextBatch()
	require.Empty(t, d.header.Values(receiver.EventTypeHeader), "mixed types: no header")
	h.waitCursor(ordersID, tail)
}

func TestPushEventTypeHeaderNeedsAFilterField(t *testing.T) {
	h := newHarness(t)
	h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0}`)
	h.push("/orders/1", `{"type":"order.created"}`)
	d, _ := h.nextBatch()
	require.Empty(t, d.header.Get(receiver.EventTypeHeader))
}
