package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	webhooks "github.com/streamhooks/webhooks"
)

const consumerCols = `c.id, c.subscription_id, c.primary_stream, c.state, c.deadline, c.data`

// The engine's hot queries, checked for index use by a test.
const (
	// A consumer's secondary paths exclude its primary stream, so the two
	// halves never return the same consumer.
	dueConsumersQuery = `SELECT ` + consumerCols + ` FROM consumers c
		WHERE c.deadline IS NOT NULL AND c.deadline <= ?1 ORDER BY c.deadline, c.id LIMIT ?2`
	nextDeadlineQuery = "SELECT min(deadline) FROM consumers WHERE deadline IS NOT NULL"
	// A page of a subscription's consumers, from consumers_by_subscription_id
	// or, in one state, consumers_by_subscription_state.
	listConsumersQuery = `SELECT ` + consumerCols + ` FROM consumers c
		WHERE c.subscription_id = ?1 AND c.id > ?2 ORDER BY c.id LIMIT ?3`
	listConsumersInStateQuery = `SELECT ` + consumerCols + ` FROM consumers c
		WHERE c.subscription_id = ?1 AND c.state = ?4 AND c.id > ?2 ORDER BY c.id LIMIT ?3`
)

// consumerRow is a consumer encoded for the columns after id,
// subscription_id and primary_stream.
type consumerRow struct {
	state    string
	deadline sql.NullInt64
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

func scanConsumer(row scanner, lead ...any) (*webhooks.Consumer, error) {
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
	return s.write(ctx, func(tx *wtx) error {
		var n int
		if err := tx.queryRow("SELECT count(*) FROM subscriptions WHERE id = ?", c.SubscriptionID).Scan(&n); err != nil {
			return fmt.Errorf("sqlitestore: create consumer: %w", err)
		}
		if n == 0 {
			return webhooks.ErrSubscriptionNotFound
		}
		res, err := tx.exec(`INSERT INTO consumers (id, subscription_id, primary_stream, state, deadline, data)
			VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`,
			c.ID, c.SubscriptionID, c.PrimaryStream, r.state, r.deadline, r.data)
		if err != nil {
			return fmt.Errorf("sqlitestore: create consumer: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("sqlitestore: create consumer: %w", err)
		} else if n == 0 {
			return webhooks.ErrConsumerExists
		}
		return indexStreams(tx, c.ID, nil, secondaryPaths(c))
	})
}

// GetConsumer implements webhooks.Store.
func (s *Store) GetConsumer(ctx context.Context, id string) (*webhooks.Consumer, error) {
	c, err := scanConsumer(s.r.queryRow(ctx, "SELECT "+consumerCols+" FROM consumers c WHERE c.id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, webhooks.ErrConsumerNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: get consumer: %w", err)
	}
	return c, nil
}

// UpdateConsumer implements webhooks.Store. fn runs inside a transaction
// that holds the database's write lock, on the Store's writer goroutine:
// it must not call the Store's write methods, and it delays every other
// write while it runs. fn must not change the consumer's ID,
// SubscriptionID or PrimaryStream; UpdateConsumer returns an error rather
// than save such a change.
func (s *Store) UpdateConsumer(ctx context.Context, id string, fn func(c *webhooks.Consumer) (webhooks.UpdateAction, error)) (*webhooks.Consumer, error) {
	var out *webhooks.Consumer
	err := s.write(ctx, func(tx *wtx) error {
		stored, err := scanConsumer(tx.queryRow("SELECT "+consumerCols+" FROM consumers c WHERE c.id = ?", id))
		if errors.Is(err, sql.ErrNoRows) {
			return webhooks.ErrConsumerNotFound
		}
		if err != nil {
			return fmt.Errorf("sqlitestore: update consumer: %w", err)
		}
		c := stored.Clone()
		action, err := fn(c)
		if err != nil {
			return err
		}
		switch action {
		case webhooks.UpdateNone:
			out = stored
			return nil
		case webhooks.UpdateSave:
			if c.ID != stored.ID || c.SubscriptionID != stored.SubscriptionID || c.PrimaryStream != stored.PrimaryStream {
				return fmt.Errorf("sqlitestore: update of consumer %q changed its ID, SubscriptionID or PrimaryStream", id)
			}
			if err := saveConsumer(tx, stored, c); err != nil {
				return err
			}
			// fn may have kept c; hand back a copy it cannot reach.
			out = c.Clone()
			return nil
		case webhooks.UpdateDelete:
			if _, err := tx.exec("DELETE FROM consumers WHERE id = ?", id); err != nil {
				return fmt.Errorf("sqlitestore: delete consumer: %w", err)
			}
			return nil
		default:
			return fmt.Errorf("sqlitestore: update of consumer %q returned unknown action %d", id, action)
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// saveConsumer writes c over old, its stored version.
func saveConsumer(tx *wtx, old, c *webhooks.Consumer) error {
	r, err := encodeConsumer(c)
	if err != nil {
		return err
	}
	_, err = tx.exec("UPDATE consumers SET state = ?, deadline = ?, data = ? WHERE id = ?", r.state, r.deadline, r.data, c.ID)
	if err != nil {
		return fmt.Errorf("sqlitestore: save consumer: %w", err)
	}
	return indexStreams(tx, c.ID, secondaryPaths(old), secondaryPaths(c))
}

// secondaryPaths returns the distinct paths of c's streams other than its
// primary stream, which has an index of its own.
func secondaryPaths(c *webhooks.Consumer) map[string]struct{} {
	var out map[string]struct{}
	for _, so := range c.Streams {
		if so.Path == c.PrimaryStream {
			continue
		}
		if out == nil {
			out = make(map[string]struct{}, len(c.Streams))
		}
		out[so.Path] = struct{}{}
	}
	return out
}

// indexStreams brings consumer id's rows in consumer_streams from the paths
// in from to those in to.
func indexStreams(tx *wtx, id string, from, to map[string]struct{}) error {
	for p := range from {
		if _, ok := to[p]; ok {
			continue
		}
		if _, err := tx.exec("DELETE FROM consumer_streams WHERE path = ? AND consumer_id = ?", p, id); err != nil {
			return fmt.Errorf("sqlitestore: index streams: %w", err)
		}
	}
	for p := range to {
		if _, ok := from[p]; ok {
			continue
		}
		if _, err := tx.exec("INSERT INTO consumer_streams (path, consumer_id) VALUES (?, ?)", p, id); err != nil {
			return fmt.Errorf("sqlitestore: index streams: %w", err)
		}
	}
	return nil
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
	var d sql.NullInt64
	err := s.r.queryRow(ctx, nextDeadlineQuery).Scan(&d)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("sqlitestore: next deadline: %w", err)
	}
	return fromNanos(d), d.Valid, nil
}

// CountConsumers implements webhooks.Store. States with no consumers are
// absent from the map.
func (s *Store) CountConsumers(ctx context.Context) (map[webhooks.ConsumerState]int, error) {
	rows, err := s.r.query(ctx, "SELECT state, n FROM consumer_counts WHERE n > 0")
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: count consumers: %w", err)
	}
	defer rows.Close()
	out := make(map[webhooks.ConsumerState]int)
	for rows.Next() {
		var (
			state string
			n     int
		)
		if err := rows.Scan(&state, &n); err != nil {
			return nil, fmt.Errorf("sqlitestore: count consumers: %w", err)
		}
		out[webhooks.ConsumerState(state)] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: count consumers: %w", err)
	}
	return out, nil
}

// ListConsumers implements webhooks.Store. A limit below one returns
// nothing.
func (s *Store) ListConsumers(ctx context.Context, p *webhooks.ListConsumersParams) ([]*webhooks.Consumer, error) {
	if p.Limit < 1 {
		return nil, nil
	}
	if p.State == "" {
		return s.queryConsumers(ctx, listConsumersQuery, p.SubscriptionID, p.After, p.Limit)
	}
	return s.queryConsumers(ctx, listConsumersInStateQuery, p.SubscriptionID, p.After, p.Limit, string(p.State))
}

func (s *Store) queryConsumers(ctx context.Context, query string, args ...any) ([]*webhooks.Consumer, error) {
	rows, err := s.r.query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: query consumers: %w", err)
	}
	defer rows.Close()
	var out []*webhooks.Consumer
	for rows.Next() {
		c, err := scanConsumer(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlitestore: query consumers: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: query consumers: %w", err)
	}
	return out, nil
}
