package webhooks

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// Defaults of WithCircuitBreaker.
const (
	// DefaultBreakerFailures is how many delivery attempts to a
	// subscription's webhook must fail in a row, across its consumers,
	// before the engine disables it: none, since a count that suits one
	// subscription's traffic trips another's on a short outage.
	DefaultBreakerFailures = 0
	// DefaultBreakerFailingFor is how long they must fail without a
	// success before it does: five days, past the three after which a
	// wake consumer becomes a dead letter.
	DefaultBreakerFailingFor = 5 * 24 * time.Hour
)

// DefaultMaxRetryAfter caps the wait a webhook's Retry-After header can
// ask for; see WithMaxRetryAfter.
const DefaultMaxRetryAfter = time.Hour

// healthResolution is how stale a subscription's LastSuccessAt may get: a
// success writes the health only if the last one it knows of is older, or
// if it ends a run of failures, so that a busy subscription does not
// write it at every delivery.
const healthResolution = time.Second

// SubscriptionDisabled tells the host that the engine disabled a
// subscription (WithSubscriptionDisabledHook).
type SubscriptionDisabled struct {
	SubscriptionID string
	// Reason says why: its webhook answered 410 Gone, or its failures
	// tripped the circuit breaker.
	Reason string
	// Health is the subscription's health when it was disabled.
	Health SubscriptionHealth
}

// successes remembers, per subscription, the last success this engine
// wrote into its health, so that it writes at most one a
// healthResolution unless a failure came between.
type successes struct {
	mu      sync.Mutex
	written map[string]time.Time
}

// due reports whether a success of subscription id at now should be
// written, and if so, notes that it is.
func (s *successes) due(id string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if last, ok := s.written[id]; ok && now.Sub(last) < healthResolution {
		return false
	}
	if s.written == nil {
		s.written = make(map[string]time.Time)
	}
	s.written[id] = now
	return true
}

// forget makes the next success of subscription id be written: a failure
// began a run that it must end.
func (s *successes) forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.written, id)
}

// recordHealth adds an attempt of sub that ended at now, failed with f or
// succeeded if f is nil, to its health, and trips the circuit breaker if
// the failures have gone on too long; a 410 Gone disables sub at once.
// A success ends only a run of failures that began before it ended: its
// write may land after the next attempt's, which its cursor move let start.
// A failure that ended at the same instant counts as later.
func (o *outcomes) recordHealth(ctx context.Context, sub *Subscription, f *deliveryFailure, now time.Time) {
	if f == nil && !o.successes.due(sub.ID, now) {
		return
	}
	if f != nil {
		o.successes.forget(sub.ID)
	}
	h, err := o.store.UpdateHealth(ctx, sub.ID, func(h *SubscriptionHealth) {
		if f == nil {
			if !h.FailingSince.IsZero() && !h.FailingSince.Before(now) {
				// The run began after this success ended: its cursor move
				// let the next attempt start, fail and record first.
				// Ending the run would trip the breaker a failure late.
				h.LastSuccessAt = later(h.LastSuccessAt, now)
				return
			}
			h.ConsecutiveFailures, h.FailingSince, h.LastSuccessAt = 0, time.Time{}, now
			return
		}
		h.ConsecutiveFailures++
		h.LastFailureAt, h.LastFailureReason = now, f.reason()
		if h.FailingSince.IsZero() {
			h.FailingSince = now
		}
	})
	if err != nil {
		if !errors.Is(err, ErrSubscriptionNotFound) && ctx.Err() == nil {
			o.log.ErrorContext(ctx, "webhooks: recording a subscription's health", "subscription_id", sub.ID, "error", err)
		}
		return
	}
	if f == nil {
		return
	}
	switch b := o.breaker; {
	case f.status == http.StatusGone:
		o.disable(ctx, sub.ID, "its webhook answered 410 Gone")
	case b.failures > 0 && h.ConsecutiveFailures >= b.failures:
		o.disable(ctx, sub.ID, fmt.Sprintf("circuit breaker: %d delivery attempts failed in a row", h.ConsecutiveFailures))
	case b.failingFor > 0 && now.Sub(h.FailingSince) >= b.failingFor:
		o.disable(ctx, sub.ID, fmt.Sprintf("circuit breaker: deliveries have failed since %s", h.FailingSince.Format(time.RFC3339)))
	}
}

// disable disables active subscription id, for reason, and tells the host
// through its hook. Of the engines that may race to disable it, only the
// one whose write made the change logs, counts and calls the hook.
func (o *outcomes) disable(ctx context.Context, id, reason string) {
	changed := false
	sub, err := o.store.UpdateSubscription(ctx, id, func(s *Subscription) error {
		changed = s.status() == StatusActive
		if changed {
			s.Status, s.UpdatedAt = StatusDisabled, o.clock.Now()
		}
		return nil
	})
	if err != nil {
		if !errors.Is(err, ErrSubscriptionNotFound) && ctx.Err() == nil {
			o.log.ErrorContext(ctx, "webhooks: disabling a subscription", "subscription_id", id, "error", err)
		}
		return
	}
	o.updated(sub)
	if !changed {
		return
	}
	o.tel.disabled(ctx)
	o.log.WarnContext(ctx, "webhooks: subscription disabled; its cursors are kept, and resuming it delivers from them",
		"subscription_id", id, "reason", reason, "consecutive_failures", sub.Health.ConsecutiveFailures)
	if hook := o.disabledHook; hook != nil {
		hook(ctx, SubscriptionDisabled{SubscriptionID: id, Reason: reason, Health: sub.Health})
	}
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
