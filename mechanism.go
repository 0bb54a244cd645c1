package webhooks

import (
	"context"
	"time"
)

// The seam between the cursor core and the delivery modes.
//
// The cursor core (consumer.go, dispatcher.go) owns consumers, cursors,
// epochs, deadlines and retries: cursorMachine holds its rules, and is the
// only code that writes a Consumer's fields. A mechanism is one delivery
// mode's policy over that core: the spec-001 wake-up (wake.go) or event
// push (push.go). It decides; the machine's transitions write. A
// mechanism's message goes out through a transport: a signed webhook POST
// (webhook_transport.go) or, for DeliveryHandler, a call of a Go function
// (handler_delivery.go), which is event push with another transport.
//
// Every attempt of every mode takes one path (attempt.go): a transition
// marks it as sent, send hands it to its destination's lane, the lane
// starts it, the mechanism prepares its message, the transport sends it,
// and record applies its outcome through the mechanism in one Store
// update. Nothing outside mechanism.go, wake.go, push.go and
// handler_delivery.go asks which mode a subscription has.
type mechanism interface {
	// start is the transition of IDLE consumer c, of active subscription
	// sub, whose streams have tails t. It starts a delivery if c has
	// pending work (changeSend), may instead schedule one for later, and
	// otherwise leaves c alone.
	start(m *cursorMachine, c *Consumer, sub *Subscription, t tails, now time.Time) change
	// apply is the transition of c that outcome r of one of its attempts
	// makes. An outcome of a delivery or attempt that has ended changes
	// nothing.
	apply(m *cursorMachine, c *Consumer, sub *Subscription, r attemptResult, t tails, now time.Time) change
	// revive is the transition of dead letter c, its failures forgotten,
	// back to delivering from its cursor.
	revive(m *cursorMachine, c *Consumer, sub *Subscription, t tails, now time.Time) change
	// skips reports whether its consumers may skip a delivery they give
	// up on (ExhaustedSkip); skip is that transition of delivering
	// consumer c, or noChange if c cannot skip, and so stops.
	skips() bool
	skip(m *cursorMachine, c *Consumer, now time.Time) change
	// attemptTimeout is how long an attempt may stay in flight before it
	// counts as failed; requestTimeout is how long its transport waits.
	attemptTimeout(m *cursorMachine, sub *Subscription) time.Duration
	requestTimeout(m *cursorMachine, sub *Subscription) time.Duration
	// defaultRetry is the retry policy of a subscription that sets none.
	defaultRetry(m *cursorMachine) RetryPolicy
	// prepare builds the message of c's attempt in flight. A message
	// with nothing to send is recorded as delivered at once.
	prepare(ctx context.Context, x *executor, c *Consumer, sub *Subscription) (*message, error)
	// transport is what carries the mechanism's messages.
	transport() transport
	// spanName names an attempt's trace span.
	spanName() string
	// eventOptions reports whether its subscriptions carry EventsOptions,
	// and options how the API shows them.
	eventOptions() bool
	options(s *Subscription) pushJSON
	// configure gives sub, being created through the API with the event
	// options req, its mode's defaults and those options, or refuses them.
	configure(sub *Subscription, req *pushJSON, source StreamSource) error
}

// The mechanisms, one per delivery mode.
var (
	wakeMech    mechanism = wakeMechanism{}
	pushMech    mechanism = pushMechanism{to: webhookTransport{}}
	handlerMech mechanism = pushMechanism{to: handlerTransport{}}
)

// mechanismFor is the mechanism of delivery mode d, the zero mode being
// DeliveryWake, and false for a mode the engine does not know.
func mechanismFor(d DeliveryMode) (mechanism, bool) {
	switch d {
	case "", DeliveryWake:
		return wakeMech, true
	case DeliveryEvents:
		return pushMech, true
	case DeliveryHandler:
		return handlerMech, true
	default:
		return nil, false
	}
}

// mechanismOf is the mechanism that delivers sub, which must not be nil.
// Creating a subscription checks its mode; one the engine does not know,
// which no release has written, is delivered as a wake one.
func mechanismOf(sub *Subscription) mechanism {
	if m, ok := mechanismFor(sub.Delivery); ok {
		return m
	}
	return wakeMech
}

// A transport carries a mechanism's message to its destination.
type transport interface {
	// send delivers msg for sub and classifies what it came to. It calls
	// received, if set, as soon as the destination has accepted msg,
	// before the rest of its answer is read. An error means msg could
	// not be sent at all.
	send(ctx context.Context, x *executor, sub *Subscription, msg *message, received func()) (response, error)
	// lane is the lane of sub's attempts (lanes.go).
	lane(sub *Subscription) string
	// validate checks the destination of sub.
	validate(x *executor, sub *Subscription) error
	// testable refuses a test delivery (SendTestDelivery) to a
	// destination that cannot take one.
	testable() error
	// offeredOverHTTP reports whether the subscription API may create
	// subscriptions that use it.
	offeredOverHTTP() bool
}

// failedStep is an error of the named step of an attempt, as the log
// names it.
type failedStep struct {
	step string
	err  error
}

func (f *failedStep) Error() string { return f.step + ": " + f.err.Error() }
func (f *failedStep) Unwrap() error { return f.err }

// message is one attempt as a mechanism prepared it for its transport.
type message struct {
	// result holds what fences the attempt's outcome, and what the
	// mechanism needs to apply it; the pipeline adds the transport's.
	result attemptResult
	// id is the delivery id: signed, and sent as DeliveryIDHeader.
	id string
	// body is a POST's JSON body; batch, if set, is what a handler gets,
	// and a POST carries its EventsPayload.
	body  []byte
	batch *Batch
	// headers are sub's custom headers, which the signed ones win over.
	headers map[string]string
	timeout time.Duration
	// acks are the offsets a 2xx may acknowledge up to, AckResponse's
	// {"offset": …}: an event-push batch's events' and its end. Nil for
	// a mechanism that takes no partial acknowledgement, whose answers'
	// offsets are ignored.
	acks []string
	// onReceipt is set if an accepted message is recorded at once,
	// before the transport has the rest of its answer.
	onReceipt bool
}

// empty reports whether msg has nothing to send.
func (msg *message) empty() bool { return msg.body == nil && msg.batch == nil }

// attemptResult is the outcome of one attempt, as a mechanism applies it.
type attemptResult struct {
	epoch      int64
	deliveryID string
	attempt    int
	// failure is why the attempt failed; nil if it was delivered, or had
	// nothing to send.
	failure *deliveryFailure
	// received is set when the destination accepted the attempt and its
	// answer is still being read; done when that answer said the
	// delivery is complete ({"done": true}).
	received bool
	done     bool
	// next is the cursor past an event-push batch, and cut is set when the
	// batch ended before its Until at a size limit: the events after it
	// have waited their window already.
	next string
	cut  bool
	// ack, if set, is the offset of the batch's event up to which a 2xx
	// acknowledged it (AckResponse), one of message.acks.
	ack string
}

// needsTails reports whether applying r may start new work, and so reads
// the streams' tails.
func (r attemptResult) needsTails() bool { return r.failure == nil && !r.received }

// latest is sub as the engine knows it now, or sub if it knows it no
// longer: an attempt's outcome is applied under the subscription's status
// then, not when the attempt was sent, so that a subscription paused
// meanwhile starts nothing more.
func (e *Engine) latest(sub *Subscription) *Subscription {
	if now := e.subs.get(sub.ID); now != nil {
		return now
	}
	return sub
}

// subscription returns subscription id from the engine's set, and from the
// Store only if the set lacks it: one created through another engine that
// the feed has not reported yet. Another tenant's than ctx's is not found,
// with the error of a missing one.
func (e *Engine) subscription(ctx context.Context, id string) (*Subscription, error) {
	sub := e.subs.get(id)
	if sub == nil {
		var err error
		if sub, err = e.store.GetSubscription(ctx, id); err != nil {
			return nil, err
		}
	}
	if !visible(ctx, sub) {
		return nil, ErrSubscriptionNotFound
	}
	return sub, nil
}
