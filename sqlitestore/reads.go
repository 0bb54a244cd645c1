package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/internal/combine"
)

// The engine reads a stream's consumers for every append, and
// subscriptions for the API and for the webhooks of those it has not
// loaded, so the calls of each made at once share one query
// (internal/combine), which takes its keys as one JSON array.

const (
	getSubscriptionsQuery = selectSubscriptions + " WHERE s.id IN (SELECT value FROM json_each(?1))"
	// The consumers of several streams, each row with the path it was
	// found by, ordered by path and then ID. A consumer's secondary paths
	// exclude its primary stream, so the two halves never return the same
	// consumer for one path.
	consumersByStreamsQuery = `SELECT c.primary_stream, ` + consumerCols + ` FROM consumers c WHERE c.primary_stream IN (SELECT value FROM json_each(?1))
		UNION ALL
		SELECT cs.path, ` + consumerCols + ` FROM consumer_streams cs JOIN consumers c ON c.id = cs.consumer_id WHERE cs.path IN (SELECT value FROM json_each(?1))
		ORDER BY 1, 2`
)

// GetSubscription implements webhooks.Store.
func (s *Store) GetSubscription(ctx context.Context, id string) (*webhooks.Subscription, error) {
	return s.subscriptionReads.Get(ctx, id, s.subscriptionsByID, (*webhooks.Subscription).Clone, webhooks.ErrSubscriptionNotFound)
}

// subscriptionsByID reads the subscriptions with ids.
func (s *Store) subscriptionsByID(ctx context.Context, ids []string) (map[string]*webhooks.Subscription, error) {
	rows, err := s.queryKeys(ctx, getSubscriptionsQuery, ids)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: get subscription: %w", err)
	}
	defer rows.Close()
	out := make(map[string]*webhooks.Subscription, len(ids))
	for rows.Next() {
		sub, err := s.scanSubscription(rows)
		if err != nil {
			return nil, err
		}
		out[sub.ID] = sub
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: get subscription: %w", err)
	}
	return out, nil
}

// ConsumersByStream implements webhooks.Store.
func (s *Store) ConsumersByStream(ctx context.Context, path string) ([]*webhooks.Consumer, error) {
	return s.streamReads.Get(ctx, path, s.consumersByPath, combine.OwnEach[*webhooks.Consumer], nil)
}

// consumersByPath reads the consumers of the streams at paths.
func (s *Store) consumersByPath(ctx context.Context, paths []string) (map[string][]*webhooks.Consumer, error) {
	rows, err := s.queryKeys(ctx, consumersByStreamsQuery, paths)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: query consumers: %w", err)
	}
	defer rows.Close()
	out := make(map[string][]*webhooks.Consumer)
	var path string
	for rows.Next() {
		c, err := scanConsumer(rows, &path)
		if err != nil {
			return nil, fmt.Errorf("sqlitestore: query consumers: %w", err)
		}
		out[path] = append(out[path], c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: query consumers: %w", err)
	}
	return out, nil
}

// queryKeys runs query with keys as its one parameter, a JSON array.
func (s *Store) queryKeys(ctx context.Context, query string, keys []string) (*sql.Rows, error) {
	arg, err := json.Marshal(keys)
	if err != nil {
		return nil, err
	}
	return s.r.query(ctx, query, string(arg))
}
