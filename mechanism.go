package webhooks

import (
	"context"
	"time"
)

// A mechanism is one way of delivering a subscription's streams: the
// spec-001 wake-up (wake.go) or event push (push.go). The cursor core
// (consumer.go, dispatcher.go) owns consumers, offsets, epochs, deadlines
// and retries, and asks the subscription's mechanism two things: how an
// IDLE consumer's pending work starts going out, and to make a delivery
// attempt that a transition has marked as sent. Each runs the same way on
// every Store and across engines, since the state both need is the
// consumer's.
type mechanism interface {
	// start is the transition of IDLE consumer c, of sub, whose streams
	// have tails t. It starts a delivery attempt if c has pending work
	// (changeSend), may instead schedule one for later, and otherwise
	// leaves c alone.
	start(m *machine, c *Consumer, sub *Subscription, t tails, now time.Time) change
	// deliver makes the attempt of c, of sub, that a transition has just
	// marked as sent, and records its outcome. It returns the outcome, or
	// "" if it made no POST.
	deliver(ctx context.Context, e *Engine, c *Consumer, sub *Subscription) (outcome string)
}

// mechanismOf is the mechanism that delivers sub.
func mechanismOf(sub *Subscription) mechanism {
	if sub.pushes() {
		return pushMechanism{}
	}
	return wakeMechanism{}
}

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
// the feed has not reported yet.
func (e *Engine) subscription(ctx context.Context, id string) (*Subscription, error) {
	if sub := e.subs.get(id); sub != nil {
		return sub, nil
	}
	return e.store.GetSubscription(ctx, id)
}
