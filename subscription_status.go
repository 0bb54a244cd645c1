package webhooks

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A paused or disabled subscription delivers nothing and keeps its
// cursors, in every mode: its IDLE consumers start no delivery, a wake
// cycle that ends does not start another, a retry that comes due waits
// with no deadline, and deliveries already in flight finish. Resuming it
// resumes each consumer from its cursor.

// immutable says why a change to a field no update may make is refused.
const immutable = "id, pattern, delivery, signature, secret, tenant and status cannot be changed by an update; delete and re-create the subscription, rotate its secret, or pause or resume it"

// PauseSubscription pauses subscription id: its consumers start no new
// delivery until ResumeSubscription. It returns the subscription as
// stored, ErrSubscriptionNotFound, also for another tenant's than ctx's
// (WithTenant), as every call on a subscription does, or, for a
// subscription pending verification, an error wrapping
// ErrPendingVerification.
func (e *Engine) PauseSubscription(ctx context.Context, id string) (*Subscription, error) {
	if err := e.checkLoaded(); err != nil {
		return nil, err
	}
	if err := e.inScope(ctx, id); err != nil {
		return nil, err
	}
	sub, err := e.store.UpdateSubscription(ctx, id, func(s *Subscription) error {
		if s.status() == StatusPending {
			return detail(ErrPendingVerification, "subscription %s is pending verification; verify it first", id)
		}
		if s.status() != StatusPaused {
			s.Status, s.UpdatedAt = StatusPaused, e.clock.Now()
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	e.subs.update(sub)
	e.tel.operated(ctx, "pause")
	return sub, nil
}

// ResumeSubscription makes paused or disabled subscription id active
// again and resumes each of its consumers from its cursor: a retry that
// waited is sent, and pending work starts. Dead letters stay dead
// (ResumeConsumer). Resuming also ends the subscription's failure run, so
// that the circuit breaker gives it a fresh count. It returns the
// subscription as stored, ErrSubscriptionNotFound, or, for a subscription
// pending verification, an error wrapping ErrPendingVerification
// (VerifySubscription activates that one).
func (e *Engine) ResumeSubscription(ctx context.Context, id string) (*Subscription, error) {
	if err := e.checkLoaded(); err != nil {
		return nil, err
	}
	if err := e.inScope(ctx, id); err != nil {
		return nil, err
	}
	if _, err := e.store.UpdateHealth(ctx, id, func(h *SubscriptionHealth) {
		h.ConsecutiveFailures, h.FailingSince = 0, time.Time{}
	}); err != nil {
		return nil, err
	}
	sub, err := e.store.UpdateSubscription(ctx, id, func(s *Subscription) error {
		if s.status() == StatusPending {
			return detail(ErrPendingVerification, "subscription %s is pending verification; verify it first", id)
		}
		if s.status() != StatusActive {
			s.Status, s.UpdatedAt = StatusActive, e.clock.Now()
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	e.subs.update(sub)
	e.tel.operated(ctx, "resume")
	return sub, e.resumeConsumers(ctx, sub)
}

// resumeConsumers resumes each consumer of sub, just made active, from its
// cursor.
func (e *Engine) resumeConsumers(ctx context.Context, sub *Subscription) error {
	return e.eachConsumer(ctx, sub.ID, "", func(c *Consumer) error {
		_, err := e.core.update(ctx, c.ID, func(c *Consumer) (change, error) {
			var t tails
			if c.State == StateIdle { // only a start reads the tails
				var err error
				if t, err = e.core.readTails(ctx, streamPaths(c)); err != nil {
					return noChange, err
				}
			}
			return e.core.rules.resume(c, sub, t, e.clock.Now()), nil
		})
		return err
	})
}

// UpdateSubscription changes subscription id by fn, which may change its
// webhook, name, description and options, and returns it as stored, with
// UpdatedAt the time of the change. The result
// is checked as a create's is, the webhook URL by the engine's policy too;
// an invalid one changes nothing and returns the error, as does an fn that
// changes the ID, pattern, delivery mode, signature scheme, secrets,
// tenant, status or verification. A pending subscription whose webhook
// changes starts its verification again, at the new one. Cursors
// are kept; a batch in flight keeps the limits it started with. It returns
// ErrSubscriptionNotFound if there is no such subscription.
func (e *Engine) UpdateSubscription(ctx context.Context, id string, fn func(s *Subscription) error) (*Subscription, error) {
	if err := e.checkLoaded(); err != nil {
		return nil, err
	}
	rechallenge := false
	sub, err := e.store.UpdateSubscription(ctx, id, func(s *Subscription) error {
		if !visible(ctx, s) {
			return ErrSubscriptionNotFound
		}
		before := s.Clone()
		if err := fn(s); err != nil {
			return err
		}
		if field := immutableField(before, s); field != "" {
			return invalid(field, "%s", immutable)
		}
		s.UpdatedAt = e.clock.Now()
		// A pending subscription's new webhook is the one to verify.
		rechallenge = s.status() == StatusPending && s.Webhook != before.Webhook
		if rechallenge {
			s.Verification = newVerification(s.UpdatedAt)
		}
		return e.validate(s)
	})
	if err != nil {
		return nil, err
	}
	e.subs.update(sub)
	e.tel.operated(ctx, "update")
	if rechallenge {
		e.verifier.kickNow()
	}
	return sub, nil
}

// eachConsumer calls fn with each consumer of subscription id, in state if
// it is set, a page at a time. It goes on past a consumer that is gone,
// and returns the other errors joined.
func (e *Engine) eachConsumer(ctx context.Context, id string, state ConsumerState, fn func(c *Consumer) error) error {
	var errs []error
	p := &ListConsumersParams{SubscriptionID: id, State: state, Limit: consumerPage}
	for {
		page, err := e.store.ListConsumers(ctx, p)
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("webhooks: listing the consumers of %s: %w", id, err))...)
		}
		for _, c := range page {
			if err := fn(c); err != nil && !errors.Is(err, ErrConsumerNotFound) {
				errs = append(errs, fmt.Errorf("webhooks: consumer %s: %w", c.ID, err))
			}
		}
		if len(page) < p.Limit {
			return errors.Join(errs...)
		}
		p.After = page[len(page)-1].ID
	}
}

// consumerPage is how many consumers the engine reads from the Store at a
// time when it acts on all of a subscription's.
const consumerPage = 500

// resume restarts consumer c of sub, just resumed: a retry that waited is
// sent, unless its failures have outlasted the retry policy meanwhile, and
// an IDLE consumer starts its pending work.
func (m *cursorMachine) resume(c *Consumer, sub *Subscription, t tails, now time.Time) change {
	switch {
	case c.State == stateDelivering && !c.InFlight && c.Deadline.IsZero():
		mech := mechanismOf(sub)
		if m.tooOld(c, m.retryPolicyOf(sub, mech), now) {
			return m.deadLetter(c)
		}
		m.startAttempt(c, sub, mech, now)
		return changeSend
	case c.State == StateIdle:
		return m.start(c, sub, t, now)
	default:
		return noChange
	}
}

// immutableField names the first field that no update may change and that
// fn changed from before to after, or "" if it changed none.
func immutableField(before, after *Subscription) string {
	switch {
	case after.ID != before.ID:
		return "id"
	case after.Pattern != before.Pattern:
		return "pattern"
	case after.Delivery.orDefault() != before.Delivery.orDefault() || (after.Events == nil) != (before.Events == nil):
		return "delivery"
	case after.signature() != before.signature():
		return "signature"
	case after.status() != before.status() || !sameVerification(after.Verification, before.Verification):
		return "status"
	case after.Tenant != before.Tenant:
		return "tenant"
	case after.Secret != before.Secret || after.PreviousSecret != before.PreviousSecret ||
		!after.PreviousSecretExpiresAt.Equal(before.PreviousSecretExpiresAt):
		return "secret"
	default:
		return ""
	}
}

// sameVerification reports whether a and b are the same verification.
func sameVerification(a, b *Verification) bool {
	return (a == nil) == (b == nil) && (a == nil || (a.Attempts == b.Attempts && a.NextAttemptAt.Equal(b.NextAttemptAt) &&
		a.ExpiresAt.Equal(b.ExpiresAt) && a.LastError == b.LastError))
}
