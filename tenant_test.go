package webhooks_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
)

// tenantHost maps the X-Tenant header to the tenant, and lets a test
// change the patterns its tenants may subscribe to: by default
// /tenants/{tenant}/**.
type tenantHost struct {
	mu       sync.Mutex
	patterns map[string][]string
}

func (th *tenantHost) tenancy(max int) webhooks.Tenancy {
	return webhooks.Tenancy{
		Tenant: func(r *http.Request) (string, error) { return r.Header.Get("X-Tenant"), nil },
		Patterns: func(tenant string) []string {
			th.mu.Lock()
			defer th.mu.Unlock()
			if p, ok := th.patterns[tenant]; ok {
				return p
			}
			return []string{"/tenants/" + tenant + "/**"}
		},
		MaxSubscriptions: max,
	}
}

func (th *tenantHost) allow(tenant string, patterns ...string) {
	th.mu.Lock()
	defer th.mu.Unlock()
	if th.patterns == nil {
		th.patterns = map[string][]string{}
	}
	th.patterns[tenant] = patterns
}

// newTenantHarness serves an engine with tenants "a" and "b", whose
// subscriptions a1 and b1 each have a consumer.
func newTenantHarness(t *testing.T, max int) (*harness, *tenantHost) {
	th := &tenantHost{}
	h := newHarness(t, webhooks.WithTenancy(th.tenancy(max)))
	h.create("/tenants/a/s", 1)
	h.create("/tenants/b/s", 1)
	h.tenantDo("a", http.MethodPut, "/tenants/a/*?subscription=a1", h.hookBody(), http.StatusCreated)
	h.tenantDo("b", http.MethodPut, "/tenants/b/*?subscription=b1", h.hookBody(), http.StatusCreated)
	return h, th
}

func (h *harness) hookBody() string { return fmt.Sprintf(`{"webhook":%q}`, h.recv.url()) }

// tenantDo sends a request as tenant ("" for the operator) and requires
// status; it returns the body.
func (h *harness) tenantDo(tenant, method, target, body string, status int) []byte {
	h.t.Helper()
	var header []string
	if tenant != "" {
		header = []string{"X-Tenant", tenant}
	}
	rec := h.do(method, target, body, header...)
	require.Equal(h.t, status, rec.Code, "%s %s as %q: %s", method, target, tenant, rec.Body.String())
	return rec.Body.Bytes()
}

// apiError decodes an error response.
func apiError(t *testing.T, body []byte) (code, message string) {
	t.Helper()
	var out struct {
		Error struct{ Code, Message string }
	}
	require.NoError(t, json.Unmarshal(body, &out), string(body))
	return out.Error.Code, out.Error.Message
}

// listIDs lists the subscriptions under /** as tenant.
func (h *harness) listIDs(tenant string) []string {
	h.t.Helper()
	var out struct {
		Subscriptions []struct {
			ID     string `json:"subscription_id"`
			Tenant string `json:"tenant"`
		}
	}
	require.NoError(h.t, json.Unmarshal(h.tenantDo(tenant, http.MethodGet, "/**?subscriptions", "", http.StatusOK), &out))
	ids := []string{}
	for _, s := range out.Subscriptions {
		ids = append(ids, s.ID+"@"+s.Tenant)
	}
	return ids
}

// One tenant reads, lists and operates on its own subscriptions only:
// every route on another's answers 404 SUBSCRIPTION_NOT_FOUND with the
// very answer of an ID that does not exist, and changes nothing.
func TestTenantScopesTheAPI(t *testing.T) {
	h, _ := newTenantHarness(t, 0)
	cid := webhooks.ConsumerID("a1", "/tenants/a/s")
	routes := []struct{ method, query, body string }{
		{http.MethodGet, "", ""},
		{http.MethodPatch, "", `{"status":"paused"}`},
		{http.MethodDelete, "", ""},
		{http.MethodGet, "&consumers", ""},
		{http.MethodGet, "&deliveries&consumer=" + url.QueryEscape(cid), ""},
		{http.MethodPost, "&rewind", `{"offset":"-1"}`},
		{http.MethodGet, "&dead", ""},
		{http.MethodPost, "&revive", fmt.Sprintf(`{"consumer":%q}`, cid)},
		{http.MethodPost, "&test", ""},
		{http.MethodPost, "&rotate", ""},
		{http.MethodGet, "&consumer=" + url.QueryEscape(cid), ""},
	}
	for _, rt := range routes {
		foreign := h.tenantDo("b", rt.method, "/**?subscription=a1"+rt.query, rt.body, http.StatusNotFound)
		missing := h.tenantDo("b", rt.method, "/**?subscription=zz"+rt.query, rt.body, http.StatusNotFound)
		code, msg := apiError(t, foreign)
		require.Equal(t, "SUBSCRIPTION_NOT_FOUND", code, "%s %s", rt.method, rt.query)
		_, missingMsg := apiError(t, missing)
		require.Equal(t, strings.ReplaceAll(missingMsg, "zz", "a1"), msg, "another tenant's answers as a missing one")
	}
	require.Equal(t, []string{"b1@b"}, h.listIDs("b"))
	require.Equal(t, []string{"a1@a"}, h.listIDs("a"))
	require.Equal(t, []string{"a1@a", "b1@b"}, h.listIDs(""), "the operator sees every tenant")

	var view struct{ Status, Tenant string }
	require.NoError(t, json.Unmarshal(h.tenantDo("a", http.MethodGet, "/**?subscription=a1", "", http.StatusOK), &view))
	require.Equal(t, "active", view.Status, "tenant b's requests changed nothing")
	require.Equal(t, "a", view.Tenant)
	sub, err := h.engine.Subscription(context.Background(), "a1")
	require.NoError(t, err)
	require.Empty(t, sub.PreviousSecret, "b's rotate did not rotate")
	h.tenantDo("a", http.MethodGet, "/**?subscription=a1&consumer="+url.QueryEscape(cid), "", http.StatusOK)
}

// An ID another tenant holds is refused 409 without a word of that
// subscription, and stays that tenant's, unchanged.
func TestTenantCreateTakenID(t *testing.T) {
	h, _ := newTenantHarness(t, 0)
	body := h.tenantDo("b", http.MethodPut, "/tenants/b/*?subscription=a1", h.hookBody(), http.StatusConflict)
	code, msg := apiError(t, body)
	require.Equal(t, "SUBSCRIPTION_CONFLICT", code)
	require.NotContains(t, msg, "/tenants/a")
	require.NotContains(t, string(body), "webhook_secret")
	// Even asked for exactly as a configured it, it is not b's to be given.
	body = h.tenantDo("b", http.MethodPut, "/tenants/a/*?subscription=a1", h.hookBody(), http.StatusConflict)
	require.NotContains(t, string(body), "webhook_secret")
	require.NotContains(t, string(body), h.recv.url())
	h.tenantDo("a", http.MethodPut, "/tenants/a/*?subscription=a1", h.hookBody(), http.StatusOK)
	require.Equal(t, []string{"a1@a"}, h.listIDs("a"))
}

// A tenant subscribes only within the patterns its host allows it, at
// create and at PATCH: 403 FORBIDDEN otherwise.
func TestTenantPatterns(t *testing.T) {
	h, th := newTenantHarness(t, 0)
	for _, pattern := range []string{"/tenants/b/*", "/**", "/tenants/*/s", "/tenants/**", "/*/a/s"} {
		body := h.tenantDo("a", http.MethodPut, pattern+"?subscription=x", h.hookBody(), http.StatusForbidden)
		code, msg := apiError(t, body)
		require.Equal(t, "FORBIDDEN", code)
		require.Contains(t, msg, "tenant a may not subscribe to "+pattern)
	}
	h.tenantDo("a", http.MethodPut, "/tenants/a/deep/**?subscription=x", h.hookBody(), http.StatusCreated)
	h.tenantDo("", http.MethodPut, "/**?subscription=op", h.hookBody(), http.StatusCreated)
	require.Equal(t, []string{"a1@a", "b1@b", "op@", "x@a"}, h.listIDs(""), "the refused creates stored nothing")

	th.allow("a", "/tenants/a/deep/**")
	h.tenantDo("a", http.MethodPatch, "/**?subscription=x", `{"description":"d"}`, http.StatusOK)
	body := h.tenantDo("a", http.MethodPatch, "/**?subscription=a1", `{"description":"d"}`, http.StatusForbidden)
	code, _ := apiError(t, body)
	require.Equal(t, "FORBIDDEN", code)
	h.tenantDo("a", http.MethodPatch, "/**?subscription=a1", `{"status":"paused"}`, http.StatusForbidden)
	_, err := h.engine.UpdateSubscription(webhooks.WithTenant(context.Background(), "a"), "a1", func(s *webhooks.Subscription) error {
		s.Description = "d"
		return nil
	})
	require.ErrorIs(t, err, webhooks.ErrForbidden, "the Go API keeps to the patterns too")
}

// A tenant holds at most MaxSubscriptions; past it a create is 403
// TENANT_LIMIT_REACHED, while other tenants, repeated creates and creates
// after a delete go on.
func TestTenantLimit(t *testing.T) {
	h, _ := newTenantHarness(t, 2)
	h.tenantDo("a", http.MethodPut, "/tenants/a/*?subscription=a2", h.hookBody(), http.StatusCreated)
	body := h.tenantDo("a", http.MethodPut, "/tenants/a/*?subscription=a3", h.hookBody(), http.StatusForbidden)
	code, msg := apiError(t, body)
	require.Equal(t, "TENANT_LIMIT_REACHED", code)
	require.Equal(t, "tenant a has 2 subscriptions, its limit; delete one to create another", msg)
	h.tenantDo("a", http.MethodPut, "/tenants/a/*?subscription=a2", h.hookBody(), http.StatusOK)
	h.tenantDo("b", http.MethodPut, "/tenants/b/*?subscription=b2", h.hookBody(), http.StatusCreated)
	_, err := h.engine.CreateSubscription(webhooks.WithTenant(context.Background(), "a"),
		&webhooks.Subscription{ID: "a4", Pattern: "/tenants/a/*", Webhook: h.recv.url()}, "")
	require.ErrorIs(t, err, webhooks.ErrTenantLimit)
	h.tenantDo("a", http.MethodDelete, "/**?subscription=a2", "", http.StatusNoContent)
	h.tenantDo("a", http.MethodPut, "/tenants/a/*?subscription=a3", h.hookBody(), http.StatusCreated)
}

// The Go API within a tenant (WithTenant) sees and changes only that
// tenant's subscriptions, and creates in it.
func TestTenantGoAPI(t *testing.T) {
	h, _ := newTenantHarness(t, 0)
	e := h.engine
	b := webhooks.WithTenant(context.Background(), "b")
	cid := webhooks.ConsumerID("a1", "/tenants/a/s")

	_, err := e.Subscription(b, "a1")
	require.ErrorIs(t, err, webhooks.ErrSubscriptionNotFound)
	subs, err := e.Subscriptions(b)
	require.NoError(t, err)
	require.Len(t, subs, 1)
	require.Equal(t, "b1", subs[0].ID)
	_, err = e.PauseSubscription(b, "a1")
	require.ErrorIs(t, err, webhooks.ErrSubscriptionNotFound)
	_, err = e.ResumeSubscription(b, "a1")
	require.ErrorIs(t, err, webhooks.ErrSubscriptionNotFound)
	_, err = e.UpdateSubscription(b, "a1", func(*webhooks.Subscription) error { return nil })
	require.ErrorIs(t, err, webhooks.ErrSubscriptionNotFound)
	_, err = e.RotateSecret(b, "a1", 0)
	require.ErrorIs(t, err, webhooks.ErrSubscriptionNotFound)
	_, err = e.SendTestDelivery(b, "a1")
	require.ErrorIs(t, err, webhooks.ErrSubscriptionNotFound)
	_, err = e.Rewind(b, &webhooks.RewindParams{SubscriptionID: "a1", Offset: webhooks.OffsetNone})
	require.ErrorIs(t, err, webhooks.ErrSubscriptionNotFound)
	_, err = e.ListConsumers(b, &webhooks.ListConsumersParams{SubscriptionID: "a1", Limit: 10})
	require.ErrorIs(t, err, webhooks.ErrSubscriptionNotFound)
	_, err = e.Consumer(b, cid)
	require.ErrorIs(t, err, webhooks.ErrConsumerNotFound)
	_, err = e.DeliveryLog(b, cid, 10)
	require.ErrorIs(t, err, webhooks.ErrConsumerNotFound)
	require.ErrorIs(t, e.ResumeConsumer(b, cid), webhooks.ErrConsumerNotFound)

	all, err := e.Subscriptions(context.Background())
	require.NoError(t, err)
	require.Len(t, all, 2, "without a tenant, a call sees every tenant")
	_, err = e.Consumer(context.Background(), cid)
	require.NoError(t, err)

	_, err = e.UpdateSubscription(webhooks.WithTenant(context.Background(), "a"), "a1", func(s *webhooks.Subscription) error {
		s.Tenant = "b"
		return nil
	})
	var ve *webhooks.ValidationError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, "tenant", ve.Field)

	s, err := e.CreateSubscription(b, &webhooks.Subscription{ID: "b2", Pattern: "/tenants/b/x/*", Webhook: h.recv.url(), Tenant: "a"}, "")
	require.NoError(t, err)
	require.Equal(t, "b", s.Tenant, "the context's tenant wins")
	_, err = e.CreateSubscription(context.Background(), &webhooks.Subscription{ID: "bad", Pattern: "/x/*", Webhook: h.recv.url(), Tenant: "a/b"}, "")
	require.ErrorAs(t, err, &ve)
	require.Equal(t, "tenant", ve.Field)
}

// A Tenancy.Tenant failure refuses the request as the Authorizer's would:
// 401 or 403 as it says, a generic 500 for anything else, and for a name
// the host got wrong.
func TestTenantResolverErrors(t *testing.T) {
	for _, tc := range []struct {
		tenant string
		err    error
		status int
	}{
		{"", webhooks.ErrUnauthorized, http.StatusUnauthorized},
		{"", fmt.Errorf("token for nobody: %w", webhooks.ErrForbidden), http.StatusForbidden},
		{"", fmt.Errorf("directory down"), http.StatusInternalServerError},
		{"a/b", nil, http.StatusInternalServerError},
	} {
		h := newHarness(t, webhooks.WithTenancy(webhooks.Tenancy{
			Tenant: func(*http.Request) (string, error) { return tc.tenant, tc.err },
		}))
		rec := h.do(http.MethodGet, "/**?subscriptions", "")
		require.Equal(t, tc.status, rec.Code, rec.Body.String())
		require.NotContains(t, rec.Body.String(), "directory down")
		require.NotContains(t, rec.Body.String(), "a/b")
	}
}

// Tenants survive a restart of the engine on its Store.
func TestTenantSurvivesRestart(t *testing.T) {
	h, _ := newTenantHarness(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, h.engine.Stop(ctx))
	th := &tenantHost{}
	h.startEngine(webhooks.WithTenancy(th.tenancy(0)))
	require.Equal(t, []string{"a1@a"}, h.listIDs("a"))
	h.tenantDo("b", http.MethodGet, "/**?subscription=a1", "", http.StatusNotFound)
}

// Another tenant's pending subscription is not found: it can neither
// verify it, restart its challenge, pause, resume nor change it, over the
// API or in Go, and it stays pending.
func TestTenantScopesVerification(t *testing.T) {
	h, _ := newTenantHarness(t, 0)
	e := h.engine
	h.tenantDo("a", http.MethodPut, "/tenants/a/*?subscription=a2",
		fmt.Sprintf(`{"webhook":%q,"verify":true}`, h.recv.url()), http.StatusCreated)
	for _, rt := range []struct{ method, query, body string }{
		{http.MethodPost, "&verify", ""},
		{http.MethodPost, "&challenge", ""},
		{http.MethodPatch, "", `{"status":"active"}`},
		{http.MethodPatch, "", `{"name":"b's"}`},
	} {
		body := h.tenantDo("b", rt.method, "/**?subscription=a2"+rt.query, rt.body, http.StatusNotFound)
		code, _ := apiError(t, body)
		require.Equal(t, "SUBSCRIPTION_NOT_FOUND", code, "%s %s", rt.method, rt.query)
	}

	b := webhooks.WithTenant(context.Background(), "b")
	_, err := e.VerifySubscription(b, "a2")
	require.ErrorIs(t, err, webhooks.ErrSubscriptionNotFound)
	_, err = e.RestartVerification(b, "a2")
	require.ErrorIs(t, err, webhooks.ErrSubscriptionNotFound)
	_, err = e.PauseSubscription(b, "a2")
	require.ErrorIs(t, err, webhooks.ErrSubscriptionNotFound)
	_, err = e.ResumeSubscription(b, "a2")
	require.ErrorIs(t, err, webhooks.ErrSubscriptionNotFound)
	_, err = e.UpdateSubscription(b, "a2", func(s *webhooks.Subscription) error {
		s.Name = "b's"
		return nil
	})
	require.ErrorIs(t, err, webhooks.ErrSubscriptionNotFound)

	a := webhooks.WithTenant(context.Background(), "a")
	sub, err := e.Subscription(a, "a2")
	require.NoError(t, err)
	require.Equal(t, webhooks.StatusPending, sub.Status, "tenant b changed nothing")
	require.Empty(t, sub.Name)
	_, err = e.RestartVerification(a, "a2")
	require.NoError(t, err, "its own tenant restarts it")
	sub, err = e.VerifySubscription(a, "a2")
	require.NoError(t, err, "and verifies it")
	require.Equal(t, webhooks.StatusActive, sub.Status)
}
