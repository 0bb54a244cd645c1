package webhooks_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/memstore"
)

// outageStore is a Store whose consumer reads and writes fail with
// ErrStoreUnavailable while it is down.
type outageStore struct {
	webhooks.Store
	down atomic.Bool
}

func (s *outageStore) unavailable() error {
	if s.down.Load() {
		return fmt.Errorf("test outage: %w", webhooks.ErrStoreUnavailable)
	}
	return nil
}

func (s *outageStore) ConsumersByStream(ctx context.Context, path string) ([]*webhooks.Consumer, error) {
	if err := s.unavailable(); err != nil {
		return nil, err
	}
	return s.Store.ConsumersByStream(ctx, path)
}

func (s *outageStore) DueConsumers(ctx context.Context, now time.Time, limit int) ([]*webhooks.Consumer, error) {
	if err := s.unavailable(); err != nil {
		return nil, err
	}
	return s.Store.DueConsumers(ctx, now, limit)
}

// More streams are missed in an outage than the engine keeps paths of:
// it sweeps every stream of the subscriptions it loaded at Start instead,
// so the stream created last, whose path it did not keep, still gets its
// consumer.
func TestStreamsMissedBeyondTheBoundAreSwept(t *testing.T) {
	store := &outageStore{Store: memstore.New()}
	h := newUnstartedHarness(t, store)
	require.NoError(t, store.CreateSubscription(context.Background(), &webhooks.Subscription{
		ID: "s1", Pattern: "/agents/*", Webhook: h.recv.url(), Secret: "whsec_test", CreatedAt: testStart,
	}))
	startForTest(t, h.engine)
	store.down.Store(true)
	for i := range 1100 {
		p := fmt.Sprintf("/other/%d", i)
		h.source.set(p, 1)
		require.ErrorIs(t, h.engine.StreamCreated(context.Background(), p), webhooks.ErrStoreUnavailable)
	}
	h.source.set(agentA, 10)
	require.ErrorIs(t, h.engine.StreamCreated(context.Background(), agentA), webhooks.ErrStoreUnavailable)

	store.down.Store(false)
	h.clock.Add(webhooks.DefaultPollInterval)
	d := h.nextDelivery()
	require.Equal(t, agentAID, d.n.ConsumerID)
}

func (s *outageStore) GetSubscription(ctx context.Context, id string) (*webhooks.Subscription, error) {
	if err := s.unavailable(); err != nil {
		return nil, err
	}
	return s.Store.GetSubscription(ctx, id)
}

// outageLines records the engine's log lines about requests failed by a
// Store outage, with their suppressed counts.
type outageLines struct {
	mu         sync.Mutex
	suppressed []int64
}

func (l *outageLines) Enabled(context.Context, slog.Level) bool { return true }
func (l *outageLines) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *outageLines) WithGroup(string) slog.Handler            { return l }
func (l *outageLines) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "webhooks: request failed: store unavailable" {
		return nil
	}
	var n int64
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "suppressed" {
			n = a.Value.Int64()
		}
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.suppressed = append(l.suppressed, n)
	return nil
}

func (l *outageLines) lines() []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.suppressed)
}

// While the Store cannot be reached every API request fails with a 503,
// and the log of them is sampled: a few lines at once, then one a second
// that counts the requests not logged since the last line.
func TestOutageRequestLogIsSampled(t *testing.T) {
	store := &outageStore{Store: memstore.New()}
	logs := &outageLines{}
	h := newHarnessStore(t, store, webhooks.WithLogger(slog.New(logs)))
	store.down.Store(true)
	get := func() {
		rec := h.do(http.MethodGet, "/agents/*?subscription=s1", "")
		require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
	}
	for range 100 {
		get()
	}
	require.Equal(t, []int64{0, 0, 0, 0, 0}, logs.lines(), "a burst of lines, then none")
	h.clock.Add(time.Second)
	get()
	require.Equal(t, []int64{0, 0, 0, 0, 0, 95}, logs.lines(), "one more line, counting the 95 not logged")
}

// A stream deleted while the Store cannot be reached loses its consumer
// once the Store answers again: the scheduler retries the deletion.
func TestStreamDeletedInAnOutageIsRetried(t *testing.T) {
	store := &outageStore{Store: memstore.New()}
	h := newHarnessStore(t, store)
	h.source.set(agentA, 10)
	h.subscribe("s1", "/agents/*")
	h.consumer(agentAID)

	store.down.Store(true)
	h.source.remove(agentA)
	require.ErrorIs(t, h.engine.StreamDeleted(context.Background(), agentA), webhooks.ErrStoreUnavailable)
	h.consumer(agentAID)

	store.down.Store(false)
	h.clock.Add(testPollInterval)
	h.waitGone(agentAID)
}

// A stream deleted and created again while the Store cannot be reached
// gets a new consumer from its start once the Store answers: the old one,
// acked past the new stream's tail, would never see pending work in it.
// A stream created and then deleted in the outage gets none.
func TestStreamDeletedAndCreatedInAnOutage(t *testing.T) {
	store := &outageStore{Store: memstore.New()}
	// The clock jumps a poll interval at once. A timeout within the jump
	// (of a POST still on its way, of its WAKING or of its LIVE consumer)
	// would send a consumer a second webhook.
	long := 2 * testPollInterval
	h := newHarnessStore(t, store, webhooks.WithTimeouts(long, long, long))
	h.source.set(agentA, 10)
	h.subscribe("s1", "/agents/*")
	old := h.consumer(agentAID)
	require.NotEqual(t, webhooks.OffsetNone, old.Streams[0].Offset, "adopted at its tail")

	store.down.Store(true)
	h.clock.Add(time.Second)
	h.source.remove(agentA)
	require.ErrorIs(t, h.engine.StreamDeleted(context.Background(), agentA), webhooks.ErrStoreUnavailable)
	h.source.set(agentA, 3)
	require.ErrorIs(t, h.engine.StreamCreated(context.Background(), agentA), webhooks.ErrStoreUnavailable)
	const brief, last = "/agents/brief", "/agents/z"
	h.source.set(brief, 3)
	require.ErrorIs(t, h.engine.StreamCreated(context.Background(), brief), webhooks.ErrStoreUnavailable)
	h.source.remove(brief)
	require.ErrorIs(t, h.engine.StreamDeleted(context.Background(), brief), webhooks.ErrStoreUnavailable)
	h.source.set(last, 3)
	require.ErrorIs(t, h.engine.StreamCreated(context.Background(), last), webhooks.ErrStoreUnavailable)

	store.down.Store(false)
	h.clock.Add(testPollInterval)
	got := map[string][]webhooks.StreamOffset{}
	for range 2 {
		d := h.nextDelivery()
		got[d.n.ConsumerID] = d.n.Streams
	}
	require.Equal(t, map[string][]webhooks.StreamOffset{
		agentAID:                        {{Path: agentA, Offset: webhooks.OffsetNone}},
		webhooks.ConsumerID("s1", last): {{Path: last, Offset: webhooks.OffsetNone}},
	}, got, "agentA has a new consumer, from its start")
	// Missed events are retried in path order, so the brief stream's turn
	// came before the last stream's webhook.
	_, err := store.GetConsumer(context.Background(), webhooks.ConsumerID("s1", brief))
	require.ErrorIs(t, err, webhooks.ErrConsumerNotFound, "a stream created and deleted in the outage has no consumer")
}
