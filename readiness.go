package webhooks

import (
	"context"
	"errors"
	"fmt"
	"time"
)

const (
	// ReadyTimeout is how long Ready waits for the Store to answer.
	ReadyTimeout = 2 * time.Second
	// StalledAfter is how long the scheduler may spend on one step, a
	// Store query or a due consumer, before Live reports it stalled.
	StalledAfter = time.Minute
)

// ErrStalled is returned by Live when the scheduler has been stuck in one
// step for StalledAfter.
var ErrStalled = errors.New("webhooks: scheduler stalled")

// errReadyTimeout ends Ready's Store query after ReadyTimeout.
var errReadyTimeout = fmt.Errorf("no answer within %v", ReadyTimeout)

// Ready reports whether the engine can serve: it returns nil once Start has
// loaded the subscriptions, while the engine runs and its Store answers a
// query within ReadyTimeout. It returns ErrNotStarted before Start,
// ErrStopped after Stop, and the Store's error otherwise. A host mounts it
// as a readiness probe.
func (e *Engine) Ready(ctx context.Context) error {
	if err := e.runState(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// The timeout runs on the engine's clock, as a delivery's does.
	timer := e.clock.AfterFunc(ReadyTimeout, func() { cancel(errReadyTimeout) })
	defer timer.Stop()
	if _, _, err := e.store.NextDeadline(ctx); err != nil {
		if cause := context.Cause(ctx); cause != nil {
			err = cause
		}
		return fmt.Errorf("webhooks: store unreachable: %w", err)
	}
	return nil
}

// Live reports whether the engine's scheduler is making progress: nil
// while it waits for work or has spent less than StalledAfter on its
// current step, ErrStalled otherwise. Like Ready, it returns ErrNotStarted
// before Start and ErrStopped after Stop. A host mounts it as a liveness
// probe: a stalled scheduler delivers nothing until the process restarts.
func (e *Engine) Live() error {
	if err := e.runState(); err != nil {
		return err
	}
	if e.sched.stalled(e.clock.Now(), StalledAfter) {
		return ErrStalled
	}
	return nil
}

// runState returns ErrStopped after Stop, ErrNotStarted before Start has
// loaded the subscriptions, and nil while the engine runs.
func (e *Engine) runState() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.stopped:
		return ErrStopped
	case !e.running:
		return ErrNotStarted
	}
	return nil
}
