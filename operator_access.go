package webhooks

import (
	"context"
	"net/http"
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
// ErrSubscriptionNotFound. It holds the secrets that the subscription API
// never shows: the caller must not show them either.
func (e *Engine) Subscription(ctx context.Context, id string) (*Subscription, error) {
	if err := e.checkLoaded(); err != nil {
		return nil, err
	}
	return e.store.GetSubscription(ctx, id)
}

// Subscriptions returns every subscription as stored, ordered by ID, with
// the secrets Subscription warns of.
func (e *Engine) Subscriptions(ctx context.Context) ([]*Subscription, error) {
	if err := e.checkLoaded(); err != nil {
		return nil, err
	}
	return e.store.ListSubscriptions(ctx)
}

// Consumer returns consumer id as stored, or ErrConsumerNotFound.
func (e *Engine) Consumer(ctx context.Context, id string) (*Consumer, error) {
	if err := e.checkLoaded(); err != nil {
		return nil, err
	}
	return e.store.GetConsumer(ctx, id)
}
