package webhooks

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/google/uuid"

	"github.com/streamhooks/webhooks/receiver"
)

// The wake-up delivery mechanism (spec 001): a signed POST that tells a
// consumer to read its streams and call back. A 2xx proves receipt and
// makes the consumer LIVE; its callbacks ack, and its done, or a
// {"done": true} answer, ends the wake cycle.

// wakeMechanism delivers by wake-up.
type wakeMechanism struct{}

func (wakeMechanism) start(m *cursorMachine, c *Consumer, sub *Subscription, t tails, now time.Time) change {
	return m.wakeIfPending(c, sub, t, now)
}

func (wakeMechanism) apply(m *cursorMachine, c *Consumer, sub *Subscription, r attemptResult, t tails, now time.Time) change {
	return m.applyWake(c, sub, r, t, now)
}

// revive starts a dead letter's new wake cycle if it has pending work.
func (wakeMechanism) revive(m *cursorMachine, c *Consumer, sub *Subscription, t tails, now time.Time) change {
	return m.restart(c, sub, t, now)
}

// attemptTimeout is the spec's WAKING timeout.
func (wakeMechanism) attemptTimeout(m *cursorMachine, _ *Subscription) time.Duration {
	return m.wakingTimeout
}

func (wakeMechanism) requestTimeout(m *cursorMachine, _ *Subscription) time.Duration {
	return m.requestTimeout
}

// skips is false: a wake carries no batch to record, and its consumer
// reads the streams itself, so a skip would move cursors past events no
// one read. A wake consumer that gives up stops.
func (wakeMechanism) skips() bool { return false }

func (wakeMechanism) skip(*cursorMachine, *Consumer, time.Time) change { return noChange }

// defaultRetry gives up on a wake-up after the failure GC period (spec
// 001's three days).
func (wakeMechanism) defaultRetry(m *cursorMachine) RetryPolicy {
	return RetryPolicy{MaxAge: m.failureGCAfter}
}

// prepare builds the signed body of a wake-up POST. Every attempt gets a
// fresh token; the wake_id stays that of the cycle (S2). A 2xx is recorded
// as soon as its status arrives: it proves receipt, so the consumer is
// LIVE at once, even if the receiver holds the body open while it works
// (spec: WAKING Timeout).
func (wakeMechanism) prepare(_ context.Context, x *executor, c *Consumer, sub *Subscription) (*message, error) {
	token, err := x.tokens.issue(c.ID, c.Epoch, c.WakeID)
	if err != nil {
		return nil, &failedStep{"building notification", err}
	}
	body, err := json.Marshal(receiver.Notification{
		ConsumerID:    c.ID,
		Epoch:         c.Epoch,
		WakeID:        c.WakeID,
		PrimaryStream: c.PrimaryStream,
		Streams:       c.Streams,
		TriggeredBy:   c.TriggeredBy,
		Callback:      x.callbackURL(c.ID),
		Token:         token,
	})
	if err != nil {
		return nil, &failedStep{"building notification", err}
	}
	return &message{
		result:    attemptResult{epoch: c.Epoch, deliveryID: c.WakeID, attempt: c.Attempt},
		id:        c.WakeID,
		body:      body,
		timeout:   x.cursors.requestTimeout,
		onReceipt: true,
	}, nil
}

func (wakeMechanism) transport() transport { return webhookTransport{} }

func (wakeMechanism) spanName() string { return "webhooks.deliver" }

func (wakeMechanism) eventOptions() bool { return false }

func (wakeMechanism) options(*Subscription) pushJSON { return pushJSON{} }

// configure refuses event options: a wake carries no events.
func (wakeMechanism) configure(_ *Subscription, req *pushJSON, _ StreamSource) error {
	if !req.empty() {
		return invalid(req.field(), "batch, headers, timeout_ms and filter apply only to delivery %q", DeliveryEvents)
	}
	return nil
}

func newWakeID() string {
	id := uuid.New()
	return "w_" + hex.EncodeToString(id[:])
}

// wakeIfPending wakes IDLE consumer c, of sub, if it has pending work.
func (m *cursorMachine) wakeIfPending(c *Consumer, sub *Subscription, t tails, now time.Time) change {
	if c.State != StateIdle {
		return noChange
	}
	pending := pendingStreams(c, t)
	if len(pending) == 0 {
		return noChange
	}
	return m.wake(c, sub, t, pending, now)
}

// wake starts a new wake cycle: IDLE → WAKING (or LIVE → WAKING on done
// with pending work), its first attempt marked as sent (begin). It keeps
// the streams' tails, to which a synchronous done acks.
func (m *cursorMachine) wake(c *Consumer, sub *Subscription, t tails, triggeredBy []string, now time.Time) change {
	ch := m.begin(c, sub, wakeMech, newWakeID(), now)
	c.TriggeredBy = triggeredBy
	c.WakeTails = c.WakeTails[:0]
	for _, s := range c.Streams {
		if info, ok := t[s.Path]; ok {
			c.WakeTails = append(c.WakeTails, StreamOffset{Path: s.Path, Offset: info.Tail})
		}
	}
	return ch
}

// applyWake applies the outcome of a wake-up POST. One of a wake cycle
// that has ended changes nothing.
func (m *cursorMachine) applyWake(c *Consumer, sub *Subscription, r attemptResult, t tails, now time.Time) change {
	if c.Epoch != r.epoch || c.WakeID != r.deliveryID {
		return noChange
	}
	switch {
	case r.failure != nil:
		return m.failAttempt(c, sub, r, now)
	case r.received:
		// LIVE and IDLE consumers have no failure run to end: goLive
		// ended it.
		if c.State != stateDelivering {
			return noChange
		}
		m.goLive(c, now)
		return changeSave
	case r.done:
		if c.State == StateIdle {
			return noChange
		}
		deliveryOK(c)
		m.autoAck(c)
		return m.finish(c, sub, t, now)
	default:
		// A 2xx without done was recorded when it was received.
		return noChange
	}
}

// autoAck acks every stream up to its tail when the wake began: the
// synchronous-done shortcut, which cannot have seen anything newer.
func (m *cursorMachine) autoAck(c *Consumer) {
	for _, wt := range c.WakeTails {
		i := streamIndex(c.Streams, wt.Path)
		if i >= 0 && compareOffsets(wt.Offset, c.Streams[i].Offset) > 0 {
			c.Streams[i].Offset = wt.Offset
		}
	}
}
