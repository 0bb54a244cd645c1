package pgstore

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/internal/pgtest"
	"github.com/streamhooks/webhooks/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newPool opens a pool whose connections use schema, closed when the test
// ends or by the caller.
func newPool(t testing.TB, schema string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.DSN(t))
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// newStore returns a store in a fresh schema.
func newStore(t testing.TB, opts ...Option) *Store {
	t.Helper()
	s, err := New(context.Background(), newPool(t, pgtest.Schema(t)), opts...)
	require.NoError(t, err)
	return s
}

// closingStore closes its pool, for storetest's suites that close and
// reopen a store.
type closingStore struct {
	*Store
}

func (s closingStore) Close() error {
	s.pool.Close()
	return nil
}

// schemas maps the directories RunDurable hands out to the schemas that
// stand for them.
type schemas map[string]string

func (m schemas) open(t *testing.T, dir string, opts ...Option) webhooks.Store {
	t.Helper()
	if m[dir] == "" {
		m[dir] = pgtest.Schema(t)
	}
	s, err := New(t.Context(), newPool(t, m[dir]), opts...)
	require.NoError(t, err)
	return closingStore{s}
}

func TestStore(t *testing.T) {
	pgtest.DSN(t)
	storetest.Run(t, func(t *testing.T) webhooks.Store { return newStore(t) })
}

func TestStoreDurable(t *testing.T) {
	pgtest.DSN(t)
	m := schemas{}
	storetest.RunDurable(t, func(t *testing.T, dir string) webhooks.Store { return m.open(t, dir) })
}

func TestStoreEncryptedDurable(t *testing.T) {
	pgtest.DSN(t)
	m := schemas{}
	storetest.RunDurable(t, func(t *testing.T, dir string) webhooks.Store { return m.open(t, dir, WithEncryptionKey(key('k'))) })
}

// TestStoreShared runs the shared suite on two pools on one schema, as two
// engine processes would use it.
func TestStoreShared(t *testing.T) {
	pgtest.DSN(t)
	storetest.RunShared(t, func(t *testing.T) (webhooks.Store, webhooks.Store) {
		schema := pgtest.Schema(t)
		a, err := New(t.Context(), newPool(t, schema))
		require.NoError(t, err)
		b, err := New(t.Context(), newPool(t, schema))
		require.NoError(t, err)
		return a, b
	})
}

func key(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

// A watch whose connection dies returns an error other than its context's,
// and a new watch, on a new connection, reports changes again.
func TestWatchSubscriptionsAfterALostConnection(t *testing.T) {
	schema := pgtest.Schema(t)
	cfg, err := pgxpool.ParseConfig(pgtest.DSN(t))
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.ConnConfig.RuntimeParams["application_name"] = schema
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := New(t.Context(), pool)
	require.NoError(t, err)

	calls := make(chan struct{}, 16)
	watch := func(ctx context.Context) chan error {
		done := make(chan error, 1)
		go func() { done <- s.WatchSubscriptions(ctx, func() { calls <- struct{}{} }) }()
		waitSignal(t, calls, "no call once watching")
		return done
	}
	done := watch(t.Context())
	// The watch's connection is the one whose last query read the schema.
	pgtest.Exec(t, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '"+schema+
		"' AND query = 'SELECT coalesce(current_schema(), '''')'")
	err = waitSignal(t, done, "the watch did not end when its connection died")
	require.Error(t, err)
	require.NotErrorIs(t, err, context.Canceled)

	ctx, cancel := context.WithCancel(t.Context())
	done = watch(ctx)
	require.NoError(t, s.CreateSubscription(ctx, &webhooks.Subscription{ID: "s", Pattern: "/a", Webhook: "https://example.com"}))
	waitSignal(t, calls, "the new watch did not report a create")
	cancel()
	require.ErrorIs(t, waitSignal(t, done, "the watch did not end with its context"), context.Canceled)
}

// waitSignal waits, boundedly, for a value on ch.
func waitSignal[T any](t *testing.T, ch <-chan T, msg string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal(msg)
		panic("unreachable")
	}
}

// TestWatchSubscriptionsIgnoresOtherSchemas creates subscriptions in a
// store in another schema of the database, then one in the watched store:
// the watch reports only the last. Notifications arrive in commit order,
// so those the watch failed to filter out would be reported first.
func TestWatchSubscriptionsIgnoresOtherSchemas(t *testing.T) {
	watched, other := newStore(t), newStore(t)
	calls := make(chan struct{}, 64)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- watched.WatchSubscriptions(ctx, func() { calls <- struct{}{} }) }()
	waitSignal(t, calls, "no call once watching")

	for i := range 10 {
		require.NoError(t, other.CreateSubscription(ctx, &webhooks.Subscription{ID: fmt.Sprint("elsewhere", i), Pattern: "/a", Webhook: "https://example.com"}))
	}
	require.NoError(t, watched.CreateSubscription(ctx, &webhooks.Subscription{ID: "here", Pattern: "/a", Webhook: "https://example.com"}))
	waitSignal(t, calls, "the watch did not report a create in its schema")
	cancel()
	require.ErrorIs(t, waitSignal(t, done, "the watch did not end with its context"), context.Canceled)
	require.Empty(t, calls, "the watch reported creates in another schema")
}

// TestUpdateHealthNotifiesNoWatcher listens on the watchers' channel,
// updates a subscription's health and then notifies a fence on the
// channel: notifications arrive in commit order, so the fence comes first
// only if the health update sent none.
func TestUpdateHealthNotifiesNoWatcher(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	require.NoError(t, s.CreateSubscription(ctx, &webhooks.Subscription{ID: "s", Pattern: "/a", Webhook: "https://example.com"}))
	conn, err := s.pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "LISTEN "+subscriptionsChannel)
	require.NoError(t, err)
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), "UNLISTEN *") }()

	for range 2 { // an insert, then an update
		_, err = s.UpdateHealth(ctx, "s", func(h *webhooks.SubscriptionHealth) { h.ConsecutiveFailures++ })
		require.NoError(t, err)
	}
	_, err = s.pool.Exec(ctx, "SELECT pg_notify($1, 'fence')", subscriptionsChannel)
	require.NoError(t, err)
	var schema string
	require.NoError(t, s.pool.QueryRow(ctx, "SELECT current_schema()").Scan(&schema))
	wait, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		n, err := conn.Conn().WaitForNotification(wait)
		require.NoError(t, err)
		// Other tests' stores, in other schemas of the shared database,
		// notify on the same channel; only this schema's count.
		if n.Payload == "fence" {
			return
		}
		require.NotEqual(t, schema, n.Payload, "UpdateHealth notified the subscription watchers")
	}
}

func BenchmarkListConsumers(b *testing.B) {
	storetest.BenchmarkListConsumers(b, newStore(b))
}

// BenchmarkDSCost measures the DSStore's ack, link, append and wake at
// 10, 10,000 and 100,000 links (storetest.BenchmarkDSCost).
func BenchmarkDSCost(b *testing.B) {
	storetest.BenchmarkDSCost(b, newStore(b))
}

// BenchmarkDSCostRatio reports the DSStore's cost at 100,000 links as a
// ratio of its cost at 10 (storetest.BenchmarkDSCostRatio).
func BenchmarkDSCostRatio(b *testing.B) {
	storetest.BenchmarkDSCostRatio(b, newStore(b))
}
