package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	webhooks "github.com/streamhooks/webhooks"
)

var _ webhooks.Leaser = (*Store)(nil)

// Lease statements, checked for index use by a test.
const (
	// tryLeaseQuery grants a lease in one statement: the conflicting row
	// stays locked until the statement ends, so racing engines are granted
	// it one at a time and see each other's grants. A refused grant
	// returns no row.
	tryLeaseQuery = `INSERT INTO streamhooks_leases AS l (name, holder, until) VALUES ($1, $2, $4)
		ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, until = excluded.until
		WHERE l.holder = excluded.holder OR l.until <= $3
		RETURNING l.holder`
	releaseLeaseQuery = "DELETE FROM streamhooks_leases WHERE name = $1 AND holder = $2"
)

// TryLease implements webhooks.Leaser. The engines' clocks decide, as they
// do for consumer deadlines, not the database's.
func (s *Store) TryLease(ctx context.Context, name, holder string, now, until time.Time) (bool, error) {
	nowN, err := nanos(now)
	if err != nil {
		return false, err
	}
	untilN, err := nanos(until)
	if err != nil {
		return false, err
	}
	var got string
	err = s.pool.QueryRow(ctx, tryLeaseQuery, name, holder, nowN, untilN).Scan(&got)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("pgstore: try lease %s: %w", name, err)
	}
	return true, nil
}

// ReleaseLease implements webhooks.Leaser.
func (s *Store) ReleaseLease(ctx context.Context, name, holder string) error {
	if _, err := s.pool.Exec(ctx, releaseLeaseQuery, name, holder); err != nil {
		return fmt.Errorf("pgstore: release lease %s: %w", name, err)
	}
	return nil
}
