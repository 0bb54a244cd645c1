package webhooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/streamhooks/webhooks/receiver"
)

// The wake-up delivery mechanism (spec 001): a signed POST that tells a
// consumer to read its streams and call back. The scheduler
// (dispatcher.go) and the transitions that start an attempt hand it here;
// lanes.go bounds the POSTs in flight per destination.

const (
	// MaxWebhookResponseBytes bounds how much of a webhook response body is
	// read. A longer body is not looked at for {"done": true}: the 2xx
	// alone counts.
	MaxWebhookResponseBytes = 64 << 10
)

// errRequestTimeout cancels a webhook POST that outlived the request timeout.
var errRequestTimeout = errors.New("webhook request timed out")

// wakeMechanism delivers by wake-up.
type wakeMechanism struct{}

func (wakeMechanism) start(m *machine, c *Consumer, _ *Subscription, t tails, now time.Time) change {
	return m.wakeIfPending(c, t, now)
}

func (wakeMechanism) deliver(ctx context.Context, e *Engine, c *Consumer, sub *Subscription) string {
	return e.deliver(ctx, c, sub)
}

// send hands the attempt of c, just marked as sent, to the lane of its
// webhook's host.
func (e *Engine) send(ctx context.Context, c *Consumer) {
	sub, err := e.subscription(ctx, c.SubscriptionID)
	if err != nil {
		// A deleted subscription took the consumer with it. After another
		// error the attempt stays in flight in the Store and times out like
		// a lost POST.
		if !errors.Is(err, ErrSubscriptionNotFound) && ctx.Err() == nil {
			e.log.ErrorContext(ctx, "webhooks: loading subscription", "consumer_id", c.ID, "error", err)
		}
		return
	}
	if wait := e.limits.turn(sub, c.ID, e.clock.Now()); wait > 0 {
		e.deferAttempt(ctx, c, sub, wait)
		return
	}
	e.lanes.enqueue(ctx, laneOf(sub), c, sub)
}

// sendStarted sends the attempt of c that this engine's transition has
// just started and stored: a wake's first (machine.wake), which needs no
// further write, or a retry come due. The attempt runs in the engine's
// context, not the caller's, which may be a request's. It counts as a
// delivery, so that Stop waits for it; an engine not running leaves the
// attempt to time out and be retried, as after a crash.
func (e *Engine) sendStarted(c *Consumer) {
	if c.State != StateWaking || !c.InFlight {
		return
	}
	e.mu.Lock()
	if !e.running || e.stopped {
		e.mu.Unlock()
		return
	}
	// Counted before Stop can begin to wait.
	e.deliveries.Add(1)
	ctx := e.runCtx
	e.mu.Unlock()
	defer e.deliveries.Done()
	e.send(ctx, c)
}

// startDelivery runs attempt a, started by its lane, in a goroutine that
// Stop waits for. Its context is the engine's context for deliveries in
// flight, which Stop leaves them until its own context ends; an attempt
// that its lane has not started by Stop is not (lanes.next).
func (e *Engine) startDelivery(a *attempt) {
	e.deliveries.Add(1)
	e.attempts.Add(1)
	go e.runDelivery(a)
}

// runDelivery sends attempt a and reports its outcome to its lane.
func (e *Engine) runDelivery(a *attempt) {
	defer e.deliveries.Done()
	e.lanes.finish(a, laneOutcomeOf(mechanismOf(a.sub).deliver(e.sendCtx, e, a.c, a.sub)))
	e.attempts.Add(-1)
	e.progressed.Send()
}

// deliver sends one delivery attempt for c, a consumer of sub just marked
// as sending, and applies its outcome. It returns the outcome, or "" if it
// made no POST.
func (e *Engine) deliver(ctx context.Context, c *Consumer, sub *Subscription) (outcome string) {
	ctx, span := e.tel.tracer.Start(ctx, "webhooks.deliver", trace.WithAttributes(consumerAttrs(c)...))
	defer span.End()
	body, err := e.notification(c)
	if err != nil {
		e.log.ErrorContext(ctx, "webhooks: building notification", "consumer_id", c.ID, "error", err)
		return
	}
	header, err := e.signedHeader(sub, c.WakeID, body, e.clock.Now())
	if err != nil {
		// The attempt times out, and is retried, as a lost POST is.
		e.log.ErrorContext(ctx, "webhooks: signing notification", "consumer_id", c.ID, "error", err)
		return
	}
	result := deliveryResult{epoch: c.Epoch, wakeID: c.WakeID, attempt: c.Attempt}
	resp := e.post(ctx, sub.Webhook, header, body, e.cfg.requestTimeout, func() {
		// A 2xx proves receipt: the consumer is LIVE at once, even if the
		// receiver holds the body open while it works (spec: WAKING
		// Timeout).
		accepted := result
		accepted.ok = true
		e.record(ctx, c.ID, sub, accepted)
	})
	if ctx.Err() != nil {
		// Shutting down: the attempt stays in flight in the Store and times
		// out like any other after a restart.
		return
	}
	e.tel.delivered(ctx, span, resp.outcome, resp.failure, resp.latency)
	switch resp.outcome {
	case outcomeOK:
		// Recorded when the status arrived.
		e.attemptEnded(ctx, c, sub, resp, nil)
	case outcomeDone:
		result.ok, result.done = true, true
		e.record(ctx, c.ID, sub, result)
		e.attemptEnded(ctx, c, sub, resp, nil)
	default:
		// An attempt the WAKING timeout failed first was logged then.
		result.failure = resp.failure
		if stored, applied := e.record(ctx, c.ID, sub, result); applied {
			e.attemptEnded(ctx, c, sub, resp, stored)
		}
	}
	return resp.outcome
}

// record applies the outcome of a delivery attempt to consumer id. It
// returns the consumer as stored afterwards, nil if there is none, and
// whether the outcome changed it: an outcome of an attempt that has
// already ended changes nothing.
func (e *Engine) record(ctx context.Context, id string, sub *Subscription, result deliveryResult) (stored *Consumer, applied bool) {
	c, err := e.update(ctx, id, func(cur *Consumer) (change, error) {
		var t tails
		if result.done {
			var err error
			if t, err = e.readTails(ctx, streamPaths(cur)); err != nil {
				return noChange, err
			}
		}
		ch := e.m.applyDelivery(cur, e.latest(sub), result, t, e.clock.Now())
		applied = ch != noChange
		return ch, nil
	})
	if err != nil {
		// After Stop the attempt stays in flight and times out.
		if !errors.Is(err, ErrConsumerNotFound) && ctx.Err() == nil {
			e.log.ErrorContext(ctx, "webhooks: recording delivery outcome", "consumer_id", id, "error", err)
		}
		return nil, false
	}
	return c, applied
}

// notification builds the signed body of a wake-up POST. Every attempt gets
// a fresh token; the wake_id stays that of the cycle (S2).
func (e *Engine) notification(c *Consumer) ([]byte, error) {
	token, err := e.tokens.issue(c.ID, c.Epoch, c.WakeID)
	if err != nil {
		return nil, err
	}
	return json.Marshal(receiver.Notification{
		ConsumerID:    c.ID,
		Epoch:         c.Epoch,
		WakeID:        c.WakeID,
		PrimaryStream: c.PrimaryStream,
		Streams:       c.Streams,
		TriggeredBy:   c.TriggeredBy,
		Callback:      e.callbackURL(c.ID),
		Token:         token,
	})
}

// signedHeader returns the headers of a POST of JSON body, delivery id,
// to sub's webhook, signed at now by its scheme. It fails only for a
// subscription whose secret or scheme is not one the engine made.
func (e *Engine) signedHeader(sub *Subscription, id string, body []byte, now time.Time) (http.Header, error) {
	h := http.Header{
		"Content-Type": {"application/json"},
		"User-Agent":   {"streamhooks"},
	}
	if err := signDelivery(h, sub, id, now, body); err != nil {
		return nil, err
	}
	return h, nil
}

// response is what one webhook POST came to.
type response struct {
	outcome string
	failure *deliveryFailure // nil for a 2xx
	status  int              // 0 if no response arrived
	// preview is the start of the response body, for the delivery log.
	preview string
	sentAt  time.Time
	latency time.Duration
}

// post sends one webhook POST of body with header to url, and classifies
// the outcome, and the failure if it is one. It calls accepted, if set, as
// soon as a 2xx status arrives, before reading the body. The timeout runs
// on the engine's clock; it cancels the request rather than setting a
// context deadline, which the dialer would read against the real clock.
func (e *Engine) post(ctx context.Context, url string, header http.Header, body []byte, timeout time.Duration, accepted func()) (r response) {
	r.sentAt = e.clock.Now()
	defer func() { r.latency = e.clock.Since(r.sentAt) }()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timer := e.clock.AfterFunc(timeout, func() { cancel(errRequestTimeout) })
	defer timer.Stop()

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		r.outcome, r.failure = outcomeError, transportFailure(err)
		return r
	}
	req.Header = header
	resp, err := e.client.Do(req)
	if err != nil {
		if errors.Is(context.Cause(ctx), errRequestTimeout) {
			// A transport other than net/http's may not pass the cause on.
			r.outcome, r.failure = outcomeTimeout, transportFailure(errRequestTimeout)
			return r
		}
		trace.SpanFromContext(ctx).SetAttributes(attribute.String("webhooks.error", err.Error()))
		r.outcome, r.failure = outcomeError, transportFailure(err)
		return r
	}
	defer resp.Body.Close()
	r.status = resp.StatusCode
	trace.SpanFromContext(ctx).SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	if f := statusFailure(resp.StatusCode); f != nil {
		f.retryAfter = retryAfter(resp, e.clock.Now())
		data, _ := io.ReadAll(io.LimitReader(resp.Body, MaxResponsePreview))
		r.outcome, r.failure, r.preview = outcomeHTTPError, f, responsePreview(data)
		return r
	}
	if accepted != nil {
		accepted()
	}
	// Only a body read whole can finish the wake: a "done" in a body cut
	// short or past the limit may not be what the receiver meant, and
	// auto-acking on it could lose events.
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxWebhookResponseBytes+1))
	r.preview = responsePreview(data)
	var d receiver.DoneResponse
	if err == nil && len(data) <= MaxWebhookResponseBytes && json.Unmarshal(data, &d) == nil && d.Done {
		r.outcome = outcomeDone
		return r
	}
	r.outcome = outcomeOK
	return r
}
