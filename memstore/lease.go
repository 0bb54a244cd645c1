package memstore

import (
	"context"
	"time"

	webhooks "github.com/streamhooks/webhooks"
)

var _ webhooks.Leaser = (*Store)(nil)

// heldLease is a granted lease.
type heldLease struct {
	holder string
	until  time.Time
}

// TryLease implements webhooks.Leaser, for engines that share one Store in
// one process.
func (s *Store) TryLease(_ context.Context, name, holder string, now, until time.Time) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.leases[name]; ok && cur.holder != holder && cur.until.After(now) {
		return false, nil
	}
	if s.leases == nil {
		s.leases = make(map[string]heldLease)
	}
	s.leases[name] = heldLease{holder: holder, until: until}
	return true, nil
}

// ReleaseLease implements webhooks.Leaser.
func (s *Store) ReleaseLease(_ context.Context, name, holder string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leases[name].holder == holder {
		delete(s.leases, name)
	}
	return nil
}
