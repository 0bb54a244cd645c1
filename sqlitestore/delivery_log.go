package sqlitestore

import (
	"context"
	"fmt"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/internal/seal"
)

var _ webhooks.DeliveryLog = (*Store)(nil)

// AppendAttempts implements webhooks.DeliveryLog, in one transaction.
func (s *Store) AppendAttempts(ctx context.Context, attempts []*webhooks.DeliveryAttempt, keep int) error {
	data := make([][]byte, len(attempts))
	kept := make(map[string]bool)
	for i, a := range attempts {
		b, err := a.MarshalData()
		if err != nil {
			return err
		}
		data[i] = s.sealer.Seal(b, seal.ADDeliveryAttempt(a.ConsumerID))
		kept[a.ConsumerID] = true
	}
	return s.write(ctx, func(tx *wtx) error {
		for i, a := range attempts {
			// A consumer or __ds subscription deleted meanwhile keeps no log.
			q, key := appendAttemptQuery, a.ConsumerID
			if id, ok := webhooks.DSDeliveryLogSubscription(key); ok {
				q, key = appendDSAttemptQuery, id
			}
			if _, err := tx.exec(q, key, data[i]); err != nil {
				return fmt.Errorf("sqlitestore: append attempts: %w", err)
			}
		}
		for key := range kept {
			q := trimAttemptsQuery
			if id, ok := webhooks.DSDeliveryLogSubscription(key); ok {
				q, key = trimDSAttemptsQuery, id
			}
			if _, err := tx.exec(q, key, keep); err != nil {
				return fmt.Errorf("sqlitestore: append attempts: %w", err)
			}
		}
		return nil
	})
}

// ListAttempts implements webhooks.DeliveryLog. A limit below one returns
// nothing.
func (s *Store) ListAttempts(ctx context.Context, consumerID string, limit int) ([]*webhooks.DeliveryAttempt, error) {
	if limit < 1 {
		return nil, nil
	}
	q, key := listAttemptsQuery, consumerID
	if id, ok := webhooks.DSDeliveryLogSubscription(consumerID); ok {
		q, key = listDSAttemptsQuery, id
	}
	rows, err := s.r.query(ctx, q, key, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: list attempts: %w", err)
	}
	defer rows.Close()
	var out []*webhooks.DeliveryAttempt
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			return nil, fmt.Errorf("sqlitestore: list attempts: %w", err)
		}
		plain, err := s.sealer.Open(data, seal.ADDeliveryAttempt(consumerID))
		if err != nil {
			return nil, fmt.Errorf("sqlitestore: list attempts of consumer %s: %w", consumerID, err)
		}
		a := &webhooks.DeliveryAttempt{ConsumerID: consumerID}
		if err := a.UnmarshalData(plain); err != nil {
			return nil, fmt.Errorf("sqlitestore: list attempts of consumer %s: %w", consumerID, err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: list attempts: %w", err)
	}
	return out, nil
}

// The delivery log's statements, checked for index use by a test.
const (
	// A consumer deleted meanwhile keeps no log.
	appendAttemptQuery = `INSERT INTO delivery_attempts (consumer_id, data)
		SELECT ?1, ?2 WHERE EXISTS (SELECT 1 FROM consumers WHERE id = ?1)`
	// Every attempt at or below the newest one past the ?2 to keep.
	trimAttemptsQuery = `DELETE FROM delivery_attempts WHERE consumer_id = ?1 AND seq <= (
		SELECT seq FROM delivery_attempts WHERE consumer_id = ?1 ORDER BY seq DESC LIMIT 1 OFFSET ?2)`
	listAttemptsQuery = "SELECT data FROM delivery_attempts WHERE consumer_id = ?1 ORDER BY seq DESC LIMIT ?2"

	// The same for a __ds subscription's log.
	appendDSAttemptQuery = `INSERT INTO ds_delivery_attempts (subscription_id, data)
		SELECT ?1, ?2 WHERE EXISTS (SELECT 1 FROM ds_subscriptions WHERE id = ?1 AND deleted = 0)`
	trimDSAttemptsQuery = `DELETE FROM ds_delivery_attempts WHERE subscription_id = ?1 AND seq <= (
		SELECT seq FROM ds_delivery_attempts WHERE subscription_id = ?1 ORDER BY seq DESC LIMIT 1 OFFSET ?2)`
	listDSAttemptsQuery = "SELECT data FROM ds_delivery_attempts WHERE subscription_id = ?1 ORDER BY seq DESC LIMIT ?2"
)
