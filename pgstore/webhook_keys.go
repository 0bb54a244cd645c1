package pgstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/streamhooks/webhooks/internal/seal"
)

// The webhook key set is a row of streamhooks_meta, which every schema has
// had since its first version: no migration adds it. An empty value stands
// for none, which UpdateWebhookKeys inserts so that it has a row to lock;
// a sealed value is never empty.
const loadWebhookKeys = "SELECT value FROM streamhooks_meta WHERE key = 'webhook_keys'"

// WebhookKeys implements webhooks.WebhookKeyStore.
func (s *Store) WebhookKeys(ctx context.Context) ([]byte, error) {
	var sealed []byte
	err := s.pool.QueryRow(ctx, loadWebhookKeys).Scan(&sealed)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, dbError("webhook keys", err)
	}
	return s.openWebhookKeys(sealed)
}

// UpdateWebhookKeys implements webhooks.WebhookKeyStore. It locks the row,
// creating it first if it is missing, so that racing updates from every
// engine on the database take effect one after the other.
func (s *Store) UpdateWebhookKeys(ctx context.Context, fn func(old []byte) ([]byte, error)) ([]byte, error) {
	var (
		out   []byte
		inner error // fn's error, returned as it is
	)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// A racing insert waits for the first to commit, then does nothing.
		if _, err := tx.Exec(ctx, "INSERT INTO streamhooks_meta (key, value) VALUES ('webhook_keys', '') ON CONFLICT (key) DO NOTHING"); err != nil {
			return err
		}
		var sealed []byte
		if err := tx.QueryRow(ctx, loadWebhookKeys+" FOR UPDATE").Scan(&sealed); err != nil {
			return err
		}
		old, err := s.openWebhookKeys(sealed)
		if err != nil {
			inner = err
			return err
		}
		next, err := fn(old)
		if err == nil && len(next) == 0 {
			err = errors.New("pgstore: empty webhook key set")
		}
		if err != nil {
			inner = err
			return err
		}
		if _, err := tx.Exec(ctx, "UPDATE streamhooks_meta SET value = $1 WHERE key = 'webhook_keys'",
			s.sealer.Seal(next, seal.ADWebhookKeys)); err != nil {
			return err
		}
		out = next
		return nil
	})
	switch {
	case inner != nil:
		return nil, inner
	case err != nil:
		return nil, dbError("webhook keys", err)
	}
	return out, nil
}

// openWebhookKeys unseals a stored key set; the empty placeholder is none.
func (s *Store) openWebhookKeys(sealed []byte) ([]byte, error) {
	if len(sealed) == 0 {
		return nil, nil
	}
	plain, err := s.sealer.Open(sealed, seal.ADWebhookKeys)
	if err != nil {
		return nil, dbError("webhook keys", err)
	}
	return plain, nil
}
