package pgstore

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/internal/combine"
	"github.com/streamhooks/webhooks/internal/commitstat"
)

// updateOp is one UpdateConsumer call, queued for a batch.
type updateOp struct {
	ctx context.Context
	id  string
	fn  func(c *webhooks.Consumer) (webhooks.UpdateAction, error)

	// Set by the batch that runs the op.
	out      *webhooks.Consumer
	err      error
	panicked any // what fn panicked with, re-raised in the caller
}

func (op *updateOp) Context() context.Context { return op.ctx }
func (op *updateOp) Fail(err error)           { op.out, op.err = nil, err }

// runBatch runs ops in one transaction that locks their consumers' rows,
// in ID order so that batches of several instances cannot deadlock. Each
// op's fn runs in queue order on the consumer as the ops before it left
// it. If the writes fail, every op of a consumer they touched runs again
// alone, so that one bad write fails only its own caller.
func (s *Store) runBatch(ops []*updateOp) {
	live, ctx, cancel := combine.Begin(ops)
	defer cancel()
	if len(live) == 0 {
		return
	}
	dirty, err := s.runLocked(ctx, live)
	if err == nil {
		return
	}
	var retry []*updateOp
	for _, op := range live {
		switch {
		case dirty != nil && !dirty[op.id]:
		case unreachable(err) || ctx.Err() != nil:
			op.out, op.err = nil, dbError("update consumer", err)
		default:
			retry = append(retry, op)
		}
	}
	for _, op := range retry {
		op.out, op.err, op.panicked = nil, nil, nil
		if _, err := s.runLocked(op.ctx, []*updateOp{op}); err != nil {
			op.Fail(dbError("update consumer", err))
		}
	}
}

// runLocked is runBatch's transaction. It returns the IDs of the consumers
// that the ops changed, and an error if those changes did not commit; an
// op of any other consumer has its outcome already. With an error before
// the writes were sent, dirty is nil: no op has its outcome.
func (s *Store) runLocked(ctx context.Context, ops []*updateOp) (dirty map[string]bool, err error) {
	ids := make([]string, 0, len(ops))
	for _, op := range ops {
		if !slices.Contains(ids, op.id) {
			ids = append(ids, op.id)
		}
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	// The pool destroys, rather than reuses, a connection released inside
	// a transaction: one the ROLLBACK below did not reach.
	defer conn.Release()
	committed := false
	defer func() {
		if !committed {
			_, _ = conn.Exec(ctx, "ROLLBACK")
		}
	}()

	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(lockConsumersQuery, ids)
	stored, err := readAllLocked(ctx, conn.Conn(), b)
	if err != nil {
		return nil, err
	}
	finals := applyAll(ops, ids, stored)
	b = &pgx.Batch{}
	dirty = make(map[string]bool)
	var (
		del             []string
		upIDs, upStates []string
		upDeadlines     []*int64
		upData          [][]byte
	)
	for i, id := range ids {
		old, c := stored[id], finals[i]
		if old == c {
			continue
		}
		dirty[id] = true
		if c == nil {
			del = append(del, id)
			continue
		}
		r, err := encodeConsumer(c)
		if err != nil {
			return nil, err
		}
		from, to := secondaryPaths(old), secondaryPaths(c)
		if unindex, index := diff(from, to), diff(to, from); len(unindex) > 0 || len(index) > 0 {
			b.Queue(saveConsumerPathsQuery, id, r.state, r.deadline, r.data, unindex, index)
			continue
		}
		upIDs, upStates = append(upIDs, id), append(upStates, r.state)
		upDeadlines, upData = append(upDeadlines, r.deadline), append(upData, r.data)
	}
	if len(upIDs) > 0 {
		b.Queue(saveConsumersQuery, upIDs, upStates, upDeadlines, upData)
	}
	if len(del) > 0 {
		b.Queue(deleteConsumersQuery, del)
	}
	if len(dirty) == 0 {
		// Nothing changed: the row locks took a transaction ID, and a
		// COMMIT would wait for a synced WAL flush that keeps nothing.
		b.Queue("ROLLBACK")
	} else {
		b.Queue("COMMIT")
	}
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return dirty, err
	}
	committed = true
	if len(dirty) > 0 {
		commitstat.Committed(len(ops))
	}
	return dirty, nil
}

// lockConsumersQuery reads and locks consumers in ID order, the order
// every batch locks in. A transition never changes a consumer's key, so
// the lock is FOR NO KEY UPDATE: it excludes every other transition but
// lets the delivery log insert attempts that reference the consumer, whose
// foreign key takes FOR KEY SHARE. A delete waits for those inserts.
const lockConsumersQuery = "SELECT " + consumerCols + " FROM streamhooks_consumers c WHERE c.id = ANY ($1) ORDER BY c.id FOR NO KEY UPDATE"

// saveConsumersQuery stores many consumers whose paths did not change.
const saveConsumersQuery = `UPDATE streamhooks_consumers c SET state = u.state, deadline = u.deadline, data = u.data
	FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bytea[]) AS u (id, state, deadline, data)
	WHERE c.id = u.id`

const deleteConsumersQuery = "DELETE FROM streamhooks_consumers WHERE id = ANY ($1)"

// applyAll runs the ops' fns on the consumers stored under ids and
// returns the consumers as the ops leave them, in the order of ids, nil
// where deleted or missing. The ops
// of one consumer run in queue order, each on what the one before it left;
// those of different consumers run at once, as they would unbatched, so
// that the StreamSource reads of a batch do not add up.
func applyAll(ops []*updateOp, ids []string, stored map[string]*webhooks.Consumer) []*webhooks.Consumer {
	byID := make(map[string][]*updateOp, len(ids))
	for _, op := range ops {
		byID[op.id] = append(byID[op.id], op)
	}
	finals := make([]*webhooks.Consumer, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		chain := func() {
			c, found := stored[id]
			for _, op := range byID[id] {
				if !found || c == nil {
					op.err = webhooks.ErrConsumerNotFound
					continue
				}
				c = applyOp(op, c)
			}
			finals[i] = c
		}
		if i == len(ids)-1 {
			chain()
		} else {
			wg.Go(chain)
		}
	}
	wg.Wait()
	return finals
}

// applyOp runs op's fn on a copy of c, records the result in op, and
// returns the consumer as op leaves it: c, a new version, or nil if op
// deleted it.
func applyOp(op *updateOp, c *webhooks.Consumer) *webhooks.Consumer {
	next := c.Clone()
	var action webhooks.UpdateAction
	func() {
		defer func() { op.panicked = recover() }()
		action, op.err = op.fn(next)
	}()
	switch {
	case op.panicked != nil, op.err != nil:
	case op.ctx.Err() != nil:
		// The caller gave up while fn ran: keep nothing of it.
		op.err = op.ctx.Err()
	case action == webhooks.UpdateNone:
		op.out = c.Clone()
	case action == webhooks.UpdateSave:
		if next.ID != c.ID || next.SubscriptionID != c.SubscriptionID || next.PrimaryStream != c.PrimaryStream {
			op.err = fmt.Errorf("pgstore: update of consumer %q changed its ID, SubscriptionID or PrimaryStream", op.id)
			break
		}
		// fn may have kept next; hand back a copy it cannot reach.
		op.out = next.Clone()
		return next
	case action == webhooks.UpdateDelete:
		return nil
	default:
		op.err = fmt.Errorf("pgstore: update of consumer %q returned unknown action %d", op.id, action)
	}
	return c
}

// readAllLocked sends b, a BEGIN and a read of consumers, and returns them
// by ID.
func readAllLocked(ctx context.Context, conn *pgx.Conn, b *pgx.Batch) (map[string]*webhooks.Consumer, error) {
	br := conn.SendBatch(ctx, b)
	_, err := br.Exec()
	out := make(map[string]*webhooks.Consumer)
	if err == nil {
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			var cs []*webhooks.Consumer
			cs, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (*webhooks.Consumer, error) { return scanConsumer(row) })
			for _, c := range cs {
				out[c.ID] = c
			}
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return out, err
}
