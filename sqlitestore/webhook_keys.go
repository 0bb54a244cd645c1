package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/streamhooks/webhooks/internal/seal"
)

// The webhook key set is a row of the meta table, which every database has
// had since its first schema version: no migration adds it.
const loadWebhookKeys = "SELECT value FROM meta WHERE key = 'webhook_keys'"

// WebhookKeys implements webhooks.WebhookKeyStore.
func (s *Store) WebhookKeys(ctx context.Context) ([]byte, error) {
	var sealed []byte
	err := s.r.queryRow(ctx, loadWebhookKeys).Scan(&sealed)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: webhook keys: %w", err)
	}
	return s.openWebhookKeys(sealed)
}

// UpdateWebhookKeys implements webhooks.WebhookKeyStore. The single writer
// runs it, so racing updates take effect one after the other.
func (s *Store) UpdateWebhookKeys(ctx context.Context, fn func(old []byte) ([]byte, error)) ([]byte, error) {
	var (
		out   []byte
		inner error // fn's error, returned as it is
	)
	err := s.write(ctx, func(tx *wtx) error {
		var old []byte
		var sealed []byte
		err := tx.queryRow(loadWebhookKeys).Scan(&sealed)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return err
		default:
			if old, err = s.openWebhookKeys(sealed); err != nil {
				return err
			}
		}
		next, err := fn(old)
		if err == nil && len(next) == 0 {
			err = errors.New("sqlitestore: empty webhook key set")
		}
		if err != nil {
			inner = err
			return err
		}
		if _, err := tx.exec("INSERT INTO meta (key, value) VALUES ('webhook_keys', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
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
		return nil, fmt.Errorf("sqlitestore: webhook keys: %w", err)
	}
	return out, nil
}

func (s *Store) openWebhookKeys(sealed []byte) ([]byte, error) {
	plain, err := s.sealer.Open(sealed, seal.ADWebhookKeys)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: webhook keys: %w", err)
	}
	return plain, nil
}
