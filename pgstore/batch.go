package pgstore

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"

	webhooks "github.com/streamhooks/webhooks"
)

// Concurrent UpdateConsumer calls share transactions, as River's completer
// batches job completions: one caller leads a batch of every update queued
// meanwhile, in one transaction of two round trips, whatever its size. A
// transition then costs the database a share of four statements rather
// than four, which is what bounds a busy instance (docs/BENCHMARKS.md).

const (
	// maxBatch bounds the updates of one transaction.
	maxBatch = 128
	// maxLeaders is how many batches may run at once. One: the batch that
	// fills while another runs is larger, and on the 2-core machine of
	// docs/BENCHMARKS.md two at once made fewer wake cycles (0.22 against
	// 0.24 of the ceiling; with 3 instances 0.70-0.75 against 0.78-0.84 of
	// one). Functions then run one after another, as sqlitestore's do, so
	// a slow StreamSource holds up the updates queued behind it.
	maxLeaders = 1
)

// updateOp is one UpdateConsumer call, queued for a batch.
type updateOp struct {
	ctx context.Context
	id  string
	fn  func(c *webhooks.Consumer) (webhooks.UpdateAction, error)

	// Set by the batch that runs the op, before signal.
	out      *webhooks.Consumer
	err      error
	panicked any // what fn panicked with, re-raised in the caller

	signal chan bool // receives true to lead the next batch, false when done
}

// batcher is the queue of UpdateConsumer calls, run in batches led by the
// callers themselves: a Store has no goroutine of its own.
type batcher struct {
	mu      sync.Mutex
	queue   []*updateOp
	leaders int
}

// batched runs fn as UpdateConsumer documents it, in a batch.
func (s *Store) batched(ctx context.Context, id string, fn func(c *webhooks.Consumer) (webhooks.UpdateAction, error)) (*webhooks.Consumer, error) {
	b := &s.batch
	op := &updateOp{ctx: ctx, id: id, fn: fn, signal: make(chan bool, 1)}
	b.mu.Lock()
	lead := b.leaders < maxLeaders
	if lead {
		b.leaders++
	} else {
		b.queue = append(b.queue, op)
	}
	b.mu.Unlock()
	if !lead {
		select {
		case lead = <-op.signal:
		case <-ctx.Done():
			if b.leave(op) {
				return nil, ctx.Err()
			}
			// A batch has taken the op, or it was chosen to lead.
			lead = <-op.signal
		}
	}
	if lead {
		s.lead(op)
	}
	if op.panicked != nil {
		panic(op.panicked)
	}
	return op.out, op.err
}

// leave takes op out of the queue if it is still there, neither taken by
// a batch nor chosen to lead, and reports whether it did.
func (b *batcher) leave(op *updateOp) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := slices.Index(b.queue, op)
	if i >= 0 {
		b.queue = slices.Delete(b.queue, i, i+1)
	}
	return i >= 0
}

// lead runs own, which is not queued, and the ops queued behind it in one
// batch, then hands the lead to the first op still queued, if any. Every
// op is in one place at a time, changed under b.mu: queued, or taken by a
// batch, or leading one; so each runs in one batch, and the number of
// leaders stays within maxLeaders.
func (s *Store) lead(own *updateOp) {
	b := &s.batch
	b.mu.Lock()
	n := min(len(b.queue), maxBatch-1)
	batch := append([]*updateOp{own}, b.queue[:n]...)
	b.queue = slices.Delete(b.queue, 0, n)
	b.mu.Unlock()
	s.runBatch(batch)
	for _, op := range batch[1:] {
		op.signal <- false
	}
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.leaders--
		b.mu.Unlock()
		return
	}
	next := b.queue[0]
	b.queue = b.queue[1:]
	b.mu.Unlock()
	next.signal <- true
}

// runBatch runs ops in one transaction that locks their consumers' rows,
// in ID order so that batches of several instances cannot deadlock. Each
// op's fn runs in queue order on the consumer as the ops before it left
// it. If the writes fail, every op of a consumer they touched runs again
// alone, so that one bad write fails only its own caller.
func (s *Store) runBatch(ops []*updateOp) {
	var live []*updateOp
	for _, op := range ops {
		if err := op.ctx.Err(); err != nil {
			op.err = err
		} else {
			live = append(live, op)
		}
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := allDone(live)
	defer cancel()
	dirty, err := s.runLocked(ctx, live)
	if err == nil {
		return
	}
	var retry []*updateOp
	for _, op := range live {
		switch {
		case !dirty[op.id]:
		case unreachable(err) || ctx.Err() != nil:
			op.out, op.err = nil, dbError("update consumer", err)
		default:
			retry = append(retry, op)
		}
	}
	for _, op := range retry {
		op.out, op.err, op.panicked = nil, nil, nil
		func() {
			defer func() { op.panicked = recover() }()
			op.out, op.err = s.updateOne(op.ctx, op.id, op.fn)
		}()
	}
}

// runLocked is runBatch's transaction. It returns the IDs of the consumers
// that the ops changed, and an error if those changes did not commit; an
// op of any other consumer has its outcome already.
func (s *Store) runLocked(ctx context.Context, ops []*updateOp) (dirty map[string]bool, err error) {
	ids := make([]string, 0, len(ops))
	for _, op := range ops {
		if !slices.Contains(ids, op.id) {
			ids = append(ids, op.id)
		}
	}
	all := func() map[string]bool {
		m := make(map[string]bool, len(ids))
		for _, id := range ids {
			m[id] = true
		}
		return m
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return all(), err
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
		return all(), err
	}
	cur := make(map[string]*webhooks.Consumer, len(stored))
	for id, c := range stored {
		cur[id] = c
	}
	for _, op := range ops {
		applyOp(op, cur)
	}

	b = &pgx.Batch{}
	dirty = make(map[string]bool)
	var (
		del             []string
		upIDs, upStates []string
		upDeadlines     []*int64
		upData          [][]byte
	)
	for _, id := range ids {
		old, c := stored[id], cur[id]
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
			return all(), err
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
	b.Queue("COMMIT")
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return dirty, err
	}
	committed = true
	return dirty, nil
}

// lockConsumersQuery reads and locks consumers in ID order, the order
// every batch locks in.
const lockConsumersQuery = "SELECT " + consumerCols + " FROM streamhooks_consumers c WHERE c.id = ANY ($1) ORDER BY c.id FOR UPDATE"

// saveConsumersQuery stores many consumers whose paths did not change.
const saveConsumersQuery = `UPDATE streamhooks_consumers c SET state = u.state, deadline = u.deadline, data = u.data
	FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bytea[]) AS u (id, state, deadline, data)
	WHERE c.id = u.id`

const deleteConsumersQuery = "DELETE FROM streamhooks_consumers WHERE id = ANY ($1)"

// applyOp runs op's fn on a copy of its consumer in cur and records the
// result in cur and in op.
func applyOp(op *updateOp, cur map[string]*webhooks.Consumer) {
	c, ok := cur[op.id]
	if !ok || c == nil {
		op.err = webhooks.ErrConsumerNotFound
		return
	}
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
			return
		}
		cur[op.id] = next
		// fn may have kept next; hand back a copy it cannot reach.
		op.out = next.Clone()
	case action == webhooks.UpdateDelete:
		cur[op.id] = nil
	default:
		op.err = fmt.Errorf("pgstore: update of consumer %q returned unknown action %d", op.id, action)
	}
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

// allDone returns a context that is done once every op's context is: a
// batch goes on while any of its callers waits for it.
func allDone(ops []*updateOp) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu      sync.Mutex
		waiting = len(ops)
	)
	stops := make([]func() bool, 0, len(ops))
	for _, op := range ops {
		stops = append(stops, context.AfterFunc(op.ctx, func() {
			mu.Lock()
			defer mu.Unlock()
			if waiting--; waiting == 0 {
				cancel()
			}
		}))
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}
