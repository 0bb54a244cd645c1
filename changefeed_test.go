package webhooks_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/internal/pgtest"
	"github.com/streamhooks/webhooks/memstore"
	"github.com/streamhooks/webhooks/pgstore"
	"github.com/streamhooks/webhooks/receiver"
	"github.com/streamhooks/webhooks/sqlitestore"
)

// feedStore is a Store with the subscription feed, as every Store of this
// module is.
type feedStore interface {
	webhooks.Store
	webhooks.SubscriptionFeed
}

// probeStore counts the consumers an engine tries to create, by
// subscription. Once gated, its feed is the test's: the engine's changed
// function is sent on watching, and while hold is set each
// ListSubscriptions takes its list, says so on listed, and returns it only
// when release is sent.
type probeStore struct {
	feedStore
	mu     sync.Mutex
	spawns map[string]int

	watching chan func()
	hold     atomic.Bool
	listed   chan struct{}
	release  chan struct{}

	// failWatches and failLists are how many of the next watches and
	// lists fail; watches counts the watches begun.
	failWatches, failLists, watches atomic.Int32
}

func newProbeStore(s feedStore) *probeStore {
	p := &probeStore{feedStore: s, spawns: map[string]int{}}
	p.failWatches.Store(-1 << 30)
	p.failLists.Store(-1 << 30)
	return p
}

func (s *probeStore) gate() *probeStore {
	s.watching, s.listed, s.release = make(chan func(), 1), make(chan struct{}), make(chan struct{})
	return s
}

func (s *probeStore) CreateConsumer(ctx context.Context, c *webhooks.Consumer) error {
	s.mu.Lock()
	s.spawns[c.SubscriptionID]++
	s.mu.Unlock()
	return s.feedStore.CreateConsumer(ctx, c)
}

func (s *probeStore) spawned(sub string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.spawns[sub]
}

var errProbe = errors.New("probe: store unavailable")

func (s *probeStore) WatchSubscriptions(ctx context.Context, changed func()) error {
	s.watches.Add(1)
	if s.failWatches.Add(-1) >= 0 {
		return errProbe
	}
	if s.watching == nil {
		return s.feedStore.WatchSubscriptions(ctx, changed)
	}
	s.watching <- changed
	<-ctx.Done()
	return ctx.Err()
}

func (s *probeStore) ListSubscriptions(ctx context.Context) ([]*webhooks.Subscription, error) {
	if s.failLists.Add(-1) >= 0 {
		return nil, errProbe
	}
	subs, err := s.feedStore.ListSubscriptions(ctx)
	if !s.hold.Load() {
		return subs, err
	}
	if err := holdList(ctx, s.listed, s.release); err != nil {
		return nil, err
	}
	return subs, err
}

// holdList says on listed that a list is taken, and returns once release
// is sent, or with ctx's error.
func holdList(ctx context.Context, listed, release chan struct{}) error {
	select {
	case listed <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// feedEngines runs two engines, A on store a and B on store b, with one
// mock clock, one stream source and one webhook receiver.
func feedEngines(t *testing.T, a, b webhooks.Store) (*harness, *harness) {
	ha := newHarnessStore(t, a)
	hb := &harness{t: t, clock: ha.clock, store: b, source: ha.source, recv: ha.recv, progressed: ha.signals()}
	hb.startEngine()
	return ha, hb
}

// testEnginesShareSubscriptions checks that engine B, on another handle of
// A's data, learns of the subscriptions created and deleted through A.
func testEnginesShareSubscriptions(t *testing.T, a, b feedStore) {
	pb := newProbeStore(b)
	ha, hb := feedEngines(t, a, pb)
	ha.subscribe("s1", "/a/*")

	// A stream created through B before B has heard of s1 gets its
	// consumer at its next append after B has.
	hb.create("/a/1", 0)
	id := webhooks.ConsumerID("s1", "/a/1")
	require.Eventually(t, func() bool {
		hb.appendTo("/a/1", 1)
		_, err := hb.store.GetConsumer(context.Background(), id)
		return err == nil
	}, waitFor, time.Millisecond, "engine B never gave /a/1 a consumer of s1, created through engine A")
	d := hb.nextDelivery()
	require.Equal(t, id, d.n.ConsumerID)
	hb.create("/a/2", 1)
	require.Equal(t, webhooks.ConsumerID("s1", "/a/2"), hb.nextDelivery().n.ConsumerID, "a stream created through B once B knows s1")

	rec := ha.do(http.MethodDelete, "/a/*?subscription=s1", "")
	require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
	n := 0
	require.Eventually(t, func() bool {
		n++
		before := pb.spawned("s1")
		hb.create(fmt.Sprintf("/a/late%d", n), 1)
		return pb.spawned("s1") == before
	}, waitFor, time.Millisecond, "engine B still spawns consumers of s1, deleted through engine A")
}

func TestEnginesShareSubscriptionsMemstore(t *testing.T) {
	s := memstore.New()
	testEnginesShareSubscriptions(t, s, s)
}

func TestEnginesShareSubscriptionsSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hooks.db")
	open := func() feedStore {
		s, err := sqlitestore.Open(path, sqlitestore.WithChangePollInterval(5*time.Millisecond))
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		return s
	}
	testEnginesShareSubscriptions(t, open(), open())
}

func TestEnginesShareSubscriptionsPostgres(t *testing.T) {
	dsn, schema := pgtest.DSN(t), pgtest.Schema(t)
	open := func() feedStore {
		cfg, err := pgxpool.ParseConfig(dsn)
		require.NoError(t, err)
		cfg.ConnConfig.RuntimeParams["search_path"] = schema
		cfg.MaxConns = 4
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		s, err := pgstore.New(context.Background(), pool)
		require.NoError(t, err)
		return s
	}
	testEnginesShareSubscriptions(t, open(), open())
}

// A reload whose list was read before the engine's own create committed
// must not drop the subscription the create indexed.
func TestFeedReloadKeepsAConcurrentCreate(t *testing.T) {
	s := newProbeStore(memstore.New()).gate()
	h := newHarnessStore(t, s)
	changed := receive(t, s.watching)
	s.hold.Store(true)
	changed()
	receive(t, s.listed) // a list without s1
	h.subscribe("s1", "/a/*")
	s.release <- struct{}{}
	changed()
	receive(t, s.listed) // the stale reload has ended

	h.create("/a/1", 1)
	require.Equal(t, webhooks.ConsumerID("s1", "/a/1"), h.nextDelivery().n.ConsumerID)
}

// A reload whose list was read before the engine's own delete committed
// must not bring back the subscription the delete unindexed.
func TestFeedReloadKeepsAConcurrentDelete(t *testing.T) {
	s := newProbeStore(memstore.New()).gate()
	h := newHarnessStore(t, s)
	changed := receive(t, s.watching)
	h.subscribe("s1", "/a/*")
	s.hold.Store(true)
	changed()
	receive(t, s.listed) // a list with s1
	rec := h.do(http.MethodDelete, "/a/*?subscription=s1", "")
	require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
	s.release <- struct{}{}
	changed()
	receive(t, s.listed) // the stale reload has ended

	h.create("/a/1", 1)
	require.Zero(t, s.spawned("s1"), "the engine spawned a consumer of a subscription it deleted")
}

// A subscription deleted and created again under its id through another
// engine, between two reloads of this one, is replaced at the next: this
// engine's webhooks are then signed with the new secret.
func TestFeedReloadReplacesASubscriptionCreatedAgain(t *testing.T) {
	mem := memstore.New()
	ha := newHarnessStore(t, mem)
	ha.subscribe("s1", "/a/*")
	pb := newProbeStore(mem).gate()
	hb := &harness{t: t, clock: ha.clock, store: pb, source: ha.source, recv: ha.recv, progressed: ha.signals()}
	hb.startEngine() // B loads s1 as it is now
	changed := receive(t, pb.watching)

	rec := ha.do(http.MethodDelete, "/a/*?subscription=s1", "")
	require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
	secret := ha.subscribe("s1", "/a/*")
	pb.hold.Store(true)
	changed()
	receive(t, pb.listed) // a list with the new s1
	pb.release <- struct{}{}
	changed()
	receive(t, pb.listed) // the first reload has ended
	pb.release <- struct{}{}

	hb.create("/a/1", 1)
	d := hb.nextDelivery()
	require.NoError(t, verifySignature(secret, d.header, d.body,
		hb.clock.Now(), receiver.DefaultTolerance), "engine B signed with the deleted subscription's secret")
}

// subscriptionReadsStore counts GetSubscription calls.
type subscriptionReadsStore struct {
	*memstore.Store
	reads atomic.Int32
}

func (s *subscriptionReadsStore) GetSubscription(ctx context.Context, id string) (*webhooks.Subscription, error) {
	s.reads.Add(1)
	return s.Store.GetSubscription(ctx, id)
}

// A delivery takes its webhook and secret from the engine's subscriptions,
// which the API and the feed keep, so that a wake cycle reads no
// subscription from the Store.
func TestDeliveryReadsNoSubscription(t *testing.T) {
	s := &subscriptionReadsStore{Store: memstore.New()}
	h := newHarnessStore(t, s)
	h.subscribe("s1", "/a/*")
	s.reads.Store(0)
	h.create("/a/1", 1)
	require.Equal(t, webhooks.ConsumerID("s1", "/a/1"), h.nextDelivery().n.ConsumerID)
	require.Zero(t, s.reads.Load(), "a delivery read its subscription from the Store")
}

// receive waits for the next value on ch.
func receive[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitFor):
		t.Fatal("nothing arrived")
		panic("unreachable")
	}
}

// A watch that fails is logged as an error and begun again after
// storeErrorRetry on the engine's clock; B then learns of what it missed.
func TestFeedWatchErrorIsRetried(t *testing.T) {
	s := memstore.New()
	pb := newProbeStore(s)
	pb.failWatches.Store(1)
	testFeedRetries(t, s, pb, "webhooks: watching subscriptions", func() bool { return pb.watches.Load() == 1 })
}

// A reload whose list fails is logged as an error and tried again after
// storeErrorRetry on the engine's clock.
func TestFeedReloadErrorIsRetried(t *testing.T) {
	s := memstore.New()
	pb := newProbeStore(s)
	testFeedRetries(t, s, pb, "webhooks: reloading subscriptions", func() bool {
		pb.failLists.Store(1) // after Start's list
		return true
	})
}

// testFeedRetries runs engine A on a and engine B, which logs, on b, which
// fails once with errProbe after armed returns true; a subscription created
// through A reaches B only once B's clock has moved on.
func testFeedRetries(t *testing.T, a webhooks.Store, b *probeStore, msg string, armed func() bool) {
	logs, logger := newLogCapture()
	ha := newHarnessStore(t, a)
	hb := &harness{t: t, clock: ha.clock, store: b, source: ha.source, recv: ha.recv, progressed: ha.signals()}
	hb.startEngine(webhooks.WithLogger(logger))
	require.Eventually(t, armed, waitFor, time.Millisecond)
	ha.subscribe("s1", "/a/*")
	require.Eventually(t, func() bool { return len(logs.lines(t, msg)) == 1 }, waitFor, time.Millisecond)
	line := logs.lines(t, msg)[0]
	require.Equal(t, "ERROR", line["level"])
	require.Equal(t, errProbe.Error(), line["error"])

	hb.create("/a/1", 1)
	require.Zero(t, b.spawned("s1"), "B learned of s1 before its retry")
	id := webhooks.ConsumerID("s1", "/a/1")
	require.Eventually(t, func() bool {
		hb.clock.Add(time.Second)
		hb.appendTo("/a/1", 1)
		_, err := b.GetConsumer(context.Background(), id)
		return err == nil
	}, waitFor, time.Millisecond, "B never retried")
	require.Equal(t, id, hb.nextDelivery().n.ConsumerID)
}
