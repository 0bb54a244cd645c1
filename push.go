package webhooks

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
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

// pushMechanism delivers by event push, through transport to: a webhook
// (DeliveryEvents) or a Go function (DeliveryHandler).
type pushMechanism struct{ to transport }

// start starts a batch of IDLE consumer c if its stream has events past
// its cursor. With a batch window the first such event opens the window,
// and the batch starts when it closes.
func (p pushMechanism) start(m *cursorMachine, c *Consumer, sub *Subscription, t tails, now time.Time) change {
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
			return m.openWindow(c, now.Add(ev.MaxWait))
		}
		if c.Deadline.After(now) {
			return noChange
		}
	}
	return m.startBatch(c, sub, p, ReadLimit{MaxEvents: ev.MaxBatchEvents, MaxBytes: ev.MaxBatchBytes, Until: info.Tail}, now)
}

func (pushMechanism) apply(m *cursorMachine, c *Consumer, sub *Subscription, r attemptResult, t tails, now time.Time) change {
	return m.applyBatch(c, sub, r, t, now)
}

// revive retries a dead letter's batch, as a new run of attempts under
// the same delivery id; one whose batch a rewind dropped starts afresh.
func (p pushMechanism) revive(m *cursorMachine, c *Consumer, sub *Subscription, t tails, now time.Time) change {
	if c.Batch == (ReadLimit{}) {
		return m.restart(c, sub, t, now)
	}
	return m.retryBatch(c, sub, p, now)
}

// skips is true: a batch has bounds to record and move past.
func (pushMechanism) skips() bool { return true }

func (pushMechanism) skip(m *cursorMachine, c *Consumer, now time.Time) change {
	return m.skipBatch(c, now)
}

// attemptTimeout is the transport's own timeout and a grace, so that an
// engine that is alive always ends its attempt before another may send the
// batch again.
func (p pushMechanism) attemptTimeout(m *cursorMachine, sub *Subscription) time.Duration {
	return p.requestTimeout(m, sub) + pushTimeoutGrace
}

// requestTimeout is the subscription's timeout, or the engine's.
func (pushMechanism) requestTimeout(m *cursorMachine, sub *Subscription) time.Duration {
	if sub.Events.Timeout > 0 {
		return sub.Events.Timeout
	}
	return m.requestTimeout
}

// defaultRetry gives up on a batch after DefaultMaxAttempts.
func (pushMechanism) defaultRetry(*cursorMachine) RetryPolicy {
	return RetryPolicy{MaxAttempts: DefaultMaxAttempts}
}

// prepare reads c's batch in flight from the stream and leaves out what
// the filter does not match. A batch with nothing left to send moves the
// cursor without a POST.
func (p pushMechanism) prepare(ctx context.Context, x *executor, c *Consumer, sub *Subscription) (*message, error) {
	batch, sel, err := x.readBatch(ctx, c, sub)
	if err != nil {
		return nil, &failedStep{"reading a batch", err}
	}
	trace.SpanFromContext(ctx).SetAttributes(attribute.Int("webhooks.events", len(sel.events)))
	msg := &message{
		result: attemptResult{
			epoch:      c.Epoch,
			deliveryID: c.WakeID,
			attempt:    c.Attempt,
			next:       batch.Next,
			cut:        batch.Next != c.Batch.Until,
		},
		id:      c.WakeID,
		headers: sub.Events.Headers,
		timeout: p.requestTimeout(x.cursors, sub),
		// A 2xx may acknowledge up to an event's offset, or the whole
		// batch.
		acks: append(slices.Clip(sel.offsets), batch.Next),
	}
	if len(sel.events) == 0 {
		return msg, nil
	}
	if sel.eventType != "" {
		msg.headers = maps.Clone(msg.headers)
		if msg.headers == nil {
			msg.headers = map[string]string{}
		}
		msg.headers[receiver.EventTypeHeader] = sel.eventType
	}
	msg.batch = &Batch{
		EventsPayload: receiver.EventsPayload{
			SubscriptionID: sub.ID,
			Stream:         c.PrimaryStream,
			DeliveryID:     c.WakeID,
			Events:         sel.events,
			FirstOffset:    c.Streams[0].Offset,
			Offset:         batch.Next,
			UpToDate:       batch.Next == c.Batch.Until,
			Offsets:        sel.offsets,
		},
		Attempt:     c.Attempt,
		MaxAttempts: x.cursors.retryPolicyOf(sub, p).MaxAttempts,
	}
	return msg, nil
}

func (p pushMechanism) transport() transport { return p.to }

func (pushMechanism) spanName() string { return "webhooks.push" }

func (pushMechanism) eventOptions() bool { return true }

func (pushMechanism) options(s *Subscription) pushJSON { return pushView(s.Events) }

// configure gives sub the default events options, retry policy and rate
// limit of event push, then req's options; the source must read events.
func (pushMechanism) configure(sub *Subscription, req *pushJSON, source StreamSource) error {
	if _, ok := source.(EventReader); !ok {
		return errNoEventReader()
	}
	sub.Events = defaultEventsOptions()
	sub.Retry = &RetryPolicy{MaxAttempts: DefaultMaxAttempts}
	sub.RateLimit = DefaultEventsRateLimit
	return req.applyTo(sub.Events)
}

func newDeliveryID() string {
	id := uuid.New()
	return "msg_" + hex.EncodeToString(id[:])
}

// openWindow opens IDLE consumer c's batch window, to close at until.
func (m *cursorMachine) openWindow(c *Consumer, until time.Time) change {
	c.Deadline = until
	return changeSave
}

// startBatch starts c's batch up to limit, under a new delivery id, to be
// delivered by mech.
func (m *cursorMachine) startBatch(c *Consumer, sub *Subscription, mech mechanism, limit ReadLimit, now time.Time) change {
	c.Batch, c.BatchEnd = limit, ""
	return m.begin(c, sub, mech, newDeliveryID(), now)
}

// retryBatch starts a new run of attempts, by mech, of dead letter c's
// batch, under the same delivery id; of a paused or disabled subscription,
// the batch waits, with no deadline, to be resumed.
func (m *cursorMachine) retryBatch(c *Consumer, sub *Subscription, mech mechanism, now time.Time) change {
	c.State = stateDelivering
	c.Attempt = 0
	if !sub.active() {
		c.InFlight, c.Deadline = false, time.Time{}
		return changeSave
	}
	m.startAttempt(c, sub, mech, now)
	return changeSend
}

// applyBatch applies the outcome of an attempt of c's batch. A 2xx of any
// attempt of the batch moves the cursor past it, or to the event it
// acknowledged up to, and starts the next batch if there are events for
// one: the rest of a batch acknowledged in part goes at once, as a new
// batch under a new delivery id, since it is no longer the same content.
// A failure counts only for the attempt in flight.
func (m *cursorMachine) applyBatch(c *Consumer, sub *Subscription, r attemptResult, t tails, now time.Time) change {
	if c.State != stateDelivering || c.Epoch != r.epoch || c.WakeID != r.deliveryID {
		return noChange
	}
	if r.failure != nil {
		return m.failAttempt(c, sub, r, now)
	}
	if r.ack != "" && r.ack != r.next {
		r.next, r.cut = r.ack, true
	}
	if len(c.Streams) > 0 && compareOffsets(r.next, c.Streams[0].Offset) > 0 {
		c.Streams[0].Offset = r.next
	}
	deliveryOK(c)
	c.State = StateIdle
	c.InFlight = false
	c.Attempt = 0
	c.Batch, c.BatchEnd = ReadLimit{}, ""
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

// eventsBody encodes p as encoding/json would, but with the events as the
// source gave them rather than compacted: a JSON stream's events are
// valid JSON values (EventBatch), and a batch is encoded at every attempt.
func eventsBody(p *receiver.EventsPayload) []byte {
	size := 160 + len(p.SubscriptionID) + len(p.Stream) + len(p.FirstOffset) + len(p.Offset) + 16
	for _, o := range p.Offsets {
		size += len(o) + 3
	}
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
	if len(p.Offsets) > 0 {
		b = append(b, `,"offsets":[`...)
		for i, o := range p.Offsets {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, o)
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always encodes
	return append(b, q...)
}

// readBatch reads the events of c's batch in flight, and returns them as
// they go in the payload, with their offsets if the source gives them
// (selectEvents). A read and filtering that outlive the attempt's timeout stop, so that no
// source or event holds a goroutine for longer than an attempt.
func (x *executor) readBatch(ctx context.Context, c *Consumer, sub *Subscription) (EventBatch, selection, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timer := x.clock.AfterFunc(pushMechanism{}.requestTimeout(x.cursors, sub), func() { cancel(errRequestTimeout) })
	defer timer.Stop()
	reader, ok := x.source.(EventReader)
	if !ok {
		return EventBatch{}, selection{}, errors.New("the StreamSource cannot read events (EventReader)")
	}
	if len(c.Streams) == 0 {
		return EventBatch{}, selection{}, errors.New("the consumer has no stream")
	}
	batch, err := reader.ReadEvents(ctx, c.PrimaryStream, c.Streams[0].Offset, c.Batch)
	if err != nil {
		return EventBatch{}, selection{}, fmt.Errorf("reading %s: %w", c.PrimaryStream, err)
	}
	sel, err := x.selectEvents(ctx, c, sub, batch)
	if err != nil {
		return EventBatch{}, selection{}, err
	}
	return batch, sel, nil
}
