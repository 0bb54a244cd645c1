package sqlitestore

import (
	"context"
	"fmt"
	"time"

	webhooks "github.com/streamhooks/webhooks"
)

var _ webhooks.Leaser = (*Store)(nil)

// TryLease implements webhooks.Leaser. Stores in several processes may
// share the file: the write holds its write lock.
func (s *Store) TryLease(ctx context.Context, name, holder string, now, until time.Time) (bool, error) {
	nowN, err := nanos(now)
	if err != nil {
		return false, err
	}
	untilN, err := nanos(until)
	if err != nil {
		return false, err
	}
	var granted bool
	err = s.write(ctx, func(tx *wtx) error {
		res, err := tx.exec(`INSERT INTO leases (name, holder, until) VALUES (?, ?, ?)
			ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, until = excluded.until
			WHERE leases.holder = excluded.holder OR leases.until <= ?`,
			name, holder, untilN, nowN)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		granted = n == 1
		return err
	})
	if err != nil {
		return false, fmt.Errorf("sqlitestore: try lease %s: %w", name, err)
	}
	return granted, nil
}

// ReleaseLease implements webhooks.Leaser.
func (s *Store) ReleaseLease(ctx context.Context, name, holder string) error {
	err := s.write(ctx, func(tx *wtx) error {
		_, err := tx.exec("DELETE FROM leases WHERE name = ? AND holder = ?", name, holder)
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlitestore: release lease %s: %w", name, err)
	}
	return nil
}
