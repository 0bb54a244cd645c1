package webhooks

import (
	"context"
	"errors"
	"net/http"
	"slices"
)

// This file gives an operator's screen, such as package ui, what the
// subscription API reads and checks, as Go calls.

// Authorize runs the engine's Authorizer (WithAuthorizer) on r as operation
// op on subscription id, or "" for none. It returns nil to allow, or the
// Authorizer's error: one wrapping ErrUnauthorized or ErrForbidden refuses
// the request, any other is the Authorizer's failure. Without an
// Authorizer every request is allowed, as in the subscription API.
func (e *Engine) Authorize(r *http.Request, op Operation, id string) error {
	if e.cfg.authorizer == nil {
		return nil
	}
	return e.cfg.authorizer(r, op, id)
}

// Subscription returns subscription id as stored, with its health, or
// ErrSubscriptionNotFound, also for another tenant's than ctx's
// (WithTenant). It holds the secrets that the subscription API never
// shows: the caller must not show them either.
func (e *Engine) Subscription(ctx context.Context, id string) (*Subscription, error) {
	if err := e.checkLoaded(); err != nil {
		return nil, err
	}
	sub, err := e.store.GetSubscription(ctx, id)
	if err == nil && !visible(ctx, sub) {
		return nil, ErrSubscriptionNotFound
	}
	return sub, err
}

// Subscriptions returns every subscription as stored, of ctx's tenant
// only if it has one (WithTenant), ordered by ID, with the secrets
// Subscription warns of.
func (e *Engine) Subscriptions(ctx context.Context) ([]*Subscription, error) {
	if err := e.checkLoaded(); err != nil {
		return nil, err
	}
	subs, err := e.store.ListSubscriptions(ctx)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(subs, func(s *Subscription) bool { return !visible(ctx, s) }), nil
}

// Consumer returns consumer id as stored, or ErrConsumerNotFound, also for
// a consumer of another tenant's subscription than ctx's (WithTenant).
func (e *Engine) Consumer(ctx context.Context, id string) (*Consumer, error) {
	if err := e.checkLoaded(); err != nil {
		return nil, err
	}
	if err := e.consumerInScope(ctx, id); err != nil {
		return nil, err
	}
	return e.store.GetConsumer(ctx, id)
}

// consumerInScope returns ErrConsumerNotFound if a call with ctx may not
// see consumer id, and nil without a tenant.
func (e *Engine) consumerInScope(ctx context.Context, id string) error {
	if _, ok := TenantFromContext(ctx); !ok {
		return nil
	}
	subID, _, err := ParseConsumerID(id)
	if err != nil {
		return ErrConsumerNotFound
	}
	if err := e.inScope(ctx, subID); errors.Is(err, ErrSubscriptionNotFound) {
		return ErrConsumerNotFound
	} else if err != nil {
		return err
	}
	return nil
}
