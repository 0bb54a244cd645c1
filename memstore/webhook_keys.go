package memstore

import (
	"context"
	"errors"
	"slices"
)

// WebhookKeys implements webhooks.WebhookKeyStore.
func (s *Store) WebhookKeys(context.Context) ([]byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.webhookKeys), nil
}

// UpdateWebhookKeys implements webhooks.WebhookKeyStore. fn runs under the
// store's lock, so it must not call the Store.
func (s *Store) UpdateWebhookKeys(_ context.Context, fn func(old []byte) ([]byte, error)) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next, err := fn(slices.Clone(s.webhookKeys))
	if err != nil {
		return nil, err
	}
	if len(next) == 0 {
		return nil, errors.New("memstore: empty webhook key set")
	}
	s.webhookKeys = slices.Clone(next)
	return slices.Clone(next), nil
}
