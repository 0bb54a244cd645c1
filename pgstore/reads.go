package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/internal/combine"
)

// The engine reads a stream's consumers for every append, and
// subscriptions for the API and for the webhooks of those it has not
// loaded, so the calls of each made at once share one query
// (internal/combine).

const (
	getSubscriptionsQuery = selectSubscriptions + " WHERE s.id = ANY ($1)"
	// The consumers of several streams, each row with the path it was
	// found by, ordered by path and then ID. A consumer's secondary paths
	// exclude its primary stream, so the two halves never return the same
	// consumer for one path.
	consumersByStreamsQuery = `SELECT c.primary_stream, ` + consumerCols + ` FROM streamhooks_consumers c WHERE c.primary_stream = ANY ($1)
		UNION ALL
		SELECT cs.path, ` + consumerCols + ` FROM streamhooks_consumer_streams cs JOIN streamhooks_consumers c ON c.id = cs.consumer_id WHERE cs.path = ANY ($1)
		ORDER BY 1, 2`
)

// GetSubscription implements webhooks.Store.
func (s *Store) GetSubscription(ctx context.Context, id string) (*webhooks.Subscription, error) {
	return s.subscriptionReads.Get(ctx, id, s.subscriptionsByID, (*webhooks.Subscription).Clone, webhooks.ErrSubscriptionNotFound)
}

// subscriptionsByID reads the subscriptions with ids.
func (s *Store) subscriptionsByID(ctx context.Context, ids []string) (map[string]*webhooks.Subscription, error) {
	// A failed Query's error comes back from CollectRows too.
	rows, _ := s.pool.Query(ctx, getSubscriptionsQuery, ids)
	subs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*webhooks.Subscription, error) { return s.scanSubscription(row) })
	if err != nil {
		return nil, dbError("get subscription", err)
	}
	out := make(map[string]*webhooks.Subscription, len(subs))
	for _, sub := range subs {
		out[sub.ID] = sub
	}
	return out, nil
}

// ConsumersByStream implements webhooks.Store.
func (s *Store) ConsumersByStream(ctx context.Context, path string) ([]*webhooks.Consumer, error) {
	return s.streamReads.Get(ctx, path, s.consumersByPath, combine.OwnEach[*webhooks.Consumer], nil)
}

// consumersByPath reads the consumers of the streams at paths.
func (s *Store) consumersByPath(ctx context.Context, paths []string) (map[string][]*webhooks.Consumer, error) {
	type found struct {
		path string
		c    *webhooks.Consumer
	}
	// A failed Query's error comes back from CollectRows too.
	rows, _ := s.pool.Query(ctx, consumersByStreamsQuery, paths)
	all, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (found, error) {
		var f found
		c, err := scanConsumer(row, &f.path)
		f.c = c
		return f, err
	})
	if err != nil {
		return nil, dbError("query consumers", err)
	}
	out := make(map[string][]*webhooks.Consumer)
	for _, f := range all {
		out[f.path] = append(out[f.path], f.c)
	}
	return out, nil
}
