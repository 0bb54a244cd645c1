package webhooks_test

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/receiver"
)

// routeTarget is a request target that asks for rt on subscription id.
func routeTarget(rt webhooks.Route, id string) string {
	switch rt.Shape {
	case "list":
		return "/**?subscriptions"
	case "callback":
		return "/callback/" + agentAID
	case "reserved":
		switch rt.Query {
		case "jwks":
			return "/__ds/jwks.json"
		case "subscription":
			return "/__ds/subscriptions/" + id
		case "stream":
			return "/__ds/subscriptions/" + id + "/streams/manual%2Fa"
		}
		return "/__ds/subscriptions/" + id + "/" + rt.Query
	}
	target := "/agents/*?subscription=" + id
	switch rt.Query {
	case "":
	case "deliveries":
		target += "&deliveries&consumer=" + agentAID
	case "consumer":
		target += "&consumer=" + agentAID
	default:
		target += "&" + rt.Query
	}
	return target
}

// routeBody is a body that rt would accept.
func routeBody(rt webhooks.Route, h *harness) string {
	switch {
	case rt.Shape == "reserved" && rt.Method == http.MethodPut:
		return `{"type":"webhook","streams":["manual/a"],"webhook":{"url":"` + h.recv.url() + `"}}`
	case rt.Query == "streams":
		return `{"streams":["manual/b"]}`
	case rt.Query == "claim":
		return `{"worker":"w1"}`
	case rt.Query == "callback" || rt.Query == "ack" || rt.Query == "release":
		return `{"wake_id":"w_1","generation":1}`
	case rt.Method == http.MethodPut:
		return subBody(h.recv.url(), "")
	case rt.Method == http.MethodPatch:
		return `{"status":"paused"}`
	case rt.Query == "rewind":
		return `{"offset":"-1"}`
	case rt.Query == "revive":
		return `{"consumer":"` + agentAID + `"}`
	case rt.Shape == "callback":
		return `{"epoch":1,"done":true}`
	}
	return ""
}

// Every route of the table is refused by a refusing Authorizer, which is
// asked the route's operation, and changes nothing; callbacks, which
// their tokens authenticate, are refused without one.
func TestEveryRouteIsRefusedByARefusingAuthorizer(t *testing.T) {
	rec := &authRecorder{}
	h, srv := newAuthServer(t, rec)
	h.wake("s1", "/agents/*", agentA)
	before := h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive && !c.InFlight })
	subBefore, err := h.store.GetSubscription(context.Background(), "s1")
	require.NoError(t, err)
	rec.taken()
	rec.refuseWith(webhooks.ErrUnauthorized)

	routes := webhooks.Routes()
	require.NotEmpty(t, routes)
	for _, rt := range routes {
		target := routeTarget(rt, "s1")
		resp, body := authSend(t, srv, rt.Method, target, routeBody(rt, h))
		if rt.Shape == "reserved" && rt.Query == "jwks" {
			require.Equal(t, http.StatusOK, resp.StatusCode, "the JWKS is public")
			require.Empty(t, rec.taken(), "the JWKS asked the Authorizer")
			continue
		}
		if rt.Shape == "callback" || rt.Shape == "reserved" && rt.Op == "" {
			subRequireError(t, http.StatusUnauthorized, receiver.CodeTokenInvalid, resp.StatusCode, body, resp.Header.Get("Content-Type"))
			require.Empty(t, rec.taken(), "a callback asked the Authorizer")
			continue
		}
		subRequireError(t, http.StatusUnauthorized, receiver.ErrorCode("UNAUTHORIZED"), resp.StatusCode, body, resp.Header.Get("Content-Type"))
		path, _, _ := strings.Cut(target, "?")
		path, err := url.PathUnescape(path)
		require.NoError(t, err)
		id := "s1"
		if rt.Op == webhooks.OpList {
			id = ""
		}
		require.Equal(t, []authCall{{rt.Method, path, rt.Op, id}}, rec.taken(), "%s %s", rt.Method, target)
	}
	sub, err := h.store.GetSubscription(context.Background(), "s1")
	require.NoError(t, err)
	// Health is written by the wake's delivery, not by the refused requests.
	sub.Health, subBefore.Health = webhooks.SubscriptionHealth{}, webhooks.SubscriptionHealth{}
	require.Equal(t, subBefore, sub)
	require.Equal(t, before, h.consumer(agentAID))
}

// unservedMethods are the methods that no route of rt's shape and query
// serves.
func unservedMethods(rt webhooks.Route) []string {
	served := map[string]bool{}
	for _, o := range webhooks.Routes() {
		if o.Shape == rt.Shape && o.Query == rt.Query {
			served[o.Method] = true
		}
	}
	var out []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodTrace, "PROPFIND"} {
		if !served[m] {
			out = append(out, m)
		}
	}
	return out
}

// tokenRoute reports whether rt is authenticated by a token, or public:
// the Authorizer is never asked about it.
func tokenRoute(rt webhooks.Route) bool {
	return rt.Shape == "callback" || rt.Shape == "reserved" && rt.Op == ""
}

// A method that no route serves tells a caller the Authorizer refuses
// nothing about which subscriptions exist: it is refused as any request
// is. Allowed, it is answered 405 with the methods served there, the same
// for a subscription that exists and one that does not.
func TestUnservedMethodsLeakNothingWithoutAuthorization(t *testing.T) {
	rec := &authRecorder{}
	h, _ := newAuthServer(t, rec)
	h.wake("s1", "/agents/*", agentA)
	rec.taken()
	seen := map[string]bool{}
	for _, rt := range webhooks.Routes() {
		if seen[rt.Shape+"?"+rt.Query] {
			continue
		}
		seen[rt.Shape+"?"+rt.Query] = true
		for _, method := range unservedMethods(rt) {
			for _, allowed := range []bool{false, true} {
				if allowed {
					rec.verdict.Store(nil)
				} else {
					rec.refuseWith(webhooks.ErrUnauthorized)
				}
				var answers []string
				for _, id := range []string{"s1", "nope"} {
					target := routeTarget(rt, id)
					r := h.do(method, target, "")
					want := http.StatusUnauthorized
					if allowed || tokenRoute(rt) {
						want = http.StatusMethodNotAllowed
					}
					require.Equal(t, want, r.Code, "%s %s: %s", method, target, r.Body.String())
					if want == http.StatusMethodNotAllowed {
						require.NotEmpty(t, r.Header().Get("Allow"), "%s %s", method, target)
						require.NotContains(t, r.Header().Get("Allow"), method, "%s %s", method, target)
					}
					answers = append(answers, r.Header().Get("Allow")+" "+r.Body.String())
				}
				require.Equal(t, answers[0], answers[1], "%s %s: a subscription that exists is told apart", method, rt.Query)
				calls := rec.taken()
				if tokenRoute(rt) {
					require.Empty(t, calls)
					continue
				}
				require.Len(t, calls, 2, "%s %s was not authorized", method, rt.Query)
				wantOp := webhooks.OpRead
				if rt.Shape == "list" {
					wantOp = webhooks.OpList
				}
				require.True(t, slices.ContainsFunc(calls, func(c authCall) bool { return c.op == wantOp }))
			}
		}
	}
}
