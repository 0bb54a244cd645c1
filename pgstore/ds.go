package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	webhooks "github.com/streamhooks/webhooks"
)

var _ webhooks.DSStore = (*Store)(nil)

// The DSStore keeps a subscription and its cursor group in one row of
// streamhooks_ds_subscriptions, and each link in a row of
// streamhooks_ds_links. Every statement names the links it touches by key,
// or reads the partial index of pending links, so none costs the number of
// a subscription's links but a delete.
//
// Locks are taken subscriptions first, in ID order, then links: an ack
// and an append that touch one link cannot deadlock.

const (
	dsConfigCols = `type, pattern, streams, webhook_url, wake_stream, lease_ttl, description, config_hash, created_at`
	dsCursorCols = `generation, wake_id, holder, lease_expires_at, due_at, attempt, status,
		EXISTS (SELECT 1 FROM streamhooks_ds_links l WHERE l.subscription_id = s.id AND l.pending)`
	dsSelectSub    = `SELECT s.id, ` + dsConfigCols + `, ` + dsCursorCols + ` FROM streamhooks_ds_subscriptions s`
	dsSelectCursor = `SELECT s.id, ` + dsCursorCols + ` FROM streamhooks_ds_subscriptions s`
	dsLinkCols     = `path, link_type, acked_offset, tail_offset, pending`
)

func scanDSCursor(row pgx.Row, id *string, lead ...any) (webhooks.DSCursor, error) {
	var (
		c          webhooks.DSCursor
		lease, due *int64
		status     string
		dest       = append([]any{id}, lead...)
	)
	dest = append(dest, &c.Generation, &c.WakeID, &c.Holder, &lease, &due, &c.Attempt, &status, &c.Pending)
	if err := row.Scan(dest...); err != nil {
		return c, err
	}
	c.LeaseExpiresAt, c.DueAt, c.Status = fromNanos(lease), fromNanos(due), webhooks.DSStatus(status)
	return c, nil
}

func scanDSSub(row pgx.Row) (*webhooks.DSSubscription, error) {
	var (
		sub         webhooks.DSSubscription
		typ         string
		streams     []byte
		description []byte
		ttl         int64
		created     *int64
	)
	c, err := scanDSCursor(row, &sub.ID, &typ, &sub.Pattern, &streams, &sub.WebhookURL, &sub.WakeStream, &ttl,
		&description, &sub.ConfigHash, &created)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(streams, &sub.Streams); err != nil {
		return nil, fmt.Errorf("pgstore: __ds subscription %s: streams: %w", sub.ID, err)
	}
	sub.Type, sub.LeaseTTL, sub.Description = webhooks.DSType(typ), time.Duration(ttl), string(description)
	sub.CreatedAt, sub.Cursor = fromNanos(created), c
	return &sub, nil
}

func scanDSLinks(rows pgx.Rows) ([]webhooks.DSLink, error) {
	defer rows.Close()
	var out []webhooks.DSLink
	for rows.Next() {
		var (
			l   webhooks.DSLink
			typ int16
		)
		if err := rows.Scan(&l.Path, &typ, &l.AckedOffset, &l.TailOffset, &l.Pending); err != nil {
			return nil, err
		}
		l.Type = webhooks.DSLinkType(typ)
		out = append(out, l)
	}
	return out, rows.Err()
}

func scanDSCursors(rows pgx.Rows) ([]webhooks.DSLinkedCursor, error) {
	defer rows.Close()
	var out []webhooks.DSLinkedCursor
	for rows.Next() {
		var (
			lc  webhooks.DSLinkedCursor
			err error
		)
		if lc.Cursor, err = scanDSCursor(rows, &lc.ID); err != nil {
			return nil, err
		}
		out = append(out, lc)
	}
	return out, rows.Err()
}

// lockDSCursor locks the row of the live subscription id and reads its
// cursor.
func lockDSCursor(ctx context.Context, tx pgx.Tx, id string) (webhooks.DSCursor, error) {
	var got string
	c, err := scanDSCursor(tx.QueryRow(ctx, dsSelectCursor+" WHERE s.id = $1 AND NOT s.deleted FOR UPDATE", id), &got)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, webhooks.ErrDSSubscriptionNotFound
	}
	return c, err
}

// saveDSCursor stores c, all but Pending, in subscription id's row.
func saveDSCursor(ctx context.Context, tx pgx.Tx, id string, c webhooks.DSCursor) error {
	lease, err := nanos(c.LeaseExpiresAt)
	if err != nil {
		return err
	}
	due, err := nanos(c.DueAt)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `UPDATE streamhooks_ds_subscriptions SET generation = $1, wake_id = $2, holder = $3,
		lease_expires_at = $4, due_at = $5, attempt = $6, status = $7 WHERE id = $8`,
		c.Generation, c.WakeID, c.Holder, lease, due, c.Attempt, string(c.Status), id)
	return err
}

func dsPending(ctx context.Context, tx pgx.Tx, id string) (bool, error) {
	var pending bool
	err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM streamhooks_ds_links WHERE subscription_id = $1 AND pending)", id).Scan(&pending)
	return pending, err
}

// linkDS links specs to subscription id, whose row the caller locked.
func linkDS(ctx context.Context, tx pgx.Tx, id string, specs []webhooks.DSLinkSpec) error {
	if len(specs) == 0 {
		return nil
	}
	paths := make([]string, len(specs))
	types := make([]int16, len(specs))
	offsets := make([]string, len(specs))
	for i, sp := range specs {
		paths[i], types[i], offsets[i] = sp.Path, int16(sp.Type), sp.Offset
	}
	// One statement for a backfill of any size; a path twice in specs
	// gains both types.
	_, err := tx.Exec(ctx, `INSERT INTO streamhooks_ds_links (subscription_id, path, link_type, acked_offset, tail_offset, pending)
		SELECT $1, path, bit_or(link_type), min(off COLLATE "C"), min(off COLLATE "C"), false
		FROM unnest($2::text[], $3::smallint[], $4::text[]) AS u (path, link_type, off)
		GROUP BY path ORDER BY path
		ON CONFLICT (subscription_id, path) DO UPDATE
		SET link_type = streamhooks_ds_links.link_type | excluded.link_type`, id, paths, types, offsets)
	return err
}

// dsTx runs fn in a transaction, returning its domain errors as they are
// and wrapping the others with what.
func (s *Store) dsTx(ctx context.Context, what string, fn func(tx pgx.Tx) error) error {
	var inner error
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		err := fn(tx)
		if isDSDomainError(err) {
			inner = err
		}
		return err
	})
	switch {
	case inner != nil:
		return inner
	case err != nil:
		return dbError(what, err)
	}
	return nil
}

// isDSDomainError reports whether err is the contract's answer rather than
// a failure of the database.
func isDSDomainError(err error) bool {
	return errors.Is(err, webhooks.ErrDSSubscriptionNotFound) || errors.Is(err, webhooks.ErrDSSubscriptionConflict) ||
		errors.Is(err, webhooks.ErrDSFenced) || errors.Is(err, webhooks.ErrDSAlreadyClaimed) || errors.Is(err, webhooks.ErrDSNotLinked)
}

// PutDSSubscription implements webhooks.DSStore. A create notifies the
// watchers when it commits.
func (s *Store) PutDSSubscription(ctx context.Context, p *webhooks.PutDSSubscriptionParams) (*webhooks.DSSubscription, bool, error) {
	in := p.Subscription
	created, err := nanos(in.CreatedAt)
	if err != nil {
		return nil, false, err
	}
	streams, err := json.Marshal(append([]string{}, in.Streams...))
	if err != nil {
		return nil, false, err
	}
	var (
		out   *webhooks.DSSubscription
		isNew bool
	)
	err = s.dsTx(ctx, "put __ds subscription", func(tx pgx.Tx) error {
		isNew = false
		// Inserts, or replaces a tombstone keeping its generation; on a
		// live row it changes nothing but locks it.
		rows, err := tx.Query(ctx, `INSERT INTO streamhooks_ds_subscriptions AS d (id, deleted, `+dsConfigCols+`,
				generation, wake_id, holder, lease_expires_at, due_at, attempt, status)
			VALUES ($1, false, $2, $3, $4, $5, $6, $7, $8, $9, $10, 0, '', '', NULL, NULL, 0, $11)
			ON CONFLICT (id) DO UPDATE SET deleted = false, type = excluded.type, pattern = excluded.pattern,
				streams = excluded.streams, webhook_url = excluded.webhook_url, wake_stream = excluded.wake_stream,
				lease_ttl = excluded.lease_ttl, description = excluded.description, config_hash = excluded.config_hash,
				created_at = excluded.created_at, wake_id = '', holder = '', lease_expires_at = NULL, due_at = NULL,
				attempt = 0, status = excluded.status
			WHERE d.deleted
			RETURNING `+notifySubscriptions,
			in.ID, string(in.Type), in.Pattern, streams, in.WebhookURL, in.WakeStream, int64(in.LeaseTTL),
			[]byte(in.Description), in.ConfigHash, created, string(webhooks.DSActive))
		if err != nil {
			return err
		}
		for rows.Next() {
			isNew = true
		}
		if rows.Close(); rows.Err() != nil {
			return rows.Err()
		}
		if !isNew {
			var hash string
			if err := tx.QueryRow(ctx, "SELECT config_hash FROM streamhooks_ds_subscriptions WHERE id = $1", in.ID).Scan(&hash); err != nil {
				return err
			}
			if hash != in.ConfigHash {
				return webhooks.ErrDSSubscriptionConflict
			}
		}
		if err := linkDS(ctx, tx, in.ID, p.Links); err != nil {
			return err
		}
		out, err = scanDSSub(tx.QueryRow(ctx, dsSelectSub+" WHERE s.id = $1", in.ID))
		return err
	})
	if err != nil {
		return nil, false, err
	}
	return out, isNew, nil
}

// GetDSSubscription implements webhooks.DSStore.
func (s *Store) GetDSSubscription(ctx context.Context, id string) (*webhooks.DSSubscription, error) {
	sub, err := scanDSSub(s.pool.QueryRow(ctx, dsSelectSub+" WHERE s.id = $1 AND NOT s.deleted", id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, webhooks.ErrDSSubscriptionNotFound
	}
	if err != nil {
		return nil, dbError("get __ds subscription", err)
	}
	return sub, nil
}

// ListDSSubscriptions implements webhooks.DSStore.
func (s *Store) ListDSSubscriptions(ctx context.Context) ([]*webhooks.DSSubscription, error) {
	rows, err := s.pool.Query(ctx, dsSelectSub+" WHERE NOT s.deleted ORDER BY s.id")
	if err != nil {
		return nil, dbError("list __ds subscriptions", err)
	}
	defer rows.Close()
	var out []*webhooks.DSSubscription
	for rows.Next() {
		sub, err := scanDSSub(rows)
		if err != nil {
			return nil, dbError("list __ds subscriptions", err)
		}
		out = append(out, sub)
	}
	if err := rows.Err(); err != nil {
		return nil, dbError("list __ds subscriptions", err)
	}
	return out, nil
}

// DeleteDSSubscription implements webhooks.DSStore. It notifies the
// watchers when it commits.
func (s *Store) DeleteDSSubscription(ctx context.Context, id string) error {
	return s.dsTx(ctx, "delete __ds subscription", func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE streamhooks_ds_subscriptions SET deleted = true, wake_id = '', holder = '',
			lease_expires_at = NULL, due_at = NULL WHERE id = $1 AND NOT deleted`, id)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return webhooks.ErrDSSubscriptionNotFound
		}
		if _, err := tx.Exec(ctx, "DELETE FROM streamhooks_ds_links WHERE subscription_id = $1", id); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "DELETE FROM streamhooks_ds_delivery_attempts WHERE subscription_id = $1", id); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "SELECT "+notifySubscriptions)
		return err
	})
}

// lockDSLive locks the row of the live subscription id.
func lockDSLive(ctx context.Context, tx pgx.Tx, id string) error {
	var one int
	err := tx.QueryRow(ctx, "SELECT 1 FROM streamhooks_ds_subscriptions WHERE id = $1 AND NOT deleted FOR UPDATE", id).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return webhooks.ErrDSSubscriptionNotFound
	}
	return err
}

// LinkDSStreams implements webhooks.DSStore.
func (s *Store) LinkDSStreams(ctx context.Context, p *webhooks.LinkDSStreamsParams) error {
	return s.dsTx(ctx, "link __ds streams", func(tx pgx.Tx) error {
		if err := lockDSLive(ctx, tx, p.ID); err != nil {
			return err
		}
		return linkDS(ctx, tx, p.ID, p.Links)
	})
}

// UnlinkDSStream implements webhooks.DSStore.
func (s *Store) UnlinkDSStream(ctx context.Context, p *webhooks.UnlinkDSStreamParams) error {
	return s.dsTx(ctx, "unlink __ds stream", func(tx pgx.Tx) error {
		if err := lockDSLive(ctx, tx, p.ID); err != nil {
			return err
		}
		var glob int16
		if p.PatternMatches {
			glob = int16(webhooks.DSLinkGlob)
		}
		if _, err := tx.Exec(ctx, `UPDATE streamhooks_ds_links SET link_type = (link_type & ~$3::smallint) | $4::smallint
			WHERE subscription_id = $1 AND path = $2`, p.ID, p.Path, int16(webhooks.DSLinkExplicit), glob); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "DELETE FROM streamhooks_ds_links WHERE subscription_id = $1 AND path = $2 AND link_type = 0", p.ID, p.Path)
		return err
	})
}

// DropDSStream implements webhooks.DSStore. It locks the subscriptions
// that link path in ID order, as NoteDSAppend does, so that it waits for
// their cursors' updates rather than deadlock with them.
func (s *Store) DropDSStream(ctx context.Context, path string) error {
	return s.dsTx(ctx, "drop __ds stream", func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT FROM streamhooks_ds_subscriptions
			WHERE id IN (SELECT subscription_id FROM streamhooks_ds_links WHERE path = $1) ORDER BY id FOR UPDATE`, path); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "DELETE FROM streamhooks_ds_links WHERE path = $1", path)
		return err
	})
}

// ListDSLinks implements webhooks.DSStore.
func (s *Store) ListDSLinks(ctx context.Context, p *webhooks.ListDSLinksParams) ([]webhooks.DSLink, error) {
	var live bool
	if err := s.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM streamhooks_ds_subscriptions WHERE id = $1 AND NOT deleted)", p.ID).Scan(&live); err != nil {
		return nil, dbError("list __ds links", err)
	}
	if !live {
		return nil, webhooks.ErrDSSubscriptionNotFound
	}
	var (
		rows pgx.Rows
		err  error
	)
	switch {
	case len(p.Paths) > 0:
		rows, err = s.pool.Query(ctx, "SELECT "+dsLinkCols+` FROM streamhooks_ds_links WHERE subscription_id = $1
			AND path = ANY ($2::text[]) ORDER BY path`, p.ID, p.Paths)
	case p.PendingOnly:
		rows, err = s.pool.Query(ctx, "SELECT "+dsLinkCols+` FROM streamhooks_ds_links WHERE subscription_id = $1 AND pending
			AND path > $2 ORDER BY path LIMIT $3`, p.ID, p.After, p.Limit)
	default:
		rows, err = s.pool.Query(ctx, "SELECT "+dsLinkCols+` FROM streamhooks_ds_links WHERE subscription_id = $1
			AND path > $2 ORDER BY path LIMIT $3`, p.ID, p.After, p.Limit)
	}
	if err != nil {
		return nil, dbError("list __ds links", err)
	}
	out, err := scanDSLinks(rows)
	if err != nil {
		return nil, dbError("list __ds links", err)
	}
	return out, nil
}

// NoteDSAppend implements webhooks.DSStore.
func (s *Store) NoteDSAppend(ctx context.Context, p *webhooks.NoteDSAppendParams) ([]webhooks.DSLinkedCursor, error) {
	now, err := nanos(p.Now)
	if err != nil {
		return nil, err
	}
	var out []webhooks.DSLinkedCursor
	err = s.dsTx(ctx, "note __ds append", func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT FROM streamhooks_ds_subscriptions
			WHERE id IN (SELECT subscription_id FROM streamhooks_ds_links WHERE path = $1) ORDER BY id FOR UPDATE`, p.Path); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE streamhooks_ds_links SET tail_offset = $2, pending = ($2 > acked_offset)
			WHERE path = $1 AND tail_offset < $2`, p.Path, p.Tail); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE streamhooks_ds_subscriptions SET due_at = $2
			WHERE id IN (SELECT subscription_id FROM streamhooks_ds_links WHERE path = $1 AND pending)
			AND NOT deleted AND wake_id = '' AND holder = '' AND due_at IS NULL`, p.Path, now); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, dsSelectCursor+` WHERE s.id IN (SELECT subscription_id FROM streamhooks_ds_links WHERE path = $1)
			AND NOT s.deleted ORDER BY s.id`, p.Path)
		if err != nil {
			return err
		}
		out, err = scanDSCursors(rows)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// UpdateDSCursor implements webhooks.DSStore.
func (s *Store) UpdateDSCursor(ctx context.Context, id string, fn func(c *webhooks.DSCursor) error) (*webhooks.DSCursor, error) {
	var (
		out   webhooks.DSCursor
		inner error
	)
	err := s.dsTx(ctx, "update __ds cursor", func(tx pgx.Tx) error {
		c, err := lockDSCursor(ctx, tx, id)
		if err != nil {
			return err
		}
		pending := c.Pending
		if err := fn(&c); err != nil {
			inner = err
			return err
		}
		c.Pending = pending
		out = c
		return saveDSCursor(ctx, tx, id, c)
	})
	if inner != nil {
		return nil, inner
	}
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// ClaimDS implements webhooks.DSStore.
func (s *Store) ClaimDS(ctx context.Context, p *webhooks.ClaimDSParams) (*webhooks.DSCursor, error) {
	var out webhooks.DSCursor
	err := s.dsTx(ctx, "claim __ds subscription", func(tx pgx.Tx) error {
		c, err := lockDSCursor(ctx, tx, p.ID)
		if err != nil {
			return err
		}
		if out, err = c.Claim(p); err != nil {
			return err
		}
		return saveDSCursor(ctx, tx, p.ID, out)
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// AckDS implements webhooks.DSStore.
func (s *Store) AckDS(ctx context.Context, p *webhooks.AckDSParams) (*webhooks.DSCursor, error) {
	var out webhooks.DSCursor
	err := s.dsTx(ctx, "ack __ds subscription", func(tx pgx.Tx) error {
		c, err := lockDSCursor(ctx, tx, p.ID)
		if err != nil {
			return err
		}
		if err := c.CheckFence(p.Generation, p.WakeID, p.Now); err != nil {
			return err
		}
		if len(p.Acks) > 0 {
			paths := make([]string, len(p.Acks))
			offsets := make([]string, len(p.Acks))
			for i, a := range p.Acks {
				paths[i], offsets[i] = a.Path, a.Offset
			}
			// One statement: each acked link takes the latest of its
			// offset and the acks', and reports the paths it found.
			rows, err := tx.Query(ctx, `WITH a AS (
					SELECT path, max(off COLLATE "C") AS off FROM unnest($2::text[], $3::text[]) AS u (path, off) GROUP BY path
				)
				UPDATE streamhooks_ds_links l
				SET acked_offset = greatest(l.acked_offset, a.off),
					tail_offset = greatest(l.tail_offset, l.acked_offset, a.off),
					pending = greatest(l.tail_offset, l.acked_offset, a.off) > greatest(l.acked_offset, a.off)
				FROM a WHERE l.subscription_id = $1 AND l.path = a.path
				RETURNING l.path`, p.ID, paths, offsets)
			if err != nil {
				return err
			}
			found := map[string]bool{}
			for rows.Next() {
				var path string
				if err := rows.Scan(&path); err != nil {
					rows.Close()
					return err
				}
				found[path] = true
			}
			if rows.Close(); rows.Err() != nil {
				return rows.Err()
			}
			for _, a := range p.Acks {
				if !found[a.Path] {
					// The transaction rolls back the acks it applied.
					return fmt.Errorf("%w: %q", webhooks.ErrDSNotLinked, a.Path)
				}
			}
		}
		pending, err := dsPending(ctx, tx, p.ID)
		if err != nil {
			return err
		}
		switch {
		case p.Done:
			c = c.EndWake(pending, p.Now)
		case !p.LeaseUntil.IsZero():
			c.LeaseExpiresAt, c.DueAt = p.LeaseUntil, p.LeaseUntil
		}
		c.Pending = pending
		out = c
		return saveDSCursor(ctx, tx, p.ID, c)
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// ReleaseDS implements webhooks.DSStore.
func (s *Store) ReleaseDS(ctx context.Context, p *webhooks.ReleaseDSParams) (*webhooks.DSCursor, error) {
	var out webhooks.DSCursor
	err := s.dsTx(ctx, "release __ds subscription", func(tx pgx.Tx) error {
		c, err := lockDSCursor(ctx, tx, p.ID)
		if err != nil {
			return err
		}
		if err := c.CheckFence(p.Generation, p.WakeID, p.Now); err != nil {
			return err
		}
		out = c.EndWake(c.Pending, p.Now)
		return saveDSCursor(ctx, tx, p.ID, out)
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// DueDSSubscriptions implements webhooks.DSStore.
func (s *Store) DueDSSubscriptions(ctx context.Context, now time.Time, limit int) ([]webhooks.DSLinkedCursor, error) {
	n, err := nanos(now)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, dsSelectCursor+` WHERE NOT s.deleted AND s.due_at IS NOT NULL AND s.due_at <= $1
		ORDER BY s.due_at, s.id LIMIT $2`, n, limit)
	if err != nil {
		return nil, dbError("due __ds subscriptions", err)
	}
	out, err := scanDSCursors(rows)
	if err != nil {
		return nil, dbError("due __ds subscriptions", err)
	}
	return out, nil
}

// NextDSDeadline implements webhooks.DSStore.
func (s *Store) NextDSDeadline(ctx context.Context) (time.Time, bool, error) {
	var due *int64
	err := s.pool.QueryRow(ctx, "SELECT min(due_at) FROM streamhooks_ds_subscriptions WHERE NOT deleted AND due_at IS NOT NULL").Scan(&due)
	if err != nil {
		return time.Time{}, false, dbError("next __ds deadline", err)
	}
	return fromNanos(due), due != nil, nil
}
