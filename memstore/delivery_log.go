package memstore

import (
	"context"
	"slices"

	webhooks "github.com/streamhooks/webhooks"
)

// AppendAttempts implements webhooks.DeliveryLog.
func (s *Store) AppendAttempts(_ context.Context, attempts []*webhooks.DeliveryAttempt, keep int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	trim := make(map[string]struct{})
	for _, a := range attempts {
		if _, ok := s.consumers[a.ConsumerID]; !ok {
			continue
		}
		s.attempts[a.ConsumerID] = append(s.attempts[a.ConsumerID], *a)
		trim[a.ConsumerID] = struct{}{}
	}
	for id := range trim {
		l := s.attempts[id]
		if n := len(l) - max(keep, 0); n > 0 {
			l = slices.Delete(l, 0, n)
			// A big batch must not leave a big array behind.
			if cap(l) > 2*keep {
				l = slices.Clip(slices.Clone(l))
			}
		}
		if len(l) == 0 {
			delete(s.attempts, id)
		} else {
			s.attempts[id] = l
		}
	}
	return nil
}

// ListAttempts implements webhooks.DeliveryLog.
func (s *Store) ListAttempts(_ context.Context, consumerID string, limit int) ([]*webhooks.DeliveryAttempt, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	l := s.attempts[consumerID]
	out := make([]*webhooks.DeliveryAttempt, 0, min(max(limit, 0), len(l)))
	for i := len(l) - 1; i >= 0 && len(out) < limit; i-- {
		a := l[i]
		out = append(out, &a)
	}
	return out, nil
}
