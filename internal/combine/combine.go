// Package combine runs calls of one kind made at once together: one caller
// leads a batch of every call queued while the batch before it ran, as
// River's completer batches job completions. A Store then pays a batch's
// fixed cost (a transaction, a query, a commit) once for many calls.
package combine

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
)

// One batch of a kind runs at a time: the batch that fills while another
// runs is larger, and on the 2-core machine of docs/BENCHMARKS.md two at
// once made fewer wake cycles on PostgreSQL (0.22 against 0.24 of the
// ceiling; with 3 instances 0.70-0.75 against 0.78-0.84 of one).

// MaxBatch bounds the calls of one batch.
const MaxBatch = 128

// queued is a call waiting in a Combiner.
type queued[C any] struct {
	call   C
	signal chan bool // receives true to lead the next batch, false when done
}

// Combiner queues calls of one kind and runs them in batches, led by the
// callers themselves, so that it needs no goroutine of its own. The zero
// Combiner is ready to use. Every call is in one place at a time, changed
// under mu: queued, or taken by a batch, or leading one; so each runs in
// one batch, and one batch runs at a time.
type Combiner[C any] struct {
	mu      sync.Mutex
	queue   []*queued[C]
	leading bool
}

// Do runs call, by run, in a batch with the calls queued meanwhile, and
// returns once it has run. It returns false, and call does not run, if ctx
// ends while call waits in the queue. run gets every call of the batch and
// sets their outcomes in them; every call of b passes the same run, since
// the leader's runs the batch.
func (b *Combiner[C]) Do(ctx context.Context, call C, run func([]C)) bool {
	q := &queued[C]{call: call, signal: make(chan bool, 1)}
	b.mu.Lock()
	lead := !b.leading
	if lead {
		b.leading = true
	} else {
		b.queue = append(b.queue, q)
	}
	b.mu.Unlock()
	if !lead {
		select {
		case lead = <-q.signal:
		case <-ctx.Done():
			if b.leave(q) {
				return false
			}
			// A batch has taken the call, or chose it to lead.
			lead = <-q.signal
		}
	}
	if lead {
		b.lead(q, run)
	}
	return true
}

// leave takes q out of the queue if it is still there, and reports whether
// it did.
func (b *Combiner[C]) leave(q *queued[C]) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := slices.Index(b.queue, q)
	if i >= 0 {
		b.queue = slices.Delete(b.queue, i, i+1)
	}
	return i >= 0
}

// lead runs own, which is not queued, and the calls queued behind it in
// one batch, then hands the lead to the first call still queued, if any.
func (b *Combiner[C]) lead(own *queued[C], run func([]C)) {
	// Callers made runnable with this one, by the same response or tick,
	// queue while it yields once, and join its batch: on the machine of
	// docs/BENCHMARKS.md the wake cycle on PostgreSQL went from 0.29 to
	// 0.32 of the ceiling.
	runtime.Gosched()
	b.mu.Lock()
	n := min(len(b.queue), MaxBatch-1)
	batch := append([]*queued[C]{own}, b.queue[:n]...)
	b.queue = slices.Delete(b.queue, 0, n)
	b.mu.Unlock()
	calls := make([]C, len(batch))
	for i, q := range batch {
		calls[i] = q.call
	}
	run(calls)
	for _, q := range batch[1:] {
		q.signal <- false
	}
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.leading = false
		b.mu.Unlock()
		return
	}
	next := b.queue[0]
	b.queue = b.queue[1:]
	b.mu.Unlock()
	next.signal <- true
}

// Call is what Begin needs of each call of a batch.
type Call interface {
	// Context is the caller's context.
	Context() context.Context
	// Fail sets the call's outcome to err.
	Fail(err error)
}

// Begin starts a batch: it returns the calls whose callers still wait,
// failing the others with their context's error, and a context that is
// done once every one of those callers' is, so that the batch goes on
// while any of them waits for it.
func Begin[C Call](calls []C) (waiting []C, _ context.Context, stop context.CancelFunc) {
	for _, c := range calls {
		if err := c.Context().Err(); err != nil {
			c.Fail(err)
		} else {
			waiting = append(waiting, c)
		}
	}
	if len(waiting) == 1 {
		// The one caller's own context is the batch's.
		return waiting, waiting[0].Context(), func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var left atomic.Int64
	left.Store(int64(len(waiting)))
	stops := make([]func() bool, 0, len(waiting))
	for _, c := range waiting {
		stops = append(stops, context.AfterFunc(c.Context(), func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		}))
	}
	return waiting, ctx, func() {
		for _, s := range stops {
			s()
		}
		cancel()
	}
}

// Queued reports how many calls wait for a batch.
func (b *Combiner[C]) Queued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// Lookups batches reads by key: the Get calls made at once share one read
// of all their keys.
type Lookups[K comparable, V any] struct {
	calls Combiner[*lookup[K, V]]
}

// lookup is one Get call.
type lookup[K comparable, V any] struct {
	ctx context.Context
	key K
	out V
	err error
}

func (l *lookup[K, V]) Context() context.Context { return l.ctx }
func (l *lookup[K, V]) Fail(err error)           { l.err = err }

// Get returns what read finds under key, read in a batch with the keys of
// the Get calls made meanwhile. read returns what it finds by key; every
// call of l passes the same read. Each caller gets own(v) of the value v
// found, or of the zero value if there is none and missing is nil, and
// missing otherwise.
func (l *Lookups[K, V]) Get(ctx context.Context, key K, read func(ctx context.Context, keys []K) (map[K]V, error), own func(V) V, missing error) (V, error) {
	call := &lookup[K, V]{ctx: ctx, key: key}
	ran := l.calls.Do(ctx, call, func(calls []*lookup[K, V]) {
		calls, ctx, cancel := Begin(calls)
		defer cancel()
		if len(calls) == 0 {
			return
		}
		keys := make([]K, len(calls))
		for i, c := range calls {
			keys[i] = c.key
		}
		found, err := read(ctx, keys)
		for _, c := range calls {
			v, ok := found[c.key]
			switch {
			case err != nil:
				c.err = err
			case !ok && missing != nil:
				c.err = missing
			default:
				c.out = own(v)
			}
		}
	})
	if !ran {
		var zero V
		return zero, ctx.Err()
	}
	return call.out, call.err
}

// Queued reports how many Get calls wait for a batch.
func (l *Lookups[K, V]) Queued() int { return l.calls.Queued() }

// OwnEach copies each of xs, for a caller to own; it returns an empty
// slice, not nil, for none.
func OwnEach[T interface{ Clone() T }](xs []T) []T {
	out := make([]T, len(xs))
	for i, x := range xs {
		out[i] = x.Clone()
	}
	return out
}
