package sqlitestore_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/sqlitestore"
	"github.com/streamhooks/webhooks/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) webhooks.Store {
		s, err := sqlitestore.Open(filepath.Join(t.TempDir(), "hooks.db"))
		require.NoError(t, err)
		return s
	})
}

func TestStoreDurable(t *testing.T) {
	storetest.RunDurable(t, func(t *testing.T, dir string) webhooks.Store {
		s, err := sqlitestore.Open(filepath.Join(dir, "hooks.db"))
		require.NoError(t, err)
		return s
	})
}

func TestStoreEncryptedDurable(t *testing.T) {
	storetest.RunDurable(t, func(t *testing.T, dir string) webhooks.Store {
		s, err := sqlitestore.Open(filepath.Join(dir, "hooks.db"), sqlitestore.WithEncryptionKey(sqlKey('k')))
		require.NoError(t, err)
		return s
	})
}

var sqlT0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func sqlKey(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

// sqlOpen opens path and closes the store when the test ends.
func sqlOpen(t testing.TB, path string, opts ...sqlitestore.Option) *sqlitestore.Store {
	t.Helper()
	s, err := sqlitestore.Open(path, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// sqlSetup creates subscription "s" with a consumer on each path.
func sqlSetup(t testing.TB, s webhooks.Store, paths ...string) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, s.CreateSubscription(ctx, &webhooks.Subscription{ID: "s", Pattern: "/**", Webhook: "https://example.com/s", Secret: "whsec_s", CreatedAt: sqlT0}))
	for _, p := range paths {
		require.NoError(t, s.CreateConsumer(ctx, &webhooks.Consumer{
			ID:             webhooks.ConsumerID("s", p),
			SubscriptionID: "s",
			PrimaryStream:  p,
			State:          webhooks.StateIdle,
			Streams:        []webhooks.StreamOffset{{Path: p, Offset: webhooks.OffsetNone}},
			CreatedAt:      sqlT0,
			UpdatedAt:      sqlT0,
		}))
	}
}

func sqlSave(fn func(c *webhooks.Consumer)) func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
	return func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
		fn(c)
		return webhooks.UpdateSave, nil
	}
}

// sqlUserVersion reads the schema version straight from the file.
func sqlUserVersion(t *testing.T, path string) int {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	defer db.Close()
	var v int
	require.NoError(t, db.QueryRow("PRAGMA user_version").Scan(&v))
	return v
}

func TestOpenEmptyFileMigratesAndReopens(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "hooks.db")
	require.NoError(t, os.WriteFile(path, nil, 0o600)) // an empty file is an empty database

	s, err := sqlitestore.Open(path)
	require.NoError(t, err)
	sqlSetup(t, s, "/a")
	require.NoError(t, s.Close())
	version := sqlUserVersion(t, path)
	require.Positive(t, version)

	s = sqlOpen(t, path)
	require.Equal(t, version, sqlUserVersion(t, path), "reopening runs no migration")
	c, err := s.GetConsumer(ctx, webhooks.ConsumerID("s", "/a"))
	require.NoError(t, err)
	require.Equal(t, "/a", c.PrimaryStream)
}

func TestOpenCreatesPrivateFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "hooks.db")
	s := sqlOpen(t, path)
	sqlSetup(t, s, "/a") // writes the WAL
	for _, name := range []string{"hooks.db", "hooks.db-wal"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), name)
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hooks.db")
	s, err := sqlitestore.Open(path)
	require.NoError(t, err)
	require.NoError(t, s.Close())

	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	_, err = db.Exec("PRAGMA user_version = 999")
	require.NoError(t, err)
	require.NoError(t, db.Close())

	_, err = sqlitestore.Open(path)
	require.ErrorContains(t, err, "schema version 999 is newer")
	require.Equal(t, 999, sqlUserVersion(t, path), "a refused database is left alone")
}

func TestOpenRejectsBadOptions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hooks.db")
	for _, opt := range []sqlitestore.Option{
		sqlitestore.WithEncryptionKey(make([]byte, 16)),
		sqlitestore.WithBusyTimeout(0),
		sqlitestore.WithSynchronous("OFF"),
		sqlitestore.WithChangePollInterval(0),
	} {
		_, err := sqlitestore.Open(path, opt)
		require.Error(t, err)
	}
	_, err := sqlitestore.Open(path + "?mode=memory")
	require.Error(t, err)
	_, err = os.Stat(path)
	require.ErrorIs(t, err, os.ErrNotExist, "a rejected Open creates nothing")
}

// sqlFileBytes returns the contents of every file in dir: the database and
// whatever WAL is left.
func sqlFileBytes(t *testing.T, dir string) []byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var all []byte
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		all = append(all, b...)
	}
	return all
}

func TestEncryption(t *testing.T) {
	ctx := context.Background()
	const secret = "whsec_needle_4b1d9a"
	// Data the engine encodes (Subscription.MarshalData) may hold
	// credentials too; a Store keeps whatever mode it is given.
	const delivery webhooks.DeliveryMode = "delivery_needle_5c2e81"
	const previous = "whsec_previous_needle_90af1e"
	signingKey := []byte("signing_needle_77e0c3_0123456789")
	webhookKeys := []byte("webhook_keys_needle_31f7aa")

	// store writes a secret and a signing key into a fresh directory and
	// returns the directory.
	store := func(opts ...sqlitestore.Option) string {
		dir := t.TempDir()
		s, err := sqlitestore.Open(filepath.Join(dir, "hooks.db"), opts...)
		require.NoError(t, err)
		require.NoError(t, s.CreateSubscription(ctx, &webhooks.Subscription{ID: "s", Pattern: "/**", Webhook: "https://example.com/s", Secret: secret, Delivery: delivery, PreviousSecret: previous}))
		_, err = s.LoadOrStoreSigningKey(ctx, signingKey)
		require.NoError(t, err)
		_, err = s.UpdateWebhookKeys(ctx, func([]byte) ([]byte, error) { return webhookKeys, nil })
		require.NoError(t, err)
		require.NoError(t, s.Close())
		return dir
	}

	t.Run("plaintext without a key", func(t *testing.T) {
		raw := sqlFileBytes(t, store())
		require.True(t, bytes.Contains(raw, []byte(secret)), "the search finds plaintext")
		require.True(t, bytes.Contains(raw, signingKey))
		require.True(t, bytes.Contains(raw, webhookKeys))
		require.True(t, bytes.Contains(raw, []byte(delivery)))
		require.True(t, bytes.Contains(raw, []byte(previous)))
	})

	dir := store(sqlitestore.WithEncryptionKey(sqlKey('k')))
	path := filepath.Join(dir, "hooks.db")

	t.Run("sealed with a key", func(t *testing.T) {
		raw := sqlFileBytes(t, dir)
		require.False(t, bytes.Contains(raw, []byte(secret)))
		require.False(t, bytes.Contains(raw, signingKey))
		require.False(t, bytes.Contains(raw, webhookKeys), "the webhook signing keys are sealed")
		require.False(t, bytes.Contains(raw, []byte(delivery)), "subscription data is sealed")
		require.False(t, bytes.Contains(raw, []byte(previous)), "the previous secret, in subscription data, is sealed")
	})

	t.Run("the key opens it", func(t *testing.T) {
		s := sqlOpen(t, path, sqlitestore.WithEncryptionKey(sqlKey('k')))
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

	t.Run("a wrong key fails at open", func(t *testing.T) {
		_, err := sqlitestore.Open(path, sqlitestore.WithEncryptionKey(sqlKey('x')))
		require.ErrorContains(t, err, "encryption key does not match")
	})

	t.Run("no key fails at open", func(t *testing.T) {
		_, err := sqlitestore.Open(path)
		require.ErrorContains(t, err, "database is encrypted")
	})

	t.Run("a key cannot adopt plaintext secrets", func(t *testing.T) {
		_, err := sqlitestore.Open(filepath.Join(store(), "hooks.db"), sqlitestore.WithEncryptionKey(sqlKey('k')))
		require.ErrorContains(t, err, "plaintext secrets")
	})
}

// TestStoreShared runs the shared suite on two Stores on one file, as two
// engine processes would use it: the write lock taken before the read must
// serialize them across handles.
func TestStoreShared(t *testing.T) {
	storetest.RunShared(t, func(t *testing.T) (webhooks.Store, webhooks.Store) {
		path := filepath.Join(t.TempDir(), "hooks.db")
		a, err := sqlitestore.Open(path)
		require.NoError(t, err)
		b, err := sqlitestore.Open(path)
		require.NoError(t, err)
		return a, b
	})
}

func TestUpdateConsumerPanicRollsBack(t *testing.T) {
	ctx := context.Background()
	s := sqlOpen(t, filepath.Join(t.TempDir(), "hooks.db"))
	sqlSetup(t, s, "/a")
	id := webhooks.ConsumerID("s", "/a")

	require.PanicsWithValue(t, "boom", func() {
		_, _ = s.UpdateConsumer(ctx, id, func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
			c.Epoch = 9
			panic("boom")
		})
	}, "the panic reaches the caller, not the writer goroutine")

	c, err := s.UpdateConsumer(ctx, id, sqlSave(func(c *webhooks.Consumer) { c.Attempt = 1 }))
	require.NoError(t, err, "the store still writes")
	require.Zero(t, c.Epoch)
	require.Equal(t, 1, c.Attempt)
}

func TestUpdateConsumerCanceledContext(t *testing.T) {
	s := sqlOpen(t, filepath.Join(t.TempDir(), "hooks.db"))
	sqlSetup(t, s, "/a")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.UpdateConsumer(ctx, webhooks.ConsumerID("s", "/a"), func(*webhooks.Consumer) (webhooks.UpdateAction, error) {
		t.Error("fn called with a canceled context")
		return webhooks.UpdateNone, nil
	})
	require.ErrorIs(t, err, context.Canceled)
}

func TestTimesOutsideRangeAreRejected(t *testing.T) {
	ctx := context.Background()
	s := sqlOpen(t, filepath.Join(t.TempDir(), "hooks.db"))
	sqlSetup(t, s, "/a")
	id := webhooks.ConsumerID("s", "/a")
	far := time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)
	_, err := s.UpdateConsumer(ctx, id, sqlSave(func(c *webhooks.Consumer) { c.Deadline = far }))
	require.ErrorContains(t, err, "outside the storable range")
	c, err := s.GetConsumer(ctx, id)
	require.NoError(t, err)
	require.True(t, c.Deadline.IsZero())
}

func TestClose(t *testing.T) {
	ctx := context.Background()
	s, err := sqlitestore.Open(filepath.Join(t.TempDir(), "hooks.db"))
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close is idempotent")
	err = s.CreateSubscription(ctx, &webhooks.Subscription{ID: "s"})
	require.True(t, errors.Is(err, sqlitestore.ErrClosed), err)
}

// TestOpenDatabaseOfFirstRelease reads testdata/v1.db, which the first
// release of this package wrote with its own consumer encoder, before the
// engine took the format over (webhooks.Consumer.MarshalData).
func TestOpenDatabaseOfFirstRelease(t *testing.T) {
	ctx := context.Background()
	raw, err := os.ReadFile("testdata/v1.db")
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "hooks.db")
	require.NoError(t, os.WriteFile(path, raw, 0o600))
	s := sqlOpen(t, path)

	t0 := time.Date(2025, 3, 4, 5, 6, 7, 123456789, time.UTC)
	sub, err := s.GetSubscription(ctx, "s")
	require.NoError(t, err)
	require.Equal(t, &webhooks.Subscription{ID: "s", Pattern: "/**", Webhook: "https://example.com/s", Description: "d", Secret: "whsec_s", CreatedAt: t0}, sub)
	full := &webhooks.Consumer{
		ID:             webhooks.ConsumerID("s", "/a"),
		SubscriptionID: "s",
		PrimaryStream:  "/a",
		State:          webhooks.StateWaking,
		Epoch:          -(1 << 40),
		WakeID:         "w_ü",
		Streams:        []webhooks.StreamOffset{{Path: "/a", Offset: "-1"}, {Path: "", Offset: ""}},
		WakeTails:      []webhooks.StreamOffset{{Path: "/a", Offset: "0000000000000001_0000000000000002"}},
		TriggeredBy:    []string{"/a", ""},
		Attempt:        3,
		InFlight:       true,
		Failures:       1 << 20,
		FailingSince:   t0,
		Deadline:       t0.Add(time.Minute + 3),
		CreatedAt:      time.Unix(0, -5).UTC(),
		UpdatedAt:      t0.Add(time.Second),
	}
	bare := &webhooks.Consumer{ID: webhooks.ConsumerID("s", "/b"), SubscriptionID: "s", PrimaryStream: "/b", State: webhooks.StateIdle}
	for _, want := range []*webhooks.Consumer{full, bare} {
		got, err := s.GetConsumer(ctx, want.ID)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	key, err := s.LoadOrStoreSigningKey(ctx, []byte("new key"))
	require.NoError(t, err)
	require.Equal(t, []byte("v1 signing key"), key)
	leased, err := s.TryLease(ctx, "metrics", "a", t0, t0.Add(time.Minute))
	require.NoError(t, err)
	require.True(t, leased, "the upgrade adds the leases table")
	keys, err := s.WebhookKeys(ctx)
	require.NoError(t, err)
	require.Nil(t, keys, "a database of the first release has no webhook keys")
	_, err = s.UpdateWebhookKeys(ctx, func([]byte) ([]byte, error) { return []byte("keys"), nil })
	require.NoError(t, err, "and stores them with no migration")

	// An update rewrites the value in the current format, which reads back.
	got, err := s.UpdateConsumer(ctx, full.ID, sqlSave(func(c *webhooks.Consumer) { c.Epoch++ }))
	require.NoError(t, err)
	full.Epoch++
	require.Equal(t, full, got)
	require.NoError(t, s.Close())
	got, err = sqlOpen(t, path).GetConsumer(ctx, full.ID)
	require.NoError(t, err)
	require.Equal(t, full, got)
}

// A database of the first release gets the counter of subscription
// changes when opened: a delete through one Store is reported by another's
// watch.
func TestWatchSubscriptionsOnADatabaseOfFirstRelease(t *testing.T) {
	raw, err := os.ReadFile("testdata/v1.db")
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "hooks.db")
	require.NoError(t, os.WriteFile(path, raw, 0o600))
	a := sqlOpen(t, path)
	b := sqlOpen(t, path, sqlitestore.WithChangePollInterval(time.Millisecond))

	ctx, cancel := context.WithCancel(t.Context())
	calls := make(chan struct{}, 16)
	done := make(chan error, 1)
	go func() { done <- b.WatchSubscriptions(ctx, func() { calls <- struct{}{} }) }()
	defer func() {
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
	}()
	select {
	case <-calls:
	case <-time.After(10 * time.Second):
		t.Fatal("no call once watching")
	}
	require.NoError(t, a.DeleteSubscription(ctx, "s"))
	select {
	case <-calls:
	case <-time.After(10 * time.Second):
		t.Fatal("the delete was not reported")
	}
}

// A write that finds the file's write lock held, by another process, past
// the busy timeout fails with ErrStoreUnavailable: it may succeed later.
func TestBusyWriteIsStoreUnavailable(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "hooks.db")
	s := sqlOpen(t, path, sqlitestore.WithBusyTimeout(time.Millisecond))
	sqlSetup(t, s, "/a")

	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	defer db.Close()
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE")
	require.NoError(t, err)

	_, err = s.UpdateConsumer(ctx, webhooks.ConsumerID("s", "/a"), sqlSave(func(c *webhooks.Consumer) { c.Attempt++ }))
	require.ErrorIs(t, err, webhooks.ErrStoreUnavailable)

	_, err = conn.ExecContext(ctx, "ROLLBACK")
	require.NoError(t, err)
	_, err = s.UpdateConsumer(ctx, webhooks.ConsumerID("s", "/a"), sqlSave(func(c *webhooks.Consumer) { c.Attempt++ }))
	require.NoError(t, err, "the lock released, writes work again")
}
