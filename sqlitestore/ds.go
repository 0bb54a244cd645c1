package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	webhooks "github.com/streamhooks/webhooks"
)

var _ webhooks.DSStore = (*Store)(nil)

// The DSStore keeps a subscription and its cursor group in one row of
// ds_subscriptions, and each link in a row of ds_links. Every statement
// names the links it touches by key, or reads the partial index of pending
// links, so none costs the number of a subscription's links but a delete.

const (
	dsConfigCols = `type, pattern, streams, webhook_url, wake_stream, lease_ttl, description, config_hash, created_at`
	dsCursorCols = `generation, wake_id, holder, lease_expires_at, due_at, attempt, status,
		EXISTS (SELECT 1 FROM ds_links l WHERE l.subscription_id = s.id AND l.pending = 1)`
	dsSelectSub    = `SELECT s.id, ` + dsConfigCols + `, ` + dsCursorCols + ` FROM ds_subscriptions s`
	dsSelectCursor = `SELECT s.id, ` + dsCursorCols + ` FROM ds_subscriptions s`
	dsLinkCols     = `path, link_type, acked_offset, tail_offset, pending`
)

func scanDSCursor(row scanner, id *string, lead ...any) (webhooks.DSCursor, error) {
	var (
		c            webhooks.DSCursor
		lease, due   sql.NullInt64
		status       string
		dest         = append([]any{id}, lead...)
		pendingFound bool
	)
	dest = append(dest, &c.Generation, &c.WakeID, &c.Holder, &lease, &due, &c.Attempt, &status, &pendingFound)
	if err := row.Scan(dest...); err != nil {
		return c, err
	}
	c.LeaseExpiresAt, c.DueAt = fromNanos(lease), fromNanos(due)
	c.Status, c.Pending = webhooks.DSStatus(status), pendingFound
	return c, nil
}

func scanDSSub(row scanner) (*webhooks.DSSubscription, error) {
	var (
		sub     webhooks.DSSubscription
		typ     string
		streams string
		ttl     int64
		created sql.NullInt64
	)
	c, err := scanDSCursor(row, &sub.ID, &typ, &sub.Pattern, &streams, &sub.WebhookURL, &sub.WakeStream, &ttl,
		&sub.Description, &sub.ConfigHash, &created)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(streams), &sub.Streams); err != nil {
		return nil, fmt.Errorf("sqlitestore: __ds subscription %s: streams: %w", sub.ID, err)
	}
	sub.Type, sub.LeaseTTL, sub.CreatedAt, sub.Cursor = webhooks.DSType(typ), time.Duration(ttl), fromNanos(created), c
	return &sub, nil
}

func scanDSLink(row scanner) (webhooks.DSLink, error) {
	var l webhooks.DSLink
	err := row.Scan(&l.Path, &l.Type, &l.AckedOffset, &l.TailOffset, &l.Pending)
	return l, err
}

// dsCursorInTx reads the cursor of the live subscription id.
func dsCursorInTx(tx *wtx, id string) (webhooks.DSCursor, error) {
	var got string
	c, err := scanDSCursor(tx.queryRow(dsSelectCursor+" WHERE s.id = ? AND s.deleted = 0", id), &got)
	if errors.Is(err, sql.ErrNoRows) {
		return c, webhooks.ErrDSSubscriptionNotFound
	}
	return c, err
}

// saveDSCursor stores c, all but Pending, in subscription id's row.
func saveDSCursor(tx *wtx, id string, c webhooks.DSCursor) error {
	lease, err := nanos(c.LeaseExpiresAt)
	if err != nil {
		return err
	}
	due, err := nanos(c.DueAt)
	if err != nil {
		return err
	}
	_, err = tx.exec(`UPDATE ds_subscriptions SET generation = ?, wake_id = ?, holder = ?, lease_expires_at = ?, due_at = ?,
		attempt = ?, status = ? WHERE id = ?`, c.Generation, c.WakeID, c.Holder, lease, due, c.Attempt, string(c.Status), id)
	return err
}

// dsPendingInTx reports whether subscription id has a pending link.
func dsPendingInTx(tx *wtx, id string) (bool, error) {
	var pending bool
	err := tx.queryRow("SELECT EXISTS (SELECT 1 FROM ds_links WHERE subscription_id = ? AND pending = 1)", id).Scan(&pending)
	return pending, err
}

// linkDS links specs to subscription id.
func linkDS(tx *wtx, id string, specs []webhooks.DSLinkSpec) error {
	for _, sp := range specs {
		if _, err := tx.exec(`INSERT INTO ds_links (subscription_id, path, link_type, acked_offset, tail_offset, pending)
			VALUES (?, ?, ?, ?, ?, 0)
			ON CONFLICT (subscription_id, path) DO UPDATE SET link_type = link_type | excluded.link_type`,
			id, sp.Path, sp.Type, sp.Offset, sp.Offset); err != nil {
			return err
		}
	}
	return nil
}

// dsWrite runs fn in a write, returning its domain errors as they are and
// wrapping the others with what.
func (s *Store) dsWrite(ctx context.Context, what string, fn func(tx *wtx) error) error {
	var inner error
	err := s.write(ctx, func(tx *wtx) error {
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
		return fmt.Errorf("sqlitestore: %s: %w", what, err)
	}
	return nil
}

// isDSDomainError reports whether err is the contract's answer rather than
// a failure of the database.
func isDSDomainError(err error) bool {
	return errors.Is(err, webhooks.ErrDSSubscriptionNotFound) || errors.Is(err, webhooks.ErrDSSubscriptionConflict) ||
		errors.Is(err, webhooks.ErrDSFenced) || errors.Is(err, webhooks.ErrDSAlreadyClaimed) || errors.Is(err, webhooks.ErrDSNotLinked)
}

// PutDSSubscription implements webhooks.DSStore.
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
	err = s.dsWrite(ctx, "put __ds subscription", func(tx *wtx) error {
		var (
			hash    string
			deleted bool
		)
		err := tx.queryRow("SELECT config_hash, deleted FROM ds_subscriptions WHERE id = ?", in.ID).Scan(&hash, &deleted)
		switch {
		case err == nil && !deleted && hash != in.ConfigHash:
			return webhooks.ErrDSSubscriptionConflict
		case err == nil && !deleted:
		case err == nil || errors.Is(err, sql.ErrNoRows):
			// A successor keeps the tombstone's generation.
			if _, err := tx.exec(`INSERT INTO ds_subscriptions (id, deleted, `+dsConfigCols+`,
				generation, wake_id, holder, lease_expires_at, due_at, attempt, status)
				VALUES (?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, '', '', NULL, NULL, 0, ?)
				ON CONFLICT (id) DO UPDATE SET deleted = 0, type = excluded.type, pattern = excluded.pattern,
					streams = excluded.streams, webhook_url = excluded.webhook_url, wake_stream = excluded.wake_stream,
					lease_ttl = excluded.lease_ttl, description = excluded.description, config_hash = excluded.config_hash,
					created_at = excluded.created_at, wake_id = '', holder = '', lease_expires_at = NULL, due_at = NULL,
					attempt = 0, status = excluded.status`,
				in.ID, string(in.Type), in.Pattern, string(streams), in.WebhookURL, in.WakeStream, int64(in.LeaseTTL),
				in.Description, in.ConfigHash, created, string(webhooks.DSActive)); err != nil {
				return err
			}
			isNew = true
		default:
			return err
		}
		if err := linkDS(tx, in.ID, p.Links); err != nil {
			return err
		}
		out, err = scanDSSub(tx.queryRow(dsSelectSub+" WHERE s.id = ?", in.ID))
		return err
	})
	if err != nil {
		return nil, false, err
	}
	return out, isNew, nil
}

// GetDSSubscription implements webhooks.DSStore.
func (s *Store) GetDSSubscription(ctx context.Context, id string) (*webhooks.DSSubscription, error) {
	sub, err := scanDSSub(s.r.queryRow(ctx, dsSelectSub+" WHERE s.id = ? AND s.deleted = 0", id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, webhooks.ErrDSSubscriptionNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: get __ds subscription: %w", err)
	}
	return sub, nil
}

// ListDSSubscriptions implements webhooks.DSStore.
func (s *Store) ListDSSubscriptions(ctx context.Context) ([]*webhooks.DSSubscription, error) {
	rows, err := s.r.query(ctx, dsSelectSub+" WHERE s.deleted = 0 ORDER BY s.id")
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: list __ds subscriptions: %w", err)
	}
	defer rows.Close()
	var out []*webhooks.DSSubscription
	for rows.Next() {
		sub, err := scanDSSub(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlitestore: list __ds subscriptions: %w", err)
		}
		out = append(out, sub)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: list __ds subscriptions: %w", err)
	}
	return out, nil
}

// DeleteDSSubscription implements webhooks.DSStore.
func (s *Store) DeleteDSSubscription(ctx context.Context, id string) error {
	return s.dsWrite(ctx, "delete __ds subscription", func(tx *wtx) error {
		res, err := tx.exec(`UPDATE ds_subscriptions SET deleted = 1, wake_id = '', holder = '', lease_expires_at = NULL,
			due_at = NULL WHERE id = ? AND deleted = 0`, id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return webhooks.ErrDSSubscriptionNotFound
		}
		if _, err = tx.exec("DELETE FROM ds_links WHERE subscription_id = ?", id); err != nil {
			return err
		}
		_, err = tx.exec("DELETE FROM ds_delivery_attempts WHERE subscription_id = ?", id)
		return err
	})
}

// dsRequireLive returns ErrDSSubscriptionNotFound unless id is live.
func dsRequireLive(tx *wtx, id string) error {
	var one int
	err := tx.queryRow("SELECT 1 FROM ds_subscriptions WHERE id = ? AND deleted = 0", id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return webhooks.ErrDSSubscriptionNotFound
	}
	return err
}

// LinkDSStreams implements webhooks.DSStore.
func (s *Store) LinkDSStreams(ctx context.Context, p *webhooks.LinkDSStreamsParams) error {
	return s.dsWrite(ctx, "link __ds streams", func(tx *wtx) error {
		if err := dsRequireLive(tx, p.ID); err != nil {
			return err
		}
		return linkDS(tx, p.ID, p.Links)
	})
}

// UnlinkDSStream implements webhooks.DSStore.
func (s *Store) UnlinkDSStream(ctx context.Context, p *webhooks.UnlinkDSStreamParams) error {
	return s.dsWrite(ctx, "unlink __ds stream", func(tx *wtx) error {
		if err := dsRequireLive(tx, p.ID); err != nil {
			return err
		}
		var typ webhooks.DSLinkType
		err := tx.queryRow("SELECT link_type FROM ds_links WHERE subscription_id = ? AND path = ?", p.ID, p.Path).Scan(&typ)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		typ &^= webhooks.DSLinkExplicit
		if p.PatternMatches {
			typ |= webhooks.DSLinkGlob
		}
		if typ == 0 {
			_, err = tx.exec("DELETE FROM ds_links WHERE subscription_id = ? AND path = ?", p.ID, p.Path)
		} else {
			_, err = tx.exec("UPDATE ds_links SET link_type = ? WHERE subscription_id = ? AND path = ?", typ, p.ID, p.Path)
		}
		return err
	})
}

// DropDSStream implements webhooks.DSStore. A deleted subscription has
// no links left to drop.
func (s *Store) DropDSStream(ctx context.Context, path string) error {
	return s.dsWrite(ctx, "drop __ds stream", func(tx *wtx) error {
		_, err := tx.exec("DELETE FROM ds_links WHERE path = ?", path)
		return err
	})
}

// ListDSLinks implements webhooks.DSStore.
func (s *Store) ListDSLinks(ctx context.Context, p *webhooks.ListDSLinksParams) ([]webhooks.DSLink, error) {
	var live bool
	if err := s.r.queryRow(ctx, "SELECT EXISTS (SELECT 1 FROM ds_subscriptions WHERE id = ? AND deleted = 0)", p.ID).Scan(&live); err != nil {
		return nil, fmt.Errorf("sqlitestore: list __ds links: %w", err)
	}
	if !live {
		return nil, webhooks.ErrDSSubscriptionNotFound
	}
	var (
		rows *sql.Rows
		err  error
	)
	switch {
	case len(p.Paths) > 0:
		paths, merr := json.Marshal(p.Paths)
		if merr != nil {
			return nil, merr
		}
		rows, err = s.r.query(ctx, "SELECT "+dsLinkCols+` FROM ds_links WHERE subscription_id = ?
			AND path IN (SELECT value FROM json_each(?)) ORDER BY path`, p.ID, string(paths))
	case p.PendingOnly:
		// Without stats SQLite seeks the primary key from After and
		// filters every link after it: the pending index is named.
		rows, err = s.r.query(ctx, "SELECT "+dsLinkCols+` FROM ds_links INDEXED BY ds_links_pending
			WHERE subscription_id = ? AND pending = 1 AND path > ? ORDER BY path LIMIT ?`, p.ID, p.After, p.Limit)
	default:
		rows, err = s.r.query(ctx, "SELECT "+dsLinkCols+` FROM ds_links WHERE subscription_id = ?
			AND path > ? ORDER BY path LIMIT ?`, p.ID, p.After, p.Limit)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: list __ds links: %w", err)
	}
	defer rows.Close()
	var out []webhooks.DSLink
	for rows.Next() {
		l, err := scanDSLink(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlitestore: list __ds links: %w", err)
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: list __ds links: %w", err)
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
	err = s.dsWrite(ctx, "note __ds append", func(tx *wtx) error {
		out = nil
		if _, err := tx.exec(`UPDATE ds_links SET tail_offset = ?2, pending = (?2 > acked_offset)
			WHERE path = ?1 AND tail_offset < ?2`, p.Path, p.Tail); err != nil {
			return err
		}
		if _, err := tx.exec(`UPDATE ds_subscriptions SET due_at = ?2
			WHERE id IN (SELECT subscription_id FROM ds_links WHERE path = ?1 AND pending = 1)
			AND deleted = 0 AND wake_id = '' AND holder = '' AND due_at IS NULL`, p.Path, now); err != nil {
			return err
		}
		rows, err := tx.query(dsSelectCursor+` WHERE s.id IN (SELECT subscription_id FROM ds_links WHERE path = ?)
			AND s.deleted = 0 ORDER BY s.id`, p.Path)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var lc webhooks.DSLinkedCursor
			if lc.Cursor, err = scanDSCursor(rows, &lc.ID); err != nil {
				return err
			}
			out = append(out, lc)
		}
		return rows.Err()
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
	err := s.dsWrite(ctx, "update __ds cursor", func(tx *wtx) error {
		c, err := dsCursorInTx(tx, id)
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
		return saveDSCursor(tx, id, c)
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
	err := s.dsWrite(ctx, "claim __ds subscription", func(tx *wtx) error {
		c, err := dsCursorInTx(tx, p.ID)
		if err != nil {
			return err
		}
		if out, err = c.Claim(p); err != nil {
			return err
		}
		return saveDSCursor(tx, p.ID, out)
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// AckDS implements webhooks.DSStore.
func (s *Store) AckDS(ctx context.Context, p *webhooks.AckDSParams) (*webhooks.DSCursor, error) {
	var out webhooks.DSCursor
	err := s.dsWrite(ctx, "ack __ds subscription", func(tx *wtx) error {
		c, err := dsCursorInTx(tx, p.ID)
		if err != nil {
			return err
		}
		if err := c.CheckFence(p.Generation, p.WakeID, p.Now); err != nil {
			return err
		}
		for _, a := range p.Acks {
			var acked, tail string
			err := tx.queryRow("SELECT acked_offset, tail_offset FROM ds_links WHERE subscription_id = ? AND path = ?", p.ID, a.Path).Scan(&acked, &tail)
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("%w: %q", webhooks.ErrDSNotLinked, a.Path)
			}
			if err != nil {
				return err
			}
			acked = max(acked, a.Offset)
			tail = max(tail, acked)
			if _, err := tx.exec("UPDATE ds_links SET acked_offset = ?, tail_offset = ?, pending = ? WHERE subscription_id = ? AND path = ?",
				acked, tail, tail > acked, p.ID, a.Path); err != nil {
				return err
			}
		}
		switch {
		case p.Done:
			pending, err := dsPendingInTx(tx, p.ID)
			if err != nil {
				return err
			}
			c = c.EndWake(pending, p.Now)
		case !p.LeaseUntil.IsZero():
			c.LeaseExpiresAt, c.DueAt = p.LeaseUntil, p.LeaseUntil
		}
		if c.Pending, err = dsPendingInTx(tx, p.ID); err != nil {
			return err
		}
		out = c
		return saveDSCursor(tx, p.ID, c)
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// ReleaseDS implements webhooks.DSStore.
func (s *Store) ReleaseDS(ctx context.Context, p *webhooks.ReleaseDSParams) (*webhooks.DSCursor, error) {
	var out webhooks.DSCursor
	err := s.dsWrite(ctx, "release __ds subscription", func(tx *wtx) error {
		c, err := dsCursorInTx(tx, p.ID)
		if err != nil {
			return err
		}
		if err := c.CheckFence(p.Generation, p.WakeID, p.Now); err != nil {
			return err
		}
		out = c.EndWake(c.Pending, p.Now)
		return saveDSCursor(tx, p.ID, out)
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
	rows, err := s.r.query(ctx, dsSelectCursor+` WHERE s.deleted = 0 AND s.due_at IS NOT NULL AND s.due_at <= ?
		ORDER BY s.due_at, s.id LIMIT ?`, n, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: due __ds subscriptions: %w", err)
	}
	defer rows.Close()
	var out []webhooks.DSLinkedCursor
	for rows.Next() {
		var lc webhooks.DSLinkedCursor
		if lc.Cursor, err = scanDSCursor(rows, &lc.ID); err != nil {
			return nil, fmt.Errorf("sqlitestore: due __ds subscriptions: %w", err)
		}
		out = append(out, lc)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: due __ds subscriptions: %w", err)
	}
	return out, nil
}

// NextDSDeadline implements webhooks.DSStore.
func (s *Store) NextDSDeadline(ctx context.Context) (time.Time, bool, error) {
	var due sql.NullInt64
	err := s.r.queryRow(ctx, "SELECT MIN(due_at) FROM ds_subscriptions WHERE deleted = 0 AND due_at IS NOT NULL").Scan(&due)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("sqlitestore: next __ds deadline: %w", err)
	}
	return fromNanos(due), due.Valid, nil
}
