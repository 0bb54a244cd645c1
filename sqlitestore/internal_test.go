package sqlitestore

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/internal/seal"
	"github.com/stretchr/testify/require"
)

// setMigrations replaces the schema steps for one test.
func setMigrations(t *testing.T, steps []string) {
	old := migrations
	migrations = steps
	t.Cleanup(func() { migrations = old })
}

func tableExists(t *testing.T, s *Store, name string) bool {
	t.Helper()
	var n int
	require.NoError(t, s.r.db.QueryRow("SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?", name).Scan(&n))
	return n == 1
}

func userVersion(t *testing.T, s *Store) int {
	t.Helper()
	var v int
	require.NoError(t, s.r.db.QueryRow("PRAGMA user_version").Scan(&v))
	return v
}

// TestMigrationsRunInOrderOnce adds schema steps to an existing database:
// each runs once, in order, and a failing step leaves the database at the
// version before it.
func TestMigrationsRunInOrderOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hooks.db")
	s, err := Open(path)
	require.NoError(t, err)
	require.Equal(t, len(migrations), userVersion(t, s))
	require.NoError(t, s.Close())

	base := slices.Clone(migrations)
	// Step 3 needs step 2's table: out of order, it fails. Run twice, step
	// 2's CREATE TABLE fails.
	setMigrations(t, append(slices.Clone(base),
		"CREATE TABLE extra (x INTEGER)",
		"INSERT INTO extra (x) VALUES (1)"))
	for range 2 {
		s, err = Open(path)
		require.NoError(t, err)
		require.Equal(t, len(base)+2, userVersion(t, s))
		var n int
		require.NoError(t, s.r.db.QueryRow("SELECT count(*) FROM extra").Scan(&n))
		require.Equal(t, 1, n)
		require.NoError(t, s.Close())
	}

	setMigrations(t, append(slices.Clone(migrations),
		// Fails at its third statement, after the first two ran.
		"CREATE TABLE partial (x INTEGER UNIQUE); INSERT INTO partial VALUES (1); INSERT INTO partial VALUES (1)",
	))
	_, err = Open(path)
	require.ErrorContains(t, err, "migrate to schema version")
	setMigrations(t, migrations[:len(migrations)-1])
	s, err = Open(path)
	require.NoError(t, err)
	defer s.Close()
	require.Equal(t, len(base)+2, userVersion(t, s))
	require.False(t, tableExists(t, s, "partial"), "a failed step is rolled back whole")
}

// TestCommitSavepoints runs one group by hand: each op's failure rolls back
// only its own changes, and the others commit together.
func TestCommitSavepoints(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "hooks.db"))
	require.NoError(t, err)
	defer s.Close()

	insert := func(key string, then error) func(tx *wtx) error {
		return func(tx *wtx) error {
			if _, err := tx.exec("INSERT INTO meta (key, value) VALUES (?, x'00')", key); err != nil {
				return err
			}
			return then
		}
	}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	boom := errors.New("boom")
	ops := []*op{
		{ctx: context.Background(), run: insert("a", nil)},
		{ctx: context.Background(), run: insert("b", boom)},
		{ctx: context.Background(), run: func(tx *wtx) error {
			_ = insert("c", nil)(tx)
			panic("c")
		}},
		{ctx: canceled, run: insert("d", nil)},
		{ctx: context.Background(), run: insert("a", nil)}, // duplicate key
		{ctx: context.Background(), run: insert("e", nil)},
	}
	ops = s.commit(ops)

	require.NoError(t, ops[0].err)
	require.ErrorIs(t, ops[1].err, boom)
	require.Equal(t, "c", ops[2].panicked)
	require.ErrorIs(t, ops[3].err, context.Canceled)
	require.ErrorContains(t, ops[4].err, "UNIQUE")
	require.NoError(t, ops[5].err)
	require.Equal(t, []string{"a", "e"}, metaKeys(t, s))
}

// TestCommitBrokenTransactionFailsAll ends the group's transaction from
// inside an op: no op of the group may then report success.
func TestCommitBrokenTransactionFailsAll(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "hooks.db"))
	require.NoError(t, err)
	defer s.Close()

	ops := []*op{
		{ctx: context.Background(), run: func(tx *wtx) error {
			_, err := tx.exec("INSERT INTO meta (key, value) VALUES ('a', x'00')")
			return err
		}},
		{ctx: context.Background(), run: func(tx *wtx) error {
			_, err := tx.exec("ROLLBACK")
			return err
		}},
		{ctx: context.Background(), run: func(*wtx) error {
			t.Error("op after a broken transaction ran")
			return nil
		}},
	}
	ops = s.commit(ops)
	for i, o := range ops {
		require.Error(t, o.err, "op %d", i)
	}
	require.Empty(t, metaKeys(t, s))
}

func metaKeys(t *testing.T, s *Store) []string {
	t.Helper()
	rows, err := s.r.db.Query("SELECT key FROM meta ORDER BY key")
	require.NoError(t, err)
	defer rows.Close()
	var keys []string
	for rows.Next() {
		var k string
		require.NoError(t, rows.Scan(&k))
		keys = append(keys, k)
	}
	require.NoError(t, rows.Err())
	return keys
}

// TestQueryPlansUseIndexes keeps the engine's hot queries off full table
// scans, which would cost time in proportion to all consumers.
func TestQueryPlansUseIndexes(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "hooks.db"))
	require.NoError(t, err)
	defer s.Close()
	for name, q := range map[string]string{
		"GetConsumer":        "SELECT " + consumerCols + " FROM consumers c WHERE c.id = ?1",
		"ConsumersByStream":  consumersByStreamsQuery,
		"GetSubscription":    getSubscriptionsQuery,
		"DueConsumers":       dueConsumersQuery,
		"NextDeadline":       nextDeadlineQuery,
		"DeleteSubscription": "DELETE FROM subscriptions WHERE id = ?1",
		"DeleteConsumer":     "DELETE FROM consumers WHERE id = ?1",
		"UnindexStream":      "DELETE FROM consumer_streams WHERE path = ?1 AND consumer_id = ?1",
		"AppendAttempt":      appendAttemptQuery,
		"TrimAttempts":       trimAttemptsQuery,
	} {
		plan := queryPlan(t, s, q, `["x","y"]`, 1)
		for _, step := range plan {
			// A batched read scans its list of keys, and no table.
			require.False(t, strings.HasPrefix(step, "SCAN") && !strings.HasPrefix(step, "SCAN json_each"), "%s scans a table: %q", name, plan)
		}
		require.NotEmpty(t, plan, name)
	}
}

// TestListConsumersPlans checks that ListConsumers reads its page from an
// index in ID order: neither a scan of the subscription's consumers nor a
// sort of them.
func TestListConsumersPlans(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "hooks.db"))
	require.NoError(t, err)
	defer s.Close()
	for q, index := range map[string]string{
		listConsumersQuery:        "consumers_by_subscription_id",
		listConsumersInStateQuery: "consumers_by_subscription_state",
		listAttemptsQuery:         "delivery_attempts_by_consumer",
	} {
		plan := queryPlan(t, s, q, "s", "s:", 100, "IDLE")
		t.Log(plan)
		require.Len(t, plan, 1, q)
		require.Contains(t, plan[0], "SEARCH", q)
		require.Contains(t, plan[0], "USING INDEX "+index, q)
	}
}

// queryPlan returns the steps of q's EXPLAIN QUERY PLAN, with args bound.
func queryPlan(t *testing.T, s *Store, q string, args ...any) []string {
	rows, err := s.r.db.Query("EXPLAIN QUERY PLAN "+q, args...)
	require.NoError(t, err, q)
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		require.NoError(t, rows.Scan(&id, &parent, &unused, &detail))
		plan = append(plan, detail)
	}
	require.NoError(t, rows.Err())
	return plan
}

// TestUpdateHealthLeavesFeedAlone checks that a health update leaves the
// change counter, which WatchSubscriptions polls, as it was.
func TestUpdateHealthLeavesFeedAlone(t *testing.T) {
	ctx := context.Background()
	s, err := Open(filepath.Join(t.TempDir(), "hooks.db"))
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.CreateSubscription(ctx, &webhooks.Subscription{ID: "s", Pattern: "/**", Webhook: "https://example.com/"}))
	before, err := s.subscriptionsVersion(ctx)
	require.NoError(t, err)
	for range 2 { // an insert, then an update
		_, err = s.UpdateHealth(ctx, "s", func(h *webhooks.SubscriptionHealth) { h.ConsecutiveFailures++ })
		require.NoError(t, err)
	}
	after, err := s.subscriptionsVersion(ctx)
	require.NoError(t, err)
	require.Equal(t, before, after, "UpdateHealth bumped the subscription change counter")
	_, err = s.UpdateSubscription(ctx, "s", func(*webhooks.Subscription) error { return nil })
	require.NoError(t, err)
	after, err = s.subscriptionsVersion(ctx)
	require.NoError(t, err)
	require.Greater(t, after, before, "UpdateSubscription bumps the change counter")
}

// TestSubscriptionFromBeforeDataReadsAsZero reads a subscription stored
// by the schema before subscription data, with an encryption key: its
// empty data reads as zero fields.
func TestSubscriptionFromBeforeDataReadsAsZero(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "hooks.db")
	k := bytes.Repeat([]byte{'k'}, 32)
	all := migrations
	setMigrations(t, all[:3]) // before subscriptions.data
	s, err := Open(path, WithEncryptionKey(k))
	require.NoError(t, err)
	_, err = s.w.conn.ExecContext(ctx, `INSERT INTO subscriptions (id, pattern, webhook, description, secret, created_at)
		VALUES ('old', '/**', 'https://example.com/', '', ?, NULL)`, s.sealer.Seal([]byte("whsec_old"), seal.ADSecret("old")))
	require.NoError(t, err)
	require.NoError(t, s.Close())

	setMigrations(t, all)
	s, err = Open(path, WithEncryptionKey(k))
	require.NoError(t, err)
	defer s.Close()
	sub, err := s.GetSubscription(ctx, "old")
	require.NoError(t, err)
	require.Equal(t, &webhooks.Subscription{ID: "old", Pattern: "/**", Webhook: "https://example.com/", Secret: "whsec_old"}, sub)
}
