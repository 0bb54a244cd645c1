package webhooks

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/streamhooks/webhooks/internal/startstop"
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

// scheduler is the engine's one scheduling loop: a single timer at the
// earliest consumer deadline in the Store. It reads the Store's deadlines
// and nothing else of it; what is due it hands to the cursor core (due),
// after the events missed in a Store outage (catchUp).
type scheduler struct {
	startstop.Base
	clock        clock.Clock
	store        Store
	log          *slog.Logger
	pollInterval time.Duration
	// catchUp makes up for the stream events missed while the Store was
	// unavailable, and reports false if it still is.
	catchUp func(ctx context.Context) bool
	// due acts on a consumer whose deadline has passed.
	due          func(ctx context.Context, c *Consumer) error
	parkedSignal func()

	kick  chan struct{}
	armed atomic.Int64 // UnixNano the timer waits for; 0 while it works
	// parked is set while it waits for its timer or a kick: a test moves
	// a mock clock only while the engine is idle (see kickAt).
	parkMu sync.Mutex
	parked bool
	// beat is the UnixNano at which it began its current step (Live).
	beat atomic.Int64
}

// stalled reports whether the scheduler has spent longer than limit on
// its current step at now, not waiting for work.
func (s *scheduler) stalled(now time.Time, limit time.Duration) bool {
	s.parkMu.Lock()
	parked := s.parked
	s.parkMu.Unlock()
	return !parked && now.Sub(time.Unix(0, s.beat.Load())) > limit
}

// kickAt makes the scheduler look at the Store again if deadline is
// earlier than the one its timer waits for. The channel holds one element,
// so kicks that arrive while it works merge into one.
func (s *scheduler) kickAt(deadline time.Time) {
	if armed := s.armed.Load(); armed != 0 && deadline.UnixNano() >= armed {
		return
	}
	// The kick is sent with parked cleared, under one lock, so that the
	// scheduler never counts as parked with a kick it is about to take.
	s.parkMu.Lock()
	s.parked = false
	select {
	case s.kick <- struct{}{}:
	default:
	}
	s.parkMu.Unlock()
}

// Start starts the scheduling loop, in ctx, until Stop.
func (s *scheduler) Start(ctx context.Context) {
	ctx, ok, stopped := s.StartInit(ctx)
	if !ok {
		return
	}
	s.beat.Store(s.clock.Now().UnixNano())
	go func() {
		defer stopped()
		s.run(ctx)
	}()
}

// run is the engine's one scheduling loop. It keeps a single timer at
// the earliest deadline in the Store, or the poll interval away if that is
// sooner, and acts on what is due; there is no goroutine or timer per
// consumer, so a durable Store resumes every deadline after a restart.
func (s *scheduler) run(ctx context.Context) {
	timer := s.clock.Timer(time.Hour)
	defer timer.Stop()
	for {
		// While it works every new deadline kicks it; once it knows the
		// next deadline, only earlier ones do.
		s.armed.Store(0)
		s.beat.Store(s.clock.Now().UnixNano())
		next := s.runDue(ctx)
		if ctx.Err() != nil {
			return
		}
		// Only this engine's own transitions kick it: a deadline written to
		// the Store by anything else waits for the poll.
		if poll := s.clock.Now().Add(s.pollInterval); next.IsZero() || next.After(poll) {
			next = poll
		}
		now := s.clock.Now()
		wait := s.clock.Until(next)
		if wait <= 0 {
			// Due already: a timer set to zero would wait for the next
			// tick of a mock clock.
			continue
		}
		s.armed.Store(next.UnixNano())
		// A tick left from before a kick woke it is dropped: a clock whose
		// timers keep it across Reset (a mock's) would fire into a full
		// channel.
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
		if s.clock.Since(now) > armSlack {
			// The clock jumped while the timer was being armed (a paused
			// process, or a mock clock set by a test), so the timer fires
			// late by the jump: look again.
			continue
		}
		s.park(true)
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		case <-timer.C:
		}
		s.park(false)
	}
}

// park records whether the scheduler waits for work, and tells a test when
// it starts to. It does not count as waiting with a kick pending.
func (s *scheduler) park(waiting bool) {
	s.parkMu.Lock()
	s.parked = waiting && len(s.kick) == 0
	s.parkMu.Unlock()
	if waiting {
		s.parkedSignal()
	}
}

// runDue handles every consumer whose deadline has passed and returns when
// to look again: the next deadline, a retry time after a Store error, or
// the zero time if no consumer has a deadline.
func (s *scheduler) runDue(ctx context.Context) time.Time {
	if !s.catchUp(ctx) {
		return s.clock.Now().Add(storeErrorRetry)
	}
	for {
		due, err := s.store.DueConsumers(ctx, s.clock.Now(), dueBatch)
		if err != nil {
			if ctx.Err() == nil {
				s.log.ErrorContext(ctx, "webhooks: listing due consumers", "error", err)
			}
			return s.clock.Now().Add(storeErrorRetry)
		}
		for _, c := range due {
			s.beat.Store(s.clock.Now().UnixNano())
			if err := s.due(ctx, c); err != nil {
				if ctx.Err() != nil {
					return time.Time{}
				}
				s.log.ErrorContext(ctx, "webhooks: handling due consumer", "consumer_id", c.ID, "error", err)
				return s.clock.Now().Add(storeErrorRetry)
			}
		}
		if len(due) < dueBatch {
			break
		}
	}
	s.beat.Store(s.clock.Now().UnixNano())
	next, ok, err := s.store.NextDeadline(ctx)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			s.log.ErrorContext(ctx, "webhooks: reading next deadline", "error", err)
		}
		return s.clock.Now().Add(storeErrorRetry)
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
	c, err := e.core.update(ctx, snapshot.ID, func(c *Consumer) (change, error) {
		timedOut = nil
		before := *c
		var t tails
		if c.State == StateLive || c.State == StateIdle {
			var err error
			if t, err = e.core.readTails(ctx, streamPaths(c)); err != nil {
				return noChange, err
			}
		}
		ch = e.core.rules.onDue(c, sub, t, e.clock.Now())
		if c.Failures > before.Failures {
			timedOut = &before
		}
		return ch, nil
	})
	if timedOut != nil && err == nil {
		e.outcomes.attemptEnded(ctx, timedOut, sub, response{outcome: outcomeTimeout, failure: transportFailure(errAttemptTimeout)}, c)
	}
	if errors.Is(err, ErrConsumerNotFound) {
		return nil
	}
	return err
}
