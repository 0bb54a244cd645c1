package pgstore

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/internal/pgtest"
)

// A connection lost mid-transaction, or a server that refuses connections,
// is ErrStoreUnavailable, so that the engine answers 503 rather than 500.
// Errors in what was asked stay unmarked.
func TestUnreachableIsStoreUnavailable(t *testing.T) {
	ctx := context.Background()
	// The shared cluster runs other tests' transactions: only backends of
	// this application name may be terminated.
	app := pgtest.Name("streamhooks_test_")
	cfg, err := pgxpool.ParseConfig(pgtest.DSN(t))
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = pgtest.Schema(t)
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := New(ctx, pool)
	require.NoError(t, err)
	id := sub1(t, s)

	t.Run("connection lost in a transaction", func(t *testing.T) {
		_, err := s.UpdateConsumer(ctx, id, func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
			pgtest.Exec(t, fmt.Sprintf(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity
				WHERE application_name = '%s' AND state = 'idle in transaction'`, app))
			c.Attempt++
			return webhooks.UpdateSave, nil
		})
		require.ErrorIs(t, err, webhooks.ErrStoreUnavailable)
		c, err := s.GetConsumer(ctx, id)
		require.NoError(t, err, "the pool replaces the lost connection")
		require.Zero(t, c.Attempt, "the write was lost with the connection")
	})

	t.Run("connection refused", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := l.Addr().(*net.TCPAddr)
		require.NoError(t, l.Close())
		cfg, err := pgxpool.ParseConfig(pgtest.DSN(t))
		require.NoError(t, err)
		cfg.ConnConfig.Host, cfg.ConnConfig.Port = addr.IP.String(), uint16(addr.Port)
		cfg.ConnConfig.Fallbacks = nil
		cfg.ConnConfig.ConnectTimeout = time.Second
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		defer pool.Close()
		down := &Store{pool: pool}
		_, err = down.GetConsumer(ctx, id)
		require.ErrorIs(t, err, webhooks.ErrStoreUnavailable)
		_, err = down.UpdateConsumer(ctx, id, func(*webhooks.Consumer) (webhooks.UpdateAction, error) { return webhooks.UpdateNone, nil })
		require.ErrorIs(t, err, webhooks.ErrStoreUnavailable)
		_, err = down.ListSubscriptions(ctx)
		require.ErrorIs(t, err, webhooks.ErrStoreUnavailable)
	})

	t.Run("other errors", func(t *testing.T) {
		_, err := s.pool.Exec(ctx, "ALTER TABLE streamhooks_consumers ADD CONSTRAINT no_live CHECK (state <> 'LIVE')")
		require.NoError(t, err)
		_, err = s.UpdateConsumer(ctx, id, func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
			c.State = webhooks.StateLive
			return webhooks.UpdateSave, nil
		})
		require.ErrorContains(t, err, "no_live")
		require.NotErrorIs(t, err, webhooks.ErrStoreUnavailable)
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		_, err = s.GetConsumer(cancelled, id)
		require.Error(t, err)
		require.NotErrorIs(t, err, webhooks.ErrStoreUnavailable, "a caller that gave up is no outage")
	})
}
