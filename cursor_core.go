package webhooks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/benbjohnson/clock"
)

// cursorCore runs the cursor machine's transitions against the Store: each
// is one UpdateConsumer, its tails read from the source inside it. It
// hands what a transition started to the attempt pipeline, and a deadline
// to the scheduler, through the two functions the engine wires in; it
// knows neither.
type cursorCore struct {
	store  Store
	source StreamSource
	clock  clock.Clock
	log    *slog.Logger
	tel    *telemetry
	rules  cursorMachine
	// started sends the attempt a stored transition started; deadline
	// wakes the scheduler for a consumer's deadline; written signals a
	// test.
	started  func(c *Consumer)
	deadline func(at time.Time)
	written  func()
}

// readTails asks the source about each path once. Paths with no stream are
// left out. Any other failure of the source is marked ErrStoreUnavailable:
// the read may succeed later, so the engine retries what needed it, and its
// APIs answer 503, not 500.
func (k *cursorCore) readTails(ctx context.Context, paths []string) (tails, error) {
	t := make(tails, len(paths))
	for _, p := range paths {
		if _, seen := t[p]; seen {
			continue
		}
		info, err := k.source.Stream(ctx, p)
		if errors.Is(err, ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading stream %s: %w: %w", p, ErrStoreUnavailable, err)
		}
		t[p] = info
	}
	return t, nil
}

// update runs one atomic transition of a consumer through the Store,
// stamping UpdatedAt, counting wakes, sending the delivery attempt the
// transition started, and waking the scheduler when the consumer has a
// deadline.
func (k *cursorCore) update(ctx context.Context, id string, fn func(c *Consumer) (change, error)) (*Consumer, error) {
	var (
		before    int64
		wasFailed bool
		ch        change
	)
	c, err := k.store.UpdateConsumer(ctx, id, func(c *Consumer) (UpdateAction, error) {
		before, wasFailed = c.Epoch, c.State == StateFailed
		var err error
		ch, err = fn(c)
		action := ch.action()
		if action == UpdateSave {
			c.UpdatedAt = k.clock.Now()
		}
		return action, err
	})
	k.written()
	if err != nil || c == nil {
		return c, err
	}
	if c.Epoch > before {
		k.tel.started(ctx, c)
	}
	if c.State == StateFailed && !wasFailed {
		k.log.InfoContext(ctx, deadLetterMsg,
			"consumer_id", c.ID, "attempts", c.Attempt, "failing_since", c.FailingSince, "last_error", c.LastError)
	}
	if ch == changeSend {
		k.started(c)
	}
	if !c.Deadline.IsZero() {
		k.deadline(c.Deadline)
	}
	return c, nil
}

// record applies outcome r of an attempt of c through mech, the mechanism
// of sub, as the engine's set now holds it. It returns the consumer as
// stored afterwards, nil if there is none, and whether the outcome changed
// it: an outcome of an attempt that has already ended changes nothing.
func (k *cursorCore) record(ctx context.Context, c *Consumer, mech mechanism, sub *Subscription, r attemptResult) (stored *Consumer, applied bool, err error) {
	stored, err = k.update(ctx, c.ID, func(cur *Consumer) (change, error) {
		var t tails
		if r.needsTails() {
			var err error
			if t, err = k.readTails(ctx, streamPaths(cur)); err != nil {
				return noChange, err
			}
		}
		ch := mech.apply(&k.rules, cur, sub, r, t, k.clock.Now())
		applied = ch != noChange
		return ch, nil
	})
	if err != nil {
		applied = false
	}
	if err != nil && !errors.Is(err, ErrConsumerNotFound) && ctx.Err() == nil {
		// After Stop the attempt stays in flight and times out.
		k.log.ErrorContext(ctx, "webhooks: recording a delivery outcome", "consumer_id", c.ID, "error", err)
	}
	return stored, applied, err
}

// startPending starts delivering the pending work of consumer id, of sub,
// if it is IDLE.
func (k *cursorCore) startPending(ctx context.Context, id string, sub *Subscription) error {
	_, err := k.update(ctx, id, func(c *Consumer) (change, error) {
		if c.State != StateIdle {
			return noChange, nil
		}
		t, err := k.readTails(ctx, streamPaths(c))
		if err != nil {
			return noChange, err
		}
		return k.rules.start(c, sub, t, k.clock.Now()), nil
	})
	if errors.Is(err, ErrConsumerNotFound) {
		return nil
	}
	return err
}
