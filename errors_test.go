package webhooks_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/memstore"
)

// engineCalls calls every exported Engine method that returns an error,
// but Start, Stop, StreamDeleted and Authorize, on subscription s1 and its consumer of
// agentA.
func engineCalls(e *webhooks.Engine, webhook string) map[string]func(ctx context.Context) error {
	return map[string]func(ctx context.Context) error{
		"CreateSubscription": func(ctx context.Context) error {
			_, err := e.CreateSubscription(ctx, &webhooks.Subscription{ID: "s1", Pattern: "/agents/*", Webhook: webhook}, "")
			return err
		},
		"PauseSubscription": func(ctx context.Context) error {
			_, err := e.PauseSubscription(ctx, "s1")
			return err
		},
		"ResumeSubscription": func(ctx context.Context) error {
			_, err := e.ResumeSubscription(ctx, "s1")
			return err
		},
		"UpdateSubscription": func(ctx context.Context) error {
			_, err := e.UpdateSubscription(ctx, "s1", func(*webhooks.Subscription) error { return nil })
			return err
		},
		"RotateSecret": func(ctx context.Context) error {
			_, err := e.RotateSecret(ctx, "s1", 0)
			return err
		},
		"SendTestDelivery": func(ctx context.Context) error {
			_, err := e.SendTestDelivery(ctx, "s1")
			return err
		},
		"Rewind": func(ctx context.Context) error {
			_, err := e.Rewind(ctx, &webhooks.RewindParams{SubscriptionID: "s1", Offset: webhooks.OffsetNone})
			return err
		},
		"ListConsumers": func(ctx context.Context) error {
			_, err := e.ListConsumers(ctx, &webhooks.ListConsumersParams{SubscriptionID: "s1", Limit: 10})
			return err
		},
		"DeliveryLog": func(ctx context.Context) error {
			_, err := e.DeliveryLog(ctx, agentAID, 10)
			return err
		},
		"Subscription": func(ctx context.Context) error {
			_, err := e.Subscription(ctx, "s1")
			return err
		},
		"Subscriptions": func(ctx context.Context) error {
			_, err := e.Subscriptions(ctx)
			return err
		},
		"Consumer": func(ctx context.Context) error {
			_, err := e.Consumer(ctx, agentAID)
			return err
		},
		"Ready":          func(ctx context.Context) error { return e.Ready(ctx) },
		"Live":           func(context.Context) error { return e.Live() },
		"ResumeConsumer": func(ctx context.Context) error { return e.ResumeConsumer(ctx, agentAID) },
		"StreamCreated":  func(ctx context.Context) error { return e.StreamCreated(ctx, agentA) },
		"StreamAppended": func(ctx context.Context) error { return e.StreamAppended(ctx, agentA) },
	}
}

// Before Start every method but StreamDeleted returns ErrNotStarted, and
// none of them says so in HTTP's words.
func TestGoAPIErrNotStartedFromEveryMethod(t *testing.T) {
	h := newUnstartedHarness(t, memstore.New())
	for name, call := range engineCalls(h.engine, h.recv.url()) {
		err := call(context.Background())
		require.ErrorIs(t, err, webhooks.ErrNotStarted, name)
		require.NotContains(t, err.Error(), "SERVICE_UNAVAILABLE", name)
	}
}

// A conflicting create, a missing subscription or consumer, and an invalid
// field each come as an error that a Go caller matches, in Go's words.
func TestGoAPITypedErrors(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.subscribe("s1", "/agents/*")
	_, err := h.engine.CreateSubscription(ctx, &webhooks.Subscription{ID: "s1", Pattern: "/agents/*", Webhook: h.recv.url() + "/other"}, "")
	require.ErrorIs(t, err, webhooks.ErrSubscriptionExists)
	requireGoWords(t, err)

	_, err = h.engine.PauseSubscription(ctx, "nope")
	require.ErrorIs(t, err, webhooks.ErrSubscriptionNotFound)
	_, err = h.engine.Rewind(ctx, &webhooks.RewindParams{SubscriptionID: "nope", Offset: webhooks.OffsetNone})
	require.ErrorIs(t, err, webhooks.ErrSubscriptionNotFound)
	_, err = h.engine.Rewind(ctx, &webhooks.RewindParams{SubscriptionID: "s1", Consumer: "other:%2Fagents%2Fa", Offset: webhooks.OffsetNone})
	require.ErrorIs(t, err, webhooks.ErrConsumerNotFound)
	requireGoWords(t, err)
	require.ErrorIs(t, h.engine.ResumeConsumer(ctx, "s1:%2Fnope"), webhooks.ErrConsumerNotFound)

	for _, tc := range []struct {
		field string
		call  func() error
	}{
		{"webhook", func() error {
			_, err := h.engine.CreateSubscription(ctx, &webhooks.Subscription{ID: "s2", Pattern: "/x/*", Webhook: "ftp://x"}, "")
			return err
		}},
		{"subscription", func() error {
			_, err := h.engine.CreateSubscription(ctx, &webhooks.Subscription{ID: "a:b", Pattern: "/x/*", Webhook: h.recv.url()}, "")
			return err
		}},
		{"pattern", func() error {
			_, err := h.engine.CreateSubscription(ctx, &webhooks.Subscription{ID: "s2", Pattern: "x", Webhook: h.recv.url()}, "")
			return err
		}},
		{"retry.max_attempts", func() error {
			_, err := h.engine.UpdateSubscription(ctx, "s1", func(s *webhooks.Subscription) error {
				s.Retry = &webhooks.RetryPolicy{MaxAttempts: -1}
				return nil
			})
			return err
		}},
		{"delivery", func() error {
			_, err := h.engine.UpdateSubscription(ctx, "s1", func(s *webhooks.Subscription) error {
				s.Delivery = webhooks.DeliveryEvents
				return nil
			})
			return err
		}},
		{"pattern", func() error {
			// A stored pattern that the running engine would not match by.
			_, err := h.engine.UpdateSubscription(ctx, "s1", func(s *webhooks.Subscription) error {
				s.Pattern = "/other/*"
				return nil
			})
			return err
		}},
		{"id", func() error {
			_, err := h.engine.UpdateSubscription(ctx, "s1", func(s *webhooks.Subscription) error {
				s.ID = "s9"
				return nil
			})
			return err
		}},
		{"overlap_ms", func() error {
			_, err := h.engine.RotateSecret(ctx, "s1", -time.Second)
			return err
		}},
		{"offset", func() error {
			_, err := h.engine.Rewind(ctx, &webhooks.RewindParams{SubscriptionID: "s1", Offset: ""})
			return err
		}},
		{"limit", func() error {
			_, err := h.engine.ListConsumers(ctx, &webhooks.ListConsumersParams{SubscriptionID: "s1"})
			return err
		}},
	} {
		err := tc.call()
		var ve *webhooks.ValidationError
		require.ErrorAs(t, err, &ve, tc.field)
		require.Equal(t, tc.field, ve.Field, err.Error())
		require.NotEmpty(t, ve.Reason)
		requireGoWords(t, err)
	}
}

// A Store that cannot be reached comes to a Go caller as
// ErrStoreUnavailable.
func TestGoAPIErrStoreUnavailable(t *testing.T) {
	store := &outageStore{Store: memstore.New()}
	h := newUnstartedHarness(t, store)
	startForTest(t, h.engine)
	_, err := h.engine.CreateSubscription(context.Background(), &webhooks.Subscription{ID: "s1", Pattern: "/agents/*", Webhook: h.recv.url()}, "")
	require.NoError(t, err)
	store.down.Store(true)
	_, err = h.engine.Rewind(context.Background(), &webhooks.RewindParams{SubscriptionID: "s2", Offset: webhooks.OffsetNone})
	require.ErrorIs(t, err, webhooks.ErrStoreUnavailable)
	require.ErrorIs(t, h.engine.StreamAppended(context.Background(), agentA), webhooks.ErrStoreUnavailable)
}

// requireGoWords checks that an error meant for Go callers speaks no HTTP.
func requireGoWords(t *testing.T, err error) {
	t.Helper()
	for _, word := range []string{"PATCH", "PUT", "DELETE", "POST", "GET ", "404", "409", "400", "503", "_NOT_FOUND", "CONFLICT", "INVALID_REQUEST"} {
		require.NotContains(t, err.Error(), word)
	}
	require.True(t, strings.HasPrefix(err.Error(), "webhooks: "), err.Error())
}
