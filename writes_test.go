package webhooks_test

import (
	"context"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/memstore"
	"github.com/streamhooks/webhooks/receiver"
)

// TestWakeCycleWrites counts the Store writes of one wake cycle, from the
// append to IDLE: one answered by a callback that claims, acks and
// finishes costs the wake, the 2xx and the callback; one answered
// {"done": true} costs the wake and the done, which claims and acks in the
// same write (spec 001, Synchronous Done).
func TestWakeCycleWrites(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer string
		writes int64
	}{
		{"callback", "", 3},
		{"done", `{"done":true}`, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := &savesStore{Store: memstore.New()}
			h := newHarnessStore(t, store)
			h.subscribe("s1", "/agents/*")
			h.recv.queue(reply{status: http.StatusOK, body: tc.answer})
			h.source.set(agentA, 10)
			require.NoError(t, h.engine.StreamAppended(context.Background(), agentA))
			d := h.nextDelivery()
			if tc.answer == "" {
				h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive })
				r := h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1), WakeID: d.n.WakeID, Acks: streamOffsets(agentA, offset(10)), Done: true})
				require.Equal(t, http.StatusOK, r.status, r.raw)
			}
			c := h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateIdle })
			require.Equal(t, streamOffsets(agentA, offset(10)), c.Streams)
			require.True(t, h.waitProgress(func() bool { return webhooks.DeliveriesRunning(h.engine) == 0 }))
			require.Equal(t, tc.writes, store.saves.Load())
		})
	}
}

// A receiver may send its 2xx status with a Content-Length and hold the
// body. Its receipt waits for the body at most the grace, then makes the
// consumer LIVE on its own, well before the WAKING timeout: no retry wakes
// it twice, and the body's "done" still ends the wake.
func TestFaultEarlyStatusThenSlowBodyOfKnownLength(t *testing.T) {
	deferred := make(chan struct{}, 1)
	h := &harness{t: t, clock: newMockClock(), store: memstore.New(), source: newFakeSource(), recv: newReceiver(t),
		beforeStart: func(e *webhooks.Engine) { webhooks.SignalReceiptDeferred(e, deferred) }}
	h.startEngine(faultConstBackoff(time.Second))
	hold := make(chan struct{})
	got := make(chan struct{}, 4)
	const done = `{"done":true}`
	h.recv.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		got <- struct{}{}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "13")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-hold:
			_, _ = io.WriteString(w, done)
		case <-r.Context().Done():
		}
	})
	h.subscribe("s1", "/agents/*")
	h.create(agentA, 10)
	receive(t, got)
	select {
	case <-deferred:
	case <-time.After(waitFor):
		t.Fatal("the receipt of a 2xx with a body of known length did not wait for the body")
	}
	require.Equal(t, webhooks.StateWaking, h.consumer(agentAID).State, "the receipt was recorded before its grace")

	h.clock.Add(webhooks.ReceiptGrace)
	c := h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive })
	require.Zero(t, c.Failures)

	h.clock.Add(webhooks.DefaultWakingTimeout + time.Second)
	c = h.consumer(agentAID)
	require.Equal(t, webhooks.StateLive, c.State)
	require.Zero(t, c.Failures)
	require.Len(t, got, 0, "a consumer that answered 2xx was woken again")

	close(hold)
	c = h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateIdle })
	require.Equal(t, offset(10), c.Streams[0].Offset)
	require.Equal(t, int64(1), c.Epoch)
	h.faultRequireSettled(agentAID)
}

// heldRecordStore holds the UpdateConsumer calls of one consumer, once armed,
// until the test opens the gate.
type heldRecordStore struct {
	*memstore.Store
	mu      sync.Mutex
	id      string
	gate    chan struct{}
	entered chan struct{}
}

func (s *heldRecordStore) arm(id string) (entered, gate chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.id, s.gate, s.entered = id, make(chan struct{}), make(chan struct{}, 1)
	return s.entered, s.gate
}

func (s *heldRecordStore) UpdateConsumer(ctx context.Context, id string, fn func(*webhooks.Consumer) (webhooks.UpdateAction, error)) (*webhooks.Consumer, error) {
	s.mu.Lock()
	gate, entered := s.gate, s.entered
	if id != s.id {
		gate = nil
	}
	s.mu.Unlock()
	if gate != nil {
		entered <- struct{}{}
		<-gate
	}
	return s.Store.UpdateConsumer(ctx, id, fn)
}

// The Store write that records an answered POST holds no slot of its
// destination: with one POST per host, another consumer's POST starts
// while the first one's outcome waits for its commit.
func TestRecordingAnOutcomeFreesTheDestination(t *testing.T) {
	store := &heldRecordStore{Store: memstore.New()}
	h := newHarnessStore(t, store, webhooks.WithMaxDeliveriesPerHost(1))
	h.subscribe("s1", "/agents/*")
	hold := make(chan struct{})
	h.recv.queue(reply{status: http.StatusOK, body: `{"done":true}`, hold: hold})
	h.source.set(agentA, 10)
	require.NoError(t, h.engine.StreamAppended(context.Background(), agentA))
	require.Equal(t, agentAID, h.nextDelivery().n.ConsumerID)

	entered, gate := store.arm(agentAID)
	close(hold)
	select {
	case <-entered:
	case <-time.After(waitFor):
		t.Fatal("the outcome of the first POST was never recorded")
	}
	const agentB = "/agents/b"
	h.source.set(agentB, 10)
	require.NoError(t, h.engine.StreamAppended(context.Background(), agentB))
	require.Equal(t, webhooks.ConsumerID("s1", agentB), h.nextDelivery().n.ConsumerID, "the second POST waited for the first one's commit")

	close(gate)
	h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateIdle })
}
