package webhooks

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"
)

// DeliveryLog is an optional Store capability: a bounded log of each
// consumer's latest delivery attempts, which the subscription API shows
// (…&deliveries&consumer=ID). The engine finds it by type assertion on its
// Store; without it the engine keeps no log. memstore, sqlitestore and
// pgstore implement it.
type DeliveryLog interface {
	// AppendAttempts adds attempts to their consumers' logs, keeping only
	// the newest keep of each consumer's, so that a log never grows past
	// keep. Attempts of a consumer that no longer exists are dropped.
	// Deleting a consumer deletes its log.
	AppendAttempts(ctx context.Context, attempts []*DeliveryAttempt, keep int) error
	// ListAttempts returns up to limit of the newest attempts of consumer
	// id, newest first; none if it has no log.
	ListAttempts(ctx context.Context, consumerID string, limit int) ([]*DeliveryAttempt, error)
}

// DeliveryAttempt is one delivery attempt in a DeliveryLog.
type DeliveryAttempt struct {
	ConsumerID string
	// At is when the attempt was made.
	At time.Time
	// DeliveryID is the wake id of a wake-up, or the delivery id of a
	// batch.
	DeliveryID string
	// Attempt numbers the attempt within its delivery, from 1.
	Attempt int
	// StatusCode is the response's status, or 0 if none arrived.
	StatusCode int
	// Latency is how long the request took.
	Latency time.Duration
	// ErrorClass is empty for a 2xx, and otherwise says why the attempt
	// failed: dns, connect, tls, timeout, ssrf_blocked, status_3xx,
	// status_4xx, status_5xx, body, other, or handler for a BatchHandler's
	// error or panic.
	ErrorClass string
	// Error is the failure's detail.
	Error string
	// ResponseBody is the start of the response body, at most
	// MaxResponsePreview bytes.
	ResponseBody string
}

// MaxResponsePreview bounds DeliveryAttempt.ResponseBody, in bytes.
const MaxResponsePreview = 500

// deliveryAttemptV1 is the format MarshalData writes: a version byte
// and every field but ConsumerID, in order.
const deliveryAttemptV1 = 1

var errCorruptAttempt = errors.New("webhooks: corrupt delivery attempt")

// MarshalData encodes every field of a but ConsumerID, which a Store
// keeps as a column, as one opaque value. It fails for a time outside the
// years 1678 to 2262. Like Consumer.MarshalData, it is not MarshalBinary,
// since it leaves a field out.
func (a *DeliveryAttempt) MarshalData() ([]byte, error) {
	b, err := appendTime([]byte{deliveryAttemptV1}, a.At)
	if err != nil {
		return nil, err
	}
	b = appendString(b, a.DeliveryID)
	b = binary.AppendVarint(b, int64(a.Attempt))
	b = binary.AppendVarint(b, int64(a.StatusCode))
	b = binary.AppendVarint(b, int64(a.Latency))
	b = appendString(b, a.ErrorClass)
	b = appendString(b, a.Error)
	return appendString(b, a.ResponseBody), nil
}

// UnmarshalData sets every field of a but ConsumerID from data that
// MarshalData wrote. It leaves a unchanged if data is corrupt.
func (a *DeliveryAttempt) UnmarshalData(data []byte) error {
	d := decoder{b: data}
	if d.byte() != deliveryAttemptV1 {
		return errCorruptAttempt
	}
	out := DeliveryAttempt{ConsumerID: a.ConsumerID, At: d.time(), DeliveryID: d.string()}
	out.Attempt = int(d.varint())
	out.StatusCode = int(d.varint())
	out.Latency = time.Duration(d.varint())
	out.ErrorClass = d.string()
	out.Error = d.string()
	out.ResponseBody = d.string()
	if d.err != nil || len(d.b) != 0 {
		return errCorruptAttempt
	}
	*a = out
	return nil
}

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
