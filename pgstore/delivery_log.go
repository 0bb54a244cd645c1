package pgstore

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/internal/seal"
)

var _ webhooks.DeliveryLog = (*Store)(nil)

// The statements of the delivery log, checked for index use by a test.
const (
	// lockAttemptConsumersQuery takes the consumers whose attempts are
	// appended, in ID order as every other lock of consumers, so that none
	// is deleted before the append commits.
	lockAttemptConsumersQuery = "SELECT id FROM streamhooks_consumers WHERE id = ANY ($1) ORDER BY id FOR KEY SHARE"
	// appendAttemptsQuery inserts the attempts in order, each consumer's
	// newest last, skipping those of consumers that are gone.
	appendAttemptsQuery = `INSERT INTO streamhooks_delivery_attempts (consumer_id, data)
		SELECT a.consumer_id, a.data FROM unnest($1::text[], $2::bytea[]) WITH ORDINALITY AS a (consumer_id, data, n)
		WHERE EXISTS (SELECT FROM streamhooks_consumers c WHERE c.id = a.consumer_id)
		ORDER BY a.n`
	// trimAttemptsQuery deletes, for each consumer in $1, every attempt
	// at or below the newest one past the $2 to keep.
	trimAttemptsQuery = `DELETE FROM streamhooks_delivery_attempts d
		USING unnest($1::text[]) AS c (id), LATERAL (
			SELECT seq FROM streamhooks_delivery_attempts WHERE consumer_id = c.id ORDER BY seq DESC OFFSET $2 LIMIT 1
		) AS cut
		WHERE d.consumer_id = c.id AND d.seq <= cut.seq`
	listAttemptsQuery = "SELECT data FROM streamhooks_delivery_attempts WHERE consumer_id = $1 ORDER BY seq DESC LIMIT $2"
)

// AppendAttempts implements webhooks.DeliveryLog, in one transaction of
// one round trip. Two calls at once for one consumer may each miss the
// other's attempts when they trim, leaving its log over keep until the
// next append.
func (s *Store) AppendAttempts(ctx context.Context, attempts []*webhooks.DeliveryAttempt, keep int) error {
	keep = max(keep, 0)
	ids := make([]string, len(attempts))
	data := make([][]byte, len(attempts))
	var consumers []string
	for i, a := range attempts {
		b, err := a.MarshalData()
		if err != nil {
			return err
		}
		ids[i], data[i] = a.ConsumerID, s.sealer.Seal(b, seal.ADDeliveryAttempt(a.ConsumerID))
		if !slices.Contains(consumers, a.ConsumerID) {
			consumers = append(consumers, a.ConsumerID)
		}
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue(lockAttemptConsumersQuery, consumers)
		b.Queue(appendAttemptsQuery, ids, data)
		b.Queue(trimAttemptsQuery, consumers, keep)
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return dbError("append attempts", err)
	}
	return nil
}

// ListAttempts implements webhooks.DeliveryLog. A limit below one returns
// nothing.
func (s *Store) ListAttempts(ctx context.Context, consumerID string, limit int) ([]*webhooks.DeliveryAttempt, error) {
	if limit < 1 {
		return nil, nil
	}
	// A failed Query's error comes back from CollectRows too.
	rows, _ := s.pool.Query(ctx, listAttemptsQuery, consumerID, limit)
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*webhooks.DeliveryAttempt, error) {
		var data []byte
		if err := row.Scan(&data); err != nil {
			return nil, err
		}
		plain, err := s.sealer.Open(data, seal.ADDeliveryAttempt(consumerID))
		if err != nil {
			return nil, fmt.Errorf("consumer %s: %w", consumerID, err)
		}
		a := &webhooks.DeliveryAttempt{ConsumerID: consumerID}
		if err := a.UnmarshalData(plain); err != nil {
			return nil, fmt.Errorf("consumer %s: %w", consumerID, err)
		}
		return a, nil
	})
	if err != nil {
		return nil, dbError("list attempts", err)
	}
	return out, nil
}
