package webhooks_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/memstore"
)

// countingStore counts the consumer lookups and updates made through it.
type countingStore struct {
	webhooks.Store
	lookups, updates atomic.Int64
}

func (s *countingStore) ConsumersByStream(ctx context.Context, path string) ([]*webhooks.Consumer, error) {
	s.lookups.Add(1)
	return s.Store.ConsumersByStream(ctx, path)
}

func (s *countingStore) UpdateConsumer(ctx context.Context, id string, fn func(c *webhooks.Consumer) (webhooks.UpdateAction, error)) (*webhooks.Consumer, error) {
	s.updates.Add(1)
	return s.Store.UpdateConsumer(ctx, id, fn)
}

// idleFleet is n streams under /agents/, each with one IDLE consumer of
// s1 acked up to its tail, and an engine over them, loaded, not started.
func idleFleet(tb testing.TB, n int) (*webhooks.Engine, *countingStore, *fakeSource) {
	tb.Helper()
	ctx := context.Background()
	store := &countingStore{Store: memstore.New()}
	src := newFakeSource()
	require.NoError(tb, store.CreateSubscription(ctx, &webhooks.Subscription{
		ID: "s1", Pattern: "/agents/*", Webhook: "http://127.0.0.1:1/hook", Secret: "whsec_test", CreatedAt: testStart,
	}))
	for i := range n {
		path := fmt.Sprintf("/agents/%07d", i)
		src.streams[path] = 10
		require.NoError(tb, store.CreateConsumer(ctx, &webhooks.Consumer{
			ID: webhooks.ConsumerID("s1", path), SubscriptionID: "s1", PrimaryStream: path, State: webhooks.StateIdle,
			Streams: streamOffsets(path, offset(10)), CreatedAt: testStart, UpdatedAt: testStart,
		}))
	}
	e, err := webhooks.New(store, src, webhooks.WithClock(newMockClock()), webhooks.WithCallbackBaseURL(callbackBase))
	require.NoError(tb, err)
	require.NoError(tb, webhooks.LoadForBench(ctx, e))
	return e, store, src
}

// Start's recovery reads each stream's consumers once, and updates none
// that is IDLE and has acked its only stream's tail: an update locks the
// consumer's row, and on PostgreSQL writes it, so a recovery that updated
// every consumer wrote a million rows at each start of a million.
func TestRecoveryUpdatesNoConsumerUpToDate(t *testing.T) {
	ctx := context.Background()
	e, store, src := idleFleet(t, 100)
	src.grow("/agents/0000007", 1)
	webhooks.RecoverForBench(ctx, e)
	require.EqualValues(t, 100, store.lookups.Load())
	require.EqualValues(t, 1, store.updates.Load(), "only the consumer with pending work is updated")
	c, err := store.GetConsumer(ctx, webhooks.ConsumerID("s1", "/agents/0000007"))
	require.NoError(t, err)
	require.Equal(t, webhooks.StateWaking, c.State, "the stranded consumer is woken")
}

// An idle sweep reads no consumer: only the streams' listing. A stream
// that moved is looked up, and its stranded consumer woken, with the few
// streams that share its bucket of marks (100 streams in 64 buckets: 1.5
// on average, 11 or more about once in a million runs), and the next
// sweep leaves them alone.
func TestIdleSweepReadsNoConsumers(t *testing.T) {
	ctx := context.Background()
	e, store, src := idleFleet(t, 100)
	webhooks.RecoverForBench(ctx, e)
	store.lookups.Store(0)
	store.updates.Store(0)
	webhooks.SweepForBench(ctx, e)
	require.Zero(t, store.lookups.Load())
	require.Zero(t, store.updates.Load())

	src.grow("/agents/0000042", 1)
	webhooks.SweepForBench(ctx, e)
	looked := store.lookups.Load()
	require.GreaterOrEqual(t, looked, int64(1))
	require.LessOrEqual(t, looked, int64(12))
	require.EqualValues(t, 1, store.updates.Load())
	c, err := store.GetConsumer(ctx, webhooks.ConsumerID("s1", "/agents/0000042"))
	require.NoError(t, err)
	require.Equal(t, webhooks.StateWaking, c.State, "the stranded consumer is woken")

	webhooks.SweepForBench(ctx, e)
	require.Equal(t, looked, store.lookups.Load(), "nothing moved since")
}

// BenchmarkStreamSweep measures one stream sweep over idle consumers, one
// per stream ($SWEEP_STREAMS, 1,000,000 by default), in which no stream
// moved, against Start's recovery over the same consumers, measured in
// the same run: the ceiling, as every engine already pays it at each
// start. It reports the sweep's time as a share of the recovery's and of
// the default sweep interval, and the time of the one listing of the
// streams (MatchStreams) that the sweep makes, which is the most of it.
func BenchmarkStreamSweep(b *testing.B) {
	n := 1_000_000
	if v := os.Getenv("SWEEP_STREAMS"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		require.NoError(b, err)
	}
	ctx := context.Background()
	e, _, src := idleFleet(b, n)
	start := time.Now()
	webhooks.RecoverForBench(ctx, e)
	recovery := time.Since(start)
	pattern, err := webhooks.ParsePattern("/agents/*")
	require.NoError(b, err)
	start = time.Now()
	_, err = src.MatchStreams(ctx, pattern)
	require.NoError(b, err)
	listing := time.Since(start)
	b.ResetTimer()
	for b.Loop() {
		webhooks.SweepForBench(ctx, e)
	}
	sweep := b.Elapsed() / time.Duration(b.N)
	b.ReportMetric(recovery.Seconds(), "recovery-s")
	b.ReportMetric(sweep.Seconds(), "sweep-s")
	b.ReportMetric(listing.Seconds(), "listing-s")
	b.ReportMetric(float64(sweep)/float64(recovery), "sweep/recovery")
	b.ReportMetric(float64(sweep)/float64(60*webhooks.DefaultPollInterval), "sweep/interval")
}

// overlapStore holds each ConsumersByStream until want of them are in
// flight at once, or until the caller's context ends.
type overlapStore struct {
	webhooks.Store
	want     int
	mu       sync.Mutex
	inFlight int
	most     int
	all      chan struct{}
}

func (s *overlapStore) ConsumersByStream(ctx context.Context, path string) ([]*webhooks.Consumer, error) {
	s.mu.Lock()
	s.inFlight++
	s.most = max(s.most, s.inFlight)
	if s.inFlight == s.want {
		close(s.all)
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}()
	select {
	case <-s.all:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.Store.ConsumersByStream(ctx, path)
}

// Start's recovery and the stream sweep read the consumers of several
// streams at once, so that a Store that merges concurrent reads (pgstore)
// serves a million streams in thousands of round trips: read one after
// another, the recovery of a million consumers took hours on PostgreSQL.
func TestSweepsReadStreamsAtOnce(t *testing.T) {
	const n = 8
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	e, counting, src := idleFleet(t, n)
	store := &overlapStore{Store: counting.Store, want: n, all: make(chan struct{})}
	counting.Store = store
	webhooks.RecoverForBench(ctx, e)
	require.NoError(t, ctx.Err(), "the recovery read the streams one at a time")
	require.Equal(t, n, store.most)

	store.all = make(chan struct{})
	store.most = 0
	for i := range n {
		src.grow(fmt.Sprintf("/agents/%07d", i), 1)
	}
	webhooks.SweepForBench(ctx, e)
	require.NoError(t, ctx.Err(), "the sweep read the streams one at a time")
	require.Equal(t, n, store.most)
}

// liveHeap returns the live heap after a GC.
func liveHeap() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// What the stream sweep keeps between sweeps, and what Start's recovery
// leaves behind, does not grow with the streams: a mark per stream, 8
// bytes in a sorted slice, was the most of the memory of an engine whose
// consumers each have a stream of their own (8 MB a million). The sums by
// bucket take about half a byte a stream, up to 512 KiB (the limit of 4
// leaves room for the noise of a GC under load).
func TestSweepKeepsNoMarkPerStream(t *testing.T) {
	const n = 20_000
	ctx := context.Background()
	e, _, _ := idleFleet(t, n)
	before := liveHeap()
	webhooks.RecoverForBench(ctx, e)
	afterRecovery := liveHeap()
	webhooks.SweepForBench(ctx, e)
	afterSweep := liveHeap()
	runtime.KeepAlive(e)
	require.LessOrEqual(t, float64(afterRecovery-before)/n, 4.0, "bytes per stream kept after the recovery")
	require.LessOrEqual(t, float64(afterSweep-before)/n, 4.0, "bytes per stream kept after a sweep")
}

// failingStore fails ConsumersByStream of the path in fail, while set.
type failingStore struct {
	*countingStore
	fail atomic.Pointer[string]
}

func (s *failingStore) ConsumersByStream(ctx context.Context, path string) ([]*webhooks.Consumer, error) {
	if p := s.fail.Load(); p != nil && *p == path {
		return nil, webhooks.ErrStoreUnavailable
	}
	return s.countingStore.ConsumersByStream(ctx, path)
}

// A stream the sweep could not look at is looked at by the next sweep,
// though its tail has not moved again: the sums it was counted in are
// changed so that the next sweep's differ.
func TestSweepLooksAgainAtAStreamItFailedOn(t *testing.T) {
	ctx := context.Background()
	e, counting, src := idleFleet(t, 100)
	store := &failingStore{countingStore: &countingStore{Store: counting.Store}}
	counting.Store = store
	webhooks.RecoverForBench(ctx, e)
	path := "/agents/0000042"
	store.fail.Store(&path)
	src.grow(path, 1)
	webhooks.SweepForBench(ctx, e)
	require.Zero(t, counting.updates.Load(), "the stream's consumers could not be read")

	store.fail.Store(nil)
	webhooks.SweepForBench(ctx, e)
	require.EqualValues(t, 1, counting.updates.Load())
	c, err := counting.GetConsumer(ctx, webhooks.ConsumerID("s1", path))
	require.NoError(t, err)
	require.Equal(t, webhooks.StateWaking, c.State, "the stranded consumer is woken by the next sweep")
}

// Start's recovery looks at a stream that two subscriptions match once,
// without remembering every stream it looked at (a map of a million
// hashes, the most of its memory at its peak).
func TestRecoveryLooksAtAStreamOfTwoSubscriptionsOnce(t *testing.T) {
	const n = 50
	ctx := context.Background()
	store := &countingStore{Store: memstore.New()}
	src := newFakeSource()
	for _, id := range []string{"s1", "s2"} {
		require.NoError(t, store.CreateSubscription(ctx, &webhooks.Subscription{
			ID: id, Pattern: "/agents/*", Webhook: "http://127.0.0.1:1/hook", Secret: "whsec_test", CreatedAt: testStart,
		}))
	}
	for i := range n {
		src.streams[fmt.Sprintf("/agents/%07d", i)] = 10
	}
	e, err := webhooks.New(store, src, webhooks.WithClock(newMockClock()), webhooks.WithCallbackBaseURL(callbackBase))
	require.NoError(t, err)
	require.NoError(t, webhooks.LoadForBench(ctx, e))
	webhooks.RecoverForBench(ctx, e)
	require.EqualValues(t, n, store.lookups.Load())
	for _, id := range []string{"s1", "s2"} {
		_, err := store.GetConsumer(ctx, webhooks.ConsumerID(id, "/agents/0000007"))
		require.NoError(t, err, "each subscription has its consumer")
	}
}
