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
