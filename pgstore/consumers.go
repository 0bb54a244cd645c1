package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	webhooks "github.com/streamhooks/webhooks"
)

const consumerCols = `c.id, c.subscription_id, c.primary_stream, c.state, c.deadline, c.data`

// The engine's hot queries, checked for index use by a test.
const (
	getConsumerQuery  = `SELECT ` + consumerCols + ` FROM streamhooks_consumers c WHERE c.id = $1`
	dueConsumersQuery = `SELECT ` + consumerCols + ` FROM streamhooks_consumers c
		WHERE c.deadline IS NOT NULL AND c.deadline <= $1 ORDER BY c.deadline, c.id LIMIT $2`
	nextDeadlineQuery = "SELECT min(deadline) FROM streamhooks_consumers WHERE deadline IS NOT NULL"
	// A page of a subscription's consumers, from
	// streamhooks_consumers_by_subscription_id or, in one state,
	// streamhooks_consumers_by_subscription_state.
	listConsumersQuery = `SELECT ` + consumerCols + ` FROM streamhooks_consumers c
		WHERE c.subscription_id = $1 AND c.id > $2 ORDER BY c.id LIMIT $3`
	listConsumersInStateQuery = `SELECT ` + consumerCols + ` FROM streamhooks_consumers c
		WHERE c.subscription_id = $1 AND c.state = $4 AND c.id > $2 ORDER BY c.id LIMIT $3`
	// createConsumerQuery inserts a consumer and indexes its secondary
	// paths in one statement, and returns how many consumers it inserted.
	createConsumerQuery = `WITH c AS (
			INSERT INTO streamhooks_consumers (id, subscription_id, primary_stream, state, deadline, data)
			VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO NOTHING RETURNING id
		), paths AS (
			INSERT INTO streamhooks_consumer_streams (path, consumer_id) SELECT p, c.id FROM c, unnest($7::text[]) p
		)
		SELECT count(*) FROM c`
	// saveConsumerPathsQuery stores a consumer whose paths changed: $5
	// are those to unindex, $6 those to index.
	saveConsumerPathsQuery = `WITH c AS (
			UPDATE streamhooks_consumers SET state = $2, deadline = $3, data = $4 WHERE id = $1
		), unindexed AS (
			DELETE FROM streamhooks_consumer_streams WHERE consumer_id = $1 AND path = ANY ($5::text[])
		)
		INSERT INTO streamhooks_consumer_streams (path, consumer_id) SELECT p, $1 FROM unnest($6::text[]) p`
)

// consumerRow is a consumer encoded for the columns after id,
// subscription_id and primary_stream.
type consumerRow struct {
	state    string
	deadline *int64
	data     []byte
}

func encodeConsumer(c *webhooks.Consumer) (*consumerRow, error) {
	deadline, err := nanos(c.Deadline)
	if err != nil {
		return nil, err
	}
	data, err := c.MarshalData()
	if err != nil {
		return nil, err
	}
	return &consumerRow{state: string(c.State), deadline: deadline, data: data}, nil
}

// scanConsumer reads a consumer from row, after the columns scanned into
// lead, if any.
func scanConsumer(row pgx.Row, lead ...any) (*webhooks.Consumer, error) {
	var (
		c webhooks.Consumer
		r consumerRow
	)
	if err := row.Scan(append(lead, &c.ID, &c.SubscriptionID, &c.PrimaryStream, &r.state, &r.deadline, &r.data)...); err != nil {
		return nil, err
	}
	c.State = webhooks.ConsumerState(r.state)
	c.Deadline = fromNanos(r.deadline)
	if err := c.UnmarshalData(r.data); err != nil {
		return nil, fmt.Errorf("%w for consumer %s", err, c.ID)
	}
	return &c, nil
}

// CreateConsumer implements webhooks.Store.
func (s *Store) CreateConsumer(ctx context.Context, c *webhooks.Consumer) error {
	r, err := encodeConsumer(c)
	if err != nil {
		return err
	}
	var n int
	err = s.pool.QueryRow(ctx, createConsumerQuery,
		c.ID, c.SubscriptionID, c.PrimaryStream, r.state, r.deadline, r.data, secondaryPaths(c)).Scan(&n)
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "23503" { // foreign_key_violation
		return webhooks.ErrSubscriptionNotFound
	}
	if err != nil {
		return dbError("create consumer", err)
	}
	if n == 0 {
		return webhooks.ErrConsumerExists
	}
	return nil
}

// GetConsumer implements webhooks.Store.
func (s *Store) GetConsumer(ctx context.Context, id string) (*webhooks.Consumer, error) {
	c, err := scanConsumer(s.pool.QueryRow(ctx, getConsumerQuery, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, webhooks.ErrConsumerNotFound
	}
	if err != nil {
		return nil, dbError("get consumer", err)
	}
	return c, nil
}

// UpdateConsumer implements webhooks.Store. Calls made at once share a
// transaction of two round trips, whatever its size, which locks their
// consumers' rows (SELECT ... FOR NO KEY UPDATE) in ID order. The functions of
// different consumers run at once, those of one consumer in call order,
// each on what the one before it left. fn runs again, alone, only if the
// shared write failed, to learn whose it was. fn must not call the Store,
// whose batch waits for it, nor change the consumer's ID, SubscriptionID
// or PrimaryStream; UpdateConsumer returns an error rather than save such
// a change.
func (s *Store) UpdateConsumer(ctx context.Context, id string, fn func(c *webhooks.Consumer) (webhooks.UpdateAction, error)) (*webhooks.Consumer, error) {
	op := &updateOp{ctx: ctx, id: id, fn: fn}
	if !s.updates.Do(ctx, op, s.runBatch) {
		return nil, ctx.Err()
	}
	if op.panicked != nil {
		panic(op.panicked)
	}
	return op.out, op.err
}

// secondaryPaths returns the distinct paths of c's streams other than its
// primary stream, which has an index of its own.
func secondaryPaths(c *webhooks.Consumer) []string {
	out := make([]string, 0, len(c.Streams))
	for _, so := range c.Streams {
		if so.Path != c.PrimaryStream && !slices.Contains(out, so.Path) {
			out = append(out, so.Path)
		}
	}
	return out
}

// diff returns the paths of a not in b.
func diff(a, b []string) []string {
	out := []string{}
	for _, p := range a {
		if !slices.Contains(b, p) {
			out = append(out, p)
		}
	}
	return out
}

// DueConsumers implements webhooks.Store. Equal deadlines are ordered by
// ID. A limit below one returns nothing.
func (s *Store) DueConsumers(ctx context.Context, now time.Time, limit int) ([]*webhooks.Consumer, error) {
	if limit < 1 {
		return nil, nil
	}
	n, err := nanos(now)
	if err != nil {
		return nil, err
	}
	return s.queryConsumers(ctx, dueConsumersQuery, n, limit)
}

// NextDeadline implements webhooks.Store.
func (s *Store) NextDeadline(ctx context.Context) (time.Time, bool, error) {
	var d *int64
	if err := s.pool.QueryRow(ctx, nextDeadlineQuery).Scan(&d); err != nil {
		return time.Time{}, false, dbError("next deadline", err)
	}
	return fromNanos(d), d != nil, nil
}

// CountConsumers implements webhooks.Store. It counts every row: the
// engine calls it when metrics are collected, and a counter row kept by
// every transition would serialize the transitions of all engines.
func (s *Store) CountConsumers(ctx context.Context) (map[webhooks.ConsumerState]int, error) {
	// A failed Query's error comes back from ForEachRow too.
	rows, _ := s.pool.Query(ctx, "SELECT state, count(*) FROM streamhooks_consumers GROUP BY state")
	out := make(map[webhooks.ConsumerState]int)
	var (
		state string
		n     int
	)
	_, err := pgx.ForEachRow(rows, []any{&state, &n}, func() error {
		out[webhooks.ConsumerState(state)] = n
		return nil
	})
	if err != nil {
		return nil, dbError("count consumers", err)
	}
	return out, nil
}

// ListConsumers implements webhooks.Store. A limit below one returns
// nothing.
func (s *Store) ListConsumers(ctx context.Context, p *webhooks.ListConsumersParams) ([]*webhooks.Consumer, error) {
	if p.Limit < 1 {
		return nil, nil
	}
	// A subscription's consumer IDs share the prefix "{subscription}:"
	// (webhooks.ConsumerID), so a page starts there at the earliest.
	// Postgres may read the page from the primary key, filtering by
	// subscription, and without that bound the first page would read
	// every consumer whose ID sorts before the subscription's.
	after := max(p.After, p.SubscriptionID+":")
	if p.State == "" {
		return s.queryConsumers(ctx, listConsumersQuery, p.SubscriptionID, after, p.Limit)
	}
	return s.queryConsumers(ctx, listConsumersInStateQuery, p.SubscriptionID, after, p.Limit, string(p.State))
}

func (s *Store) queryConsumers(ctx context.Context, query string, args ...any) ([]*webhooks.Consumer, error) {
	// A failed Query's error comes back from CollectRows too.
	rows, _ := s.pool.Query(ctx, query, args...)
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*webhooks.Consumer, error) { return scanConsumer(row) })
	if err != nil {
		return nil, dbError("query consumers", err)
	}
	return out, nil
}
