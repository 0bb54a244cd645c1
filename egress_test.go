package webhooks_test

import (
	"context"
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/memstore"
)

// egressEngine is an engine on store with policy, over a transport that
// counts the requests handed to it and answers 204.
func egressEngine(t *testing.T, store webhooks.Store, policy webhooks.WebhookPolicy) (*webhooks.Engine, *atomic.Int32) {
	t.Helper()
	var calls atomic.Int32
	e, err := webhooks.New(store, newFakeSource(),
		webhooks.WithCallbackBaseURL(callbackBase),
		webhooks.WithClock(newMockClock()),
		webhooks.WithWebhookPolicy(policy),
		webhooks.WithHTTPTransport(subRoundTripper(func(r *http.Request) (*http.Response, error) {
			calls.Add(1)
			return &http.Response{StatusCode: http.StatusNoContent, Body: http.NoBody, Request: r}, nil
		})))
	require.NoError(t, err)
	startForTest(t, e)
	return e, &calls
}

// TestEgressHostLists: a webhook on a denied host, or off the allowlist,
// is refused at creation and at a change, naming the field.
func TestEgressHostLists(t *testing.T) {
	ctx := context.Background()
	e, _ := egressEngine(t, memstore.New(), webhooks.WebhookPolicy{
		AllowHosts: []string{"*.example.com"},
		DenyHosts:  []string{"internal.example.com"},
	})
	_, err := e.CreateSubscription(ctx, &webhooks.Subscription{ID: "ok", Pattern: "/a/*", Webhook: "https://hooks.example.com/x"}, "")
	require.NoError(t, err)
	for _, webhook := range []string{"https://internal.example.com/x", "https://hooks.example.org/x", "https://example.com/x"} {
		var ve *webhooks.ValidationError
		_, err := e.CreateSubscription(ctx, &webhooks.Subscription{ID: "s", Pattern: "/a/*", Webhook: webhook}, "")
		require.ErrorAs(t, err, &ve, "create %s", webhook)
		require.Equal(t, "webhook", ve.Field)
		_, err = e.UpdateSubscription(ctx, "ok", func(s *webhooks.Subscription) error {
			s.Webhook = webhook
			return nil
		})
		require.ErrorAs(t, err, &ve, "change to %s", webhook)
		require.Equal(t, "webhook", ve.Field)
	}
}

// TestEgressHostTransportKeepsURLChecks: a transport of WithHTTPTransport
// gets no POST the policy refuses. The subscription was accepted by an
// engine with no denylist; an engine that denies its host does not hand
// its POST to the transport.
func TestEgressHostTransportKeepsURLChecks(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	before, beforeCalls := egressEngine(t, store, webhooks.WebhookPolicy{})
	_, err := before.CreateSubscription(ctx, &webhooks.Subscription{ID: "s1", Pattern: "/a/*", Webhook: "https://hooks.example.com/x"}, "")
	require.NoError(t, err)
	td, err := before.SendTestDelivery(ctx, "s1")
	require.NoError(t, err)
	require.True(t, td.Delivered, "%+v", td)
	require.EqualValues(t, 1, beforeCalls.Load())

	after, afterCalls := egressEngine(t, store, webhooks.WebhookPolicy{DenyHosts: []string{"hooks.example.com"}})
	td, err = after.SendTestDelivery(ctx, "s1")
	require.NoError(t, err)
	require.False(t, td.Delivered)
	require.Equal(t, "ssrf_blocked", td.ErrorClass)
	require.Zero(t, afterCalls.Load(), "the denied POST reached the host's transport")
}

func TestEgressPolicyValidated(t *testing.T) {
	for name, p := range map[string]webhooks.WebhookPolicy{
		"bad host":     {AllowHosts: []string{"https://hooks.example.com"}},
		"bad denied":   {DenyHosts: []string{"*"}},
		"proxy scheme": {Proxy: &url.URL{Scheme: "socks5", Host: "127.0.0.1:1080"}},
		"proxy host":   {Proxy: &url.URL{Scheme: "http"}},
	} {
		_, err := webhooks.New(memstore.New(), newFakeSource(), webhooks.WithCallbackBaseURL(callbackBase), webhooks.WithWebhookPolicy(p))
		if err == nil {
			t.Errorf("%s: New accepted %+v", name, p)
		}
	}
	_, err := webhooks.New(memstore.New(), newFakeSource(), webhooks.WithCallbackBaseURL(callbackBase),
		webhooks.WithWebhookPolicy(webhooks.WebhookPolicy{AllowHosts: []string{"*.example.com", "203.0.113.9"}, Proxy: &url.URL{Scheme: "http", Host: "127.0.0.1:3128"}}))
	require.NoError(t, err)
}

// TestWebhookPolicyDialControl: the Control a host's dialer takes to keep
// the address check refuses what the policy refuses.
func TestWebhookPolicyDialControl(t *testing.T) {
	prod, dev := webhooks.WebhookPolicy{}, webhooks.WebhookPolicy{AllowLoopback: true}
	require.Error(t, prod.DialControl("tcp", "10.0.0.1:443", nil))
	require.Error(t, prod.DialControl("tcp", "127.0.0.1:443", nil))
	require.Error(t, dev.DialControl("tcp", "169.254.169.254:80", nil))
	require.NoError(t, dev.DialControl("tcp", "127.0.0.1:443", nil))
	require.Error(t, prod.DialControl("tcp", "203.0.113.9:443", nil), "203.0.113.0/24 is documentation")
	require.NoError(t, prod.DialControl("tcp", "[2606:4700::1]:443", nil))
}
