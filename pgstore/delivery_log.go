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

	// The same for the __ds subscriptions' logs. The lock is a share
	// lock, which a delete's FOR UPDATE waits for, so that a delete
	// drops every row an append committed.
	lockDSAttemptSubscriptionsQuery = "SELECT id FROM streamhooks_ds_subscriptions WHERE id = ANY ($1) AND NOT deleted ORDER BY id FOR SHARE"
	appendDSAttemptsQuery           = `INSERT INTO streamhooks_ds_delivery_attempts (subscription_id, data)
		SELECT a.id, a.data FROM unnest($1::text[], $2::bytea[]) WITH ORDINALITY AS a (id, data, n)
		WHERE EXISTS (SELECT FROM streamhooks_ds_subscriptions s WHERE s.id = a.id AND NOT s.deleted)
		ORDER BY a.n`
	trimDSAttemptsQuery = `DELETE FROM streamhooks_ds_delivery_attempts d
		USING unnest($1::text[]) AS c (id), LATERAL (
			SELECT seq FROM streamhooks_ds_delivery_attempts WHERE subscription_id = c.id ORDER BY seq DESC OFFSET $2 LIMIT 1
		) AS cut
		WHERE d.subscription_id = c.id AND d.seq <= cut.seq`
	listDSAttemptsQuery = "SELECT data FROM streamhooks_ds_delivery_attempts WHERE subscription_id = $1 ORDER BY seq DESC LIMIT $2"
)

// AppendAttempts implements webhooks.DeliveryLog, in one transaction of
// one round trip. Two calls at once for one consumer may each miss the
// other's attempts when they trim, leaving its log over keep until the
// next append.
func (s *Store) AppendAttempts(ctx context.Context, attempts []*webhooks.DeliveryAttempt, keep int) error {
	keep = max(keep, 0)
	// The consumers' attempts, then the __ds subscriptions'.
	var ids, dsIDs, consumers, dsSubs []string
	var data, dsData [][]byte
	for _, a := range attempts {
		b, err := a.MarshalData()
		if err != nil {
			return err
		}
		sealed := s.sealer.Seal(b, seal.ADDeliveryAttempt(a.ConsumerID))
		if id, ok := webhooks.DSDeliveryLogSubscription(a.ConsumerID); ok {
			dsIDs, dsData = append(dsIDs, id), append(dsData, sealed)
			if !slices.Contains(dsSubs, id) {
				dsSubs = append(dsSubs, id)
			}
			continue
		}
		ids, data = append(ids, a.ConsumerID), append(data, sealed)
		if !slices.Contains(consumers, a.ConsumerID) {
			consumers = append(consumers, a.ConsumerID)
		}
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		if len(consumers) > 0 {
			b.Queue(lockAttemptConsumersQuery, consumers)
			b.Queue(appendAttemptsQuery, ids, data)
			b.Queue(trimAttemptsQuery, consumers, keep)
		}
		if len(dsSubs) > 0 {
			b.Queue(lockDSAttemptSubscriptionsQuery, dsSubs)
			b.Queue(appendDSAttemptsQuery, dsIDs, dsData)
			b.Queue(trimDSAttemptsQuery, dsSubs, keep)
		}
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
	q, key := listAttemptsQuery, consumerID
	if id, ok := webhooks.DSDeliveryLogSubscription(consumerID); ok {
		q, key = listDSAttemptsQuery, id
	}
	rows, _ := s.pool.Query(ctx, q, key, limit)
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
