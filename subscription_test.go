package webhooks_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/memstore"
	"github.com/streamhooks/webhooks/receiver"
)

// subView is a subscription as the API shows it.
type subView struct {
	SubscriptionID string `json:"subscription_id"`
	Pattern        string `json:"pattern"`
	Webhook        string `json:"webhook"`
	WebhookSecret  string `json:"webhook_secret"`
	Description    string `json:"description"`
}

// subBody returns a create request body.
func subBody(webhook, description string) string {
	data, _ := json.Marshal(map[string]string{"webhook": webhook, "description": description})
	return string(data)
}

// subDecode decodes a subscription response, failing on anything but JSON.
func subDecode(t *testing.T, body []byte) subView {
	t.Helper()
	var v subView
	require.NoError(t, json.Unmarshal(body, &v), string(body))
	return v
}

// subRequireNoSecret fails if a response body carries a webhook_secret key.
func subRequireNoSecret(t testing.TB, body []byte) {
	t.Helper()
	require.NotContains(t, string(body), "webhook_secret", string(body))
	require.NotContains(t, string(body), "whsec_", string(body))
}

// subRequireError checks an API error response: status, the one JSON error
// shape, code and a message.
func subRequireError(t *testing.T, status int, code receiver.ErrorCode, gotStatus int, raw []byte, ctype string) receiver.ErrorBody {
	t.Helper()
	require.Equal(t, status, gotStatus, string(raw))
	require.Contains(t, ctype, "application/json", string(raw))
	var out receiver.CallbackResponse
	require.NoError(t, json.Unmarshal(raw, &out), string(raw))
	require.False(t, out.OK, string(raw))
	require.NotNil(t, out.Error, string(raw))
	require.Equal(t, code, out.Error.Code, string(raw))
	require.NotEmpty(t, out.Error.Message, string(raw))
	return *out.Error
}

// subList lists subscriptions with GET {pattern}?subscriptions and returns
// their IDs.
func (h *harness) subList(pattern string) []string {
	h.t.Helper()
	rec := h.do(http.MethodGet, pattern+"?subscriptions", "")
	require.Equal(h.t, http.StatusOK, rec.Code, rec.Body.String())
	subRequireNoSecret(h.t, rec.Body.Bytes())
	var out struct {
		Subscriptions []subView `json:"subscriptions"`
	}
	require.NoError(h.t, json.Unmarshal(rec.Body.Bytes(), &out), rec.Body.String())
	require.NotNil(h.t, out.Subscriptions, "subscriptions must be a JSON array: %s", rec.Body.String())
	ids := []string{}
	for _, s := range out.Subscriptions {
		ids = append(ids, s.SubscriptionID)
	}
	return ids
}

// subNoConsumer fails if consumer id exists.
func (h *harness) subNoConsumer(id string) {
	h.t.Helper()
	_, err := h.store.GetConsumer(context.Background(), id)
	require.ErrorIs(h.t, err, webhooks.ErrConsumerNotFound, "consumer %s should not exist", id)
}

var subSecretFormat = regexp.MustCompile(`^whsec_[A-Za-z0-9_-]{32,}$`)

func TestSubscriptionCreate(t *testing.T) {
	h := newHarness(t)
	rec := h.do(http.MethodPut, "/agents/*?subscription=agent-handler", subBody(h.recv.url(), "agents"),
		"Content-Type", "application/json")
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	require.Contains(t, rec.Header().Get("Content-Type"), "application/json")

	var raw map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &raw))
	for _, k := range []string{"subscription_id", "pattern", "webhook", "webhook_secret", "description", "status", "consecutive_failures"} {
		require.Contains(t, raw, k, "create returns spec 001's fields, the status and the health")
	}
	v := subDecode(t, rec.Body.Bytes())
	require.Equal(t, subView{
		SubscriptionID: "agent-handler",
		Pattern:        "/agents/*",
		Webhook:        h.recv.url(),
		WebhookSecret:  v.WebhookSecret,
		Description:    "agents",
	}, v)
	require.Regexp(t, subSecretFormat, v.WebhookSecret)
	// At least 128 bits of randomness, however it is encoded.
	require.GreaterOrEqual(t, len(strings.TrimPrefix(v.WebhookSecret, "whsec_")), 32)

	// Each subscription gets its own secret.
	other := h.subscribe("other", "/agents/*")
	require.Regexp(t, subSecretFormat, other)
	require.NotEqual(t, v.WebhookSecret, other)

	// The store keeps the secret it answered.
	stored, err := h.store.GetSubscription(context.Background(), "agent-handler")
	require.NoError(t, err)
	require.Equal(t, v.WebhookSecret, stored.Secret)
	require.Equal(t, "/agents/*", stored.Pattern)

	// Deliveries are signed with that secret (S8).
	h.create("/agents/task-1", 0)
	h.appendTo("/agents/task-1", 10)
	for range 2 {
		d := h.nextDelivery()
		secret := other
		if strings.HasPrefix(d.n.ConsumerID, "agent-handler:") {
			secret = v.WebhookSecret
		}
		require.NoError(t, verifySignature(secret, d.header, d.body,
			h.clock.Now(), receiver.DefaultTolerance))
	}
}

func TestSubscriptionCreateWithoutDescription(t *testing.T) {
	h := newHarness(t)
	rec := h.do(http.MethodPut, "/a/**?subscription=s1", fmt.Sprintf(`{"webhook":%q}`, h.recv.url()))
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	v := subDecode(t, rec.Body.Bytes())
	require.Equal(t, "/a/**", v.Pattern)
	require.Empty(t, v.Description)
	require.Regexp(t, subSecretFormat, v.WebhookSecret)

	// An explicitly empty description is the same configuration.
	rec = h.do(http.MethodPut, "/a/**?subscription=s1", subBody(h.recv.url(), ""))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
}

func TestSubscriptionIdempotentCreate(t *testing.T) {
	h := newHarness(t)
	body := subBody(h.recv.url(), "desc")
	first := h.do(http.MethodPut, "/agents/*?subscription=s1", body)
	require.Equal(t, http.StatusCreated, first.Code, first.Body.String())
	created := subDecode(t, first.Body.Bytes())

	for range 2 {
		again := h.do(http.MethodPut, "/agents/*?subscription=s1", body)
		require.Equal(t, http.StatusOK, again.Code, again.Body.String())
		subRequireNoSecret(t, again.Body.Bytes())
		got := subDecode(t, again.Body.Bytes())
		created.WebhookSecret = ""
		require.Equal(t, created, got)
	}

	// The secret did not change.
	stored, err := h.store.GetSubscription(context.Background(), "s1")
	require.NoError(t, err)
	require.Equal(t, subDecode(t, first.Body.Bytes()).WebhookSecret, stored.Secret)
	require.Equal(t, []string{"s1"}, h.subList("/**"))
}

func TestSubscriptionConflict(t *testing.T) {
	h := newHarness(t)
	rec := h.do(http.MethodPut, "/agents/*?subscription=s1", subBody(h.recv.url(), "desc"))
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	secret := subDecode(t, rec.Body.Bytes()).WebhookSecret

	cases := map[string]struct{ target, body string }{
		"different webhook":     {"/agents/*?subscription=s1", subBody(h.recv.url()+"/other", "desc")},
		"different description": {"/agents/*?subscription=s1", subBody(h.recv.url(), "other")},
		"no description":        {"/agents/*?subscription=s1", fmt.Sprintf(`{"webhook":%q}`, h.recv.url())},
		"different pattern":     {"/agents/**?subscription=s1", subBody(h.recv.url(), "desc")},
		"narrower pattern":      {"/agents/x?subscription=s1", subBody(h.recv.url(), "desc")},
		// Configurations are compared before the webhook URL is validated.
		"invalid webhook":        {"/agents/*?subscription=s1", subBody("ftp://x", "desc")},
		"forbidden webhook":      {"/agents/*?subscription=s1", subBody("https://169.254.169.254/", "desc")},
		"not a url":              {"/agents/*?subscription=s1", subBody("::not a url", "desc")},
		"invalid and other path": {"/other/*?subscription=s1", subBody("ftp://x", "")},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rec := h.do(http.MethodPut, tc.target, tc.body)
			subRequireError(t, http.StatusConflict, receiver.ErrorCode("SUBSCRIPTION_CONFLICT"), rec.Code, rec.Body.Bytes(), rec.Header().Get("Content-Type"))
			subRequireNoSecret(t, rec.Body.Bytes())
		})
	}

	// Nothing changed.
	stored, err := h.store.GetSubscription(context.Background(), "s1")
	require.NoError(t, err)
	require.Equal(t, "/agents/*", stored.Pattern)
	require.Equal(t, h.recv.url(), stored.Webhook)
	require.Equal(t, "desc", stored.Description)
	require.Equal(t, secret, stored.Secret)
	require.Equal(t, []string{"s1"}, h.subList("/**"))
}

// A repeated create is answered by comparison, whatever the policy of the
// engine that gets it: an engine that would refuse the webhook still says
// 200 to the same configuration and 409 to another.
func TestSubscriptionCompareBeforePolicy(t *testing.T) {
	h := newHarness(t)
	body := subBody(h.recv.url(), "") // a loopback http URL
	rec := h.do(http.MethodPut, "/agents/*?subscription=s1", body)
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())

	strict, err := webhooks.New(h.store, h.source, webhooks.WithCallbackBaseURL(callbackBase), webhooks.WithClock(h.clock))
	require.NoError(t, err)
	startForTest(t, strict)
	handler := apiHandler(t, strict)

	rec = subServe(handler, http.MethodPut, "/agents/*?subscription=s1", body)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	subRequireNoSecret(t, rec.Body.Bytes())

	rec = subServe(handler, http.MethodPut, "/agents/*?subscription=s1", subBody(h.recv.url(), "changed"))
	subRequireError(t, http.StatusConflict, receiver.ErrorCode("SUBSCRIPTION_CONFLICT"), rec.Code, rec.Body.Bytes(), rec.Header().Get("Content-Type"))

	// A new ID with the same loopback URL is refused by the strict engine.
	rec = subServe(handler, http.MethodPut, "/agents/*?subscription=s2", body)
	subRequireError(t, http.StatusBadRequest, receiver.CodeInvalidRequest, rec.Code, rec.Body.Bytes(), rec.Header().Get("Content-Type"))
}

func TestSubscriptionBadPatterns(t *testing.T) {
	h := newHarness(t)
	body := subBody(h.recv.url(), "")
	for i, pattern := range []string{
		"/agents/foo*",
		"/agents/*foo",
		"/agents/f*o",
		"/a/**x",
		"/a/x**",
		"/a/***",
		"/" + strings.Repeat("a", webhooks.MaxPatternLength),
		"/" + strings.Repeat("a/", 4096) + "*",
	} {
		name := pattern
		if len(name) > 40 {
			name = "too long"
		}
		t.Run(name, func(t *testing.T) {
			id := fmt.Sprintf("bp%d", i)
			rec := h.do(http.MethodPut, pattern+"?subscription="+id, body)
			subRequireError(t, http.StatusBadRequest, receiver.CodeInvalidRequest, rec.Code, rec.Body.Bytes(), rec.Header().Get("Content-Type"))
			// Listing and getting with a bad pattern fail the same way.
			rec = h.do(http.MethodGet, pattern+"?subscriptions", "")
			subRequireError(t, http.StatusBadRequest, receiver.CodeInvalidRequest, rec.Code, rec.Body.Bytes(), rec.Header().Get("Content-Type"))
			rec = h.do(http.MethodGet, pattern+"?subscription="+id, "")
			subRequireError(t, http.StatusBadRequest, receiver.CodeInvalidRequest, rec.Code, rec.Body.Bytes(), rec.Header().Get("Content-Type"))
		})
	}
	require.Empty(t, h.subList("/**"))

	// The longest pattern is accepted.
	longest := "/" + strings.Repeat("a", webhooks.MaxPatternLength-3) + "/*"
	require.Len(t, longest, webhooks.MaxPatternLength)
	rec := h.do(http.MethodPut, longest+"?subscription=long", body)
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	require.Equal(t, longest, subDecode(t, rec.Body.Bytes()).Pattern)
}

// Only "*" and "**" are wildcards: other glob syntax is either refused or
// literal, never a wildcard.
func TestSubscriptionNoOtherGlobSyntax(t *testing.T) {
	h := newHarness(t)
	for i, tc := range []struct{ pattern, stream string }{
		{"/agents/[ab]", "/agents/a"},
		{"/agents/{a,b}", "/agents/a"},
		{"/agents/%3F", "/agents/a"}, // "?" in the path
		{"/agents/task-%3F", "/agents/task-1"},
	} {
		id := fmt.Sprintf("g%d", i)
		rec := h.do(http.MethodPut, tc.pattern+"?subscription="+id, subBody(h.recv.url(), ""))
		if rec.Code == http.StatusBadRequest {
			continue
		}
		require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
		h.create(tc.stream, 0)
		h.subNoConsumer(webhooks.ConsumerID(id, tc.stream))
	}
}

func TestSubscriptionEncodedStar(t *testing.T) {
	h := newHarness(t)
	rec := h.do(http.MethodPut, "/agents/%2A?subscription=x", subBody(h.recv.url(), ""))
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	require.Equal(t, "/agents/*", subDecode(t, rec.Body.Bytes()).Pattern)

	rec = h.do(http.MethodPut, "/agents/*?subscription=x", subBody(h.recv.url(), ""))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	rec = h.do(http.MethodPut, "/agents/%2a?subscription=x", subBody(h.recv.url(), ""))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())

	rec = h.do(http.MethodGet, "/agents/%2A?subscription=x", "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, []string{"x"}, h.subList("/agents/%2A"))

	// The pattern is a wildcard, not a literal "*".
	h.create("/agents/task-1", 0)
	h.consumer(webhooks.ConsumerID("x", "/agents/task-1"))

	rec = h.do(http.MethodDelete, "/agents/%2A?subscription=x", "")
	require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
}

func TestSubscriptionInvalidIDs(t *testing.T) {
	h := newHarness(t)
	body := subBody(h.recv.url(), "")
	for name, q := range map[string]string{
		"empty":    "subscription=",
		"colon":    "subscription=a:b",
		"too long": "subscription=" + strings.Repeat("a", webhooks.MaxSubscriptionIDLength+1),
		"slash":    "subscription=a%2Fb",
		"space":    "subscription=a%20b",
		"percent":  "subscription=a%25b",
	} {
		t.Run(name, func(t *testing.T) {
			for _, method := range []string{http.MethodPut, http.MethodGet, http.MethodDelete} {
				rec := h.do(method, "/agents/*?"+q, body)
				subRequireError(t, http.StatusBadRequest, receiver.CodeInvalidRequest, rec.Code, rec.Body.Bytes(), rec.Header().Get("Content-Type"))
			}
		})
	}
	require.Empty(t, h.subList("/**"))

	// The longest and most varied valid ID is accepted.
	long := strings.Repeat("a", webhooks.MaxSubscriptionIDLength)
	rec := h.do(http.MethodPut, "/agents/*?subscription="+long, body)
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	rec = h.do(http.MethodPut, "/agents/*?subscription=Az09-_.x", body)
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
}

func TestSubscriptionBadBodies(t *testing.T) {
	h := newHarness(t)
	url := h.recv.url()
	valid := fmt.Sprintf(`{"webhook":%q}`, url)
	for name, body := range map[string]string{
		"empty":           "",
		"missing webhook": `{"description":"d"}`,
		"empty webhook":   `{"webhook":""}`,
		"null":            `null`,
		"unknown field":   fmt.Sprintf(`{"webhook":%q,"secret":"mine"}`, url),
		"not json":        "webhook=" + url,
		"truncated":       valid[:len(valid)-1],
		"trailing data":   valid + `{}`,
		"wrong type":      `{"webhook":42}`,
		"array":           `[]`,
		"oversized":       valid + strings.Repeat(" ", webhooks.MaxSubscriptionBodyBytes),
		"long description": fmt.Sprintf(`{"webhook":%q,"description":%q}`, url,
			strings.Repeat("d", webhooks.MaxDescriptionLength+1)),
		"long webhook": fmt.Sprintf(`{"webhook":%q}`, url+"?"+strings.Repeat("q", webhooks.MaxWebhookURLLength)),
	} {
		t.Run(name, func(t *testing.T) {
			rec := h.do(http.MethodPut, "/agents/*?subscription=s1", body)
			subRequireError(t, http.StatusBadRequest, receiver.CodeInvalidRequest, rec.Code, rec.Body.Bytes(), rec.Header().Get("Content-Type"))
		})
	}
	require.Empty(t, h.subList("/**"))

	// A body of exactly the limit, padded with whitespace, is accepted.
	exact := valid + strings.Repeat(" ", webhooks.MaxSubscriptionBodyBytes-len(valid))
	require.Len(t, exact, webhooks.MaxSubscriptionBodyBytes)
	rec := h.do(http.MethodPut, "/agents/*?subscription=s1", exact)
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	// As is the longest description.
	rec = h.do(http.MethodPut, "/agents/*?subscription=s2", subBody(url, strings.Repeat("d", webhooks.MaxDescriptionLength)))
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
}

func TestSubscriptionMethodNotAllowed(t *testing.T) {
	h := newHarness(t)
	h.subscribe("s1", "/agents/*")
	for _, method := range []string{http.MethodPost, http.MethodHead} {
		rec := h.do(method, "/agents/*?subscription=s1", subBody(h.recv.url(), ""))
		subRequireError(t, http.StatusMethodNotAllowed, receiver.CodeInvalidRequest, rec.Code, rec.Body.Bytes(), rec.Header().Get("Content-Type"))
		allow := rec.Header().Get("Allow")
		for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodPatch, http.MethodDelete} {
			require.Contains(t, allow, m)
		}
	}
	for _, method := range []string{http.MethodPut, http.MethodPost, http.MethodDelete} {
		rec := h.do(method, "/agents/*?subscriptions", "")
		subRequireError(t, http.StatusMethodNotAllowed, receiver.CodeInvalidRequest, rec.Code, rec.Body.Bytes(), rec.Header().Get("Content-Type"))
		require.Equal(t, http.MethodGet, rec.Header().Get("Allow"))
	}
	// Nothing was deleted or changed.
	require.Equal(t, []string{"s1"}, h.subList("/**"))
}

// subServe sends one request to handler.
func subServe(handler http.Handler, method, target, body string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, httptest.NewRequest(method, target, strings.NewReader(body)))
	return rec
}

// subStrictEngine is an engine with the production webhook policy, over a
// transport that counts the requests it is asked to make.
func subStrictEngine(t *testing.T) (*webhooks.Engine, *atomic.Int32) {
	t.Helper()
	var calls atomic.Int32
	e, err := webhooks.New(memstore.New(), newFakeSource(),
		webhooks.WithCallbackBaseURL(callbackBase),
		webhooks.WithHTTPTransport(subRoundTripper(func(*http.Request) (*http.Response, error) {
			calls.Add(1)
			return nil, errors.New("no requests expected")
		})))
	require.NoError(t, err)
	startForTest(t, e)
	return e, &calls
}

type subRoundTripper func(*http.Request) (*http.Response, error)

func (f subRoundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestSubscriptionWebhookPolicy(t *testing.T) {
	e, calls := subStrictEngine(t)
	handler := apiHandler(t, e)
	for i, webhook := range []string{
		"http://example.com/hook",
		"https://10.0.0.1/",
		"https://172.16.0.1/",
		"https://192.168.1.1/",
		"https://169.254.169.254/",
		"https://169.254.169.254/latest/meta-data/",
		"https://169.254.1.1/",
		"https://127.0.0.1/",
		"http://127.0.0.1/",
		"https://[::1]/",
		"https://localhost/",
		"https://[::ffff:10.0.0.1]/",
		"https://[fd00:ec2::254]/",
		"https://0.0.0.0/",
		"https://user:pass@example.com/",
		"ftp://example.com/",
		"ftp://x",
		"https:///nohost",
		"example.com/hook",
		"/relative",
	} {
		t.Run(webhook, func(t *testing.T) {
			rec := subServe(handler, http.MethodPut, fmt.Sprintf("/agents/*?subscription=s%d", i), subBody(webhook, ""))
			subRequireError(t, http.StatusBadRequest, receiver.CodeInvalidRequest, rec.Code, rec.Body.Bytes(), rec.Header().Get("Content-Type"))
		})
	}
	rec := subServe(handler, http.MethodGet, "/**?subscriptions", "")
	require.JSONEq(t, `{"subscriptions":[]}`, rec.Body.String())

	rec = subServe(handler, http.MethodPut, "/agents/*?subscription=ok", subBody("https://example.com/hook", ""))
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	require.Zero(t, calls.Load(), "creating a subscription must not contact the webhook")
}

// The development policy allows loopback, over http too, and nothing else
// that the production policy refuses.
func TestSubscriptionWebhookPolicyLoopback(t *testing.T) {
	h := newHarness(t)
	for i, webhook := range []string{"http://127.0.0.1:9/hook", "https://127.0.0.1/", "http://localhost:8080/", "http://[::1]:9/"} {
		rec := h.do(http.MethodPut, fmt.Sprintf("/a/*?subscription=ok%d", i), subBody(webhook, ""))
		require.Equal(t, http.StatusCreated, rec.Code, "%s: %s", webhook, rec.Body.String())
	}
	for i, webhook := range []string{"http://example.com/", "https://10.0.0.1/", "https://169.254.169.254/", "ftp://127.0.0.1/"} {
		rec := h.do(http.MethodPut, fmt.Sprintf("/a/*?subscription=bad%d", i), subBody(webhook, ""))
		subRequireError(t, http.StatusBadRequest, receiver.CodeInvalidRequest, rec.Code, rec.Body.Bytes(), rec.Header().Get("Content-Type"))
	}
}

func TestSubscriptionGet(t *testing.T) {
	h := newHarness(t)
	rec := h.do(http.MethodPut, "/agents/*?subscription=s1", subBody(h.recv.url(), "desc"))
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	want := subDecode(t, rec.Body.Bytes())
	want.WebhookSecret = ""

	for _, pattern := range []string{"/**", "/agents/*", "/agents/**", "/%2A%2A"} {
		rec := h.do(http.MethodGet, pattern+"?subscription=s1", "")
		require.Equal(t, http.StatusOK, rec.Code, "%s: %s", pattern, rec.Body.String())
		subRequireNoSecret(t, rec.Body.Bytes())
		require.Equal(t, want, subDecode(t, rec.Body.Bytes()), pattern)
	}
	for _, pattern := range []string{"/other/*", "/agents/task-1", "/agents/*/inbox", "/*"} {
		rec := h.do(http.MethodGet, pattern+"?subscription=s1", "")
		subRequireError(t, http.StatusNotFound, receiver.ErrorCode("SUBSCRIPTION_NOT_FOUND"), rec.Code, rec.Body.Bytes(), rec.Header().Get("Content-Type"))
	}
	rec = h.do(http.MethodGet, "/**?subscription=nope", "")
	subRequireError(t, http.StatusNotFound, receiver.ErrorCode("SUBSCRIPTION_NOT_FOUND"), rec.Code, rec.Body.Bytes(), rec.Header().Get("Content-Type"))

	// A DELETE through a pattern that does not reach it finds nothing
	// either, and leaves it in place.
	rec = h.do(http.MethodDelete, "/other/*?subscription=s1", "")
	subRequireError(t, http.StatusNotFound, receiver.ErrorCode("SUBSCRIPTION_NOT_FOUND"), rec.Code, rec.Body.Bytes(), rec.Header().Get("Content-Type"))
	require.Equal(t, []string{"s1"}, h.subList("/**"))
}

func TestSubscriptionList(t *testing.T) {
	h := newHarness(t)

	rec := h.do(http.MethodGet, "/**?subscriptions", "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, `{"subscriptions":[]}`, strings.TrimSpace(rec.Body.String()))

	h.subscribe("s1", "/agents/*")
	h.subscribe("s2", "/agents/*/inbox")
	h.subscribe("s3", "/other/*")
	h.subscribe("s0", "/agents/*")

	rec = h.do(http.MethodGet, "/**?subscriptions", "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	subRequireNoSecret(t, rec.Body.Bytes())
	var all struct {
		Subscriptions []subView `json:"subscriptions"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &all))
	require.Len(t, all.Subscriptions, 4)
	for _, s := range all.Subscriptions {
		require.Equal(t, h.recv.url(), s.Webhook)
		require.NotEmpty(t, s.Pattern)
	}

	ids := h.subList("/**")
	require.ElementsMatch(t, []string{"s0", "s1", "s2", "s3"}, ids)
	require.True(t, slices.IsSorted(ids), "list is ordered by ID: %v", ids)
	require.Equal(t, []string{"s0", "s1"}, h.subList("/agents/*"))
	require.Equal(t, []string{"s0", "s1", "s2"}, h.subList("/agents/**"))
	require.Equal(t, []string{"s2"}, h.subList("/agents/*/inbox"))
	require.Equal(t, []string{"s3"}, h.subList("/other/*"))
	require.Equal(t, []string{"s3"}, h.subList("/other/**"))

	rec = h.do(http.MethodGet, "/nothing/*?subscriptions", "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, `{"subscriptions":[]}`, strings.TrimSpace(rec.Body.String()))
}

// subWakeLive wakes consumer sub:path through its first delivery and waits
// until the 2xx has made it LIVE.
func (h *harness) subWakeLive(sub, pattern, path string) delivery {
	h.t.Helper()
	d := h.wake(sub, pattern, path)
	h.waitConsumer(webhooks.ConsumerID(sub, path), func(c *webhooks.Consumer) bool {
		return c.State == webhooks.StateLive && !c.InFlight
	})
	return d
}

func TestSubscriptionDeleteCascades(t *testing.T) {
	h := newHarness(t)
	d := h.subWakeLive("s1", "/agents/*", "/agents/task-1")
	id := webhooks.ConsumerID("s1", "/agents/task-1")
	require.Equal(t, id, d.n.ConsumerID)

	// A second consumer of s1, IDLE, and one of another subscription.
	h.create("/agents/task-2", 0)
	h.consumer(webhooks.ConsumerID("s1", "/agents/task-2"))
	h.subscribe("keep", "/agents/**")
	h.create("/agents/task-3", 0)
	keep := webhooks.ConsumerID("keep", "/agents/task-3")
	h.consumer(keep)

	rec := h.do(http.MethodDelete, "/agents/*?subscription=s1", "")
	require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
	require.Empty(t, rec.Body.String())

	// Removed at once, not eventually.
	h.subNoConsumer(id)
	h.subNoConsumer(webhooks.ConsumerID("s1", "/agents/task-2"))
	h.consumer(keep)

	// In-flight callbacks get CONSUMER_GONE (S7).
	r := h.callback(id, d.n.Token, receiver.CallbackRequest{Epoch: epoch(d.n.Epoch), WakeID: d.n.WakeID})
	requireError(t, r, http.StatusGone, receiver.CodeConsumerGone)
	r = h.callback(id, d.n.Token, receiver.CallbackRequest{
		Epoch: epoch(d.n.Epoch),
		Acks:  streamOffsets("/agents/task-1", offset(10)),
		Done:  true,
	})
	requireError(t, r, http.StatusGone, receiver.CodeConsumerGone)

	// It is gone for the API too.
	rec = h.do(http.MethodDelete, "/agents/*?subscription=s1", "")
	subRequireError(t, http.StatusNotFound, receiver.ErrorCode("SUBSCRIPTION_NOT_FOUND"), rec.Code, rec.Body.Bytes(), rec.Header().Get("Content-Type"))
	rec = h.do(http.MethodGet, "/**?subscription=s1", "")
	subRequireError(t, http.StatusNotFound, receiver.ErrorCode("SUBSCRIPTION_NOT_FOUND"), rec.Code, rec.Body.Bytes(), rec.Header().Get("Content-Type"))
	require.Equal(t, []string{"keep"}, h.subList("/**"))

	// Streams it matched spawn no consumers any more.
	h.appendTo("/agents/task-1", 5)
	h.create("/agents/task-9", 5)
	h.appendTo("/agents/task-9", 5)
	h.subNoConsumer(id)
	h.subNoConsumer(webhooks.ConsumerID("s1", "/agents/task-9"))
	counts, err := h.store.CountConsumers(context.Background())
	require.NoError(t, err)
	// keep's consumers of task-1, task-2, task-3 and task-9.
	require.Equal(t, 4, counts[webhooks.StateIdle]+counts[webhooks.StateWaking]+counts[webhooks.StateLive], counts)

	// The ID can be used again, with a new secret and fresh consumers.
	rec = h.do(http.MethodPut, "/agents/*?subscription=s1", subBody(h.recv.url(), "again"))
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	c := h.consumer(id)
	require.Equal(t, webhooks.StateIdle, c.State)
	require.Zero(t, c.Epoch)
	// The old token does not reach the new consumer: its epoch is ahead.
	r = h.callback(id, d.n.Token, receiver.CallbackRequest{Epoch: epoch(d.n.Epoch)})
	require.NotEqual(t, http.StatusOK, r.status, r.raw)
}

// A webhook whose subscription is deleted while the POST is in flight must
// not bring the consumer back.
func TestSubscriptionDeleteDuringDelivery(t *testing.T) {
	h := newHarness(t)
	hold := make(chan struct{})
	h.recv.queue(reply{status: http.StatusOK, hold: hold})
	d := h.wake("s1", "/agents/*", "/agents/task-1")
	id := webhooks.ConsumerID("s1", "/agents/task-1")

	rec := h.do(http.MethodDelete, "/**?subscription=s1", "")
	require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
	close(hold)

	r := h.callback(id, d.n.Token, receiver.CallbackRequest{Epoch: epoch(d.n.Epoch), WakeID: d.n.WakeID})
	requireError(t, r, http.StatusGone, receiver.CodeConsumerGone)
	// Stop waits for the delivery to finish; then the consumer must still be
	// gone.
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(t, h.engine.Stop(ctx))
	h.subNoConsumer(id)
}

func TestSubscriptionExistingStreams(t *testing.T) {
	h := newHarness(t)
	h.source.set("/agents/a", 10)
	h.source.set("/agents/b", 0)
	h.source.set("/agents/deep/c", 7)
	h.source.set("/other/d", 5)
	h.subscribe("s1", "/agents/*")

	a := h.consumer(webhooks.ConsumerID("s1", "/agents/a"))
	require.Equal(t, webhooks.StateIdle, a.State)
	require.Zero(t, a.Epoch)
	require.True(t, a.Deadline.IsZero(), "no delivery is scheduled: %v", a.Deadline)
	require.Equal(t, "s1", a.SubscriptionID)
	require.Equal(t, "/agents/a", a.PrimaryStream)
	require.Equal(t, streamOffsets("/agents/a", offset(10)), a.Streams)

	b := h.consumer(webhooks.ConsumerID("s1", "/agents/b"))
	require.Equal(t, webhooks.StateIdle, b.State)
	require.True(t, b.Deadline.IsZero())
	require.Equal(t, streamOffsets("/agents/b", offset(0)), b.Streams)

	h.subNoConsumer(webhooks.ConsumerID("s1", "/agents/deep/c"))
	h.subNoConsumer(webhooks.ConsumerID("s1", "/other/d"))

	// Time passing wakes nobody.
	h.clock.Add(time.Hour)
	for _, id := range []string{a.ID, b.ID} {
		c := h.consumer(id)
		require.Equal(t, webhooks.StateIdle, c.State, id)
		require.Zero(t, c.Epoch, id)
		require.True(t, c.Deadline.IsZero(), id)
	}
	// Nor does being told of a stream with no new events.
	require.NoError(t, h.engine.StreamAppended(context.Background(), "/agents/a"))
	require.NoError(t, h.engine.StreamCreated(context.Background(), "/agents/b"))
	require.Equal(t, webhooks.StateIdle, h.consumer(a.ID).State)
	require.Equal(t, webhooks.StateIdle, h.consumer(b.ID).State)
	select {
	case d := <-h.recv.deliveries:
		t.Fatalf("unexpected delivery: %s", d.body)
	default:
	}

	// A new append wakes it, from the old tail.
	h.appendTo("/agents/a", 5)
	d := h.nextDelivery()
	require.Equal(t, a.ID, d.n.ConsumerID)
	require.Equal(t, int64(1), d.n.Epoch)
	require.Equal(t, streamOffsets("/agents/a", offset(10)), d.n.Streams)
	require.Equal(t, []string{"/agents/a"}, d.n.TriggeredBy)
	require.Equal(t, webhooks.StateIdle, h.consumer(b.ID).State)

	h.appendTo("/agents/b", 3)
	d = h.nextDelivery()
	require.Equal(t, b.ID, d.n.ConsumerID)
	require.Equal(t, streamOffsets("/agents/b", offset(0)), d.n.Streams)
}

// A consumer the engine already has is not repositioned by a new
// subscription's scan.
func TestSubscriptionExistingStreamsSecondSubscription(t *testing.T) {
	h := newHarness(t)
	h.subscribe("s1", "/agents/*")
	h.create("/agents/a", 0)
	h.appendTo("/agents/a", 10)
	h.nextDelivery()
	h.subscribe("s2", "/agents/**")
	c1 := h.consumer(webhooks.ConsumerID("s1", "/agents/a"))
	require.Equal(t, streamOffsets("/agents/a", webhooks.OffsetNone), c1.Streams)
	c2 := h.consumer(webhooks.ConsumerID("s2", "/agents/a"))
	require.Equal(t, webhooks.StateIdle, c2.State)
	require.Equal(t, streamOffsets("/agents/a", offset(10)), c2.Streams)
}

func TestSubscriptionConsumerID(t *testing.T) {
	require.Equal(t, "s1:%2Fagents%2Ftask-1", webhooks.ConsumerID("s1", "/agents/task-1"))
	require.Equal(t, "agent-handler:%2Fagents%2Ftask-123", webhooks.ConsumerID("agent-handler", "/agents/task-123"))

	for _, path := range []string{
		"/agents/task-1",
		"/a b/c",
		"/100%/done",
		"/%2F/literal",
		"/a:b/c:d",
		"/q?x=1#frag",
		"/ünïcode/☃",
		"/",
		"/a/../b",
		"/a+b&c=d;e,f",
	} {
		id := webhooks.ConsumerID("sub.1_x-y", path)
		require.NotContains(t, id[len("sub.1_x-y:"):], "/", "the path part of %q has no raw '/'", id)
		require.NotContains(t, id, "?")
		require.NotContains(t, id, "#")
		require.NotContains(t, id, " ")
		sub, got, err := webhooks.ParseConsumerID(id)
		require.NoError(t, err, id)
		require.Equal(t, "sub.1_x-y", sub, id)
		require.Equal(t, path, got, id)
	}

	// Any percent-encoding of the path parses to the same consumer.
	sub, path, err := webhooks.ParseConsumerID("s1:%2fagents%2ftask-1")
	require.NoError(t, err)
	require.Equal(t, "s1", sub)
	require.Equal(t, "/agents/task-1", path)

	for _, bad := range []string{"", "nocolon", ":%2Fa", "s1:", "s1:agents", "s1:%zz", "a b:%2Fx", strings.Repeat("a", webhooks.MaxSubscriptionIDLength+1) + ":%2Fa"} {
		_, _, err := webhooks.ParseConsumerID(bad)
		require.Error(t, err, "%q", bad)
	}
}

// The consumer IDs the engine makes are ConsumerID's, and a path with
// characters that need escaping reaches its consumer through the callback
// URL.
func TestSubscriptionConsumerIDInEngine(t *testing.T) {
	h := newHarness(t)
	h.subscribe("s1", "/agents/*")
	path := "/agents/a b%c:d"
	h.create(path, 0)
	h.appendTo(path, 10)
	d := h.nextDelivery()
	id := webhooks.ConsumerID("s1", path)
	require.Equal(t, id, d.n.ConsumerID)
	require.Equal(t, path, d.n.PrimaryStream)
	require.Equal(t, callbackBase+"/callback/"+id, d.n.Callback)
	h.waitConsumer(id, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive })
	r := h.callback(id, d.n.Token, receiver.CallbackRequest{Epoch: epoch(d.n.Epoch), Acks: streamOffsets(path, offset(10))})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	require.Equal(t, streamOffsets(path, offset(10)), h.consumer(id).Streams)
}

func TestSubscriptionTwoSubscriptionsOneStream(t *testing.T) {
	h := newHarness(t)
	h.subscribe("s1", "/agents/*")
	h.subscribe("s2", "/agents/**")
	h.create("/agents/task-1", 0)
	h.appendTo("/agents/task-1", 10)

	got := map[string]delivery{}
	for range 2 {
		d := h.nextDelivery()
		got[d.n.ConsumerID] = d
	}
	id1 := webhooks.ConsumerID("s1", "/agents/task-1")
	id2 := webhooks.ConsumerID("s2", "/agents/task-1")
	require.Contains(t, got, id1)
	require.Contains(t, got, id2)
	d1, d2 := got[id1], got[id2]
	require.Equal(t, int64(1), d1.n.Epoch)
	require.Equal(t, int64(1), d2.n.Epoch)
	require.NotEmpty(t, d1.n.WakeID)
	require.NotEqual(t, d1.n.WakeID, d2.n.WakeID)
	require.NotEqual(t, d1.n.Token, d2.n.Token)
	require.NotEqual(t, d1.n.Callback, d2.n.Callback)
	for _, id := range []string{id1, id2} {
		h.waitConsumer(id, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive && !c.InFlight })
	}

	// Tokens are not interchangeable between them.
	r := h.callback(id2, d1.n.Token, receiver.CallbackRequest{Epoch: epoch(1)})
	requireError(t, r, http.StatusUnauthorized, receiver.CodeTokenInvalid)

	// Acking and finishing one leaves the other as it was.
	r = h.callback(id1, d1.n.Token, receiver.CallbackRequest{
		Epoch:  epoch(1),
		WakeID: d1.n.WakeID,
		Acks:   streamOffsets("/agents/task-1", offset(10)),
		Done:   true,
	})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	c1 := h.consumer(id1)
	require.Equal(t, webhooks.StateIdle, c1.State)
	require.Equal(t, streamOffsets("/agents/task-1", offset(10)), c1.Streams)
	c2 := h.consumer(id2)
	require.Equal(t, webhooks.StateLive, c2.State)
	require.Equal(t, int64(1), c2.Epoch)
	require.Equal(t, streamOffsets("/agents/task-1", webhooks.OffsetNone), c2.Streams)

	// Deleting one subscription leaves the other's consumer.
	rec := h.do(http.MethodDelete, "/**?subscription=s1", "")
	require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
	h.subNoConsumer(id1)
	require.Equal(t, streamOffsets("/agents/task-1", webhooks.OffsetNone), h.consumer(id2).Streams)
}

// subFailingStore is a memstore whose subscription reads fail on demand
// with an error whose text must never reach a client.
type subFailingStore struct {
	*memstore.Store
	fail atomic.Bool
}

const subSecretErrorText = "postgres://admin:hunter2@db.internal:5432 connection refused"

func (s *subFailingStore) ListSubscriptions(ctx context.Context) ([]*webhooks.Subscription, error) {
	if s.fail.Load() {
		return nil, errors.New(subSecretErrorText)
	}
	return s.Store.ListSubscriptions(ctx)
}

func (s *subFailingStore) GetSubscription(ctx context.Context, id string) (*webhooks.Subscription, error) {
	if s.fail.Load() {
		return nil, fmt.Errorf("get %s: %w", id, errors.New(subSecretErrorText))
	}
	return s.Store.GetSubscription(ctx, id)
}

func TestSubscriptionStoreErrorIsGeneric(t *testing.T) {
	store := &subFailingStore{Store: memstore.New()}
	e, err := webhooks.New(store, newFakeSource(),
		webhooks.WithCallbackBaseURL(callbackBase),
		webhooks.WithWebhookPolicy(webhooks.WebhookPolicy{AllowLoopback: true}),
		webhooks.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	require.NoError(t, err)
	startForTest(t, e)
	handler := apiHandler(t, e)
	rec := subServe(handler, http.MethodPut, "/a/*?subscription=s1", subBody("http://127.0.0.1:9/", ""))
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())

	store.fail.Store(true)
	for _, req := range []struct{ method, target, body string }{
		{http.MethodGet, "/**?subscriptions", ""},
		{http.MethodGet, "/**?subscription=s1", ""},
		{http.MethodDelete, "/**?subscription=s1", ""},
		{http.MethodPut, "/a/*?subscription=s1", subBody("http://127.0.0.1:9/", "")},
		{http.MethodPut, "/a/*?subscription=s2", subBody("http://127.0.0.1:9/", "")},
	} {
		rec := subServe(handler, req.method, req.target, req.body)
		eb := subRequireError(t, http.StatusInternalServerError, receiver.ErrorCode("INTERNAL_ERROR"), rec.Code, rec.Body.Bytes(), rec.Header().Get("Content-Type"))
		for _, leak := range []string{"hunter2", "postgres", "db.internal", "connection refused"} {
			require.NotContains(t, eb.Message, leak, "%s %s", req.method, req.target)
			require.NotContains(t, rec.Body.String(), leak, "%s %s", req.method, req.target)
		}
	}
	store.fail.Store(false)
	rec = subServe(handler, http.MethodGet, "/**?subscription=s1", "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
}

// Requests without a subscription query go to the host's handler, and
// callbacks to the callback API.
func TestSubscriptionHandlerRouting(t *testing.T) {
	h := newHarness(t)
	rec := h.do(http.MethodPut, "/agents/*", subBody(h.recv.url(), ""))
	require.Equal(t, http.StatusNotFound, rec.Code)
	require.Empty(t, h.subList("/**"))
	rec = h.do(http.MethodGet, "/agents/x?other=1", "")
	require.Equal(t, http.StatusNotFound, rec.Code)

	// "?subscriptions" with a value still lists.
	h.subscribe("s1", "/agents/*")
	require.Equal(t, []string{"s1"}, h.subList("/agents/*"))
	rec = h.do(http.MethodGet, "/**?subscriptions=1", "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Contains(t, rec.Body.String(), `"s1"`)
}

// A subscription deleted and created again under another pattern matches
// only its new pattern.
func TestSubscriptionRecreateOtherPattern(t *testing.T) {
	h := newHarness(t)
	h.subscribe("s1", "/agents/*")
	rec := h.do(http.MethodDelete, "/agents/*?subscription=s1", "")
	require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
	h.subscribe("s1", "/other/*")

	h.create("/agents/a", 5)
	h.subNoConsumer(webhooks.ConsumerID("s1", "/agents/a"))
	h.create("/other/b", 5)
	d := h.nextDelivery()
	require.Equal(t, webhooks.ConsumerID("s1", "/other/b"), d.n.ConsumerID)
}

// A subscription takes a delivery mode: "wake", spec 001's, which is also
// what none means. Any other is refused, and nothing is stored.
func TestSubscriptionDelivery(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	body := func(delivery string) string {
		return fmt.Sprintf(`{"webhook":%q%s}`, h.recv.url(), delivery)
	}
	for _, bad := range []string{`"push"`, `"Wake"`, `"Events"`, `1`} {
		rec := h.do(http.MethodPut, "/a/*?subscription=bad", body(`,"delivery":`+bad))
		subRequireError(t, http.StatusBadRequest, receiver.CodeInvalidRequest, rec.Code, rec.Body.Bytes(), rec.Header().Get("Content-Type"))
		_, err := h.store.GetSubscription(ctx, "bad")
		require.ErrorIs(t, err, webhooks.ErrSubscriptionNotFound, bad)
	}

	rec := h.do(http.MethodPut, "/a/*?subscription=s1", body(`,"delivery":"wake"`))
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	rec = h.do(http.MethodPut, "/b/*?subscription=s2", body(""))
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	for _, id := range []string{"s1", "s2"} {
		sub, err := h.store.GetSubscription(ctx, id)
		require.NoError(t, err)
		require.Equal(t, webhooks.DeliveryWake, sub.Delivery, id)
	}
	// Naming the default or leaving it out is the same configuration.
	rec = h.do(http.MethodPut, "/a/*?subscription=s1", body(""))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	rec = h.do(http.MethodPut, "/b/*?subscription=s2", body(`,"delivery":"wake"`))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
}

// A wake subscription disabled through the Store wakes nothing, not even a
// consumer whose done leaves work pending, and keeps every acked offset;
// ResumeSubscription wakes those with pending work.
func TestDisabledWakeSubscriptionWakesNothing(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	d := h.wake("s1", "/agents/*", agentA)
	r := h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1), WakeID: d.n.WakeID, Acks: streamOffsets(agentA, offset(10))})
	require.Equal(t, http.StatusOK, r.status, r.raw)

	_, err := h.store.UpdateSubscription(ctx, "s1", func(s *webhooks.Subscription) error {
		s.Status = webhooks.StatusDisabled
		return nil
	})
	require.NoError(t, err)
	require.True(t, h.waitProgress(func() bool {
		return webhooks.LoadedSubscription(h.engine, "s1").Status == webhooks.StatusDisabled
	}), "the feed brings the status to the engine")

	h.appendTo(agentA, 5)
	r = h.callback(agentAID, r.body.Token, receiver.CallbackRequest{Epoch: epoch(1), Done: true})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	c := h.consumer(agentAID)
	require.Equal(t, webhooks.StateIdle, c.State, "done with pending work wakes nothing")
	require.Equal(t, int64(1), c.Epoch)
	h.create("/agents/b", 3)
	require.Equal(t, webhooks.StateIdle, h.consumer(webhooks.ConsumerID("s1", "/agents/b")).State, "nor does a new stream")
	h.faultRequireNoDelivery()

	_, err = h.engine.ResumeSubscription(ctx, "s1")
	require.NoError(t, err)
	woken := map[string]int64{}
	for range 2 {
		n := h.nextDelivery().n
		woken[n.PrimaryStream] = n.Epoch
	}
	require.Equal(t, map[string]int64{agentA: 2, "/agents/b": 1}, woken)
}
