package webhooks

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/streamhooks/webhooks/receiver"
)

// Handler delivery (DeliveryHandler) is event push to a Go function in the
// host's process instead of a URL: the same batches, cursor, retries, dead
// letters, delivery log and health as DeliveryEvents, with the function's
// error as the attempt's outcome. There is no HTTP hop, no signature to
// check and no SSRF policy to exempt a loopback URL from, so a host
// processes its own streams, such as an inbox, in-process.

// DeliveryHandler delivers a subscription's streams in batches, as
// DeliveryEvents does, to the BatchHandler that the host registered under
// the subscription's Handler name (WithBatchHandler). A nil return
// acknowledges the batch; an error or a panic fails the attempt, which is
// retried on the subscription's schedule. Such subscriptions are created
// in Go only (Engine.CreateSubscription).
const DeliveryHandler DeliveryMode = "handler"

// A BatchHandler handles a batch of a DeliveryHandler subscription. ctx
// ends at the subscription's timeout (EventsOptions.Timeout); a handler
// still running then is abandoned, its outcome ignored, and the batch
// retried. While an abandoned call of a stream's batch has not returned,
// the retries of that stream fail without calling the handler again, so a
// handler that ignores ctx holds at most one goroutine per stream. Delivery is at least once: a
// batch whose acknowledgement was lost, in a crash for instance, comes
// again under the same DeliveryID.
type BatchHandler func(ctx context.Context, b *Batch) error

// Batch is what a BatchHandler gets: the batch an event-push POST would
// carry, and which attempt this is.
type Batch struct {
	receiver.EventsPayload
	// Attempt counts the attempts of this batch, from 1.
	Attempt int
	// MaxAttempts is how many attempts the subscription's retry policy
	// gives a batch before its consumer becomes a dead letter; zero means
	// no limit. A handler that would rather set a failing event aside than
	// stop its stream does so when Attempt reaches it.
	MaxAttempts int

	// ack is what AckThrough set; the engine reads it once the handler
	// has returned.
	ack string
}

// AckThrough makes a nil return of the handler acknowledge b only up to
// offset, one of b's Offsets: the events after it come again as a new
// batch, under a new delivery id, as for a webhook's AckResponse. An
// offset that is not one of b's Offsets, nor b's Offset, fails the
// attempt. The last call before the handler returns counts.
func (b *Batch) AckThrough(offset string) { b.ack = offset }

// WithBatchHandler registers h under name, for the DeliveryHandler
// subscriptions whose Handler is name. Every engine sharing a Store
// registers the same handlers, since any of them may deliver a batch; a
// batch for a name this engine lacks fails, and is retried.
func WithBatchHandler(name string, h BatchHandler) Option {
	return func(c *config) error {
		if name == "" || h == nil {
			return errors.New("WithBatchHandler: empty name or nil handler")
		}
		if c.handlers == nil {
			c.handlers = make(map[string]BatchHandler)
		}
		c.handlers[name] = h
		return nil
	}
}

// failHandler is a handler's error or panic; failTimeout is its timeout.
const failHandler failureClass = "handler"

// errStillHandling fails an attempt whose stream's last handler call,
// abandoned at its timeout, has not returned.
var errStillHandling = errors.New("the handler's last call for this stream, abandoned at its timeout, has not returned")

// handlerTransport calls the BatchHandler that a subscription names.
type handlerTransport struct{}

// send calls the handler of sub with msg's batch, within msg's timeout,
// and classifies what it came to as a POST's response is classified.
func (handlerTransport) send(ctx context.Context, x *executor, sub *Subscription, msg *message, _ func()) (response, error) {
	return x.callHandler(ctx, sub, msg.batch, msg.timeout), nil
}

// lane is the handler's, whose calls the lane's limit then bounds.
func (handlerTransport) lane(sub *Subscription) string { return "handler:" + sub.Handler }

// validate checks that sub names a handler registered on this engine,
// and no webhook.
func (handlerTransport) validate(x *executor, sub *Subscription) error {
	switch {
	case sub.Webhook != "":
		return invalid("webhook", "delivery %q has no webhook URL", DeliveryHandler)
	case x.handlers[sub.Handler] == nil:
		return invalid("handler", "no handler %q is registered on this engine", sub.Handler)
	}
	return nil
}

// testable refuses a test delivery: there is no webhook to test.
func (handlerTransport) testable() error {
	return invalid("delivery", "a %q subscription has no webhook to test", DeliveryHandler)
}

// offeredOverHTTP is false: a handler is the host's Go function, so its
// subscriptions are created in Go only.
func (handlerTransport) offeredOverHTTP() bool { return false }

// callHandler calls the handler of sub with b, within timeout, and
// classifies what it came to as a POST's response is classified.
func (x *executor) callHandler(ctx context.Context, sub *Subscription, b *Batch, timeout time.Duration) (r response) {
	r.sentAt = x.clock.Now()
	defer func() { r.latency = x.clock.Since(r.sentAt) }()
	h := x.handlers[sub.Handler]
	if h == nil {
		r.outcome = outcomeHandlerError
		r.failure = &deliveryFailure{class: failHandler, err: fmt.Errorf("no handler %q is registered", sub.Handler)}
		return r
	}
	key := ConsumerID(sub.ID, b.Stream)
	if _, busy := x.handling.LoadOrStore(key, struct{}{}); busy {
		r.outcome = outcomeHandlerError
		r.failure = &deliveryFailure{class: failHandler, err: errStillHandling}
		return r
	}
	// The timeout runs on the engine's clock, as a POST's does.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timer := x.clock.AfterFunc(timeout, func() { cancel(errRequestTimeout) })
	defer timer.Stop()
	done := make(chan error, 1) // the handler never blocks on sending, even abandoned
	go func() {
		err := runHandler(ctx, h, b)
		// Free the stream before answering: the caller may call the
		// handler for its next batch at once.
		x.handling.Delete(key)
		done <- err
		x.handlerReturned()
	}()
	select {
	case err := <-done:
		switch {
		case err == nil:
			r.outcome, r.ack = outcomeOK, b.ack
		case errors.Is(context.Cause(ctx), errRequestTimeout):
			r.outcome, r.failure = outcomeTimeout, transportFailure(errRequestTimeout)
		default:
			r.outcome, r.failure = outcomeHandlerError, &deliveryFailure{class: failHandler, err: err}
		}
	case <-ctx.Done():
		// Abandoned: at the timeout, or because the engine stops, which
		// the caller sees in its own ctx.
		r.outcome, r.failure = outcomeTimeout, transportFailure(errRequestTimeout)
	}
	return r
}

// runHandler calls h, turning a panic into an error.
func runHandler(ctx context.Context, h BatchHandler, b *Batch) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v", p)
		}
	}()
	return h(ctx, b)
}
