package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/pgstore"
)

// The seeded layout: subscription i has the pattern /cap/s{i}/* and
// consumer j the stream /cap/s{j mod S}/{j div S}, so the consumers spread
// evenly over the subscriptions, one stream each. Every stream's tail is
// seedTail, and every consumer has acked it: IDLE, with nothing pending.
const (
	seedTail    = "0000000000000100"
	seedWebhook = "http://127.0.0.1:9/never" // never posted: nothing is pending
)

func subscriptionID(i int) string      { return fmt.Sprintf("cap-%06d", i) }
func subscriptionPattern(i int) string { return fmt.Sprintf("/cap/s%d/*", i) }
func streamPath(subs, j int) string    { return fmt.Sprintf("/cap/s%d/%d", j%subs, j/subs) }

// openStore opens a pool whose connections use schema, and a pgstore on it,
// which creates the tables there.
func openStore(ctx context.Context, dsn, schema string, conns int32) (*pgxpool.Pool, *pgstore.Store, error) {
	if err := exec(ctx, dsn, "CREATE SCHEMA IF NOT EXISTS "+schema); err != nil {
		return nil, nil, err
	}
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, nil, err
	}
	pc.ConnConfig.RuntimeParams["search_path"] = schema
	pc.MaxConns = conns
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, nil, err
	}
	s, err := pgstore.New(ctx, pool)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, s, nil
}

// exec runs sql on a connection of its own.
func exec(ctx context.Context, dsn, sql string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	_, err = conn.Exec(ctx, sql)
	return errors.Join(err, conn.Close(ctx))
}

// seed fills a fresh schema with c.subs subscriptions and c.consumers
// consumers, with COPY, and records the layout in a table of its own.
func seed(ctx context.Context, c config) error {
	if err := exec(ctx, c.dsn, "DROP SCHEMA IF EXISTS "+c.schema+" CASCADE"); err != nil {
		return err
	}
	pool, _, err := openStore(ctx, c.dsn, c.schema, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	start := time.Now()
	now := time.Now().UTC()
	created := now.UnixNano()
	subs := make([][]any, c.subs)
	for i := range subs {
		sub := &webhooks.Subscription{ID: subscriptionID(i), Pattern: subscriptionPattern(i), Webhook: seedWebhook, Secret: "capacity-secret-0123456789abcdef", CreatedAt: now}
		data, err := sub.MarshalData()
		if err != nil {
			return err
		}
		subs[i] = []any{sub.ID, sub.Pattern, sub.Webhook, []byte{}, []byte(sub.Secret), created, data}
	}
	if _, err := pool.CopyFrom(ctx, pgx.Identifier{"streamhooks_subscriptions"},
		[]string{"id", "pattern", "webhook", "description", "secret", "created_at", "data"}, pgx.CopyFromRows(subs)); err != nil {
		return fmt.Errorf("copying subscriptions: %w", err)
	}
	deadline := now.Add(365 * 24 * time.Hour).UnixNano()
	j := 0
	var row []any
	_, err = pool.CopyFrom(ctx, pgx.Identifier{"streamhooks_consumers"},
		[]string{"id", "subscription_id", "primary_stream", "state", "deadline", "data"},
		pgx.CopyFromFunc(func() ([]any, error) {
			if j == c.consumers {
				return nil, nil
			}
			sub, path := subscriptionID(j%c.subs), streamPath(c.subs, j)
			j++
			con := &webhooks.Consumer{
				ID: webhooks.ConsumerID(sub, path), SubscriptionID: sub, PrimaryStream: path, State: webhooks.StateIdle,
				Streams: []webhooks.StreamOffset{{Path: path, Offset: seedTail}}, CreatedAt: now, UpdatedAt: now,
			}
			var d *int64
			if c.deadlines {
				// A wake whose attempt is a year from its retry: the
				// scheduler has a deadline to keep, and nothing is due.
				con.State, con.WakeID, con.Epoch, con.Attempt = webhooks.StateWaking, "w-seeded", 1, 1
				con.WakeTails = con.Streams
				d = &deadline
			}
			data, err := con.MarshalData()
			if err != nil {
				return nil, err
			}
			row = append(row[:0], con.ID, con.SubscriptionID, con.PrimaryStream, string(con.State), d, data)
			return row, nil
		}))
	if err != nil {
		return fmt.Errorf("copying consumers: %w", err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE capacity_layout (subs int NOT NULL, consumers int NOT NULL, deadlines bool NOT NULL)"); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, "INSERT INTO capacity_layout VALUES ($1, $2, $3)", c.subs, c.consumers, c.deadlines); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE"); err != nil {
		return err
	}
	fmt.Printf("CAPACITY seed schema=%s subs=%d consumers=%d deadlines=%t seconds=%.1f\n", c.schema, c.subs, c.consumers, c.deadlines, time.Since(start).Seconds())
	return diskUse(ctx, pool, c)
}

// diskUse prints the bytes of the tables and indexes, per consumer.
func diskUse(ctx context.Context, pool *pgxpool.Pool, c config) error {
	rows, err := pool.Query(ctx, `SELECT c.relname, pg_relation_size(c.oid)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'i', 't') ORDER BY 2 DESC`)
	if err != nil {
		return err
	}
	var (
		total int64
		parts string
	)
	for rows.Next() {
		var (
			name string
			size int64
		)
		if err := rows.Scan(&name, &size); err != nil {
			return err
		}
		total += size
		if size > 0 {
			parts += fmt.Sprintf(" %s=%d", name, size)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	per := 0.0
	if c.consumers > 0 {
		per = float64(total) / float64(c.consumers)
	}
	fmt.Printf("CAPACITY disk schema=%s consumers=%d bytes=%d per_consumer=%.0f%s\n", c.schema, c.consumers, total, per, parts)
	return nil
}
