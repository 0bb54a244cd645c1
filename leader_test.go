package webhooks_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/internal/mockclock"
	"github.com/streamhooks/webhooks/memstore"
)

// Messages of the lines logged when an instance gains or loses a lease.
const (
	gainedMsg = "webhooks: this instance gained a lease"
	lostMsg   = "webhooks: this instance lost a lease"
)

// leaseSpy is a shared memstore seen by one engine instance: it reports
// each TryLease on tries, and while unreachable is set fails TryLease and
// ReleaseLease, as a Store the instance has lost contact with.
type leaseSpy struct {
	*memstore.Store
	tries       chan leaseTry
	unreachable atomic.Bool
}

// leaseTry is one TryLease call: when, and whether it was granted.
type leaseTry struct {
	now     time.Time
	granted bool
}

func newLeaseSpy(shared *memstore.Store) *leaseSpy {
	return &leaseSpy{Store: shared, tries: make(chan leaseTry, 64)}
}

func (s *leaseSpy) TryLease(ctx context.Context, name, holder string, now, until time.Time) (bool, error) {
	if s.unreachable.Load() {
		s.tries <- leaseTry{now: now}
		return false, errors.New("store unreachable")
	}
	ok, err := s.Store.TryLease(ctx, name, holder, now, until)
	s.tries <- leaseTry{now: now, granted: ok}
	return ok, err
}

func (s *leaseSpy) ReleaseLease(ctx context.Context, name, holder string) error {
	if s.unreachable.Load() {
		return errors.New("store unreachable")
	}
	return s.Store.ReleaseLease(ctx, name, holder)
}

// nextTry waits for the instance's next lease attempt.
func (s *leaseSpy) nextTry(t *testing.T) leaseTry {
	t.Helper()
	select {
	case try := <-s.tries:
		return try
	case <-time.After(waitFor):
		t.Fatal("the engine made no lease attempt")
		return leaseTry{}
	}
}

// granted waits for the instance's next lease attempt and returns whether
// it was granted.
func (s *leaseSpy) granted(t *testing.T) bool {
	t.Helper()
	return s.nextTry(t).granted
}

// instance is one of several engines sharing a Store and a mock clock, with
// a metric reader and a log of its own.
type instance struct {
	*harness
	reader *sdkmetric.ManualReader
	logs   *logCapture
}

func newInstance(t *testing.T, store webhooks.Store, clk *mockclock.Clock, opts ...webhooks.Option) *instance {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	// Runs after the engine's Stop: cleanups run last-in first-out.
	t.Cleanup(func() { require.NoError(t, mp.Shutdown(context.Background())) })
	logs, logger := newLogCapture()
	h := &harness{t: t, clock: clk, store: store, source: newFakeSource(), recv: newReceiver(t)}
	h.startEngine(append([]webhooks.Option{webhooks.WithMeterProvider(mp), webhooks.WithLogger(logger)}, opts...)...)
	return &instance{harness: h, reader: reader, logs: logs}
}

// consumerGauge returns the instance's webhooks.consumers points by state,
// empty if it reports none.
func (in *instance) consumerGauge(t *testing.T) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, in.reader.Collect(context.Background(), &rm))
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == "webhooks.consumers" {
				return telInt64Points(t, m, "state")
			}
		}
	}
	return map[string]int64{}
}

// summedGauge sums the consumer gauge over instances, as a metrics backend
// does over the processes that report it.
func summedGauge(t *testing.T, instances ...*instance) map[string]int64 {
	t.Helper()
	sum := map[string]int64{}
	for _, in := range instances {
		for state, n := range in.consumerGauge(t) {
			sum[state] += n
		}
	}
	return sum
}

// storeConsumers fills store with two IDLE consumers and a LIVE one, with no
// deadline, so that no engine acts on them.
func storeConsumers(t *testing.T, store webhooks.Store) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, store.CreateSubscription(ctx, &webhooks.Subscription{ID: "s1", Pattern: "/agents/*", Webhook: "https://example.com/hook", Secret: "whsec_x"}))
	for path, state := range map[string]webhooks.ConsumerState{"/agents/a": webhooks.StateIdle, "/agents/b": webhooks.StateIdle, "/agents/c": webhooks.StateLive} {
		c := &webhooks.Consumer{ID: webhooks.ConsumerID("s1", path), SubscriptionID: "s1", PrimaryStream: path, State: state,
			Streams: streamOffsets(path, webhooks.OffsetNone)}
		require.NoError(t, store.CreateConsumer(ctx, c))
	}
}

var storeGauge = map[string]int64{"IDLE": 2, "WAKING": 0, "LIVE": 1, "FAILED": 0}

// Two engines on one Store: only the one that holds the lease reports the
// Store-wide gauge, so the sum over both is the Store's count, not twice it.
func TestMetricsGaugeSummedOverInstances(t *testing.T) {
	store, clk := memstore.New(), newMockClock()
	storeConsumers(t, store)
	a := newInstance(t, store, clk)
	b := newInstance(t, store, clk)

	require.Equal(t, storeGauge, a.consumerGauge(t), "the first instance started holds the lease")
	require.Empty(t, b.consumerGauge(t), "the other reports nothing")
	require.Equal(t, storeGauge, summedGauge(t, a, b))
	gained := a.logs.lines(t, gainedMsg)
	require.Len(t, gained, 1)
	require.Equal(t, "INFO", gained[0]["level"])
	require.Equal(t, "metrics", gained[0]["lease"])
	require.Empty(t, b.logs.lines(t, gainedMsg))
}

// When the instance holding the lease stops, it releases the lease, and
// another takes it over at its next renewal, well before the lease would
// have expired.
func TestMetricsLeaseTakenOverAfterStop(t *testing.T) {
	shared, clk := memstore.New(), newMockClock()
	storeConsumers(t, shared)
	spyA, spyB := newLeaseSpy(shared), newLeaseSpy(shared)
	a := newInstance(t, spyA, clk)
	require.True(t, spyA.granted(t))
	b := newInstance(t, spyB, clk)
	require.False(t, spyB.granted(t))

	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(t, a.engine.Stop(ctx))
	require.Empty(t, a.consumerGauge(t), "a stopped instance reports nothing")
	lost := a.logs.lines(t, lostMsg)
	require.Len(t, lost, 1)
	require.Equal(t, "INFO", lost[0]["level"])
	require.Equal(t, "metrics", lost[0]["lease"])

	clk.Add(webhooks.LeaseRenewal(b.engine))
	require.True(t, spyB.granted(t), "the released lease is taken over at the next renewal")
	require.Equal(t, storeGauge, b.consumerGauge(t))
	require.Equal(t, storeGauge, summedGauge(t, a, b))
	require.Len(t, b.logs.lines(t, gainedMsg), 1)
}

// An instance that can no longer reach the Store keeps reporting only until
// its lease ends by its own clock; then the other takes the lease, and
// never do both report.
func TestMetricsLeaseTakenOverAfterExpiry(t *testing.T) {
	shared, clk := memstore.New(), newMockClock()
	storeConsumers(t, shared)
	spyA, spyB := newLeaseSpy(shared), newLeaseSpy(shared)
	a := newInstance(t, spyA, clk)
	require.True(t, spyA.granted(t))
	b := newInstance(t, spyB, clk)
	require.False(t, spyB.granted(t))
	renewal := webhooks.LeaseRenewal(a.engine)

	spyA.unreachable.Store(true)
	for range 2 {
		clk.Add(renewal)
		require.False(t, spyA.granted(t))
		require.False(t, spyB.granted(t), "a lease is held for three renewals")
		require.Equal(t, storeGauge, a.consumerGauge(t), "an instance reports until its lease ends")
		require.Empty(t, b.consumerGauge(t))
	}
	clk.Add(renewal)
	require.False(t, spyA.granted(t))
	require.True(t, spyB.granted(t), "an expired lease is taken over")
	require.Empty(t, a.consumerGauge(t), "an instance whose lease ended reports nothing")
	require.Equal(t, storeGauge, b.consumerGauge(t))
	require.Len(t, a.logs.lines(t, lostMsg), 1)
	require.Len(t, b.logs.lines(t, gainedMsg), 1)
}

// An engine renews its lease every poll interval, but not more often than
// every 5 s.
func TestMetricsLeaseRenewalInterval(t *testing.T) {
	for _, tc := range []struct{ poll, renewal time.Duration }{{time.Second, 5 * time.Second}, {time.Minute, time.Minute}} {
		t.Run(tc.poll.String(), func(t *testing.T) {
			spy, clk := newLeaseSpy(memstore.New()), newMockClock()
			newInstance(t, spy, clk, webhooks.WithPollInterval(tc.poll))
			require.Equal(t, leaseTry{now: testStart, granted: true}, spy.nextTry(t), "Start takes the lease")
			clk.Add(tc.renewal)
			require.Equal(t, leaseTry{now: testStart.Add(tc.renewal), granted: true}, spy.nextTry(t), "the first renewal")
		})
	}
}

// A Store without the Leaser capability serves one engine, which reports
// the gauge with no lease.
func TestMetricsGaugeWithoutLeaser(t *testing.T) {
	store := struct{ webhooks.Store }{memstore.New()}
	storeConsumers(t, store)
	in := newInstance(t, store, newMockClock())
	require.Equal(t, storeGauge, in.consumerGauge(t))
	require.Empty(t, in.logs.lines(t, gainedMsg))
}
