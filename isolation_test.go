package webhooks_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/memstore"
)

// hangServer is a webhook endpoint on its own loopback listener that holds
// every request until the test ends or the engine gives up on it.
type hangServer struct {
	srv      *httptest.Server
	arrived  chan<- struct{}
	finished *atomic.Int64
}

func newHangServer(t *testing.T, arrived chan<- struct{}, finished *atomic.Int64, release <-chan struct{}) *hangServer {
	s := &hangServer{arrived: arrived, finished: finished}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer s.finished.Add(1)
		s.arrived <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// TestHangingEndpointsDoNotDelayOthers checks that webhooks that hang
// cannot hold up a healthy subscriber's wake, however the hanging
// consumers are spread: many consumers of one subscription, many
// subscriptions on one host, or many hosts. They outnumber the delivery cap
// three times over, and every POST they get is held; the healthy
// subscriber, whose last POST succeeded, must still get its webhook while
// all of them are held, with the clock never moved to their timeout.
func TestHangingEndpointsDoNotDelayOthers(t *testing.T) {
	const limit = 4
	const hostile = 3 * limit
	for _, spread := range []string{"one subscription", "subscriptions on one host", "many hosts"} {
		t.Run(spread, func(t *testing.T) {
			h := newHarness(t, webhooks.WithMaxConcurrentDeliveries(limit))
			// The healthy subscriber answers done, so that every append wakes
			// it again; its first wake proves it healthy.
			h.recv.queue(reply{status: http.StatusOK, body: `{"done":true}`}, reply{status: http.StatusOK, body: `{"done":true}`})
			h.wake("s1", "/agents/*", agentA)
			h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateIdle })

			arrived := make(chan struct{}, hostile)
			var finished atomic.Int64
			release := make(chan struct{})
			servers := 1
			if spread == "many hosts" {
				servers = hostile
			}
			var hosts []*hangServer
			for range servers {
				hosts = append(hosts, newHangServer(t, arrived, &finished, release))
			}
			// Before the servers close, which waits for their handlers.
			t.Cleanup(func() { close(release) })
			switch spread {
			case "one subscription":
				h.faultSubscribe("bad", "/bad/*", hosts[0].srv.URL+"/hook")
			default:
				for i := range hostile {
					host := hosts[i%len(hosts)]
					h.faultSubscribe(fmt.Sprintf("bad%d", i), fmt.Sprintf("/bad/%d", i), host.srv.URL+"/hook")
				}
			}
			for i := range hostile {
				h.create(fmt.Sprintf("/bad/%d", i), 0)
				h.appendTo(fmt.Sprintf("/bad/%d", i), 10)
			}
			// The hanging POSTs take the whole cap.
			for range limit {
				select {
				case <-arrived:
				case <-time.After(waitFor):
					t.Fatal("the hanging endpoints never got their POSTs")
				}
			}

			h.appendTo(agentA, 10)
			d := h.nextDelivery()
			require.EqualValues(t, 2, d.n.Epoch)
			require.Zero(t, finished.Load(), "a hanging POST ended before the healthy one arrived")
			h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateIdle && c.Epoch == 2 })
			require.Empty(t, arrived, "the hanging endpoints got more POSTs than the cap")
		})
	}
}

// TestHostLimitLeavesCapacityForOtherHosts checks that the consumers of one
// host that hangs get no more POSTs than WithMaxDeliveriesPerHost allows,
// so that a subscriber never delivered to before, which has no standing
// yet, still finds room under the cap.
func TestHostLimitLeavesCapacityForOtherHosts(t *testing.T) {
	const limit, perHost, hostile = 4, 2, 12
	h := newHarness(t, webhooks.WithMaxConcurrentDeliveries(limit), webhooks.WithMaxDeliveriesPerHost(perHost))
	arrived := make(chan struct{}, hostile)
	var finished atomic.Int64
	release := make(chan struct{})
	bad := newHangServer(t, arrived, &finished, release)
	t.Cleanup(func() { close(release) })
	h.faultSubscribe("bad", "/bad/*", bad.srv.URL+"/hook")
	for i := range hostile {
		h.create(fmt.Sprintf("/bad/%d", i), 0)
		h.appendTo(fmt.Sprintf("/bad/%d", i), 10)
	}
	for range perHost {
		select {
		case <-arrived:
		case <-time.After(waitFor):
			t.Fatal("the hanging endpoint never got its POSTs")
		}
	}

	h.wake("s1", "/agents/*", agentA)
	require.Zero(t, finished.Load(), "a hanging POST ended before the healthy one arrived")
	h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive })
	require.Empty(t, arrived, "the hanging host got more POSTs than its limit")
}

// subscriptionErrStore, once armed, fails the second GetSubscription.
type subscriptionErrStore struct {
	*memstore.Store
	armed atomic.Int32 // calls left until the one that fails
}

func (s *subscriptionErrStore) GetSubscription(ctx context.Context, id string) (*webhooks.Subscription, error) {
	if s.armed.Load() > 0 && s.armed.Add(-1) == 0 {
		return nil, errors.New("store unavailable")
	}
	return s.Store.GetSubscription(ctx, id)
}

// TestAttemptWhoseHostCannotBeReadIsRetried checks that an attempt whose
// subscription the engine has not loaded (created through another engine,
// and not yet reported by the feed) and the Store fails to read, after the
// attempt was marked as sent, is not lost: it times out like a lost POST
// and is retried. The scheduler reads the subscription before it marks the
// attempt, and the send reads it again.
func TestAttemptWhoseHostCannotBeReadIsRetried(t *testing.T) {
	ctx := context.Background()
	store := &subscriptionErrStore{Store: memstore.New()}
	// The feed never reports: the engine knows only what Start loaded.
	h := newHarnessStore(t, newProbeStore(store).gate(), faultConstBackoff(time.Second))
	require.NoError(t, store.CreateSubscription(ctx, &webhooks.Subscription{
		ID: "s1", Pattern: "/agents/*", Webhook: h.recv.url(), Secret: "whsec_" + strings.Repeat("A", 43), CreatedAt: h.clock.Now(),
	}))
	h.source.set(agentA, 10)
	h.waitIdle() // the scheduler has looked, and finds the consumer at its next poll
	require.NoError(t, store.CreateConsumer(ctx, &webhooks.Consumer{
		ID: agentAID, SubscriptionID: "s1", PrimaryStream: agentA,
		State: webhooks.StateWaking, Epoch: 1, WakeID: "w_00000000000000000000000000000001",
		Streams: streamOffsets(agentA, webhooks.OffsetNone), Deadline: h.clock.Now(),
	}))
	store.armed.Store(2)
	h.clock.Add(testPollInterval) // the poll finds the consumer due
	h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.InFlight && c.Attempt == 1 })
	// Read before the scheduler parks again.
	require.True(t, h.waitProgress(func() bool { return store.armed.Load() == 0 }), "the send never read the subscription")
	h.faultRequireNoDelivery()

	h.clock.Add(webhooks.DefaultWakingTimeout)
	h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.Failures == 1 && !c.InFlight })
	h.clock.Add(time.Second)
	d := h.nextDelivery()
	require.EqualValues(t, 1, d.n.Epoch)
	h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive && c.Attempt == 2 })
}
