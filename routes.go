package webhooks

import (
	"context"
	"net/http"
	"net/url"
	"strings"
)

// shape is the path and query shape at which routes are served.
type shape int

const (
	// shapeList is {pattern}?subscriptions, or any query without
	// subscription.
	shapeList shape = iota
	// shapeSubscription is {pattern}?subscription={id}, and at most one
	// more query parameter naming an operator route.
	shapeSubscription
	// shapeCallback is {callback base}/callback/{consumer id}.
	shapeCallback
	// shapeReserved is {stream root}/__ds/…, the upstream protocol's
	// reserved API (reserved_api.go); query names the operation there.
	shapeReserved
)

// route is one operation of the engine's APIs.
type route struct {
	shape shape
	// query is the query parameter that names the operation beside
	// subscription={id}, or "" for the subscription itself.
	query  string
	method string
	// op is what the Authorizer is asked; callbacks have none: their
	// tokens authenticate them.
	op Operation
	// serve answers the request; callbacks are served by serveCallback.
	serve func(e *Engine, ctx context.Context, r *http.Request, at target) (int, any, error)
	// serveDS answers a request of shapeReserved.
	serveDS func(e *Engine, ctx context.Context, r *http.Request, at dsTarget) (int, any, error)
}

// target is what a subscription API request names: the pattern of its
// path, and the subscription ID of its query, "" for a list.
type target struct {
	pattern *Pattern
	id      string
}

// routes is the one table of the APIs' operations: the Authorizer, the
// handlers and telemetry read it. Of a subscription's operator routes, the
// first whose query parameter a request has is the one it asks for;
// "consumer" comes last because deliveries takes &consumer= too. A request
// that no route serves is authorized as the read of its shape (OpList or
// OpRead) and then answered 405 with the methods served there, whether or
// not its subscription exists.
var routes = []route{
	{shapeList, "subscriptions", http.MethodGet, OpList, (*Engine).listSubscriptions, nil},

	{shapeSubscription, "", http.MethodGet, OpRead, (*Engine).getSubscription, nil},
	{shapeSubscription, "", http.MethodPut, OpCreate, (*Engine).createSubscription, nil},
	{shapeSubscription, "", http.MethodPatch, OpUpdate, (*Engine).patchSubscription, nil},
	{shapeSubscription, "", http.MethodDelete, OpDelete, (*Engine).deleteSubscription, nil},

	// GET   {pattern}?subscription={id}&consumers                   list consumers: &state= &limit= &cursor=
	{shapeSubscription, "consumers", http.MethodGet, OpRead, onSubscription((*Engine).listConsumers), nil},
	// GET   {pattern}?subscription={id}&deliveries&consumer={cid}   its latest delivery attempts
	{shapeSubscription, "deliveries", http.MethodGet, OpRead, onSubscription((*Engine).listDeliveries), nil},
	// POST  {pattern}?subscription={id}&rewind                      {"offset": "-1"|offset, "consumer": cid}
	{shapeSubscription, "rewind", http.MethodPost, OpOperate, onSubscription((*Engine).rewindRequest), nil},
	// GET   {pattern}?subscription={id}&dead                        list dead letters, paged as consumers
	{shapeSubscription, "dead", http.MethodGet, OpRead, onSubscription((*Engine).listDeadLetters), nil},
	// POST  {pattern}?subscription={id}&revive                      {"consumer": cid}
	{shapeSubscription, "revive", http.MethodPost, OpOperate, onSubscription((*Engine).reviveRequest), nil},
	// POST  {pattern}?subscription={id}&test                        send a signed test delivery
	{shapeSubscription, "test", http.MethodPost, OpOperate, onSubscription((*Engine).testRequest), nil},
	// POST  {pattern}?subscription={id}&rotate                      {"overlap_ms": n}: a new secret
	{shapeSubscription, "rotate", http.MethodPost, OpOperate, onSubscription((*Engine).rotateRequest), nil},
	// POST  {pattern}?subscription={id}&verify                      verify a pending subscription by hand
	{shapeSubscription, "verify", http.MethodPost, OpOperate, onSubscription((*Engine).verifyRequest), nil},
	// POST  {pattern}?subscription={id}&challenge                   restart a pending subscription's challenge
	{shapeSubscription, "challenge", http.MethodPost, OpOperate, onSubscription((*Engine).challengeRequest), nil},
	// GET   {pattern}?subscription={id}&consumer={cid}              get one consumer
	{shapeSubscription, "consumer", http.MethodGet, OpRead, onSubscription((*Engine).getConsumer), nil},

	{shapeCallback, "", http.MethodPost, "", nil, nil},

	// The reserved __ds API under the stream root. Callbacks, acks and
	// releases carry their tokens; the JWKS is public; claim is the
	// host's to authorize.
	{shapeReserved, "subscription", http.MethodPut, OpCreate, nil, (*Engine).putDSSubscription},
	{shapeReserved, "subscription", http.MethodGet, OpRead, nil, (*Engine).getDSSubscription},
	{shapeReserved, "subscription", http.MethodDelete, OpDelete, nil, (*Engine).deleteDSSubscription},
	{shapeReserved, "streams", http.MethodPost, OpUpdate, nil, (*Engine).addDSStreams},
	{shapeReserved, "stream", http.MethodDelete, OpUpdate, nil, (*Engine).removeDSStream},
	{shapeReserved, "callback", http.MethodPost, "", nil, (*Engine).dsAck},
	{shapeReserved, "claim", http.MethodPost, OpClaim, nil, (*Engine).dsClaim},
	{shapeReserved, "ack", http.MethodPost, "", nil, (*Engine).dsAck},
	{shapeReserved, "release", http.MethodPost, "", nil, (*Engine).dsRelease},
	{shapeReserved, "jwks", http.MethodGet, "", nil, nil},
	{shapeReserved, "jwks", http.MethodHead, "", nil, nil},
}

// onSubscription serves an operator route on the subscription the request
// names, if the request's pattern matches its pattern.
func onSubscription(serve func(e *Engine, ctx context.Context, r *http.Request, sub *Subscription) (int, any, error)) func(*Engine, context.Context, *http.Request, target) (int, any, error) {
	return func(e *Engine, ctx context.Context, r *http.Request, at target) (int, any, error) {
		sub, err := e.findSubscription(ctx, at.pattern, at.id)
		if err != nil {
			return 0, nil, err
		}
		return serve(e, ctx, r, sub)
	}
}

// shapeOf is the shape of a subscription API request.
func shapeOf(q url.Values) shape {
	if q.Has("subscription") {
		return shapeSubscription
	}
	return shapeList
}

// operationName is the query parameter that names the operation a request
// of shape s asks for: the first in the table that q has, or "".
func operationName(s shape, q url.Values) string {
	if s == shapeList {
		return "subscriptions"
	}
	for i := range routes {
		if rt := &routes[i]; rt.shape == s && rt.query != "" && q.Has(rt.query) {
			return rt.query
		}
	}
	return ""
}

// findRoute returns the route of shape s named name for method, or nil and
// the methods served there.
func findRoute(s shape, name, method string) (*route, string) {
	var allow []string
	for i := range routes {
		rt := &routes[i]
		if rt.shape != s || rt.query != name {
			continue
		}
		if rt.method == method {
			return rt, ""
		}
		allow = append(allow, rt.method)
	}
	return nil, strings.Join(allow, ", ")
}

// isSubscriptionRequest reports whether r is for the subscription API: its
// query names a subscription or asks for a list.
func isSubscriptionRequest(r *http.Request) bool {
	// Most requests a host routes through Handler are stream reads; skip
	// parsing their query unless it can name the subscription API.
	if !strings.Contains(r.URL.RawQuery, "subscription") {
		return false
	}
	q := r.URL.Query()
	return q.Has("subscription") || q.Has("subscriptions")
}
