package webhooks

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"go.opentelemetry.io/otel/trace"
)

// The one attempt pipeline of every delivery mode: a transition marks an
// attempt as sent (changeSend), send hands it to its destination's lane,
// the lane starts it, deliver has its mechanism prepare the message and
// its transport send it, and record applies the outcome through the
// mechanism, in one Store update, before it is reported once
// (attemptEnded).

// sendStarted sends the attempt of c that this engine's transition has
// just started and stored: a delivery's first, which needs no further
// write, or a retry come due. The attempt runs in the engine's context,
// not the caller's, which may be a request's. It counts as a delivery, so
// that Stop waits for it; an engine not running leaves the attempt to time
// out and be retried, as after a crash.
func (e *Engine) sendStarted(c *Consumer) {
	if c.State != stateDelivering || !c.InFlight {
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

// send hands the attempt of c, just marked as sent, to the lane of its
// destination, or puts it back until its turn under its subscription's
// rate limit.
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
	e.lanes.enqueue(ctx, mechanismOf(sub).transport().lane(sub), c, sub)
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

// runDelivery makes attempt a and reports its outcome to its lane.
func (e *Engine) runDelivery(a *attempt) {
	defer e.deliveries.Done()
	e.lanes.finish(a, laneOutcomeOf(e.deliver(e.sendCtx, a.c, a.sub)))
	e.attempts.Add(-1)
	e.signals.attemptEnded.Send()
}

// deliver makes the attempt of c, of sub, that a transition has just
// marked as sent, and records its outcome. It returns the transport's
// outcome, or "" if nothing was sent. An attempt that cannot be prepared
// or sent stays in flight in the Store and times out, to be retried, as a
// lost POST does; so does one cut short by Stop.
func (e *Engine) deliver(ctx context.Context, c *Consumer, sub *Subscription) string {
	mech := mechanismOf(sub)
	ctx, span := e.tel.tracer.Start(ctx, mech.spanName(), trace.WithAttributes(consumerAttrs(c)...))
	defer span.End()
	msg, err := mech.prepare(ctx, e.x, c, sub)
	if err != nil {
		e.stepFailed(ctx, c, err)
		return ""
	}
	if msg.empty() {
		e.record(ctx, c, sub, msg.result)
		return ""
	}
	if msg.batch != nil {
		e.tel.batchSent(ctx, c, len(msg.batch.Events))
	}
	var (
		received    func()
		receivedErr error
	)
	if msg.onReceipt {
		received = func() {
			r := msg.result
			r.received = true
			_, _, receivedErr = e.record(ctx, c, sub, r)
		}
	}
	resp, err := mech.transport().send(ctx, e.x, sub, msg, received)
	if err != nil {
		e.stepFailed(ctx, c, err)
		return ""
	}
	if ctx.Err() != nil {
		return ""
	}
	resp = checkAck(msg, resp)
	e.tel.delivered(ctx, span, c, resp.outcome, resp.failure, resp.latency)
	r := msg.result
	r.failure, r.done, r.ack = resp.failure, resp.outcome == outcomeDone, resp.ack
	switch {
	case r.failure != nil:
		// A failure counts only if it ended the attempt in flight: one
		// that its timeout failed first was reported then.
		if stored, applied, _ := e.record(ctx, c, sub, r); applied {
			e.attemptEnded(ctx, c, sub, resp, stored)
		}
	case msg.onReceipt && !r.done:
		// Recorded when it was received.
		if reported(receivedErr) {
			e.attemptEnded(ctx, c, sub, resp, nil)
		}
	default:
		if stored, _, err := e.record(ctx, c, sub, r); reported(err) {
			e.attemptEnded(ctx, c, sub, resp, stored)
		}
	}
	return resp.outcome
}

// reported reports whether a delivered attempt whose recording returned
// err is reported now: unless the Store failed to record it, since then
// the attempt stays in flight and its timeout reports it.
func reported(err error) bool {
	return err == nil || errors.Is(err, ErrConsumerNotFound)
}

// stepFailed logs err, which kept an attempt of c from being sent, unless
// the engine stops or the stream is gone, which takes c with it.
func (e *Engine) stepFailed(ctx context.Context, c *Consumer, err error) {
	if ctx.Err() != nil || errors.Is(err, ErrStreamNotFound) {
		return
	}
	step := "sending a delivery"
	var f *failedStep
	if errors.As(err, &f) {
		step, err = f.step, f.err
	}
	e.log.ErrorContext(ctx, "webhooks: "+step, "consumer_id", c.ID, "error", err)
}

// record applies outcome r of an attempt of c, of sub, through sub's
// mechanism. It returns the consumer as stored afterwards, nil if there is
// none, and whether the outcome changed it: an outcome of an attempt that
// has already ended changes nothing.
func (e *Engine) record(ctx context.Context, c *Consumer, sub *Subscription, r attemptResult) (stored *Consumer, applied bool, err error) {
	mech := mechanismOf(sub)
	stored, err = e.core.update(ctx, c.ID, func(cur *Consumer) (change, error) {
		var t tails
		if r.needsTails() {
			var err error
			if t, err = e.core.readTails(ctx, streamPaths(cur)); err != nil {
				return noChange, err
			}
		}
		ch := mech.apply(&e.core.rules, cur, e.latest(sub), r, t, e.clock.Now())
		applied = ch != noChange
		return ch, nil
	})
	if err != nil {
		applied = false
	}
	if err != nil && !errors.Is(err, ErrConsumerNotFound) && ctx.Err() == nil {
		// After Stop the attempt stays in flight and times out.
		e.log.ErrorContext(ctx, "webhooks: recording a delivery outcome", "consumer_id", c.ID, "error", err)
	}
	return stored, applied, err
}

// checkAck checks the offset that resp, a 2xx, acknowledged msg up to
// (AckResponse): one of msg's acks, or a failure of the whole message. A
// message that takes no partial acknowledgement ignores it.
func checkAck(msg *message, resp response) response {
	switch {
	case resp.failure != nil || resp.ack == "" || msg.acks == nil:
		resp.ack = ""
	case !slices.Contains(msg.acks, resp.ack):
		resp.outcome = outcomeBadAck
		resp.failure = &deliveryFailure{class: failBadAck, err: fmt.Errorf("acknowledged offset %q is not one of the batch's", resp.ack)}
		resp.ack = ""
	}
	return resp
}
