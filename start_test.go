package webhooks_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/memstore"
	"github.com/streamhooks/webhooks/receiver"
)

// startLoadStore records the contexts the engine loads its state with, and
// fails ListSubscriptions while fail is set.
type startLoadStore struct {
	*memstore.Store
	fail  atomic.Bool
	mu    sync.Mutex
	loads []context.Context
}

func (s *startLoadStore) record(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loads = append(s.loads, ctx)
}

func (s *startLoadStore) LoadOrStoreSigningKey(ctx context.Context, key []byte) ([]byte, error) {
	s.record(ctx)
	return s.Store.LoadOrStoreSigningKey(ctx, key)
}

func (s *startLoadStore) ListSubscriptions(ctx context.Context) ([]*webhooks.Subscription, error) {
	s.record(ctx)
	if s.fail.Load() {
		return nil, errors.New("store unreachable")
	}
	return s.Store.ListSubscriptions(ctx)
}

func (s *startLoadStore) contexts() []context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loads
}

// newUnstartedHarness is a harness whose engine is made but not started,
// with the default poll interval unless opts set one.
func newUnstartedHarness(t *testing.T, store webhooks.Store, opts ...webhooks.Option) *harness {
	t.Helper()
	h := &harness{t: t, clock: newMockClock(), store: store, source: newFakeSource(), recv: newReceiver(t)}
	e, err := webhooks.New(store, h.source, append([]webhooks.Option{
		webhooks.WithClock(h.clock),
		webhooks.WithCallbackBaseURL(callbackBase),
		webhooks.WithWebhookPolicy(webhooks.WebhookPolicy{AllowLoopback: true}),
	}, opts...)...)
	require.NoError(t, err)
	webhooks.SignalProgress(e, h.signals())
	h.engine, h.handler = e, apiHandler(t, e)
	return h
}

type startCtxKey struct{}

// New reads nothing; Start loads the signing key and the subscriptions with
// the context it is given.
func TestNewDoesNoIOStartLoadsWithItsContext(t *testing.T) {
	store := &startLoadStore{Store: memstore.New()}
	h := newUnstartedHarness(t, store)
	require.Empty(t, store.contexts(), "New read the Store")

	ctx := context.WithValue(context.Background(), startCtxKey{}, "start")
	require.NoError(t, h.engine.Start(ctx))
	t.Cleanup(func() { require.NoError(t, h.engine.Stop(context.Background())) })
	// Start reads the key and the subscriptions before it returns; a
	// SubscriptionFeed's reloads, on the engine's own context, come after.
	loads := store.contexts()
	require.GreaterOrEqual(t, len(loads), 2)
	for _, got := range loads[:2] {
		require.Equal(t, "start", got.Value(startCtxKey{}), "loaded with another context than Start's")
	}
}

// startRequire503 checks an answer refused because the engine has not
// started: 503 in the one JSON error shape, with Retry-After.
func startRequire503(t *testing.T, resp *http.Response) {
	t.Helper()
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, string(raw))
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	var body receiver.CallbackResponse
	require.NoError(t, json.Unmarshal(raw, &body), string(raw))
	require.False(t, body.OK)
	require.NotNil(t, body.Error, string(raw))
	require.Equal(t, receiver.ErrorCode("SERVICE_UNAVAILABLE"), body.Error.Code)
	require.NotEmpty(t, body.Error.Message)
}

// Before Start has loaded the key and the subscriptions, both APIs answer
// 503 SERVICE_UNAVAILABLE and change nothing; a Start whose loading fails
// leaves it so, and a later Start succeeds.
func TestAPIsBeforeStartAnswer503(t *testing.T) {
	store := &startLoadStore{Store: memstore.New()}
	h := newUnstartedHarness(t, store)
	srv := httptest.NewServer(h.handler)
	t.Cleanup(srv.Close)
	put := func() *http.Response {
		req, err := http.NewRequest(http.MethodPut, srv.URL+"/agents/*?subscription=s1",
			strings.NewReader(`{"webhook":"`+h.recv.url()+`"}`))
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		return resp
	}
	refused := func() {
		startRequire503(t, put())
		resp, err := http.Get(srv.URL + "/**?subscriptions")
		require.NoError(t, err)
		startRequire503(t, resp)
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/callback/"+agentAID, strings.NewReader(`{"epoch":1}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer x")
		resp, err = http.DefaultClient.Do(req)
		require.NoError(t, err)
		startRequire503(t, resp)
		subs, err := store.Store.ListSubscriptions(context.Background())
		require.NoError(t, err)
		require.Empty(t, subs)
	}
	refused()

	store.fail.Store(true)
	err := h.engine.Start(context.Background())
	require.ErrorContains(t, err, "store unreachable")
	refused()

	store.fail.Store(false)
	require.NoError(t, h.engine.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, h.engine.Stop(context.Background())) })
	resp := put()
	defer resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
}

// Stream events before Start are not lost. StreamCreated and StreamAppended
// say ErrNotStarted, and Start's sweep gives the new stream its consumer
// and wakes both; StreamDeleted needs no Start and removes its consumers at
// once, since no sweep looks for deleted streams.
func TestStreamEventsBeforeStartAreNotLost(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	h := newUnstartedHarness(t, store)
	require.NoError(t, store.CreateSubscription(ctx, &webhooks.Subscription{
		ID: "s1", Pattern: "/agents/*", Webhook: h.recv.url(), Secret: "whsec_x",
	}))
	for path, n := range map[string]int{"/agents/old": 2, "/agents/gone": 1} {
		h.source.set(path, n)
		c := &webhooks.Consumer{
			ID: webhooks.ConsumerID("s1", path), SubscriptionID: "s1", PrimaryStream: path,
			State: webhooks.StateIdle, Streams: streamOffsets(path, offset(n)),
		}
		require.NoError(t, store.CreateConsumer(ctx, c))
	}

	h.source.set("/agents/new", 0)
	require.ErrorIs(t, h.engine.StreamCreated(ctx, "/agents/new"), webhooks.ErrNotStarted)
	h.source.grow("/agents/old", 1)
	require.ErrorIs(t, h.engine.StreamAppended(ctx, "/agents/old"), webhooks.ErrNotStarted)
	h.source.remove("/agents/gone")
	require.NoError(t, h.engine.StreamDeleted(ctx, "/agents/gone"))
	_, err := store.GetConsumer(ctx, webhooks.ConsumerID("s1", "/agents/gone"))
	require.ErrorIs(t, err, webhooks.ErrConsumerNotFound)

	startForTest(t, h.engine)
	woken := map[string]bool{}
	for range 2 {
		woken[h.nextDelivery().n.ConsumerID] = true
	}
	require.Equal(t, map[string]bool{
		webhooks.ConsumerID("s1", "/agents/new"): true,
		webhooks.ConsumerID("s1", "/agents/old"): true,
	}, woken)
}
