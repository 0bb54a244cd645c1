package webhooks_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
)

// A filter expression sends only the events it holds for: comparisons,
// in, startsWith, has() and boolean logic over the event's JSON fields,
// and dotted event types by matchesPattern. An event that is not a JSON
// object, or on which the expression fails (a missing field compared), is
// skipped; columns send only the named fields of what passes.
func TestPushFilterExpression(t *testing.T) {
	h := newHarness(t)
	h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0,"max_size":20},
		"filter":{"expression":"event.type.matchesPattern(\"order.*\") && event.total > 100 && event.status in ['pending','paid'] && event.id.startsWith('o-') && !has(event.test)"},
		"columns":["id","total","customer.name"]`)
	skipped := h.push("/orders/1",
		`{"type":"order.created","total":50,"status":"pending","id":"o-1"}`,
		`{"type":"order.created.late","total":500,"status":"pending","id":"o-2"}`,
		`{"type":"refund.created","total":500,"status":"pending","id":"o-3"}`,
		`{"type":"order.created","total":500,"status":"void","id":"o-4"}`,
		`{"type":"order.created","total":500,"status":"paid","id":"x-5"}`,
		`{"type":"order.created","total":500,"status":"paid","id":"o-6","test":true}`,
		`{"type":"order.created","status":"paid","id":"o-7"}`,
		`[1]`, `"order.created"`, `null`,
	)
	h.waitCursor(ordersID, skipped)
	h.faultRequireNoDelivery()

	tail := h.push("/orders/1",
		`{"type":"order.created","total":101,"status":"pending","id":"o-8","customer":{"name":"Ada","email":"a@x"},"secret":"s"}`,
		`{"type":"order.paid","total":100.5,"status":"paid","id":"o-9"}`,
	)
	_, p := h.nextBatch()
	require.Equal(t, []string{
		`{"customer":{"name":"Ada"},"id":"o-8","total":101}`,
		`{"id":"o-9","total":100.5}`,
	}, eventStrings(p), "only what passes, with only its columns")
	require.Equal(t, skipped, p.FirstOffset)
	h.waitCursor(ordersID, tail)
}

// The expression and the glob filter both apply when both are given.
func TestPushFilterExpressionWithPatterns(t *testing.T) {
	h := newHarness(t)
	h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0,"max_size":5},
		"filter":{"field":"type","patterns":["order.*"],"expression":"event.n >= 2"}`)
	tail := h.push("/orders/1", `{"type":"order.a","n":1}`, `{"type":"user.a","n":3}`, `{"type":"order.b","n":2}`)
	_, p := h.nextBatch()
	require.Equal(t, []string{`{"type":"order.b","n":2}`}, eventStrings(p))
	h.waitCursor(ordersID, tail)
}

// A bad expression is refused at create and at PATCH with 400 naming
// filter.expression and the compiler's problem; Go callers get a
// *ValidationError of that field.
func TestFilterExpressionRefused(t *testing.T) {
	h := newHarness(t)
	for expr, problem := range map[string]string{
		`event.total >`:                                  "Syntax error",
		`event.total + 1`:                                "must be a boolean",
		`nope == 1`:                                      "undeclared reference to 'nope'",
		`event.type.matchesPattern("a.**.b")`:            "'**' may only be the last segment",
		`event.type.matchesPattern(event.p)`:             "takes a string literal",
		`event.type.matchesPattern(1)`:                   "found no matching overload",
		`"` + strings.Repeat("a", 5000) + `" == event.a`: "longer than 4096",
	} {
		body := fmt.Sprintf(`{"webhook":%q,"delivery":"events","filter":{"expression":%q}}`, h.recv.url(), expr)
		rec := h.do(http.MethodPut, "/orders/*?subscription=s1", body)
		require.Equal(t, http.StatusBadRequest, rec.Code, "%s: %s", expr, rec.Body.String())
		require.Contains(t, rec.Body.String(), "filter.expression", expr)
		require.Contains(t, rec.Body.String(), problem, expr)

		_, err := h.engine.CreateSubscription(context.Background(), &webhooks.Subscription{
			ID: "s1", Pattern: "/orders/*", Webhook: h.recv.url(), Delivery: webhooks.DeliveryEvents,
			Events: &webhooks.EventsOptions{MaxBatchEvents: 1, MaxBatchBytes: 1, Filter: &webhooks.EventFilter{Expression: expr}},
		}, "")
		var ve *webhooks.ValidationError
		require.True(t, errors.As(err, &ve), "%s: %v", expr, err)
		require.Equal(t, "filter.expression", ve.Field, expr)
	}

	h.subscribeEvents("s1", "/orders/*", `"filter":{"expression":"event.n > 1"}`)
	rec := h.do(http.MethodPatch, "/orders/*?subscription=s1", `{"filter":{"expression":"event.n >"}}`)
	require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
	require.Contains(t, rec.Body.String(), "filter.expression")
	get := h.do(http.MethodGet, "/orders/*?subscription=s1", "")
	require.Contains(t, get.Body.String(), `"expression":"event.n \u003e 1"`, "a refused PATCH changes nothing")

	for _, cols := range []string{`[""]`, `["a..b"]`, `["a","a"]`} {
		rec := h.do(http.MethodPatch, "/orders/*?subscription=s1", `{"columns":`+cols+`}`)
		require.Equal(t, http.StatusBadRequest, rec.Code, "%s: %s", cols, rec.Body.String())
		require.Contains(t, rec.Body.String(), "column", cols)
	}
	rec = h.do(http.MethodPut, "/orders/*?subscription=w1", fmt.Sprintf(`{"webhook":%q,"columns":["a"]}`, h.recv.url()))
	require.Equal(t, http.StatusBadRequest, rec.Code, "columns on a wake subscription")
}

// The expression and the columns read back as given, and PATCH replaces
// them; [] sends events whole again.
func TestFilterExpressionReadsBack(t *testing.T) {
	h := newHarness(t)
	h.subscribeEvents("s1", "/orders/*", `"filter":{"expression":"has(event.a)"},"columns":["a","b.c"]`)
	get := h.do(http.MethodGet, "/orders/*?subscription=s1", "")
	require.Contains(t, get.Body.String(), `"filter":{"expression":"has(event.a)"},"columns":["a","b.c"]`)
	rec := h.do(http.MethodPatch, "/orders/*?subscription=s1", `{"columns":[]}`)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.NotContains(t, rec.Body.String(), "columns")
	sub, err := h.store.GetSubscription(context.Background(), "s1")
	require.NoError(t, err)
	require.Equal(t, "has(event.a)", sub.Events.Filter.Expression)
	require.Nil(t, sub.Events.Columns)
}
