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

// CreateSubscription implements webhooks.Store.
func (s *Store) CreateSubscription(ctx context.Context, sub *webhooks.Subscription) error {
	created, err := nanos(sub.CreatedAt)
	if err != nil {
		return err
	}
	secret := s.sealer.Seal([]byte(sub.Secret), seal.ADSecret(sub.ID))
	data := s.sealer.Seal(sub.MarshalData(), seal.ADSubscriptionData(sub.ID))
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
		sub, err := s.scanSubscription(tx.QueryRow(ctx, "SELECT "+subscriptionCols+" FROM streamhooks_subscriptions WHERE id = $1 FOR UPDATE", id))
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			inner = webhooks.ErrSubscriptionNotFound
			return inner
		case err != nil:
			inner = err // scanSubscription's errors say what failed
			return inner
		}
		id, pattern, created := sub.ID, sub.Pattern, sub.CreatedAt
		if err := fn(sub); err != nil {
			inner = err
			return inner
		}
		sub.ID, sub.Pattern, sub.CreatedAt = id, pattern, created
		secret := s.sealer.Seal([]byte(sub.Secret), seal.ADSecret(id))
		data := s.sealer.Seal(sub.MarshalData(), seal.ADSubscriptionData(id))
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
	rows, _ := s.pool.Query(ctx, "SELECT "+subscriptionCols+" FROM streamhooks_subscriptions ORDER BY id")
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*webhooks.Subscription, error) { return s.scanSubscription(row) })
	if err != nil {
		return nil, dbError("list subscriptions", err)
	}
	return out, nil
}

// DeleteSubscription implements webhooks.Store. Its consumers go with it,
// by the schema's cascading foreign keys, in the same transaction, which
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

func (s *Store) scanSubscription(row pgx.Row) (*webhooks.Subscription, error) {
	var (
		sub                 webhooks.Subscription
		description, secret []byte
		created             *int64
		data                []byte
	)
	if err := row.Scan(&sub.ID, &sub.Pattern, &sub.Webhook, &description, &secret, &created, &data); err != nil {
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
	return &sub, nil
}
