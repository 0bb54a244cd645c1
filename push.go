package webhooks

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/streamhooks/webhooks/receiver"
)

// Event push (DeliveryEvents): each POST carries a batch of a stream's
// events, and its 2xx moves the consumer's cursor past them. A consumer
// has one batch in flight at a time, so batches arrive in stream order;
// the batch is fixed when it starts (Consumer.Batch) and read again from
// the stream at each attempt, so every retry sends the same events under
// the same delivery id, and no events are kept between attempts.
//
// An events consumer uses the cursor core's states this way: IDLE with
// nothing in flight, its deadline, if any, closing a batch window
// (EventsOptions.MaxWait); WAKING with a batch in flight or awaiting its
// retry; FAILED once the batch has had every attempt its subscription
// allows. It is never LIVE.

// pushTimeoutGrace is how long after its POST's timeout an attempt in
// flight counts as failed.
const pushTimeoutGrace = time.Second

// pushMechanism delivers by event push.
type pushMechanism struct{}

// start starts a batch of IDLE consumer c if its stream has events past
// its cursor. With a batch window the first such event opens the window,
// and the batch starts when it closes.
func (pushMechanism) start(m *machine, c *Consumer, sub *Subscription, t tails, now time.Time) change {
	if len(c.Streams) == 0 {
		return noChange
	}
	cursor := c.Streams[0]
	info, ok := t[cursor.Path]
	if !ok || !hasPending(cursor.Offset, info) {
		return noChange
	}
	ev := sub.Events
	if ev.MaxWait > 0 {
		if c.Deadline.IsZero() {
			c.Deadline = now.Add(ev.MaxWait)
			return changeSave
		}
		if c.Deadline.After(now) {
			return noChange
		}
	}
	c.State = StateWaking
	c.Epoch++
	c.WakeID = newDeliveryID()
	c.Batch = ReadLimit{MaxEvents: ev.MaxBatchEvents, MaxBytes: ev.MaxBatchBytes, Until: info.Tail}
	c.Attempt = 0
	m.startAttempt(c, sub, now)
	return changeSend
}

// pushTimeout is the timeout of one event-push POST for sub.
func (m *machine) pushTimeout(sub *Subscription) time.Duration {
	if sub.Events.Timeout > 0 {
		return sub.Events.Timeout
	}
	return m.requestTimeout
}

func newDeliveryID() string {
	id := uuid.New()
	return "msg_" + hex.EncodeToString(id[:])
}

// pushResult is the outcome of one attempt of a batch.
type pushResult struct {
	epoch      int64
	deliveryID string
	attempt    int
	next       string // the cursor past the batch, if it succeeded
	// cut is set when the batch ended before its Until at a size limit:
	// the events after it have waited their window already.
	cut bool
	// failure is why the attempt failed; nil for a 2xx, or for a batch
	// with nothing to send.
	failure *deliveryFailure
}

// applyPush applies the outcome of an attempt of c's batch. A 2xx of any
// attempt of the batch moves the cursor past it and starts the next batch
// if there are events for one; a failure counts only for the attempt in
// flight.
func (m *machine) applyPush(c *Consumer, sub *Subscription, r pushResult, t tails, now time.Time) change {
	if c.State != StateWaking || c.Epoch != r.epoch || c.WakeID != r.deliveryID {
		return noChange
	}
	if r.failure != nil {
		if !c.InFlight || c.Attempt != r.attempt {
			return noChange
		}
		return m.fail(c, sub, r.failure, now)
	}
	if len(c.Streams) > 0 && compareOffsets(r.next, c.Streams[0].Offset) > 0 {
		c.Streams[0].Offset = r.next
	}
	deliveryOK(c)
	c.State = StateIdle
	c.InFlight = false
	c.Attempt = 0
	c.Batch = ReadLimit{}
	c.Deadline = time.Time{}
	if r.cut {
		c.Deadline = now
	}
	if ch := m.start(c, sub, t, now); ch != noChange {
		return ch
	}
	c.Deadline = time.Time{}
	return changeSave
}

// deliver sends the batch of c that a transition has marked as sent, and
// records the outcome: it reads the batch from the stream, leaves out what
// the filter does not match, and POSTs the rest, or for DeliveryHandler
// calls the handler with it. A batch with nothing left
// to send moves the cursor without a POST.
func (pushMechanism) deliver(ctx context.Context, e *Engine, c *Consumer, sub *Subscription) string {
	ctx, span := e.tel.tracer.Start(ctx, "webhooks.push", trace.WithAttributes(consumerAttrs(c)...))
	defer span.End()
	batch, events, err := e.readBatch(ctx, c, sub)
	if err != nil {
		// The attempt stays in flight and times out, to be retried. A
		// stream deleted meanwhile takes its consumers with it.
		if ctx.Err() == nil && !errors.Is(err, ErrStreamNotFound) {
			e.log.ErrorContext(ctx, "webhooks: reading a batch", "consumer_id", c.ID, "error", err)
		}
		return ""
	}
	result := pushResult{
		epoch:      c.Epoch,
		deliveryID: c.WakeID,
		attempt:    c.Attempt,
		next:       batch.Next,
		cut:        batch.Next != c.Batch.Until,
	}
	span.SetAttributes(attribute.Int("webhooks.events", len(events)))
	if len(events) == 0 {
		e.recordPush(ctx, c, sub, result, response{})
		return ""
	}
	p := &receiver.EventsPayload{
		SubscriptionID: sub.ID,
		Stream:         c.PrimaryStream,
		DeliveryID:     c.WakeID,
		Events:         events,
		FirstOffset:    c.Streams[0].Offset,
		Offset:         batch.Next,
		UpToDate:       batch.Next == c.Batch.Until,
	}
	var resp response
	if sub.Delivery == DeliveryHandler {
		resp = e.callHandler(ctx, sub, &Batch{EventsPayload: *p, Attempt: c.Attempt, MaxAttempts: e.m.retryPolicy(sub).MaxAttempts})
	} else if resp, err = e.postBatch(ctx, sub, p); err != nil {
		// The attempt times out, and is retried, as a lost POST is.
		e.log.ErrorContext(ctx, "webhooks: signing a batch", "consumer_id", c.ID, "error", err)
		return ""
	}
	if ctx.Err() != nil {
		return ""
	}
	e.tel.delivered(ctx, span, resp.outcome, resp.failure, resp.latency)
	result.failure = resp.failure
	e.recordPush(ctx, c, sub, result, resp)
	return resp.outcome
}

// postBatch signs p for sub and POSTs it to sub's webhook.
func (e *Engine) postBatch(ctx context.Context, sub *Subscription, p *receiver.EventsPayload) (response, error) {
	body := eventsBody(p)
	header, err := e.signedHeader(sub, p.DeliveryID, body, e.clock.Now())
	if err != nil {
		return response{}, err
	}
	for k, v := range sub.Events.Headers {
		if header.Get(k) == "" {
			header.Set(k, v)
		}
	}
	return e.post(ctx, sub.Webhook, header, body, e.m.pushTimeout(sub), nil), nil
}

// eventsBody encodes p as encoding/json would, but with the events as the
// source gave them rather than compacted: a JSON stream's events are
// valid JSON values (EventBatch), and a batch is encoded at every attempt.
func eventsBody(p *receiver.EventsPayload) []byte {
	size := 160 + len(p.SubscriptionID) + len(p.Stream) + len(p.FirstOffset) + len(p.Offset)
	for _, e := range p.Events {
		size += len(e) + 1
	}
	b := make([]byte, 0, size)
	b = append(b, `{"subscription_id":`...)
	b = appendJSONString(b, p.SubscriptionID)
	b = append(b, `,"stream":`...)
	b = appendJSONString(b, p.Stream)
	b = append(b, `,"delivery_id":`...)
	b = appendJSONString(b, p.DeliveryID)
	b = append(b, `,"events":[`...)
	for i, e := range p.Events {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, e...)
	}
	b = append(b, `],"first_offset":`...)
	b = appendJSONString(b, p.FirstOffset)
	b = append(b, `,"offset":`...)
	b = appendJSONString(b, p.Offset)
	b = append(b, `,"up_to_date":`...)
	b = strconv.AppendBool(b, p.UpToDate)
	return append(b, '}')
}

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always encodes
	return append(b, q...)
}

// readBatch reads the events of c's batch in flight, and returns them as
// they go in the payload: the ones the filter matches, as JSON values.
func (e *Engine) readBatch(ctx context.Context, c *Consumer, sub *Subscription) (EventBatch, []json.RawMessage, error) {
	reader, ok := e.source.(EventReader)
	if !ok {
		return EventBatch{}, nil, errors.New("the StreamSource cannot read events (EventReader)")
	}
	if len(c.Streams) == 0 {
		return EventBatch{}, nil, errors.New("the consumer has no stream")
	}
	batch, err := reader.ReadEvents(ctx, c.PrimaryStream, c.Streams[0].Offset, c.Batch)
	if err != nil {
		return EventBatch{}, nil, fmt.Errorf("reading %s: %w", c.PrimaryStream, err)
	}
	filter, err := compileFilter(sub.Events.Filter)
	if err != nil {
		return EventBatch{}, nil, err
	}
	events := make([]json.RawMessage, 0, len(batch.Events))
	for _, ev := range batch.Events {
		if !batch.JSON {
			ev, _ = json.Marshal(base64.StdEncoding.EncodeToString(ev))
		}
		if filter.match(ev) {
			events = append(events, ev)
		}
	}
	return batch, events, nil
}

// recordPush applies the outcome r of an attempt of c's batch, whose POST
// got resp, if it made one; a failure counts if it was the attempt in
// flight.
func (e *Engine) recordPush(ctx context.Context, c *Consumer, sub *Subscription, r pushResult, resp response) {
	applied := false
	stored, err := e.update(ctx, c.ID, func(cur *Consumer) (change, error) {
		var t tails
		if r.failure == nil {
			var err error
			if t, err = e.readTails(ctx, streamPaths(cur)); err != nil {
				return noChange, err
			}
		}
		ch := e.m.applyPush(cur, e.latest(sub), r, t, e.clock.Now())
		applied = ch != noChange
		return ch, nil
	})
	switch {
	case err != nil:
		// After Stop the attempt stays in flight and times out.
		if !errors.Is(err, ErrConsumerNotFound) && ctx.Err() == nil {
			e.log.ErrorContext(ctx, "webhooks: recording a batch's outcome", "consumer_id", c.ID, "error", err)
		}
	case resp.outcome != "" && (r.failure == nil || applied):
		e.attemptEnded(ctx, c, sub, resp, stored)
	}
}
