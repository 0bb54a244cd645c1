package webhooks

import (
	"context"
	"errors"
	"time"
)

const (
	// dueBatch is how many due consumers one Store query returns.
	dueBatch = 256
	// storeErrorRetry is how long the scheduler waits after a Store error.
	storeErrorRetry = time.Second
	// armSlack is how long arming the scheduler's timer may take before the
	// scheduler assumes the clock jumped meanwhile and looks again.
	armSlack = time.Millisecond
)

// errAttemptTimeout fails an attempt that got no 2xx within its timeout
// (the WAKING timeout, for a wake), while its POST may still be open.
var errAttemptTimeout = errors.New("no 2xx within the attempt's timeout")

// kickScheduler makes the scheduler look at the Store again if deadline is
// earlier than the one its timer waits for. The channel holds one element,
// so kicks that arrive while it works merge into one.
func (e *Engine) kickScheduler(deadline time.Time) {
	if armed := e.armed.Load(); armed != 0 && deadline.UnixNano() >= armed {
		return
	}
	// The kick is sent with parked cleared, under one lock, so that the
	// scheduler never counts as parked with a kick it is about to take.
	e.parkMu.Lock()
	e.parked = false
	select {
	case e.kick <- struct{}{}:
	default:
	}
	e.parkMu.Unlock()
}

// schedule is the engine's one scheduling loop. It keeps a single timer at
// the earliest deadline in the Store, or the poll interval away if that is
// sooner, and acts on what is due; there is no goroutine or timer per
// consumer, so a durable Store resumes every deadline after a restart.
func (e *Engine) schedule(ctx context.Context) {
	timer := e.clock.Timer(time.Hour)
	defer timer.Stop()
	for {
		// While it works every new deadline kicks it; once it knows the
		// next deadline, only earlier ones do.
		e.armed.Store(0)
		e.heartbeat()
		next := e.runDue(ctx)
		if ctx.Err() != nil {
			return
		}
		// Only this engine's own transitions kick it: a deadline written to
		// the Store by anything else waits for the poll.
		if poll := e.clock.Now().Add(e.cfg.pollInterval); next.IsZero() || next.After(poll) {
			next = poll
		}
		now := e.clock.Now()
		wait := e.clock.Until(next)
		if wait <= 0 {
			// Due already: a timer set to zero would wait for the next
			// tick of a mock clock.
			continue
		}
		e.armed.Store(next.UnixNano())
		timer.Reset(wait)
		if e.clock.Since(now) > armSlack {
			// The clock jumped while the timer was being armed (a paused
			// process, or a mock clock set by a test), so the timer fires
			// late by the jump: look again.
			continue
		}
		e.park(true)
		select {
		case <-ctx.Done():
			return
		case <-e.kick:
		case <-timer.C:
		}
		e.park(false)
	}
}

// park records whether the scheduler waits for work, and tells a test when
// it starts to. It does not count as waiting with a kick pending.
func (e *Engine) park(waiting bool) {
	e.parkMu.Lock()
	e.parked = waiting && len(e.kick) == 0
	e.parkMu.Unlock()
	if waiting {
		e.progressed.Send()
	}
}

// runDue handles every consumer whose deadline has passed and returns when
// to look again: the next deadline, a retry time after a Store error, or
// the zero time if no consumer has a deadline.
func (e *Engine) runDue(ctx context.Context) time.Time {
	if !e.retryMissed(ctx) {
		return e.clock.Now().Add(storeErrorRetry)
	}
	for {
		due, err := e.store.DueConsumers(ctx, e.clock.Now(), dueBatch)
		if err != nil {
			if ctx.Err() == nil {
				e.log.ErrorContext(ctx, "webhooks: listing due consumers", "error", err)
			}
			return e.clock.Now().Add(storeErrorRetry)
		}
		for _, c := range due {
			e.heartbeat()
			if err := e.handleDue(ctx, c); err != nil {
				if ctx.Err() != nil {
					return time.Time{}
				}
				e.log.ErrorContext(ctx, "webhooks: handling due consumer", "consumer_id", c.ID, "error", err)
				return e.clock.Now().Add(storeErrorRetry)
			}
		}
		if len(due) < dueBatch {
			break
		}
	}
	e.heartbeat()
	next, ok, err := e.store.NextDeadline(ctx)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			e.log.ErrorContext(ctx, "webhooks: reading next deadline", "error", err)
		}
		return e.clock.Now().Add(storeErrorRetry)
	case !ok:
		return time.Time{}
	default:
		return next
	}
}

// handleDue acts on one consumer whose deadline has passed, as seen in
// snapshot. A due send is marked as sent and handed to its destination's
// lane (lanes.go), which starts the POST when the destination may have one
// more in flight: the scheduler never waits for delivery capacity, so
// endpoints that hang cannot hold up other deadlines.
func (e *Engine) handleDue(ctx context.Context, snapshot *Consumer) error {
	var (
		ch       change
		timedOut *Consumer // the attempt the WAKING timeout failed
	)
	sub, err := e.subscription(ctx, snapshot.SubscriptionID)
	if errors.Is(err, ErrSubscriptionNotFound) {
		return nil // its consumers went with it
	}
	if err != nil {
		return err
	}
	c, err := e.update(ctx, snapshot.ID, func(c *Consumer) (change, error) {
		timedOut = nil
		before := *c
		var t tails
		if c.State == StateLive || c.State == StateIdle {
			var err error
			if t, err = e.readTails(ctx, streamPaths(c)); err != nil {
				return noChange, err
			}
		}
		ch = e.m.onDue(c, sub, t, e.clock.Now())
		if c.Failures > before.Failures {
			timedOut = &before
		}
		return ch, nil
	})
	if timedOut != nil && err == nil {
		e.attemptEnded(ctx, timedOut, sub, response{outcome: outcomeTimeout, failure: transportFailure(errAttemptTimeout)}, c)
	}
	if errors.Is(err, ErrConsumerNotFound) {
		return nil
	}
	return err
}
