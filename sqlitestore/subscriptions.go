package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/internal/seal"
)

const subscriptionCols = "id, pattern, webhook, description, secret, created_at, data"

// selectSubscriptions reads subscriptions with their health, which is
// kept apart, for scanSubscription.
const selectSubscriptions = `SELECT s.id, s.pattern, s.webhook, s.description, s.secret, s.created_at, s.data, h.data
	FROM subscriptions s LEFT JOIN subscription_health h ON h.subscription_id = s.id`

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
	return s.write(ctx, func(tx *wtx) error {
		res, err := tx.exec(`INSERT INTO subscriptions (`+subscriptionCols+`) VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO NOTHING`,
			sub.ID, sub.Pattern, sub.Webhook, sub.Description, secret, created, data)
		if err != nil {
			return fmt.Errorf("sqlitestore: create subscription: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("sqlitestore: create subscription: %w", err)
		} else if n == 0 {
			return webhooks.ErrSubscriptionExists
		}
		return nil
	})
}

// UpdateSubscription implements webhooks.Store. The write bumps the
// change counter that WatchSubscriptions polls, by a trigger.
func (s *Store) UpdateSubscription(ctx context.Context, id string, fn func(*webhooks.Subscription) error) (*webhooks.Subscription, error) {
	var out *webhooks.Subscription
	err := s.write(ctx, func(tx *wtx) error {
		sub, err := s.scanSubscription(tx.queryRow(selectSubscriptions+" WHERE s.id = ?", id))
		if errors.Is(err, sql.ErrNoRows) {
			return webhooks.ErrSubscriptionNotFound
		}
		if err != nil {
			return err
		}
		id, pattern, created, health := sub.ID, sub.Pattern, sub.CreatedAt, sub.Health
		if err := fn(sub); err != nil {
			return err
		}
		sub.ID, sub.Pattern, sub.CreatedAt, sub.Health = id, pattern, created, health
		plain, err := sub.MarshalData()
		if err != nil {
			return err
		}
		secret := s.sealer.Seal([]byte(sub.Secret), seal.ADSecret(id))
		data := s.sealer.Seal(plain, seal.ADSubscriptionData(id))
		if _, err := tx.exec("UPDATE subscriptions SET webhook = ?, description = ?, secret = ?, data = ? WHERE id = ?",
			sub.Webhook, sub.Description, secret, data, id); err != nil {
			return fmt.Errorf("sqlitestore: update subscription: %w", err)
		}
		out = sub
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ListSubscriptions implements webhooks.Store.
func (s *Store) ListSubscriptions(ctx context.Context) ([]*webhooks.Subscription, error) {
	rows, err := s.r.query(ctx, selectSubscriptions+" ORDER BY s.id")
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: list subscriptions: %w", err)
	}
	defer rows.Close()
	out := []*webhooks.Subscription{}
	for rows.Next() {
		sub, err := s.scanSubscription(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, sub)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: list subscriptions: %w", err)
	}
	return out, nil
}

// DeleteSubscription implements webhooks.Store. Its health and consumers,
// with their delivery logs, go with it, by the schema's cascading foreign
// keys, in the same transaction.
func (s *Store) DeleteSubscription(ctx context.Context, id string) error {
	return s.write(ctx, func(tx *wtx) error {
		res, err := tx.exec("DELETE FROM subscriptions WHERE id = ?", id)
		if err != nil {
			return fmt.Errorf("sqlitestore: delete subscription: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("sqlitestore: delete subscription: %w", err)
		} else if n == 0 {
			return webhooks.ErrSubscriptionNotFound
		}
		return nil
	})
}

// WatchSubscriptions implements webhooks.SubscriptionFeed. It reads a
// counter that every subscription create and delete bumps, through any
// Store on the file, each change poll interval (WithChangePollInterval).
// A read is one row, so polling costs little; SQLite's data_version would
// spare it only on a connection held for the watch alone.
func (s *Store) WatchSubscriptions(ctx context.Context, changed func()) error {
	last, err := s.subscriptionsVersion(ctx)
	if err != nil {
		return err
	}
	changed()
	tick := time.NewTicker(s.changePoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.closing:
			return ErrClosed
		case <-tick.C:
		}
		v, err := s.subscriptionsVersion(ctx)
		if err != nil {
			return err
		}
		if v != last {
			last = v
			changed()
		}
	}
}

func (s *Store) subscriptionsVersion(ctx context.Context) (int64, error) {
	var v int64
	if err := s.r.queryRow(ctx, "SELECT version FROM subscriptions_version").Scan(&v); err != nil {
		return 0, fmt.Errorf("sqlitestore: read subscription changes: %w", err)
	}
	return v, nil
}

// LoadOrStoreSigningKey implements webhooks.Store. It rejects an empty key,
// which would make every token forgeable.
func (s *Store) LoadOrStoreSigningKey(ctx context.Context, key []byte) ([]byte, error) {
	if len(key) == 0 {
		return nil, errors.New("sqlitestore: empty signing key")
	}
	const load = "SELECT value FROM meta WHERE key = 'signing_key'"
	var sealed []byte
	err := s.r.queryRow(ctx, load).Scan(&sealed)
	if errors.Is(err, sql.ErrNoRows) {
		err = s.write(ctx, func(tx *wtx) error {
			// Another Store may have stored a key since the read above.
			if _, err := tx.exec("INSERT INTO meta (key, value) VALUES ('signing_key', ?) ON CONFLICT (key) DO NOTHING",
				s.sealer.Seal(key, seal.ADSigningKey)); err != nil {
				return err
			}
			return tx.queryRow(load).Scan(&sealed)
		})
	}
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: signing key: %w", err)
	}
	plain, err := s.sealer.Open(sealed, seal.ADSigningKey)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: signing key: %w", err)
	}
	return plain, nil
}

// scanSubscription reads a row of selectSubscriptions.
func (s *Store) scanSubscription(row scanner) (*webhooks.Subscription, error) {
	var (
		sub          webhooks.Subscription
		secret       []byte
		created      sql.NullInt64
		data, health []byte
	)
	if err := row.Scan(&sub.ID, &sub.Pattern, &sub.Webhook, &sub.Description, &secret, &created, &data, &health); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
		return nil, fmt.Errorf("sqlitestore: read subscription: %w", err)
	}
	plain, err := s.sealer.Open(secret, seal.ADSecret(sub.ID))
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: subscription %s: %w", sub.ID, err)
	}
	sub.Secret = string(plain)
	sub.CreatedAt = fromNanos(created)
	if len(data) > 0 { // empty for a subscription stored before data was
		if data, err = s.sealer.Open(data, seal.ADSubscriptionData(sub.ID)); err == nil {
			err = sub.UnmarshalData(data)
		}
		if err != nil {
			return nil, fmt.Errorf("sqlitestore: subscription %s: %w", sub.ID, err)
		}
	}
	// NULL, with no health stored, reads as zero.
	if err := sub.Health.UnmarshalBinary(health); err != nil {
		return nil, fmt.Errorf("sqlitestore: subscription %s: %w", sub.ID, err)
	}
	return &sub, nil
}

// UpdateHealth implements webhooks.Store. fn runs inside a transaction
// that holds the database's write lock, on the Store's writer goroutine,
// as UpdateConsumer's does. Health has a table of its own, whose writes
// leave the change counter that WatchSubscriptions polls alone.
func (s *Store) UpdateHealth(ctx context.Context, id string, fn func(h *webhooks.SubscriptionHealth)) (*webhooks.SubscriptionHealth, error) {
	var out webhooks.SubscriptionHealth
	err := s.write(ctx, func(tx *wtx) error {
		var stored []byte
		err := tx.queryRow(`SELECT h.data FROM subscriptions s LEFT JOIN subscription_health h ON h.subscription_id = s.id
			WHERE s.id = ?`, id).Scan(&stored)
		if errors.Is(err, sql.ErrNoRows) {
			return webhooks.ErrSubscriptionNotFound
		}
		if err != nil {
			return fmt.Errorf("sqlitestore: update health: %w", err)
		}
		var h webhooks.SubscriptionHealth
		if err := h.UnmarshalBinary(stored); err != nil {
			return fmt.Errorf("sqlitestore: subscription %s: %w", id, err)
		}
		fn(&h)
		data, err := h.MarshalBinary()
		if err != nil {
			return err
		}
		if _, err := tx.exec(`INSERT INTO subscription_health (subscription_id, data) VALUES (?, ?)
			ON CONFLICT (subscription_id) DO UPDATE SET data = excluded.data`, id, data); err != nil {
			return fmt.Errorf("sqlitestore: update health: %w", err)
		}
		out = h
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}
