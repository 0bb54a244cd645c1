package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/internal/combine"
)

// The engine reads a subscription for every webhook it sends and a
// stream's consumers for every append, so these reads are batched as
// updates are (combine.go): the calls made at once share one query.

const (
	getSubscriptionsQuery = "SELECT " + subscriptionCols + " FROM streamhooks_subscriptions WHERE id = ANY ($1)"
	// The consumers of several streams, each row with the path it was
	// found by, ordered by path and then ID. A consumer's secondary paths
	// exclude its primary stream, so the two halves never return the same
	// consumer for one path.
	consumersByStreamsQuery = `SELECT c.primary_stream, ` + consumerCols + ` FROM streamhooks_consumers c WHERE c.primary_stream = ANY ($1)
		UNION ALL
		SELECT cs.path, ` + consumerCols + ` FROM streamhooks_consumer_streams cs JOIN streamhooks_consumers c ON c.id = cs.consumer_id WHERE cs.path = ANY ($1)
		ORDER BY 1, 2`
)

// subscriptionRead is one GetSubscription call, queued for a batch.
type subscriptionRead struct {
	ctx context.Context
	id  string
	out *webhooks.Subscription
	err error
}

// GetSubscription implements webhooks.Store.
func (s *Store) GetSubscription(ctx context.Context, id string) (*webhooks.Subscription, error) {
	r := &subscriptionRead{ctx: ctx, id: id}
	if !s.subscriptionReads.Do(ctx, r, s.readSubscriptions) {
		return nil, ctx.Err()
	}
	return r.out, r.err
}

func (r *subscriptionRead) Context() context.Context { return r.ctx }
func (r *subscriptionRead) Fail(err error)           { r.out, r.err = nil, err }

// readSubscriptions runs a batch of GetSubscription calls.
func (s *Store) readSubscriptions(reads []*subscriptionRead) {
	reads, ctx, cancel := combine.Begin(reads)
	defer cancel()
	if len(reads) == 0 {
		return
	}
	ids := make([]string, len(reads))
	for i, r := range reads {
		ids[i] = r.id
	}
	// A failed Query's error comes back from CollectRows too.
	rows, _ := s.pool.Query(ctx, getSubscriptionsQuery, ids)
	subs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*webhooks.Subscription, error) { return s.scanSubscription(row) })
	byID := make(map[string]*webhooks.Subscription, len(subs))
	for _, sub := range subs {
		byID[sub.ID] = sub
	}
	for _, r := range reads {
		switch sub := byID[r.id]; {
		case err != nil:
			r.Fail(dbError("get subscription", err))
		case sub == nil:
			r.Fail(webhooks.ErrSubscriptionNotFound)
		default:
			// Each caller owns what it gets.
			r.out = sub.Clone()
		}
	}
}

// streamRead is one ConsumersByStream call, queued for a batch.
type streamRead struct {
	ctx  context.Context
	path string
	out  []*webhooks.Consumer
	err  error
}

// ConsumersByStream implements webhooks.Store.
func (s *Store) ConsumersByStream(ctx context.Context, path string) ([]*webhooks.Consumer, error) {
	r := &streamRead{ctx: ctx, path: path}
	if !s.streamReads.Do(ctx, r, s.readStreams) {
		return nil, ctx.Err()
	}
	return r.out, r.err
}

func (r *streamRead) Context() context.Context { return r.ctx }
func (r *streamRead) Fail(err error)           { r.out, r.err = nil, err }

// readStreams runs a batch of ConsumersByStream calls.
func (s *Store) readStreams(reads []*streamRead) {
	reads, ctx, cancel := combine.Begin(reads)
	defer cancel()
	if len(reads) == 0 {
		return
	}
	paths := make([]string, len(reads))
	for i, r := range reads {
		paths[i] = r.path
	}
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
	byPath := make(map[string][]*webhooks.Consumer)
	for _, f := range all {
		byPath[f.path] = append(byPath[f.path], f.c)
	}
	for _, r := range reads {
		if err != nil {
			r.Fail(dbError("query consumers", err))
			continue
		}
		r.out = make([]*webhooks.Consumer, 0, len(byPath[r.path]))
		for _, c := range byPath[r.path] {
			// Each caller owns what it gets.
			r.out = append(r.out, c.Clone())
		}
	}
}
