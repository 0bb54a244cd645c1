package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/internal/seal"
)

const subscriptionCols = "id, pattern, webhook, description, secret, created_at, data"

// selectSubscriptions reads subscriptions with their health, which is
// kept apart, for scanSubscription.
const selectSubscriptions = `SELECT s.id, s.pattern, s.webhook, s.description, s.secret, s.created_at, s.data, h.data
	FROM streamhooks_subscriptions s LEFT JOIN streamhooks_subscription_health h ON h.subscription_id = s.id`

// CreateSubscription implements webhooks.Store.
func (s *Store) CreateSubscription(ctx context.Context, sub *webhooks.Subscription) error {
	created, err := nanos(sub.CreatedAt)
	if err != nil {
		return err
	}
	plain, err := sub.MarshalData()
	if err != nil {
		return err
	}
	secret := s.sealer.Seal([]byte(sub.Secret), seal.ADSecret(sub.ID))
	data := s.sealer.Seal(plain, seal.ADSubscriptionData(sub.ID))
	// One statement: the notification is sent when the insert commits,
	// and only if it inserted.
	tag, err := s.pool.Exec(ctx, `WITH created AS (
			INSERT INTO streamhooks_subscriptions (`+subscriptionCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7)
			ON CONFLICT (id) DO NOTHING RETURNING id
		)
		SELECT `+notifySubscriptions+` FROM created`,
		sub.ID, sub.Pattern, sub.Webhook, []byte(sub.Description), secret, created, data)
	if err != nil {
		return dbError("create subscription", err)
	}
	if tag.RowsAffected() == 0 {
		return webhooks.ErrSubscriptionExists
	}
	return nil
}

// UpdateSubscription implements webhooks.Store. It locks the row for fn,
// and the update notifies the watchers when it commits.
func (s *Store) UpdateSubscription(ctx context.Context, id string, fn func(*webhooks.Subscription) error) (*webhooks.Subscription, error) {
	var (
		out   *webhooks.Subscription
		inner error // an error the transaction's function returned as it is
	)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		sub, err := s.scanSubscription(tx.QueryRow(ctx, selectSubscriptions+" WHERE s.id = $1 FOR UPDATE OF s", id))
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			inner = webhooks.ErrSubscriptionNotFound
			return inner
		case err != nil:
			inner = err // scanSubscription's errors say what failed
			return inner
		}
		id, pattern, created, health := sub.ID, sub.Pattern, sub.CreatedAt, sub.Health
		if err := fn(sub); err != nil {
			inner = err
			return inner
		}
		sub.ID, sub.Pattern, sub.CreatedAt, sub.Health = id, pattern, created, health
		plain, err := sub.MarshalData()
		if err != nil {
			inner = err
			return inner
		}
		secret := s.sealer.Seal([]byte(sub.Secret), seal.ADSecret(id))
		data := s.sealer.Seal(plain, seal.ADSubscriptionData(id))
		if _, err := tx.Exec(ctx, `WITH updated AS (
				UPDATE streamhooks_subscriptions SET webhook = $2, description = $3, secret = $4, data = $5 WHERE id = $1 RETURNING id
			)
			SELECT `+notifySubscriptions+` FROM updated`,
			id, sub.Webhook, []byte(sub.Description), secret, data); err != nil {
			return err
		}
		out = sub
		return nil
	})
	switch {
	case inner != nil:
		return nil, inner
	case err != nil:
		return nil, dbError("update subscription", err)
	}
	return out, nil
}

// ListSubscriptions implements webhooks.Store.
func (s *Store) ListSubscriptions(ctx context.Context) ([]*webhooks.Subscription, error) {
	// A failed Query's error comes back from CollectRows too.
	rows, _ := s.pool.Query(ctx, selectSubscriptions+" ORDER BY s.id")
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*webhooks.Subscription, error) { return s.scanSubscription(row) })
	if err != nil {
		return nil, dbError("list subscriptions", err)
	}
	return out, nil
}

// DeleteSubscription implements webhooks.Store. Its health and consumers,
// with their delivery logs, go with it, by the schema's cascading foreign
// keys, in the same transaction, which
// notifies the watchers. It locks the subscription, which keeps new
// consumers out, and then its consumers in ID order, the order in which
// UpdateConsumer's batches lock them: the cascade, locking them as it finds
// them, could otherwise wait for a batch that waits for it.
func (s *Store) DeleteSubscription(ctx context.Context, id string) error {
	var deleted int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue("SELECT FROM streamhooks_subscriptions WHERE id = $1 FOR UPDATE", id)
		b.Queue(lockSubscriptionConsumersQuery, id)
		b.Queue(`WITH deleted AS (
				DELETE FROM streamhooks_subscriptions WHERE id = $1 RETURNING id
			)
			SELECT `+notifySubscriptions+` FROM deleted`, id).Exec(func(tag pgconn.CommandTag) error {
			deleted = tag.RowsAffected()
			return nil
		})
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return dbError("delete subscription", err)
	}
	if deleted == 0 {
		return webhooks.ErrSubscriptionNotFound
	}
	return nil
}

// lockSubscriptionConsumersQuery locks a subscription's consumers in ID
// order.
const lockSubscriptionConsumersQuery = "SELECT FROM streamhooks_consumers WHERE subscription_id = $1 ORDER BY id FOR UPDATE"

// subscriptionsChannel is the channel on which subscription creates and
// deletes are notified. The payload is the schema of the tables, so that
// stores in other schemas of the database ignore them.
const subscriptionsChannel = "streamhooks_subscriptions"

// notifySubscriptions notifies subscriptionsChannel, in SQL.
const notifySubscriptions = "pg_notify('" + subscriptionsChannel + "', coalesce(current_schema(), ''))"

// WatchSubscriptions implements webhooks.SubscriptionFeed with LISTEN on a
// connection of the pool, held for the watch and closed after it. The
// engine calls it again after an error, and so listens again.
func (s *Store) WatchSubscriptions(ctx context.Context, changed func()) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: watch subscriptions: %w", err)
	}
	defer func() {
		// A connection still listening must not go back to the pool: the
		// pool drops it once closed.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Conn().Close(ctx)
		conn.Release()
	}()
	var schema string
	if _, err := conn.Exec(ctx, "LISTEN "+subscriptionsChannel); err != nil {
		return fmt.Errorf("pgstore: watch subscriptions: %w", err)
	}
	if err := conn.QueryRow(ctx, "SELECT coalesce(current_schema(), '')").Scan(&schema); err != nil {
		return fmt.Errorf("pgstore: watch subscriptions: %w", err)
	}
	changed()
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			return fmt.Errorf("pgstore: watch subscriptions: %w", err)
		}
		if n.Payload == schema {
			changed()
		}
	}
}

// LoadOrStoreSigningKey implements webhooks.Store. It rejects an empty key,
// which would make every token forgeable.
func (s *Store) LoadOrStoreSigningKey(ctx context.Context, key []byte) ([]byte, error) {
	if len(key) == 0 {
		return nil, errors.New("pgstore: empty signing key")
	}
	const load = "SELECT value FROM streamhooks_meta WHERE key = 'signing_key'"
	var sealed []byte
	err := s.pool.QueryRow(ctx, load).Scan(&sealed)
	if errors.Is(err, pgx.ErrNoRows) {
		// Another engine may store a key meanwhile: the insert then does
		// nothing, and the read, a statement of its own, sees that key.
		_, err = s.pool.Exec(ctx, "INSERT INTO streamhooks_meta (key, value) VALUES ('signing_key', $1) ON CONFLICT (key) DO NOTHING",
			s.sealer.Seal(key, seal.ADSigningKey))
		if err == nil {
			err = s.pool.QueryRow(ctx, load).Scan(&sealed)
		}
	}
	if err != nil {
		return nil, dbError("signing key", err)
	}
	plain, err := s.sealer.Open(sealed, seal.ADSigningKey)
	if err != nil {
		return nil, dbError("signing key", err)
	}
	return plain, nil
}

// scanSubscription reads a row of selectSubscriptions.
func (s *Store) scanSubscription(row pgx.Row) (*webhooks.Subscription, error) {
	var (
		sub                 webhooks.Subscription
		description, secret []byte
		created             *int64
		data, health        []byte
	)
	if err := row.Scan(&sub.ID, &sub.Pattern, &sub.Webhook, &description, &secret, &created, &data, &health); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, err
		}
		return nil, dbError("read subscription", err)
	}
	plain, err := s.sealer.Open(secret, seal.ADSecret(sub.ID))
	if err != nil {
		return nil, fmt.Errorf("pgstore: subscription %s: %w", sub.ID, err)
	}
	sub.Description = string(description)
	sub.Secret = string(plain)
	sub.CreatedAt = fromNanos(created)
	if len(data) > 0 { // empty for a subscription stored before data was
		if data, err = s.sealer.Open(data, seal.ADSubscriptionData(sub.ID)); err == nil {
			err = sub.UnmarshalData(data)
		}
		if err != nil {
			return nil, fmt.Errorf("pgstore: subscription %s: %w", sub.ID, err)
		}
	}
	// NULL, with no health stored, reads as zero.
	if err := sub.Health.UnmarshalBinary(health); err != nil {
		return nil, fmt.Errorf("pgstore: subscription %s: %w", sub.ID, err)
	}
	return &sub, nil
}

// The statements of UpdateHealth. The subscription's row is locked FOR NO
// KEY UPDATE, which serializes health updates, and UpdateSubscription and
// DeleteSubscription with them, but lets consumers be created meanwhile.
// The health is read by a statement of its own, after the lock: a join
// that waited for the lock would give the health as it was before the
// wait, and lose the update it waited for.
const (
	lockHealthQuery = "SELECT FROM streamhooks_subscriptions WHERE id = $1 FOR NO KEY UPDATE"
	readHealthQuery = "SELECT data FROM streamhooks_subscription_health WHERE subscription_id = $1"
	saveHealthQuery = `INSERT INTO streamhooks_subscription_health (subscription_id, data) VALUES ($1, $2)
		ON CONFLICT (subscription_id) DO UPDATE SET data = excluded.data`
)

// UpdateHealth implements webhooks.Store. fn runs inside a transaction
// that locks the subscription's row, and must not call the Store. Health
// has a table of its own, whose writes notify no watcher.
func (s *Store) UpdateHealth(ctx context.Context, id string, fn func(h *webhooks.SubscriptionHealth)) (*webhooks.SubscriptionHealth, error) {
	var (
		out   webhooks.SubscriptionHealth
		inner error // an error the transaction's function returned as it is
	)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var (
			found  bool
			stored []byte
		)
		b := &pgx.Batch{}
		b.Queue(lockHealthQuery, id).Exec(func(tag pgconn.CommandTag) error {
			found = tag.RowsAffected() > 0
			return nil
		})
		b.Queue(readHealthQuery, id).QueryRow(func(row pgx.Row) error {
			if err := row.Scan(&stored); !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			return nil
		})
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		if !found {
			inner = webhooks.ErrSubscriptionNotFound
			return inner
		}
		if err := out.UnmarshalBinary(stored); err != nil {
			inner = fmt.Errorf("pgstore: subscription %s: %w", id, err)
			return inner
		}
		fn(&out)
		data, err := out.MarshalBinary()
		if err != nil {
			inner = err
			return inner
		}
		_, err = tx.Exec(ctx, saveHealthQuery, id, data)
		return err
	})
	switch {
	case inner != nil:
		return nil, inner
	case err != nil:
		return nil, dbError("update health", err)
	}
	return &out, nil
}
