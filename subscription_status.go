package webhooks

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A disabled subscription delivers nothing and keeps its cursors, in every
// mode: its IDLE consumers start no delivery, a wake cycle that ends does
// not start another, and a retry that comes due waits with no deadline.
// Enabling it resumes each consumer from its cursor.

// disableSubscription disables subscription id, whose webhook answered 410
// Gone, as Stripe and Svix do with such an endpoint.
func (e *Engine) disableSubscription(ctx context.Context, id, reason string) {
	sub, err := e.store.UpdateSubscription(ctx, id, func(s *Subscription) error {
		s.Status = StatusDisabled
		return nil
	})
	if err != nil {
		if !errors.Is(err, ErrSubscriptionNotFound) && ctx.Err() == nil {
			e.log.ErrorContext(ctx, "webhooks: disabling a subscription", "subscription_id", id, "error", err)
		}
		return
	}
	e.subs.update(sub)
	e.log.WarnContext(ctx, "webhooks: subscription disabled: its webhook answered 410 Gone; Engine.EnableSubscription resumes it",
		"subscription_id", id, "reason", reason)
}

// EnableSubscription makes subscription id active again and resumes each of
// its consumers from its cursor: a batch whose retry waited is sent, and
// pending work starts. It returns ErrSubscriptionNotFound if there is no
// such subscription.
func (e *Engine) EnableSubscription(ctx context.Context, id string) error {
	if err := e.checkLoaded(); err != nil {
		return err
	}
	sub, err := e.store.UpdateSubscription(ctx, id, func(s *Subscription) error {
		s.Status = StatusActive
		return nil
	})
	if err != nil {
		return err
	}
	e.subs.update(sub)
	pattern, err := ParsePattern(sub.Pattern)
	if err != nil {
		return fmt.Errorf("webhooks: stored subscription %s: %w", id, err)
	}
	streams, err := e.source.MatchStreams(ctx, pattern)
	if err != nil {
		return fmt.Errorf("webhooks: listing streams matching %s: %w", pattern, err)
	}
	var errs []error
	for _, s := range streams {
		_, err := e.update(ctx, ConsumerID(id, s.Path), func(c *Consumer) (change, error) {
			var t tails
			if c.State == StateIdle { // only a start reads the tails
				var err error
				if t, err = e.readTails(ctx, streamPaths(c)); err != nil {
					return noChange, err
				}
			}
			return e.m.resume(c, sub, t, e.clock.Now()), nil
		})
		if err != nil && !errors.Is(err, ErrConsumerNotFound) {
			errs = append(errs, fmt.Errorf("webhooks: resuming consumer of %s: %w", s.Path, err))
		}
	}
	return errors.Join(errs...)
}

// resume restarts consumer c of sub, just enabled: a retry that waited is
// sent, and an IDLE consumer starts its pending work.
func (m *machine) resume(c *Consumer, sub *Subscription, t tails, now time.Time) change {
	switch {
	case c.State == StateWaking && !c.InFlight && c.Deadline.IsZero():
		m.startAttempt(c, sub, now)
		return changeSend
	case c.State == StateIdle:
		return m.start(c, sub, t, now)
	default:
		return noChange
	}
}
