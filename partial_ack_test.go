package webhooks_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
)

// withEventOffsets makes h's source give its events' offsets.
func (h *harness) withEventOffsets() {
	h.source.mu.Lock()
	h.source.eventOffsets = true
	h.source.mu.Unlock()
}

// A batch carries, where the source gives them, one offset per event it
// sends, the offset after that event, so that a receiver can checkpoint
// (seed 004, Webhook Payload Format: an offset per operation); the events
// a filter leaves out leave their offsets out too.
func TestPushCarriesEventOffsets(t *testing.T) {
	h := newHarness(t)
	h.withEventOffsets()
	h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0},"filter":{"field":"type","patterns":["a"]}`)
	tail := h.push("/orders/1", `{"type":"a","n":1}`, `{"type":"b","n":2}`, `{"type":"a","n":3}`)
	d, p := h.nextBatch()
	require.Equal(t, []string{`{"type":"a","n":1}`, `{"type":"a","n":3}`}, eventStrings(p))
	require.Equal(t, []string{offset(1), offset(3)}, p.Offsets, "the receiver package parses them")
	require.Contains(t, string(d.body), fmt.Sprintf(`"offsets":[%q,%q]`, offset(1), offset(3)))
	h.waitCursor(ordersID, tail)
}

// A source without per-event offsets sends none: the field is left out.
func TestPushWithoutEventOffsets(t *testing.T) {
	h := newHarness(t)
	h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0}`)
	h.push("/orders/1", numbered(1, 2)...)
	d, p := h.nextBatch()
	require.Nil(t, p.Offsets)
	require.NotContains(t, string(d.body), `"offsets"`)
}

// A 2xx whose body is {"offset": …}, an event's offset, acknowledges the
// batch up to that event (seed 004, Response Expectations): the cursor
// moves there, and the rest goes at once as a new batch under a new
// delivery id.
func TestPushPartialAck(t *testing.T) {
	h := newHarness(t)
	h.withEventOffsets()
	h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":60000,"max_size":10}`)
	h.recv.queue(reply{status: http.StatusOK, body: fmt.Sprintf(`{"processed":true,"offset":%q}`, offset(2))})
	tail := h.push("/orders/1", numbered(1, 4)...)
	h.clock.Add(time.Minute)
	_, p1 := h.nextBatch()
	require.Equal(t, numbered(1, 4), eventStrings(p1))
	_, p2 := h.nextBatch()
	require.Equal(t, numbered(3, 4), eventStrings(p2), "the rest, without waiting for a batch window")
	require.Equal(t, offset(2), p2.FirstOffset)
	require.NotEqual(t, p1.DeliveryID, p2.DeliveryID, "other content, another delivery id")
	c := h.waitCursor(ordersID, tail)
	require.Zero(t, c.Failures)
}

// An acknowledged offset outside the batch is refused: the whole batch
// counts as failed, and is retried as it was.
func TestPushPartialAckOutsideTheBatchFails(t *testing.T) {
	for name, ack := range map[string]string{
		"past the batch":       offset(9),
		"the batch's start":    "-1",
		"between events":       "0000000000000000_000000000000000x",
		"no events' offsets":   offset(1), // the source gives none: only the batch's end
		"not an offset at all": "nonsense",
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, faultConstBackoff(time.Second))
			if !strings.HasPrefix(name, "no events") {
				h.withEventOffsets()
			}
			h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0}`)
			h.recv.queue(reply{status: http.StatusOK, body: fmt.Sprintf(`{"offset":%q}`, ack)})
			tail := h.push("/orders/1", numbered(1, 2)...)
			_, p1 := h.nextBatch()
			c := h.waitConsumer(ordersID, func(c *webhooks.Consumer) bool { return c.Failures == 1 })
			require.True(t, strings.HasPrefix(c.LastError, "bad_ack: "), c.LastError)
			require.Equal(t, webhooks.OffsetNone, c.Streams[0].Offset, "nothing acknowledged")
			h.clock.Add(time.Second)
			_, p2 := h.nextBatch()
			require.Equal(t, p1, p2, "the same batch again")
			h.waitCursor(ordersID, tail)
		})
	}
}

// Acknowledging the batch's own end, or an empty offset, acknowledges it
// whole, with or without events' offsets.
func TestPushAckOfTheWholeBatch(t *testing.T) {
	h := newHarness(t)
	h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0}`)
	h.recv.queue(reply{status: http.StatusOK, body: fmt.Sprintf(`{"offset":%q}`, offset(2))}, reply{status: http.StatusOK, body: `{"offset":""}`})
	tail := h.push("/orders/1", numbered(1, 2)...)
	h.nextBatch()
	h.waitCursor(ordersID, tail)
	tail = h.push("/orders/1", numbered(3, 3)...)
	h.nextBatch()
	h.waitCursor(ordersID, tail)
}

// A BatchHandler acknowledges part of its batch with Batch.AckThrough, as
// a webhook does with {"offset": …}.
func TestHandlerAckThrough(t *testing.T) {
	fn, calls := handlerCalls(false)
	h := newHarness(t, faultConstBackoff(time.Second), webhooks.WithBatchHandler("orders", fn))
	h.withEventOffsets()
	h.subscribeHandler(3)
	tail := h.push("/orders/1", numbered(1, 3)...)
	c1 := h.nextCall(calls)
	require.Equal(t, []string{offset(1), offset(2)}, c1.b.Offsets)
	c1.b.AckThrough(offset(1))
	c1.reply <- nil
	c2 := h.nextCall(calls)
	require.Equal(t, numbered(2, 3), eventStrings(c2.b.EventsPayload))
	require.NotEqual(t, c1.b.DeliveryID, c2.b.DeliveryID)
	c2.b.AckThrough(offset(9))
	c2.reply <- nil
	c := h.waitConsumer(ordersID, func(c *webhooks.Consumer) bool { return c.Failures == 1 })
	require.True(t, strings.HasPrefix(c.LastError, "bad_ack: "), c.LastError)
	h.waitIdle()
	h.clock.Add(time.Second)
	c3 := h.nextCall(calls)
	require.Equal(t, c2.b.DeliveryID, c3.b.DeliveryID)
	c3.reply <- nil
	h.waitCursor(ordersID, tail)
}
