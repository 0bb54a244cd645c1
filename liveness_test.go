package webhooks_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
)

// Liveness across instances (issue 27, L1): an acknowledged append always
// wakes its consumers, whatever fails on the way.

// flakySource is a fakeSource whose Stream fails, with an error that is
// neither ErrStreamNotFound nor ErrStoreUnavailable, while it is down: a
// dropped database connection of the host.
type flakySource struct {
	*fakeSource
	down atomic.Bool
}

// flakyDetail is in the source's error; clients must never see it.
const flakyDetail = "conn 10.0.0.7:5432 reset by peer"

func (s *flakySource) Stream(ctx context.Context, path string) (webhooks.StreamInfo, error) {
	if s.down.Load() {
		return webhooks.StreamInfo{}, errors.New(flakyDetail)
	}
	return s.fakeSource.Stream(ctx, path)
}

// requireRetryLater checks a 503 SERVICE_UNAVAILABLE with Retry-After
// that does not echo the source's error.
func requireRetryLater(t *testing.T, status int, header http.Header, body string) {
	t.Helper()
	require.Equal(t, http.StatusServiceUnavailable, status, body)
	secs, err := strconv.Atoi(header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", header.Get("Retry-After"))
	require.Positive(t, secs)
	require.Contains(t, body, string(webhooks.CodeServiceUnavailable))
	require.NotContains(t, body, flakyDetail)
}

// A stream read that fails is retried, never dropped: the append whose
// wake-up it failed is delivered once the source answers again, and the
// requests it failed meanwhile are answered 503 with Retry-After, as the
// docs say, not 500.
func TestFailedStreamReadIsRetried(t *testing.T) {
	src := &flakySource{}
	h := newHarnessWrapped(t, func(f *fakeSource) webhooks.StreamSource { src.fakeSource = f; return src })
	h.subscribe("s1", "/agents/*")
	h.create(agentA, 10)
	d := h.nextDelivery()
	h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive })

	src.down.Store(true)
	for _, body := range []string{
		fmt.Sprintf(`{"epoch":1,"acks":[{"path":%q,"offset":%q}]}`, agentA, offset(10)),
		`{"epoch":1,"done":true}`,
	} {
		rec := h.do(http.MethodPost, "/callback/"+agentAID, body, "Authorization", "Bearer "+d.n.Token, "Content-Type", "application/json")
		requireRetryLater(t, rec.Code, rec.Header(), rec.Body.String())
	}
	rec := h.do(http.MethodGet, "/agents/*?subscription=s1&consumers", "")
	requireRetryLater(t, rec.Code, rec.Header(), rec.Body.String())

	src.down.Store(false)
	r := h.callback(agentAID, d.n.Token, webhooks.CallbackRequest{Epoch: epoch(1), Acks: streamOffsets(agentA, offset(10)), Done: true})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateIdle })

	src.down.Store(true)
	h.source.grow(agentA, 5)
	require.ErrorIs(t, h.engine.StreamAppended(context.Background(), agentA), webhooks.ErrStoreUnavailable)
	src.down.Store(false)
	h.waitIdle()
	h.clock.Add(testPollInterval)
	again := h.nextDelivery()
	require.Equal(t, agentAID, again.n.ConsumerID)
	require.Equal(t, []string{agentA}, again.n.TriggeredBy)
}

// changedMsg is logged when a reload finds subscriptions that another
// engine changed.
const changedMsg = "webhooks: subscriptions changed through another engine"

// healthAfterLoad is a feedStore on which another engine records a failed
// delivery of s1 (Store.UpdateHealth) just after each ListSubscriptions:
// between an engine's load at Start and its feed's first reload, and
// before every later reload.
type healthAfterLoad struct{ feedStore }

func (s healthAfterLoad) ListSubscriptions(ctx context.Context) ([]*webhooks.Subscription, error) {
	subs, err := s.feedStore.ListSubscriptions(ctx)
	if err == nil {
		_, err = s.UpdateHealth(ctx, "s1", func(h *webhooks.SubscriptionHealth) { h.ConsecutiveFailures++ })
	}
	return subs, err
}

// An engine whose feed's first reload finds the subscriptions it loaded
// at Start logs no change, though their health moved meanwhile: health is
// no change of a subscription. A subscription created through another
// engine is logged, and alone.
func TestStartLogsNoSubscriptionChange(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b instanceBackend) {
		logs, logger := newLogCapture()
		c := newCluster(t, b.open(t, 2))
		c.start(0)
		c.subscribe(0, "s1", "/agents/*", "http://127.0.0.1:1/hook")
		c.subscribe(0, "s2", "/orders/*", "http://127.0.0.1:1/hook")
		// The Store itself: sharedStore hides its feed.
		store := healthAfterLoad{c.stores[1].Store.(feedStore)}
		e, err := webhooks.New(store, c.source,
			webhooks.WithClock(c.clock), webhooks.WithCallbackBaseURL(callbackBase),
			webhooks.WithWebhookPolicy(webhooks.WebhookPolicy{AllowLoopback: true}),
			webhooks.WithPollInterval(testPollInterval), webhooks.WithLogger(logger))
		require.NoError(t, err)
		reloaded := make(chan struct{}, 1)
		webhooks.SignalReloaded(e, reloaded)
		c.engines[1] = e
		c.handlers[1] = e.Handler(http.NotFoundHandler())
		c.start(1)
		awaitSignal(t, reloaded, "the first reload")
		require.Empty(t, logs.lines(t, changedMsg), "nothing changed")
		require.Equal(t, 1, webhooks.LoadedSubscription(e, "s1").Health.ConsecutiveFailures, "the reload takes the health as it is")

		c.subscribe(0, "s3", "/users/*", "http://127.0.0.1:1/hook")
		for !slices.Contains(webhooks.KnownSubscriptions(e), "s3") {
			awaitSignal(t, reloaded, "a reload with s3")
		}
		lines := logs.lines(t, changedMsg)
		require.Len(t, lines, 1)
		require.Equal(t, []any{"s3"}, lines[0]["added"])
	})
}

// awaitSignal waits for a token on ch.
func awaitSignal(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitFor):
		t.Fatalf("waited in vain for %s", what)
	}
}
