package webhooks_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
)

// handlerCall is one call of a test BatchHandler, which returns what the
// test sends on reply.
type handlerCall struct {
	b     *webhooks.Batch
	reply chan error
}

// handlerCalls returns a BatchHandler that hands each call to the test on
// the channel it also returns, and waits for the test's answer, or for its
// context if follow is set.
func handlerCalls(follow bool) (webhooks.BatchHandler, chan handlerCall) {
	calls := make(chan handlerCall)
	h := func(ctx context.Context, b *webhooks.Batch) error {
		c := handlerCall{b: b, reply: make(chan error, 1)}
		calls <- c
		if !follow {
			return <-c.reply
		}
		select {
		case err := <-c.reply:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return h, calls
}

// nextCall waits for the handler's next call.
func (h *harness) nextCall(calls chan handlerCall) handlerCall {
	h.t.Helper()
	select {
	case c := <-calls:
		return c
	case <-time.After(waitFor):
		h.t.Fatal("the handler was not called")
		return handlerCall{}
	}
}

// subscribeHandler creates handler subscription s1 on /orders/* to the
// handler "orders", batches of two sent at once, with maxAttempts.
func (h *harness) subscribeHandler(maxAttempts int) *webhooks.Subscription {
	h.t.Helper()
	sub, err := h.engine.CreateSubscription(context.Background(), &webhooks.Subscription{
		ID: "s1", Pattern: "/orders/*", Delivery: webhooks.DeliveryHandler, Handler: "orders",
		Events: &webhooks.EventsOptions{MaxBatchEvents: 2, MaxBatchBytes: 1 << 20, Timeout: time.Second},
		Retry:  &webhooks.RetryPolicy{MaxAttempts: maxAttempts},
	}, "")
	require.NoError(h.t, err)
	return sub
}

// A handler subscription gets its stream's batches in order, as event push
// does; an error fails the attempt, retried with the same batch; after
// max attempts the consumer is a dead letter, and revived it goes on.
func TestHandlerDeliveryRetriesDeadLettersAndRevives(t *testing.T) {
	fn, calls := handlerCalls(false)
	h := newHarness(t, faultConstBackoff(time.Second), webhooks.WithBatchHandler("orders", fn))
	h.subscribeHandler(2)
	tail := h.push("/orders/1", numbered(1, 3)...)

	c1 := h.nextCall(calls)
	require.Equal(t, numbered(1, 2), eventStrings(c1.b.EventsPayload))
	require.Equal(t, webhooks.OffsetNone, c1.b.FirstOffset)
	require.Equal(t, 1, c1.b.Attempt)
	require.Equal(t, 2, c1.b.MaxAttempts)
	c1.reply <- errors.New("database down")
	c := h.waitConsumer(ordersID, func(c *webhooks.Consumer) bool { return c.Failures == 1 })
	require.Equal(t, "handler: database down", c.LastError)
	require.Equal(t, webhooks.OffsetNone, c.Streams[0].Offset, "a failed batch moves no cursor")

	h.waitIdle() // the attempt is in the log before the next one starts
	h.clock.Add(time.Second)
	c2 := h.nextCall(calls)
	require.Equal(t, c1.b.EventsPayload, c2.b.EventsPayload, "the same batch, under the same delivery id")
	require.Equal(t, 2, c2.b.Attempt)
	c2.reply <- errors.New("database still down")
	c = h.waitDead(ordersID)
	require.Equal(t, "handler: database still down", c.LastError)
	h.waitIdle()
	h.flushLog()
	var log []*webhooks.DeliveryAttempt
	require.True(t, h.waitProgress(func() bool {
		var err error
		log, err = h.engine.DeliveryLog(context.Background(), ordersID, 10)
		return err == nil && len(log) == 2
	}), "both attempts logged")
	require.Equal(t, "handler", log[0].ErrorClass)
	require.Equal(t, "database still down", log[0].Error)

	require.NoError(t, h.engine.ResumeConsumer(context.Background(), ordersID))
	c3 := h.nextCall(calls)
	require.Equal(t, c1.b.EventsPayload, c3.b.EventsPayload, "revived with the same batch")
	c3.reply <- nil
	c4 := h.nextCall(calls)
	require.Equal(t, numbered(3, 3), eventStrings(c4.b.EventsPayload))
	require.Equal(t, c1.b.Offset, c4.b.FirstOffset, "the next batch starts past the acked one")
	c4.reply <- nil
	c = h.waitCursor(ordersID, tail)
	require.Empty(t, c.LastError)
}

// A panic fails the attempt as an error does, and so does a batch for a
// handler this engine has not registered.
func TestHandlerDeliveryPanicAndMissingHandler(t *testing.T) {
	panics := func(context.Context, *webhooks.Batch) error { panic("boom") }
	h := newHarness(t, faultConstBackoff(time.Hour), webhooks.WithBatchHandler("orders", panics))
	h.subscribeHandler(0)
	h.push("/orders/1", numbered(1, 1)...)
	c := h.waitConsumer(ordersID, func(c *webhooks.Consumer) bool { return c.Failures == 1 })
	require.Equal(t, "handler: handler panicked: boom", c.LastError)

	// A restarted engine without the handler.
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(t, h.engine.Stop(ctx))
	h.startEngine(faultConstBackoff(time.Hour))
	h.clock.Add(time.Hour)
	c = h.waitConsumer(ordersID, func(c *webhooks.Consumer) bool { return c.Failures == 2 })
	require.Equal(t, `handler: no handler "orders" is registered`, c.LastError)
}

// A handler that outlives the subscription's timeout is abandoned: the
// attempt fails as a timeout and the batch is retried, while it runs.
func TestHandlerDeliveryTimeout(t *testing.T) {
	fn, calls := handlerCalls(false) // ignores its context
	h := newHarness(t, faultConstBackoff(time.Second), webhooks.WithBatchHandler("orders", fn))
	h.subscribeHandler(0)
	tail := h.push("/orders/1", numbered(1, 1)...)
	hung := h.nextCall(calls)
	h.clock.Add(time.Second)
	c := h.waitConsumer(ordersID, func(c *webhooks.Consumer) bool { return c.Failures == 1 })
	require.Equal(t, "timeout: webhook request timed out", c.LastError)

	// While the abandoned call runs, a retry does not call the handler
	// again: one goroutine per stream at most.
	h.waitIdle()
	h.clock.Add(time.Second)
	c = h.waitConsumer(ordersID, func(c *webhooks.Consumer) bool { return c.Failures == 2 })
	require.Contains(t, c.LastError, "has not returned")
	select {
	case extra := <-calls:
		t.Fatalf("the handler was called again while its last call ran: %v", extra.b.DeliveryID)
	default:
	}

	hung.reply <- nil // too late: its outcome is ignored
	require.True(t, h.waitProgress(func() bool { return !webhooks.HandlerRunning(h.engine, ordersID) }))
	h.waitIdle()
	h.clock.Add(time.Second)
	retry := h.nextCall(calls)
	require.Equal(t, hung.b.EventsPayload, retry.b.EventsPayload)
	retry.reply <- nil
	h.waitCursor(ordersID, tail)
}

// Handler subscriptions are created in Go, idempotently; the HTTP API
// shows them but cannot create one, nor test one.
func TestHandlerSubscriptionCreate(t *testing.T) {
	fn, _ := handlerCalls(true)
	h := newHarness(t, webhooks.WithBatchHandler("orders", fn))
	sub := h.subscribeHandler(3)
	require.Equal(t, webhooks.DeliveryHandler, sub.Delivery)
	again := h.subscribeHandler(3)
	require.Equal(t, sub.CreatedAt, again.CreatedAt, "the same configuration returns the subscription")

	ctx := context.Background()
	_, err := h.engine.CreateSubscription(ctx, &webhooks.Subscription{
		ID: "s1", Pattern: "/orders/*", Delivery: webhooks.DeliveryHandler, Handler: "orders"}, "")
	require.ErrorIs(t, err, webhooks.ErrSubscriptionExists, "another configuration")
	for name, s := range map[string]*webhooks.Subscription{
		"unregistered":      {ID: "s2", Pattern: "/a/*", Delivery: webhooks.DeliveryHandler, Handler: "other"},
		"with a webhook":    {ID: "s2", Pattern: "/a/*", Delivery: webhooks.DeliveryHandler, Handler: "orders", Webhook: h.recv.url()},
		"handler elsewhere": {ID: "s2", Pattern: "/a/*", Delivery: webhooks.DeliveryEvents, Handler: "orders", Webhook: h.recv.url()},
		"unknown delivery":  {ID: "s2", Pattern: "/a/*", Delivery: "carrier-pigeon"},
	} {
		_, err := h.engine.CreateSubscription(ctx, s, "")
		require.Error(t, err, name)
	}

	rec := h.do(http.MethodGet, "/orders/*?subscription=s1", "")
	require.Equal(t, http.StatusOK, rec.Code)
	var view map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &view))
	require.Equal(t, "handler", view["delivery"])
	require.Equal(t, "orders", view["handler"])

	rec = h.do(http.MethodPut, "/b/*?subscription=s3", `{"webhook":"https://example.com/","delivery":"handler"}`)
	require.Equal(t, http.StatusBadRequest, rec.Code, "the API creates no handler subscription")
	rec = h.do(http.MethodPost, "/orders/*?subscription=s1&test", "")
	require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
}
