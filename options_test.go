package webhooks_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/memstore"
	"github.com/streamhooks/webhooks/receiver"
)

func TestOptionsNewRequiresStoreAndSource(t *testing.T) {
	base := webhooks.WithCallbackBaseURL(callbackBase)

	e, err := webhooks.New(nil, newFakeSource(), base)
	require.Error(t, err)
	require.Nil(t, e)
	require.Contains(t, err.Error(), "store")

	e, err = webhooks.New(memstore.New(), nil, base)
	require.Error(t, err)
	require.Nil(t, e)
	require.Contains(t, err.Error(), "source")

	e, err = webhooks.New(memstore.New(), newFakeSource())
	require.Error(t, err)
	require.Nil(t, e)
	require.Contains(t, err.Error(), "WithCallbackBaseURL")

	e, err = webhooks.New(memstore.New(), newFakeSource(), base)
	require.NoError(t, err)
	require.NotNil(t, e)
}

func TestOptionsBadValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  webhooks.Option
	}{
		{"WithTokenKey", webhooks.WithTokenKey(make([]byte, webhooks.MinTokenKeyLength-1))},
		{"WithTokenKey", webhooks.WithTokenKey(nil)},
		{"WithTimeouts", webhooks.WithTimeouts(-time.Second, 0, 0)},
		{"WithTimeouts", webhooks.WithTimeouts(0, -time.Second, 0)},
		{"WithTimeouts", webhooks.WithTimeouts(0, 0, -time.Second)},
		{"WithTokenTTL", webhooks.WithTokenTTL(time.Minute - time.Nanosecond)},
		{"WithTokenTTL", webhooks.WithTokenTTL(0)},
		{"WithTokenTTL", webhooks.WithTokenTTL(-time.Hour)},
		{"WithFailureGCAfter", webhooks.WithFailureGCAfter(0)},
		{"WithFailureGCAfter", webhooks.WithFailureGCAfter(-time.Hour)},
		{"WithBackoff", webhooks.WithBackoff(nil)},
		{"WithMaxConcurrentDeliveries", webhooks.WithMaxConcurrentDeliveries(0)},
		{"WithMaxConcurrentDeliveries", webhooks.WithMaxConcurrentDeliveries(-1)},
		{"WithMaxDeliveriesPerHost", webhooks.WithMaxDeliveriesPerHost(0)},
		{"WithCallbackBaseURL", webhooks.WithCallbackBaseURL("not a url")},
		{"WithCallbackBaseURL", webhooks.WithCallbackBaseURL("")},
		{"WithCallbackBaseURL", webhooks.WithCallbackBaseURL("/relative/path")},
		{"WithCallbackBaseURL", webhooks.WithCallbackBaseURL("ftp://streams.example.com")},
		{"WithCallbackBaseURL", webhooks.WithCallbackBaseURL("https://")},
		{"WithCallbackBaseURL", webhooks.WithCallbackBaseURL("https://streams.example.com/base?x=1")},
		{"WithCallbackBaseURL", webhooks.WithCallbackBaseURL("https://streams.example.com/base#frag")},
		{"WithClock", webhooks.WithClock(nil)},
		{"WithLogger", webhooks.WithLogger(nil)},
		{"WithTracerProvider", webhooks.WithTracerProvider(nil)},
		{"WithMeterProvider", webhooks.WithMeterProvider(nil)},
		{"WithHTTPTransport", webhooks.WithHTTPTransport(nil)},
		{"WithPollInterval", webhooks.WithPollInterval(0)},
		{"WithPollInterval", webhooks.WithPollInterval(-time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The bad option comes after a good base URL, so the error
			// can only be the option's.
			e, err := webhooks.New(memstore.New(), newFakeSource(), webhooks.WithCallbackBaseURL(callbackBase), tc.opt)
			require.Error(t, err)
			require.Nil(t, e)
			require.Contains(t, err.Error(), tc.name)
		})
	}
}

func TestOptionsGoodValues(t *testing.T) {
	for name, opt := range map[string]webhooks.Option{
		"WithTokenKey":                webhooks.WithTokenKey(make([]byte, webhooks.MinTokenKeyLength)),
		"WithTimeouts zero":           webhooks.WithTimeouts(0, 0, 0),
		"WithTimeouts":                webhooks.WithTimeouts(time.Second, time.Minute, time.Second),
		"WithTokenTTL":                webhooks.WithTokenTTL(time.Minute),
		"WithFailureGCAfter":          webhooks.WithFailureGCAfter(time.Nanosecond),
		"WithBackoff":                 webhooks.WithBackoff(func(int) time.Duration { return time.Second }),
		"WithMaxConcurrentDeliveries": webhooks.WithMaxConcurrentDeliveries(1),
		"WithMaxDeliveriesPerHost":    webhooks.WithMaxDeliveriesPerHost(1),
		"WithCallbackBaseURL path":    webhooks.WithCallbackBaseURL("https://streams.example.com/v1/hooks/"),
		"WithCallbackBaseURL http":    webhooks.WithCallbackBaseURL("http://localhost:8080"),
		"WithWebhookPolicy":           webhooks.WithWebhookPolicy(webhooks.WebhookPolicy{}),
		"WithHTTPTransport":           webhooks.WithHTTPTransport(http.DefaultTransport),
		"WithPollInterval":            webhooks.WithPollInterval(time.Millisecond),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := webhooks.New(memstore.New(), newFakeSource(), webhooks.WithCallbackBaseURL(callbackBase), opt)
			require.NoError(t, err)
		})
	}
}

// The callback base URL decides where callbacks are served and what URL
// notifications carry, with or without a trailing slash.
func TestOptionsCallbackBaseURLPath(t *testing.T) {
	h := newHarness(t, webhooks.WithCallbackBaseURL("http://streams.test/v1/hooks/"))
	d := h.wake("s1", "/agents/*", "/agents/t1")
	id := d.n.ConsumerID
	require.Equal(t, "http://streams.test/v1/hooks/callback/"+id, d.n.Callback)
	h.waitConsumer(id, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive })
	rec := h.do(http.MethodPost, "/v1/hooks/callback/"+id, `{"epoch":1}`, "Authorization", "Bearer "+d.n.Token)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
}

func TestOptionsDefaultBackoff(t *testing.T) {
	for retry := 1; retry <= 15; retry++ {
		lo, span := 60*time.Second, 5*time.Second
		if retry <= 10 {
			lo, span = min(time.Duration(1<<retry)*100*time.Millisecond, 30*time.Second), time.Second
		}
		seen := map[time.Duration]bool{}
		for range 200 {
			d := webhooks.DefaultBackoff(retry)
			require.GreaterOrEqual(t, d, lo, "retry %d", retry)
			require.Less(t, d, lo+span, "retry %d", retry)
			seen[d] = true
		}
		require.Greater(t, len(seen), 1, "retry %d has no jitter", retry)
	}
	// Spot checks of the schedule itself.
	require.GreaterOrEqual(t, webhooks.DefaultBackoff(1), 200*time.Millisecond)
	require.Less(t, webhooks.DefaultBackoff(1), 1200*time.Millisecond)
	require.GreaterOrEqual(t, webhooks.DefaultBackoff(8), 25600*time.Millisecond)
	require.GreaterOrEqual(t, webhooks.DefaultBackoff(9), 30*time.Second)
	require.Less(t, webhooks.DefaultBackoff(9), 31*time.Second)
	require.GreaterOrEqual(t, webhooks.DefaultBackoff(1000), 60*time.Second)
	require.Less(t, webhooks.DefaultBackoff(1000), 65*time.Second)
}

func optNewEngine(t *testing.T, opts ...webhooks.Option) *webhooks.Engine {
	t.Helper()
	e, err := webhooks.New(memstore.New(), newFakeSource(), append([]webhooks.Option{webhooks.WithCallbackBaseURL(callbackBase)}, opts...)...)
	require.NoError(t, err)
	return e
}

func TestOptionsStartStop(t *testing.T) {
	ctx := context.Background()
	e := optNewEngine(t)
	require.NoError(t, e.Start(ctx))
	require.NoError(t, e.Start(ctx), "Start is idempotent")
	require.NoError(t, e.Stop(ctx))
	require.NoError(t, e.Stop(ctx), "Stop is idempotent")
	err := e.Start(ctx)
	require.ErrorIs(t, err, webhooks.ErrStopped)
	require.NoError(t, e.Stop(ctx))
}

func TestOptionsStopBeforeStart(t *testing.T) {
	ctx := context.Background()
	e := optNewEngine(t)
	require.NoError(t, e.Stop(ctx))
	require.ErrorIs(t, e.Start(ctx), webhooks.ErrStopped)
}

// The engine outlives the context given to Start: only Stop stops it.
func TestOptionsStartContextCancel(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	e, err := webhooks.New(h.store, h.source,
		webhooks.WithClock(h.clock),
		webhooks.WithCallbackBaseURL(callbackBase),
		webhooks.WithWebhookPolicy(webhooks.WebhookPolicy{AllowLoopback: true}))
	require.NoError(t, err)
	require.NoError(t, e.Start(ctx))
	cancel()
	stopCtx, stop := context.WithTimeout(context.Background(), waitFor)
	defer stop()
	require.NoError(t, e.Stop(stopCtx))
}

// Stop returns the context's error if its deliveries do not finish in time,
// and gives them up.
func TestOptionsStopAbandonsDeliveries(t *testing.T) {
	h := newHarness(t)
	hold := make(chan struct{})
	defer close(hold)
	h.recv.queue(reply{status: http.StatusOK, hold: hold})
	d := h.wake("s1", "/agents/*", "/agents/t1")

	// Stop abandons the held POST once its context ends: the request's
	// context ends.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, h.engine.Stop(ctx), context.Canceled)
	select {
	case <-d.ctx.Done():
	case <-time.After(waitFor):
		t.Fatal("Stop did not abandon the delivery in flight")
	}
	// The attempt stays in flight in the Store, for a later engine to time
	// out.
	c := h.consumer(d.n.ConsumerID)
	require.Equal(t, webhooks.StateWaking, c.State)
	require.True(t, c.InFlight)
}

// optCallback POSTs a callback through handler.
func optCallback(handler http.Handler, id, token, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/callback/"+id, bytes.NewBufferString(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, req)
	return rec
}

// optSecondEngine returns the callback-serving handler of a started engine
// over store and h's source and clock.
func optSecondEngine(t *testing.T, h *harness, store webhooks.Store, opts ...webhooks.Option) http.Handler {
	t.Helper()
	base := []webhooks.Option{
		webhooks.WithClock(h.clock),
		webhooks.WithCallbackBaseURL(callbackBase),
		webhooks.WithWebhookPolicy(webhooks.WebhookPolicy{AllowLoopback: true}),
	}
	e, err := webhooks.New(store, h.source, append(base, opts...)...)
	require.NoError(t, err)
	startForTest(t, e)
	return apiHandler(t, e)
}

func optKey(b byte) []byte { return bytes.Repeat([]byte{b}, webhooks.MinTokenKeyLength) }

func TestOptionsTokenKeyWinsOverStore(t *testing.T) {
	key := optKey('k')
	given := bytes.Clone(key)
	h := newHarness(t, webhooks.WithTokenKey(given))
	// The engine keeps its own copy of the key.
	clear(given)

	// The store holds another key.
	stored, err := h.store.LoadOrStoreSigningKey(context.Background(), optKey('s'))
	require.NoError(t, err)
	require.Equal(t, optKey('s'), stored, "an engine with WithTokenKey must not put a key in the store")

	d := h.wake("s1", "/agents/*", "/agents/t1")
	id := d.n.ConsumerID
	h.waitConsumer(id, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive && !c.InFlight })

	// An engine over the same store with the same key accepts the token.
	same := optSecondEngine(t, h, h.store, webhooks.WithTokenKey(key))
	rec := optCallback(same, id, d.n.Token, `{"epoch":1}`)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())

	// One that uses the store's key refuses it.
	storeKey := optSecondEngine(t, h, h.store)
	rec = optCallback(storeKey, id, d.n.Token, `{"epoch":1}`)
	require.Equal(t, http.StatusUnauthorized, rec.Code, rec.Body.String())
	require.Contains(t, rec.Body.String(), string(receiver.CodeTokenInvalid))

	// As does one with another key.
	other := optSecondEngine(t, h, h.store, webhooks.WithTokenKey(optKey('o')))
	rec = optCallback(other, id, d.n.Token, `{"epoch":1}`)
	require.Equal(t, http.StatusUnauthorized, rec.Code, rec.Body.String())
	require.Contains(t, rec.Body.String(), string(receiver.CodeTokenInvalid))
}

func TestOptionsStoreKeyShared(t *testing.T) {
	h := newHarness(t)
	// The first engine put a key in the store.
	stored, err := h.store.LoadOrStoreSigningKey(context.Background(), optKey('x'))
	require.NoError(t, err)
	require.NotEqual(t, optKey('x'), stored)
	require.GreaterOrEqual(t, len(stored), webhooks.MinTokenKeyLength)

	d := h.wake("s1", "/agents/*", "/agents/t1")
	id := d.n.ConsumerID
	h.waitConsumer(id, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive && !c.InFlight })

	// A second engine over the same store accepts engine A's token.
	b := optSecondEngine(t, h, h.store)
	rec := optCallback(b, id, d.n.Token, `{"epoch":1}`)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	// So does one given the store's key explicitly.
	explicit := optSecondEngine(t, h, h.store, webhooks.WithTokenKey(stored))
	rec = optCallback(explicit, id, d.n.Token, `{"epoch":1}`)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())

	// An engine over another store has another key.
	elsewhere := memstore.New()
	require.NoError(t, elsewhere.CreateSubscription(context.Background(), &webhooks.Subscription{
		ID: "s1", Pattern: "/agents/*", Webhook: h.recv.url(), Secret: "whsec_x",
	}))
	c := h.consumer(id)
	require.NoError(t, elsewhere.CreateConsumer(context.Background(), c))
	foreign := optSecondEngine(t, h, elsewhere)
	rec = optCallback(foreign, id, d.n.Token, `{"epoch":1}`)
	require.Equal(t, http.StatusUnauthorized, rec.Code, rec.Body.String())
	require.True(t, strings.Contains(rec.Body.String(), string(receiver.CodeTokenInvalid)), rec.Body.String())
}

// A store that cannot give a key fails Start, naming the problem.
type optKeylessStore struct{ *memstore.Store }

func (optKeylessStore) LoadOrStoreSigningKey(context.Context, []byte) ([]byte, error) {
	return nil, errors.New("key vault unavailable")
}

func TestOptionsStoreKeyError(t *testing.T) {
	e, err := webhooks.New(optKeylessStore{memstore.New()}, newFakeSource(), webhooks.WithCallbackBaseURL(callbackBase))
	require.NoError(t, err)
	err = e.Start(context.Background())
	require.Error(t, err)
	require.Contains(t, err.Error(), "key vault unavailable")

	// With WithTokenKey the store's key is not needed.
	e, err = webhooks.New(optKeylessStore{memstore.New()}, newFakeSource(), webhooks.WithCallbackBaseURL(callbackBase),
		webhooks.WithTokenKey(optKey('k')))
	require.NoError(t, err)
	startForTest(t, e)
}

// Start reads the subscriptions in the store: a second engine over a store
// spawns consumers for subscriptions created through the first.
func TestOptionsStartLoadsSubscriptions(t *testing.T) {
	h := newHarness(t)
	h.subscribe("s1", "/agents/*")

	e, err := webhooks.New(h.store, h.source,
		webhooks.WithClock(h.clock),
		webhooks.WithCallbackBaseURL(callbackBase),
		webhooks.WithWebhookPolicy(webhooks.WebhookPolicy{AllowLoopback: true}))
	require.NoError(t, err)
	startForTest(t, e)
	h.source.set("/agents/t1", 0)
	require.NoError(t, e.StreamCreated(context.Background(), "/agents/t1"))
	h.consumer(webhooks.ConsumerID("s1", "/agents/t1"))
}
