package ui_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/memstore"
	"github.com/streamhooks/webhooks/ui"
)

// Tokens the fixture's Authorizer knows: the operator may do anything, the
// reader only read.
const (
	operatorToken = "operator-token"
	readerToken   = "reader-token"
	// tenantToken is tenant "t"'s, which may do all an operator may, to
	// its own subscriptions only.
	tenantToken = "tenant-token"
)

// origin is the Origin of the fixture's requests.
const origin = "http://ui.test"

var (
	modes    = []webhooks.DeliveryMode{webhooks.DeliveryWake, webhooks.DeliveryEvents, webhooks.DeliveryHandler}
	statuses = []webhooks.SubscriptionStatus{webhooks.StatusActive, webhooks.StatusPaused, webhooks.StatusDisabled}
)

// secretsOf are what no page may show of subscription id: its secret, its
// previous secret, a custom header's value and its webhook's password.
func secretsOf(id string) []string {
	return []string{"whsec-current-" + id, "whsec-previous-" + id, "header-value-" + id, "url-password-" + id}
}

// source is a host's streams: path to event count.
type source struct {
	mu      sync.Mutex
	streams map[string]int
}

func (s *source) Stream(_ context.Context, path string) (webhooks.StreamInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.streams[path]
	if !ok {
		return webhooks.StreamInfo{}, webhooks.ErrStreamNotFound
	}
	return webhooks.StreamInfo{Path: path, Tail: fmt.Sprintf("%020d", n)}, nil
}

func (s *source) MatchStreams(context.Context, *webhooks.Pattern) ([]webhooks.StreamInfo, error) {
	return nil, nil
}

// fixture is an engine with a subscription of every mode and status, each
// with a consumer in every state, and its screen at /ui.
type fixture struct {
	t       testing.TB
	store   *memstore.Store
	engine  *webhooks.Engine
	handler http.Handler
	subs    []*webhooks.Subscription
	hook    *httptest.Server
	// hits counts the requests the webhook received.
	hits atomic.Int64
	// requestCtx, if set, is the context of the requests the fixture
	// sends, so that a Store wrapper can tell their reads from the
	// engine's own.
	requestCtx context.Context
}

func authorize(r *http.Request, op webhooks.Operation, _ string) error {
	switch r.Header.Get("Authorization") {
	case "Bearer " + operatorToken, "Bearer " + tenantToken:
		return nil
	case "Bearer " + readerToken:
		if op == webhooks.OpRead || op == webhooks.OpList {
			return nil
		}
		return webhooks.ErrForbidden
	}
	return webhooks.ErrUnauthorized
}

func newFixture(t testing.TB, opts ...ui.Option) *fixture {
	t.Helper()
	return newFixtureOn(t, nil, opts...)
}

// newFixtureOn makes a fixture whose engine uses wrap's Store, over the
// fixture's memstore, if wrap is set.
func newFixtureOn(t testing.TB, wrap func(*memstore.Store) webhooks.Store, opts ...ui.Option) *fixture {
	t.Helper()
	ctx := t.Context()
	f := &fixture{t: t, store: memstore.New()}
	f.hook = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.hits.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(f.hook.Close)
	hookURL, err := url.Parse(f.hook.URL)
	require.NoError(t, err)
	src := &source{streams: map[string]int{}}
	for _, m := range modes {
		for _, st := range statuses {
			id := string(m) + "-" + string(st)
			sec := secretsOf(id)
			u := *hookURL
			u.User = url.UserPassword("user", sec[3])
			sub := &webhooks.Subscription{ID: id, Pattern: "/" + id + "/*", Webhook: u.String(), Description: "the " + id,
				Secret: sec[0], PreviousSecret: sec[1], PreviousSecretExpiresAt: time.Unix(1_900_000_000, 0),
				CreatedAt: time.Unix(1_700_000_000, 0), Delivery: m, Status: st,
				Retry: &webhooks.RetryPolicy{MaxAttempts: 5, Schedule: []time.Duration{time.Second}}}
			if m != webhooks.DeliveryWake {
				sub.Events = &webhooks.EventsOptions{MaxBatchEvents: 10, MaxBatchBytes: 1 << 20,
					Headers: map[string]string{"X-Api-Key": sec[2]}, Filter: &webhooks.EventFilter{Field: "type", Patterns: []string{"order.*"}}}
			}
			if m == webhooks.DeliveryHandler {
				sub.Webhook, sub.Handler = "", "h"
			}
			require.NoError(t, f.store.CreateSubscription(ctx, sub))
			for i, cs := range []webhooks.ConsumerState{webhooks.StateIdle, webhooks.StateWaking, webhooks.StateLive, webhooks.StateFailed} {
				path := fmt.Sprintf("/%s/s%d", id, i)
				src.streams[path] = 3
				c := &webhooks.Consumer{ID: webhooks.ConsumerID(id, path), SubscriptionID: id, PrimaryStream: path, State: cs,
					Epoch: int64(i + 1), Streams: []webhooks.StreamOffset{{Path: path, Offset: fmt.Sprintf("%020d", 1)}}}
				if cs == webhooks.StateFailed {
					c.Failures, c.LastError = 5, "webhook answered 500"
				}
				require.NoError(t, f.store.CreateConsumer(ctx, c))
				require.NoError(t, f.store.AppendAttempts(ctx, []*webhooks.DeliveryAttempt{{ConsumerID: c.ID, At: time.Unix(1_700_000_100, 0),
					DeliveryID: "d-" + id, Attempt: 1, StatusCode: 500, Latency: 12 * time.Millisecond, ErrorClass: "status_5xx", Error: "webhook answered 500"}}, 10))
			}
			f.subs = append(f.subs, sub)
		}
	}
	// A subscription pending verification, whose next challenge is not
	// due while the test runs.
	require.NoError(t, f.store.CreateSubscription(ctx, &webhooks.Subscription{ID: "wake-pending", Pattern: "/wake-pending/*",
		Webhook: f.hook.URL, Secret: "whsec_pending", CreatedAt: time.Unix(1_700_000_000, 0), Delivery: webhooks.DeliveryWake,
		Status: webhooks.StatusPending, Verification: &webhooks.Verification{Attempts: 1,
			NextAttemptAt: time.Unix(4_000_000_000, 0), ExpiresAt: time.Unix(4_000_000_000, 0)}}))
	var store webhooks.Store = f.store
	if wrap != nil {
		store = wrap(f.store)
	}
	f.engine, err = webhooks.New(store, src, webhooks.WithCallbackBaseURL("http://127.0.0.1:1"),
		webhooks.WithAuthorizer(authorize), webhooks.WithDeliveryLog(10),
		webhooks.WithTenancy(webhooks.Tenancy{Tenant: func(r *http.Request) (string, error) {
			if r.Header.Get("Authorization") == "Bearer "+tenantToken {
				return "t", nil
			}
			return "", nil
		}}),
		webhooks.WithWebhookPolicy(webhooks.WebhookPolicy{AllowLoopback: true}),
		webhooks.WithBatchHandler("h", func(context.Context, *webhooks.Batch) error { return nil }))
	require.NoError(t, err)
	require.NoError(t, f.engine.Start(ctx))
	t.Cleanup(func() { require.NoError(t, f.engine.Stop(context.Background())) })
	h, err := ui.New(f.engine, "/ui", opts...)
	require.NoError(t, err)
	f.handler = h
	return f
}

// request sends a request to the screen as a browser on its own origin
// would, with token if set.
func (f *fixture) request(method, target, token string, form url.Values, header map[string]string) *httptest.ResponseRecorder {
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	r := httptest.NewRequest(method, origin+target, body)
	if form != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	if method == http.MethodPost {
		r.Header.Set("Origin", origin)
		r.Header.Set("Sec-Fetch-Site", "same-origin")
	}
	for k, v := range header {
		if v == "" {
			r.Header.Del(k)
		} else {
			r.Header.Set(k, v)
		}
	}
	if f.requestCtx != nil {
		r = r.WithContext(f.requestCtx)
	}
	w := httptest.NewRecorder()
	f.handler.ServeHTTP(w, r)
	return w
}

// get reads a page as the operator and requires a 200.
func (f *fixture) get(target string) string {
	f.t.Helper()
	w := f.request(http.MethodGet, target, operatorToken, nil, nil)
	require.Equal(f.t, http.StatusOK, w.Code, "GET %s: %s", target, w.Body)
	return w.Body.String()
}

// pages are every page and live read of the fixture's subscriptions.
func (f *fixture) pages() []string {
	out := []string{"/ui/", "/ui/?q=paused", "/ui/dead"}
	for _, s := range f.subs {
		q := url.Values{"id": {s.ID}}.Encode()
		out = append(out, "/ui/subscription?"+q, "/ui/subscription/live?"+q, "/ui/subscription?"+q+"&state=FAILED")
		for i := range 4 {
			cq := url.Values{"id": {webhooks.ConsumerID(s.ID, fmt.Sprintf("/%s/s%d", s.ID, i))}}.Encode()
			out = append(out, "/ui/consumer?"+cq, "/ui/consumer/live?"+cq)
		}
	}
	return out
}

func TestPagesRenderEveryModeAndStatus(t *testing.T) {
	f := newFixture(t)
	list := f.get("/ui/")
	for _, s := range f.subs {
		t.Run(s.ID, func(t *testing.T) {
			assert.Contains(t, list, ">"+s.ID+"</a>")
			q := url.Values{"id": {s.ID}}.Encode()
			page := f.get("/ui/subscription?" + q)
			assert.Contains(t, page, `data-value="`+string(s.Status)+`"`)
			assert.Contains(t, page, "<dd>"+string(s.Delivery)+"</dd>")
			assert.Contains(t, page, `data-value="1" id="count-FAILED">1<`)
			for _, st := range []string{"IDLE", "WAKING", "LIVE", "FAILED"} {
				assert.Contains(t, page, `data-value="`+st+`"`)
			}
			if s.Status == webhooks.StatusActive {
				assert.Contains(t, page, `id="pause"`)
			} else {
				assert.Contains(t, page, `id="resume"`)
			}
			if s.Delivery != webhooks.DeliveryWake {
				assert.Contains(t, page, "X-Api-Key")
			}
			live := f.get("/ui/subscription/live?" + q)
			assert.Contains(t, live, `"status":"`+string(s.Status)+`"`)
			assert.Contains(t, live, `"count/FAILED":"1"`)
			dead := webhooks.ConsumerID(s.ID, "/"+s.ID+"/s3")
			c := f.get("/ui/consumer?" + url.Values{"id": {dead}}.Encode())
			assert.Contains(t, c, `id="revive"`)
			assert.Contains(t, c, "status_5xx")
			assert.Contains(t, c, "12ms")
			assert.Contains(t, c, "/"+s.ID+"/s3")
			idle := f.get("/ui/consumer?" + url.Values{"id": {webhooks.ConsumerID(s.ID, "/"+s.ID+"/s0")}}.Encode())
			assert.NotContains(t, idle, `id="revive"`)
		})
	}
	for _, p := range f.pages() {
		f.get(p)
	}
	dead := f.get("/ui/dead")
	for _, s := range f.subs {
		assert.Contains(t, dead, webhooks.ConsumerID(s.ID, "/"+s.ID+"/s3"))
	}
	assert.Contains(t, f.get("/ui/?q=handler-paused"), ">handler-paused</a>")
	assert.NotContains(t, f.get("/ui/?q=handler-paused"), ">wake-active</a>")
}

func TestSecretsNeverShown(t *testing.T) {
	f := newFixture(t)
	check := func(extra ...string) {
		t.Helper()
		for _, p := range f.pages() {
			body := f.get(p)
			for _, s := range f.subs {
				for _, secret := range append(secretsOf(s.ID), extra...) {
					assert.NotContains(t, body, secret, "page %s", p)
				}
			}
		}
	}
	check()
	// A rotated secret is shown once, in the answer to the rotation, and
	// never again.
	w := f.request(http.MethodPost, "/ui/subscription/rotate", operatorToken, url.Values{"id": {"events-active"}, "overlap_hours": {"1"}}, nil)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	assert.Equal(t, "no-store", w.Header().Get("Cache-Control"))
	stored, err := f.store.GetSubscription(t.Context(), "events-active")
	require.NoError(t, err)
	assert.Contains(t, w.Body.String(), stored.Secret)
	assert.NotContains(t, w.Body.String(), stored.PreviousSecret)
	check(stored.Secret, stored.PreviousSecret)
}

// inlineScript finds a script element with a body, or an event handler
// attribute: what the Content-Security-Policy forbids.
var inlineScript = regexp.MustCompile(`<script[^>]*>[^<]|\son[a-z]+=`)

func TestContentSecurityPolicy(t *testing.T) {
	f := newFixture(t)
	for _, p := range append(f.pages(), "/ui/static/live.js", "/ui/nowhere") {
		w := f.request(http.MethodGet, p, operatorToken, nil, nil)
		csp := w.Header().Get("Content-Security-Policy")
		assert.Contains(t, csp, "script-src 'self'", p)
		assert.Contains(t, csp, "default-src 'none'", p)
		assert.NotContains(t, csp, "unsafe-inline", p)
		assert.NotRegexp(t, inlineScript, w.Body.String(), p)
	}
}

// action is one of the screen's POSTs, with what shows that it was done.
type action struct {
	name string
	path string
	form url.Values
	done func(t *testing.T, f *fixture) bool
}

func actions() []action {
	subStatus := func(id string, want webhooks.SubscriptionStatus) func(*testing.T, *fixture) bool {
		return func(t *testing.T, f *fixture) bool {
			s, err := f.store.GetSubscription(t.Context(), id)
			require.NoError(t, err)
			return s.Status == want
		}
	}
	deadID := webhooks.ConsumerID("events-active", "/events-active/s3")
	return []action{
		{"pause", "/ui/subscription/pause", url.Values{"id": {"wake-active"}}, subStatus("wake-active", webhooks.StatusPaused)},
		{"resume", "/ui/subscription/resume", url.Values{"id": {"wake-paused"}}, subStatus("wake-paused", webhooks.StatusActive)},
		{"rotate", "/ui/subscription/rotate", url.Values{"id": {"wake-active"}}, func(t *testing.T, f *fixture) bool {
			s, err := f.store.GetSubscription(t.Context(), "wake-active")
			require.NoError(t, err)
			return s.Secret != secretsOf("wake-active")[0]
		}},
		{"rewind", "/ui/subscription/rewind", url.Values{"id": {"events-active"}, "offset": {"-1"}}, func(t *testing.T, f *fixture) bool {
			c, err := f.store.GetConsumer(t.Context(), webhooks.ConsumerID("events-active", "/events-active/s0"))
			require.NoError(t, err)
			return c.Streams[0].Offset == webhooks.OffsetNone
		}},
		{"revive", "/ui/consumer/revive", url.Values{"consumer": {deadID}}, func(t *testing.T, f *fixture) bool {
			c, err := f.store.GetConsumer(t.Context(), deadID)
			require.NoError(t, err)
			return c.State != webhooks.StateFailed
		}},
		{"test", "/ui/subscription/test", url.Values{"id": {"wake-active"}}, nil},
		{"verify", "/ui/subscription/verify", url.Values{"id": {"wake-pending"}}, subStatus("wake-pending", webhooks.StatusActive)},
		{"challenge", "/ui/subscription/challenge", url.Values{"id": {"wake-pending"}}, func(t *testing.T, f *fixture) bool {
			s, err := f.store.GetSubscription(t.Context(), "wake-pending")
			require.NoError(t, err)
			return !s.Verification.ExpiresAt.Equal(time.Unix(4_000_000_000, 0))
		}},
	}
}

func TestActionsRefused(t *testing.T) {
	cases := []struct {
		name   string
		token  string
		header map[string]string
		want   int
	}{
		{"no credentials", "", nil, http.StatusUnauthorized},
		{"a reader", readerToken, nil, http.StatusForbidden},
		{"cross-site", operatorToken, map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"another origin", operatorToken, map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": ""}, http.StatusForbidden},
		{"no origin", operatorToken, map[string]string{"Origin": "", "Sec-Fetch-Site": ""}, http.StatusForbidden},
	}
	for _, a := range actions() {
		for _, c := range cases {
			t.Run(a.name+"/"+c.name, func(t *testing.T) {
				f := newFixture(t)
				w := f.request(http.MethodPost, a.path, c.token, a.form, c.header)
				assert.Equal(t, c.want, w.Code, w.Body.String())
				if a.done != nil {
					assert.False(t, a.done(t, f), "done though refused")
				}
				assert.Zero(t, f.hits.Load(), "delivered though refused")
			})
		}
		t.Run(a.name+"/allowed", func(t *testing.T) {
			f := newFixture(t)
			w := f.request(http.MethodPost, a.path, operatorToken, a.form, nil)
			assert.Contains(t, []int{http.StatusOK, http.StatusSeeOther}, w.Code, w.Body.String())
			if a.done != nil {
				assert.True(t, a.done(t, f), "not done")
			} else {
				assert.Equal(t, int64(1), f.hits.Load(), "the test delivery")
			}
		})
	}
}

func TestReadsRefusedWithoutAuthorization(t *testing.T) {
	f := newFixture(t)
	for _, p := range append(f.pages(), "/ui/static/app.css") {
		w := f.request(http.MethodGet, p, "", nil, nil)
		assert.Equal(t, http.StatusUnauthorized, w.Code, p)
		assert.Equal(t, "Bearer", w.Header().Get("WWW-Authenticate"), p)
		for _, s := range f.subs {
			assert.NotContains(t, w.Body.String(), s.Pattern, p)
		}
	}
}

func TestActionsAreNotGets(t *testing.T) {
	f := newFixture(t)
	for _, a := range actions() {
		w := f.request(http.MethodGet, a.path+"?"+a.form.Encode(), operatorToken, nil, nil)
		assert.Equal(t, http.StatusMethodNotAllowed, w.Code, a.name)
		if a.done != nil {
			assert.False(t, a.done(t, f), a.name)
		}
	}
}

func TestEngineNotStarted(t *testing.T) {
	e, err := webhooks.New(memstore.New(), &source{streams: map[string]int{}}, webhooks.WithCallbackBaseURL("http://127.0.0.1:1"))
	require.NoError(t, err)
	h, err := ui.New(e, "/ui")
	require.NoError(t, err)
	for _, p := range []string{"/ui/", "/ui/subscription?id=s", "/ui/consumer?id=s:%252Fa", "/ui/dead"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, p, nil))
		assert.Equal(t, http.StatusServiceUnavailable, w.Code, p)
		assert.Equal(t, "1", w.Header().Get("Retry-After"), p)
	}
}

// An action the engine refuses as invalid is the operator's to correct: a
// 400 page that says why, not a 500.
func TestInvalidActionSaysWhy(t *testing.T) {
	f := newFixture(t)
	w := f.request(http.MethodPost, "/ui/subscription/rewind", operatorToken,
		url.Values{"id": {"events-active"}, "offset": {"not-an-offset"}}, nil)
	assert.Equal(t, http.StatusBadRequest, w.Code, w.Body.String())
	assert.Contains(t, w.Body.String(), "offset")
	assert.NotContains(t, w.Body.String(), "it is logged")
}

// A tenant's screen shows, and acts on, that tenant's subscriptions only:
// another's pages and actions answer 404, and change nothing.
func TestTenantSeesOnlyItsOwn(t *testing.T) {
	f := newFixture(t)
	_, err := f.engine.CreateSubscription(webhooks.WithTenant(t.Context(), "t"),
		&webhooks.Subscription{ID: "t-sub", Pattern: "/t/*", Webhook: f.hook.URL}, "")
	require.NoError(t, err)
	as := func(target string, want int) string {
		w := f.request(http.MethodGet, target, tenantToken, nil, nil)
		require.Equal(t, want, w.Code, "GET %s: %s", target, w.Body)
		return w.Body.String()
	}
	list := as("/ui/", http.StatusOK)
	assert.Contains(t, list, ">t-sub</a>")
	assert.NotContains(t, list, ">wake-active</a>")
	assert.NotContains(t, as("/ui/dead", http.StatusOK), "events-active")
	for _, page := range f.pages()[3:] {
		as(page, http.StatusNotFound)
	}
	for _, a := range actions() {
		w := f.request(http.MethodPost, a.path, tenantToken, a.form, nil)
		assert.Equal(t, http.StatusNotFound, w.Code, "%s: %s", a.name, w.Body)
		if a.done != nil {
			assert.False(t, a.done(t, f), "%s done on another tenant's", a.name)
		}
	}
	assert.Zero(t, f.hits.Load(), "a test delivery to another tenant's")
	assert.Contains(t, f.get("/ui/"), ">t-sub</a>", "the operator sees every tenant")
}

// A pending subscription's page offers to verify it or challenge its
// endpoint again, not to pause or resume it; verifying one that is not
// pending is a 409 that says so, and changes nothing.
func TestPendingSubscriptionActions(t *testing.T) {
	f := newFixture(t)
	page := f.get("/ui/subscription?id=wake-pending")
	assert.Contains(t, page, `data-value="pending"`)
	assert.Contains(t, page, `id="verify"`)
	assert.Contains(t, page, `id="challenge"`)
	assert.NotContains(t, page, `id="resume"`)
	assert.NotContains(t, page, `id="pause"`)
	assert.NotContains(t, f.get("/ui/subscription?id=wake-active"), `id="verify"`)

	w := f.request(http.MethodPost, "/ui/subscription/verify", operatorToken, url.Values{"id": {"wake-active"}}, nil)
	assert.Equal(t, http.StatusConflict, w.Code, w.Body.String())
	assert.Contains(t, w.Body.String(), "not pending verification")
	w = f.request(http.MethodPost, "/ui/subscription/resume", operatorToken, url.Values{"id": {"wake-pending"}}, nil)
	assert.Equal(t, http.StatusConflict, w.Code, w.Body.String())
	assert.Contains(t, w.Body.String(), "verify it first")
	s, err := f.store.GetSubscription(t.Context(), "wake-pending")
	require.NoError(t, err)
	assert.Equal(t, webhooks.StatusPending, s.Status)
}
