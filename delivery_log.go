package webhooks

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"
)

// DefaultDeliveryLogKeep is how many attempts of each consumer the
// delivery log keeps by default.
const DefaultDeliveryLogKeep = 20

// maxPendingAttempts bounds the attempts waiting for the log's writer: if
// the Store falls that far behind, further attempts are left out of the
// log and counted, rather than slow deliveries down or grow memory.
const maxPendingAttempts = 10_000

// The delivery log's writer gathers attempts for attemptLogLinger after
// the first, or until attemptLogBatch have gathered, and writes them in one
// Store call: a busy engine or an idle one pays one write per batch, not
// one per delivery.
const (
	attemptLogLinger = 250 * time.Millisecond
	attemptLogBatch  = 256
)

// attemptLog writes delivery attempts to the Store's DeliveryLog in the
// background, in batches: an attempt costs its delivery no Store write,
// and shows in the log within attemptLogLinger. Attempts not yet written
// when the engine stops are lost; the log is a diagnostic, not a record
// deliveries depend on.
type attemptLog struct {
	store   DeliveryLog // nil: no log
	keep    int
	tel     *telemetry
	clock   clock.Clock
	written func() // a test's signal

	mu      sync.Mutex
	pending []*DeliveryAttempt
	wake    chan struct{} // the first attempt of a batch has come
	full    chan struct{} // the batch is full
	// lingering is set while the writer waits for more attempts, so that a
	// test moves a mock clock only once the writer's timer is set.
	lingering atomic.Bool
}

func newAttemptLog(store Store, keep int, tel *telemetry, clk clock.Clock, written func()) *attemptLog {
	l := &attemptLog{keep: keep, tel: tel, clock: clk, written: written,
		wake: make(chan struct{}, 1), full: make(chan struct{}, 1)}
	if dl, ok := store.(DeliveryLog); ok && keep > 0 {
		l.store = dl
	}
	return l
}

// add queues a for writing.
func (l *attemptLog) add(ctx context.Context, a *DeliveryAttempt) {
	if l.store == nil {
		return
	}
	l.mu.Lock()
	dropped := len(l.pending) >= maxPendingAttempts
	if !dropped {
		l.pending = append(l.pending, a)
	}
	n := len(l.pending)
	l.mu.Unlock()
	switch {
	case dropped:
		l.tel.logDropped.Add(ctx, 1)
	case n == 1:
		signal(l.wake)
	case n >= attemptLogBatch:
		signal(l.full)
	}
}

// signal sends on ch, of capacity 1, unless a signal is waiting already.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// run writes queued attempts until ctx ends.
func (l *attemptLog) run(ctx context.Context, log *slog.Logger) {
	if l.store == nil {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.wake:
		}
		timer := l.clock.Timer(attemptLogLinger)
		l.lingering.Store(true)
		l.written()
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		case <-l.full:
		}
		timer.Stop()
		l.lingering.Store(false)
		l.mu.Lock()
		batch := l.pending
		l.pending = nil
		l.mu.Unlock()
		if len(batch) == 0 {
			continue
		}
		if err := l.store.AppendAttempts(ctx, newest(batch, l.keep), l.keep); err != nil && ctx.Err() == nil {
			l.tel.logDropped.Add(ctx, int64(len(batch)))
			log.ErrorContext(ctx, "webhooks: writing the delivery log", "attempts", len(batch), "error", err)
		}
		l.written()
	}
}

// newest is what a log that keeps keep attempts of each consumer keeps of
// attempts, in order: the newest keep of each consumer's. A hot consumer's
// batch then costs the Store no rows it would trim at once.
func newest(attempts []*DeliveryAttempt, keep int) []*DeliveryAttempt {
	seen := make(map[string]int)
	out := make([]*DeliveryAttempt, 0, len(attempts))
	for i := len(attempts) - 1; i >= 0; i-- {
		a := attempts[i]
		if seen[a.ConsumerID]++; seen[a.ConsumerID] <= keep {
			out = append(out, a)
		}
	}
	slices.Reverse(out)
	return out
}
