package pgstore

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/internal/pgtest"
	"github.com/streamhooks/webhooks/internal/seal"
)

// TestQueryPlansUseIndexes keeps the engine's hot queries, and those the
// cascading deletes run, off sequential scans, which would cost time in
// proportion to all consumers. Sequential scans are disabled, as Postgres
// prefers them on tiny tables: a plan that still has one has no index to use.
func TestQueryPlansUseIndexes(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	for name, q := range map[string]struct {
		sql  string
		args []any
	}{
		"GetConsumer":       {getConsumerQuery, []any{"x"}},
		"ConsumersByStream": {consumersByStreamsQuery, []any{[]string{"x", "y"}}},
		"GetSubscription":   {getSubscriptionsQuery, []any{[]string{"x", "y"}}},
		"DueConsumers":      {dueConsumersQuery, []any{int64(1), 10}},
		"NextDeadline":      {nextDeadlineQuery, nil},
		"SaveConsumer":      {saveConsumerPathsQuery, []any{"x", "IDLE", nil, []byte{1}, []string{"/a"}, []string{"/b"}}},
		"LockConsumers":     {lockConsumersQuery, []any{[]string{"x", "y"}}},
		"SaveConsumers":     {saveConsumersQuery, []any{[]string{"x"}, []string{"IDLE"}, []*int64{nil}, [][]byte{{1}}}},
		"DeleteConsumers":   {deleteConsumersQuery, []any{[]string{"x", "y"}}},
		// DeleteSubscription's lock, and what ON DELETE CASCADE runs for
		// a subscription and a consumer.
		"LockSubscriptionConsumers": {lockSubscriptionConsumersQuery, []any{"x"}},
		"TryLease":                  {tryLeaseQuery, []any{"metrics", "a", int64(1), int64(2)}},
		"ReleaseLease":              {releaseLeaseQuery, []any{"metrics", "a"}},
		"CascadeSubscription":       {"DELETE FROM streamhooks_consumers WHERE subscription_id = $1", []any{"x"}},
		"CascadeConsumer":           {"DELETE FROM streamhooks_consumer_streams WHERE consumer_id = $1", []any{"x"}},
		"CascadeHealth":             {"DELETE FROM streamhooks_subscription_health WHERE subscription_id = $1", []any{"x"}},
		"CascadeAttempts":           {"DELETE FROM streamhooks_delivery_attempts WHERE consumer_id = $1", []any{"x"}},
		"ListConsumers":             {listConsumersQuery, []any{"s", "s:", 100}},
		"ListConsumersInState":      {listConsumersInStateQuery, []any{"s", "s:", 100, "IDLE"}},
		"LockHealth":                {lockHealthQuery, []any{"s"}},
		"ReadHealth":                {readHealthQuery, []any{"s"}},
		"LockAttemptConsumers":      {lockAttemptConsumersQuery, []any{[]string{"x", "y"}}},
		"AppendAttempts":            {appendAttemptsQuery, []any{[]string{"x"}, [][]byte{{1}}}},
		"TrimAttempts":              {trimAttemptsQuery, []any{[]string{"x", "y"}, 20}},
		"ListAttempts":              {listAttemptsQuery, []any{"x", 20}},
	} {
		var plan []string
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, "EXPLAIN "+q.sql, q.args...)
			if err != nil {
				return err
			}
			plan, err = pgx.CollectRows(rows, pgx.RowTo[string])
			return err
		})
		require.NoError(t, err, name)
		require.NotEmpty(t, plan, name)
		for _, step := range plan {
			require.NotContains(t, step, "Seq Scan", "%s scans a table:\n%s", name, strings.Join(plan, "\n"))
		}
	}
}

// setMigrations replaces the schema steps for one test.
func setMigrations(t *testing.T, steps []string) {
	old := migrations
	migrations = steps
	t.Cleanup(func() { migrations = old })
}

func schemaVersions(t *testing.T, pool *pgxpool.Pool) []int {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT version FROM streamhooks_schema_versions ORDER BY version")
	require.NoError(t, err)
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	return versions
}

func tableExists(t *testing.T, pool *pgxpool.Pool, name string) bool {
	t.Helper()
	var ok bool
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT to_regclass($1) IS NOT NULL", name).Scan(&ok))
	return ok
}

// TestNewConcurrentlyMigratesOnce starts several stores on one empty schema
// at once, as engines deployed together do: the advisory lock lets one
// migrate and the others see its result.
func TestNewConcurrentlyMigratesOnce(t *testing.T) {
	schema := pgtest.Schema(t)
	const stores = 6
	pools := make([]*pgxpool.Pool, stores)
	for i := range pools {
		pools[i] = newPool(t, schema)
	}
	errs := make([]error, stores)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, pool := range pools {
		wg.Go(func() {
			<-start
			_, errs[i] = New(context.Background(), pool)
		})
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, schemaVersions(t, pools[0]), len(migrations))
}

// TestMigrationsRunInOrderOnce adds schema steps to an existing schema:
// each runs once, in order, and a failing step leaves the schema at the
// version before it.
func TestMigrationsRunInOrderOnce(t *testing.T) {
	ctx := context.Background()
	pool := newPool(t, pgtest.Schema(t))
	_, err := New(ctx, pool)
	require.NoError(t, err)
	base := slices.Clone(migrations)
	require.Len(t, schemaVersions(t, pool), len(base))

	// Step 3 needs step 2's table: out of order, it fails. Run twice, step
	// 2's CREATE TABLE fails.
	setMigrations(t, append(slices.Clone(base),
		"CREATE TABLE extra (x integer)",
		"INSERT INTO extra (x) VALUES (1)"))
	for range 2 {
		_, err = New(ctx, pool)
		require.NoError(t, err)
		require.Len(t, schemaVersions(t, pool), len(base)+2)
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM extra").Scan(&n))
		require.Equal(t, 1, n)
	}

	setMigrations(t, append(slices.Clone(migrations),
		// Fails at its third statement, after the first two ran.
		"CREATE TABLE partial (x integer UNIQUE); INSERT INTO partial VALUES (1); INSERT INTO partial VALUES (1)"))
	_, err = New(ctx, pool)
	require.ErrorContains(t, err, "migrate to schema version")
	require.Len(t, schemaVersions(t, pool), len(base)+2)
	require.False(t, tableExists(t, pool, "partial"), "a failed step is rolled back whole")
}

func TestNewRefusesNewerSchema(t *testing.T) {
	ctx := context.Background()
	pool := newPool(t, pgtest.Schema(t))
	_, err := New(ctx, pool)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "INSERT INTO streamhooks_schema_versions (version) VALUES (999)")
	require.NoError(t, err)
	_, err = New(ctx, pool)
	require.ErrorContains(t, err, "schema version 999 is newer")
}

func TestNewRejectsBadOptions(t *testing.T) {
	_, err := New(context.Background(), nil, WithEncryptionKey(make([]byte, 16)))
	require.ErrorContains(t, err, "32 bytes")
	_, err = New(context.Background(), nil)
	require.Error(t, err)
}

func TestEncryption(t *testing.T) {
	// Skip here, not in a subtest that uses this t.
	pgtest.DSN(t)
	ctx := context.Background()
	const secret = "whsec_needle_4b1d9a"
	// Data the engine encodes (Subscription.MarshalData) may hold
	// credentials too; a Store keeps whatever mode it is given.
	const delivery webhooks.DeliveryMode = "delivery_needle_5c2e81"
	const previous = "whsec_previous_needle_90af1e"
	signingKey := []byte("signing_needle_77e0c3_0123456789")
	webhookKeys := []byte("webhook_keys_needle_31f7aa")

	// store writes a secret and a signing key into a fresh schema and
	// returns its pool.
	store := func(opts ...Option) *pgxpool.Pool {
		pool := newPool(t, pgtest.Schema(t))
		s, err := New(ctx, pool, opts...)
		require.NoError(t, err)
		require.NoError(t, s.CreateSubscription(ctx, &webhooks.Subscription{ID: "s", Pattern: "/**", Webhook: "https://example.com/s", Secret: secret, Delivery: delivery, PreviousSecret: previous}))
		_, err = s.LoadOrStoreSigningKey(ctx, signingKey)
		require.NoError(t, err)
		_, err = s.UpdateWebhookKeys(ctx, func([]byte) ([]byte, error) { return webhookKeys, nil })
		require.NoError(t, err)
		return pool
	}
	// stored returns every value of the columns that hold secrets.
	stored := func(pool *pgxpool.Pool) []byte {
		var all []byte
		for _, q := range []string{"SELECT secret FROM streamhooks_subscriptions", "SELECT data FROM streamhooks_subscriptions", "SELECT value FROM streamhooks_meta"} {
			rows, err := pool.Query(ctx, q)
			require.NoError(t, err)
			values, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
			require.NoError(t, err)
			all = append(all, bytes.Join(values, nil)...)
		}
		return all
	}

	t.Run("plaintext without a key", func(t *testing.T) {
		raw := stored(store())
		require.True(t, bytes.Contains(raw, []byte(secret)), "the search finds plaintext")
		require.True(t, bytes.Contains(raw, signingKey))
		require.True(t, bytes.Contains(raw, webhookKeys))
		require.True(t, bytes.Contains(raw, []byte(delivery)))
		require.True(t, bytes.Contains(raw, []byte(previous)))
	})

	pool := store(WithEncryptionKey(key('k')))

	t.Run("sealed with a key", func(t *testing.T) {
		raw := stored(pool)
		require.False(t, bytes.Contains(raw, []byte(secret)))
		require.False(t, bytes.Contains(raw, signingKey))
		require.False(t, bytes.Contains(raw, webhookKeys), "the webhook signing keys are sealed")
		require.False(t, bytes.Contains(raw, []byte(delivery)), "subscription data is sealed")
		require.False(t, bytes.Contains(raw, []byte(previous)), "the previous secret, in subscription data, is sealed")
	})

	t.Run("the key opens it", func(t *testing.T) {
		s, err := New(ctx, pool, WithEncryptionKey(key('k')))
		require.NoError(t, err)
		sub, err := s.GetSubscription(ctx, "s")
		require.NoError(t, err)
		require.Equal(t, secret, sub.Secret)
		require.Equal(t, delivery, sub.Delivery)
		require.Equal(t, previous, sub.PreviousSecret)
		subs, err := s.ListSubscriptions(ctx)
		require.NoError(t, err)
		require.Equal(t, secret, subs[0].Secret)
		require.Equal(t, delivery, subs[0].Delivery)
		got, err := s.LoadOrStoreSigningKey(ctx, []byte("another key"))
		require.NoError(t, err)
		require.Equal(t, signingKey, got)
		got, err = s.WebhookKeys(ctx)
		require.NoError(t, err)
		require.Equal(t, webhookKeys, got)
	})

	t.Run("a wrong key fails at New", func(t *testing.T) {
		_, err := New(ctx, pool, WithEncryptionKey(key('x')))
		require.ErrorContains(t, err, "encryption key does not match")
	})

	t.Run("no key fails at New", func(t *testing.T) {
		_, err := New(ctx, pool)
		require.ErrorContains(t, err, "database is encrypted")
	})

	t.Run("a key cannot adopt plaintext secrets", func(t *testing.T) {
		_, err := New(ctx, store(), WithEncryptionKey(key('k')))
		require.ErrorContains(t, err, "plaintext secrets")
	})

	t.Run("a secret moved to another subscription does not open", func(t *testing.T) {
		s, err := New(ctx, pool, WithEncryptionKey(key('k')))
		require.NoError(t, err)
		require.NoError(t, s.CreateSubscription(ctx, &webhooks.Subscription{ID: "t", Pattern: "/**", Webhook: "https://example.com/t", Secret: "other"}))
		_, err = pool.Exec(ctx, "UPDATE streamhooks_subscriptions SET secret = (SELECT secret FROM streamhooks_subscriptions WHERE id = 's') WHERE id = 't'")
		require.NoError(t, err)
		_, err = s.GetSubscription(ctx, "t")
		require.ErrorContains(t, err, "cannot decrypt")
	})
}

// TestSubscriptionTextWithNUL stores a description with a NUL byte, which
// a client may send and a text column would refuse.
func TestSubscriptionTextWithNUL(t *testing.T) {
	s := newStore(t)
	want := &webhooks.Subscription{ID: "s", Pattern: "/**", Webhook: "https://example.com/s", Description: "a\x00b"}
	require.NoError(t, s.CreateSubscription(context.Background(), want))
	got, err := s.GetSubscription(context.Background(), "s")
	require.NoError(t, err)
	require.Equal(t, want, got)
}

func TestTimesOutsideRangeAreRejected(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	require.NoError(t, s.CreateSubscription(ctx, &webhooks.Subscription{ID: "s", Pattern: "/**", Webhook: "https://example.com/s"}))
	c := &webhooks.Consumer{ID: webhooks.ConsumerID("s", "/a"), SubscriptionID: "s", PrimaryStream: "/a", State: webhooks.StateIdle}
	require.NoError(t, s.CreateConsumer(ctx, c))
	_, err := s.UpdateConsumer(ctx, c.ID, func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
		c.Deadline = c.Deadline.AddDate(3000, 0, 0)
		return webhooks.UpdateSave, nil
	})
	require.ErrorContains(t, err, "outside the storable range")
	got, err := s.GetConsumer(ctx, c.ID)
	require.NoError(t, err)
	require.True(t, got.Deadline.IsZero())
}

// sub1 creates subscription "s" with one consumer on "/a" and returns the
// consumer's ID.
func sub1(t *testing.T, s *Store) string {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, s.CreateSubscription(ctx, &webhooks.Subscription{ID: "s", Pattern: "/**", Webhook: "https://example.com/s"}))
	c := &webhooks.Consumer{ID: webhooks.ConsumerID("s", "/a"), SubscriptionID: "s", PrimaryStream: "/a", State: webhooks.StateIdle}
	require.NoError(t, s.CreateConsumer(ctx, c))
	return c.ID
}

// TestUpdateConsumerPanicRollsBack panics in fn: the row lock and the
// connection must not be left behind, or the next update would wait for
// ever or run inside the dead transaction.
func TestUpdateConsumerPanicRollsBack(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	id := sub1(t, s)
	conns := s.pool.Stat().NewConnsCount()
	for range int(s.pool.Config().MaxConns) + 1 {
		require.PanicsWithValue(t, "boom", func() {
			_, _ = s.UpdateConsumer(ctx, id, func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
				c.Epoch = 9
				panic("boom")
			})
		})
	}
	c, err := s.UpdateConsumer(ctx, id, func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
		c.Attempt = 1
		return webhooks.UpdateSave, nil
	})
	require.NoError(t, err, "the store still writes")
	require.Zero(t, c.Epoch)
	require.Equal(t, 1, c.Attempt)
	require.Equal(t, conns, s.pool.Stat().NewConnsCount(), "the connection was rolled back and reused, not replaced")
}

// TestUpdateConsumerFailedWriteRollsBack makes the write fail after fn:
// nothing is stored and the store goes on working.
func TestUpdateConsumerFailedWriteRollsBack(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	id := sub1(t, s)
	_, err := s.pool.Exec(ctx, "ALTER TABLE streamhooks_consumers ADD CONSTRAINT no_live CHECK (state <> 'LIVE')")
	require.NoError(t, err)
	conns := s.pool.Stat().NewConnsCount()
	for range int(s.pool.Config().MaxConns) + 1 {
		_, err = s.UpdateConsumer(ctx, id, func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
			c.State = webhooks.StateLive
			c.Streams = []webhooks.StreamOffset{{Path: "/b", Offset: "1"}}
			return webhooks.UpdateSave, nil
		})
		require.ErrorContains(t, err, "no_live")
	}
	c, err := s.GetConsumer(ctx, id)
	require.NoError(t, err)
	require.Equal(t, webhooks.StateIdle, c.State)
	cs, err := s.ConsumersByStream(ctx, "/b")
	require.NoError(t, err)
	require.Empty(t, cs, "the failed write's index change is rolled back too")
	require.Equal(t, conns, s.pool.Stat().NewConnsCount(), "the connection was rolled back and reused, not replaced")
	_, err = s.UpdateConsumer(ctx, id, func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
		c.Attempt = 1
		return webhooks.UpdateSave, nil
	})
	require.NoError(t, err)
}

// TestUpdateConsumerCanceledInFn cancels the context while fn runs: the
// write does not happen, and the connection, still inside its transaction
// and holding the row lock, is not handed to the next caller.
func TestUpdateConsumerCanceledInFn(t *testing.T) {
	s := newStore(t)
	id := sub1(t, s)
	for range int(s.pool.Config().MaxConns) + 1 {
		ctx, cancel := context.WithCancel(context.Background())
		_, err := s.UpdateConsumer(ctx, id, func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
			c.Epoch++
			cancel()
			return webhooks.UpdateSave, nil
		})
		require.ErrorIs(t, err, context.Canceled)
	}
	c, err := s.UpdateConsumer(context.Background(), id, func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
		c.Attempt = 1
		return webhooks.UpdateSave, nil
	})
	require.NoError(t, err, "the row is not left locked")
	require.Zero(t, c.Epoch)
}

// TestSubscriptionFromBeforeDataReadsAsZero reads a subscription stored
// by the schema before subscription data, with an encryption key: its
// empty data reads as zero fields.
func TestSubscriptionFromBeforeDataReadsAsZero(t *testing.T) {
	ctx := context.Background()
	pool := newPool(t, pgtest.Schema(t))
	all := migrations
	setMigrations(t, all[:2]) // before streamhooks_subscriptions.data
	s, err := New(ctx, pool, WithEncryptionKey(key('k')))
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO streamhooks_subscriptions (id, pattern, webhook, description, secret, created_at)
		VALUES ('old', '/**', 'https://example.com/', '', $1, NULL)`, s.sealer.Seal([]byte("whsec_old"), seal.ADSecret("old")))
	require.NoError(t, err)

	setMigrations(t, all)
	s, err = New(ctx, pool, WithEncryptionKey(key('k')))
	require.NoError(t, err)
	sub, err := s.GetSubscription(ctx, "old")
	require.NoError(t, err)
	require.Equal(t, &webhooks.Subscription{ID: "old", Pattern: "/**", Webhook: "https://example.com/", Secret: "whsec_old"}, sub)
}
