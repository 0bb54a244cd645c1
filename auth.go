package webhooks

import (
	"errors"
	"fmt"
	"net/http"
)

// Operation names what a subscription API request does, for an Authorizer.
type Operation string

// The operations of the subscription API.
const (
	OpCreate Operation = "create" // PUT {pattern}?subscription={id}
	OpRead   Operation = "read"   // GET {pattern}?subscription={id}, and its consumers, deliveries and dead letters
	OpList   Operation = "list"   // GET {pattern}?subscriptions
	OpDelete Operation = "delete" // DELETE {pattern}?subscription={id}
	OpUpdate Operation = "update" // PATCH {pattern}?subscription={id}: status and fields
	// OpOperate is an operator's action on a subscription: POST
	// {pattern}?subscription={id} with &rewind, &revive, &test or &rotate.
	OpOperate Operation = "operate"
	// OpClaim is a pull-wake worker's claim of a subscription of the
	// reserved __ds API: POST {stream root}/__ds/subscriptions/{id}/claim.
	// The protocol leaves it to the host to authorize; the other __ds
	// routes are asked as OpCreate, OpRead, OpDelete and OpUpdate.
	OpClaim Operation = "claim"
)

// Errors an Authorizer returns to refuse a request.
var (
	// ErrUnauthorized refuses a request whose caller is not authenticated:
	// 401 UNAUTHORIZED with "WWW-Authenticate: Bearer".
	ErrUnauthorized = errors.New("webhooks: unauthorized")
	// ErrForbidden refuses a request the authenticated caller may not make:
	// 403 FORBIDDEN. The engine returns it too for a tenant's subscription
	// outside the tenant's patterns (Tenancy.Patterns).
	ErrForbidden = errors.New("webhooks: forbidden")
)

// Authorizer decides whether a subscription API request may proceed. It
// sees the request (its headers, path and query), the operation, and the
// subscription ID as the query gives it, not yet validated, or "" for
// OpList. A request whose method the API does not serve is asked as
// OpRead, or OpList for a list, and answered 405 only if allowed. It
// returns nil to allow the request, an error wrapping
// ErrUnauthorized or ErrForbidden to refuse it, or any other error, which is
// logged and answered with a generic 500. The client never sees the error's
// text.
type Authorizer func(r *http.Request, op Operation, subscriptionID string) error

// WithAuthorizer makes every subscription API request pass authorize
// before anything else is done with it. Callbacks are not affected: their
// tokens authenticate them. Without this option the subscription API is
// open to anyone who can reach it, and it lists webhook URLs and deletes
// subscriptions, so the host must then protect it itself.
func WithAuthorizer(authorize Authorizer) Option {
	return func(c *config) error {
		if authorize == nil {
			return fmt.Errorf("WithAuthorizer: function is nil")
		}
		c.authorizer = authorize
		return nil
	}
}

// authorize runs the host's Authorizer on a subscription API request of
// shape s for route rt, or for none if its method is served by no route:
// then it is asked as the read of its shape, since all the request can
// learn is the methods served there.
func (e *Engine) authorize(r *http.Request, s shape, rt *route, id string) error {
	if e.cfg.authorizer == nil {
		return nil
	}
	op := OpRead
	switch {
	case rt != nil:
		op = rt.op
	case s == shapeList:
		op = OpList
	}
	if op == OpList {
		id = ""
	}
	if err := e.cfg.authorizer(r, op, id); err != nil {
		return fmt.Errorf("authorizing %s: %w", op, err)
	}
	return nil
}
