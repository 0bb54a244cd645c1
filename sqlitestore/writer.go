package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/internal/commitstat"
)

// op is one write, run by the writer inside a group's transaction.
type op struct {
	ctx      context.Context
	run      func(tx *wtx) error
	err      error
	panicked any // what run panicked with, re-raised in the caller
	done     chan struct{}
}

// write runs fn in a write transaction that holds the database's write lock
// and returns once that transaction has committed. If fn returns an error,
// its changes are rolled back and write returns the error. fn runs on the
// writer goroutine, so it must not call the Store's write methods.
func (s *Store) write(ctx context.Context, fn func(tx *wtx) error) error {
	o := &op{ctx: ctx, run: fn, done: make(chan struct{})}
	select {
	case s.ops <- o:
	case <-s.closing:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	// Once accepted, an op runs to its outcome: abandoning it here would
	// leave the caller unsure whether it committed.
	<-o.done
	if o.panicked != nil {
		panic(o.panicked)
	}
	return o.err
}

// writer is the single goroutine that writes. Its transaction takes every
// op that queues while it runs, so one fsync serves all the ops that
// arrived while the previous group committed or this one ran.
func (s *Store) writer() {
	defer close(s.writerDone)
	batch := make([]*op, 0, maxBatch)
	for {
		select {
		case o := <-s.ops:
			batch = append(batch, o)
		case <-s.closing:
			return
		}
		// Writers made runnable with this one's, by the same response or
		// tick, reach the queue while the writer yields once, and share
		// its commit: on the machine of docs/BENCHMARKS.md the wake cycle
		// went from 0.28 to 0.32-0.33 of the ceiling, CPU per cycle from
		// 496-499 to 447-451 µs.
		runtime.Gosched()
		batch = s.commit(batch)
		for _, o := range batch {
			close(o.done)
		}
		clear(batch)
		batch = batch[:0]
	}
}

// commit runs batch, and the ops that queue meanwhile, in one transaction,
// each op inside a savepoint so that a failing op rolls back only its own
// changes. Ops whose changes were kept succeed only if the transaction
// commits. It returns every op it took.
func (s *Store) commit(batch []*op) []*op {
	// The transaction serves many callers, so no caller's context may
	// interrupt it; each op's context is checked before the op runs.
	if err := s.w.begin(); err != nil {
		fail(batch, beginError(err))
		return batch
	}
	for i := 0; i < len(batch); i++ {
		if o := batch[i]; o.ctx.Err() != nil {
			o.err = o.ctx.Err()
		} else if err := runInSavepoint(s.w, o); err != nil {
			// The transaction is broken, perhaps rolled back by SQLite
			// itself: nothing of this group can commit.
			s.w.rollback()
			fail(batch[:i+1], err)
			for _, rest := range batch[i+1:] {
				rest.err = err
			}
			return batch
		}
		if i == len(batch)-1 && len(batch) < maxBatch {
			select {
			case o := <-s.ops:
				batch = append(batch, o)
			default:
			}
		}
	}
	if err := s.w.commit(); err != nil {
		s.w.rollback()
		fail(batch, fmt.Errorf("sqlitestore: commit: %w", err))
		return batch
	}
	commitstat.Committed(len(batch))
	return batch
}

// runInSavepoint runs o inside a savepoint, recording its outcome in o. It
// returns an error only if the savepoint itself fails.
func runInSavepoint(tx *wtx, o *op) error {
	if _, err := tx.exec("SAVEPOINT op"); err != nil {
		return fmt.Errorf("sqlitestore: savepoint: %w", err)
	}
	func() {
		defer func() { o.panicked = recover() }()
		o.err = o.run(tx)
	}()
	if o.err == nil && o.panicked == nil {
		if _, err := tx.exec("RELEASE op"); err != nil {
			return fmt.Errorf("sqlitestore: release savepoint: %w", err)
		}
		return nil
	}
	if _, err := tx.exec("ROLLBACK TO op"); err != nil {
		return fmt.Errorf("sqlitestore: rollback to savepoint: %w", err)
	}
	if _, err := tx.exec("RELEASE op"); err != nil {
		return fmt.Errorf("sqlitestore: release savepoint: %w", err)
	}
	return nil
}

// fail sets err on the ops of batch that would otherwise have succeeded.
func fail(batch []*op, err error) {
	for _, o := range batch {
		if o.err == nil && o.panicked == nil {
			o.err = err
		}
	}
}

// beginError wraps the error of a BEGIN. One that found the write lock held
// past the busy timeout, by another Store on the file, is
// webhooks.ErrStoreUnavailable: the write may succeed later.
func beginError(err error) error {
	var e *sqlite.Error
	if errors.As(err, &e) {
		switch e.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return fmt.Errorf("sqlitestore: begin: %w: %w", webhooks.ErrStoreUnavailable, err)
		}
	}
	return fmt.Errorf("sqlitestore: begin: %w", err)
}
