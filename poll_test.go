package webhooks_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/internal/mockclock"
	"github.com/streamhooks/webhooks/memstore"
)

// pollClock is a mock clock that reports each time the scheduler arms its
// timer, which it does through Until.
type pollClock struct {
	*mockclock.Clock
	armed chan time.Time
}

func (c *pollClock) Until(t time.Time) time.Duration {
	select {
	case c.armed <- t:
	default:
	}
	return c.Mock.Until(t)
}

// A deadline written into the Store by something other than this engine,
// such as another engine or one that died, kicks no scheduler: the poll
// finds it within the poll interval, though the scheduler knew of no
// deadline at all.
func TestSchedulerPollsTheStore(t *testing.T) {
	for _, poll := range []time.Duration{0, 3 * time.Second} {
		t.Run(poll.String(), func(t *testing.T) {
			clk := &pollClock{Clock: newMockClock(), armed: make(chan time.Time, 16)}
			opts := []webhooks.Option{webhooks.WithClock(clk)}
			want := webhooks.DefaultPollInterval
			if poll > 0 {
				opts, want = append(opts, webhooks.WithPollInterval(poll)), poll
			}
			h := newUnstartedHarness(t, memstore.New(), opts...)
			h.clock = clk.Clock
			startForTest(t, h.engine)
			select {
			case at := <-clk.armed:
				require.Equal(t, h.clock.Now().Add(want), at, "an idle scheduler polls after the interval")
			case <-time.After(waitFor):
				t.Fatal("the idle scheduler armed no timer")
			}
			h.subscribe("s1", "/agents/*")
			h.source.set(agentA, 10)
			require.NoError(t, h.store.CreateConsumer(context.Background(), &webhooks.Consumer{
				ID: agentAID, SubscriptionID: "s1", PrimaryStream: agentA,
				State: webhooks.StateWaking, Epoch: 1, WakeID: "w_00000000000000000000000000000001",
				Streams: streamOffsets(agentA, webhooks.OffsetNone), Deadline: h.clock.Now(),
			}))
			h.clock.Add(want)
			d := h.nextDelivery()
			require.Equal(t, agentAID, d.n.ConsumerID)
			require.Equal(t, int64(1), d.n.Epoch)
		})
	}
}
