package receiver

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"
)

// Dedup remembers, for a window, the delivery ids (IDHeader) a receiver
// has handled, so that a delivery that comes again is not handled again.
// Delivery is at least once: a batch whose 2xx was lost comes again with
// the same id, as does every retry of it.
//
// Memory is bounded: Dedup remembers at most capacity ids, each for
// window after it was handled. An id is forgotten when its window ends or
// when capacity ids handled after it push it out, whichever comes first;
// a delivery that comes again after that is handled again. Choose a window
// that covers the subscription's retries (its retry policy's longest
// total backoff), and a capacity above the deliveries the receiver takes
// in a window.
//
// It suits event batches, whose 2xx acknowledges the batch. A wake-up
// notification's retries are fenced by its wake_id and epoch instead, and
// a duplicate answered 200 without a {"done": true} body leaves the
// consumer LIVE until its liveness timeout.
//
// Dedup is safe for concurrent use.
type Dedup struct {
	window   time.Duration
	capacity int
	now      func() time.Time

	mu       sync.Mutex
	handled  map[string]time.Time // id → when it was handled
	order    []handledID          // handled ids, oldest first, from head
	head     int
	inflight map[string]chan struct{} // closed when the call for id returns
}

// handledID is an entry of Dedup.order.
type handledID struct {
	id string
	at time.Time
}

// NewDedup returns a Dedup that remembers at most capacity ids, each for
// window, against the clock now (time.Now if nil). It panics if window or
// capacity is not positive.
func NewDedup(window time.Duration, capacity int, now func() time.Time) *Dedup {
	if window <= 0 || capacity <= 0 {
		panic("receiver: NewDedup needs a positive window and capacity")
	}
	if now == nil {
		now = time.Now
	}
	return &Dedup{
		window:   window,
		capacity: capacity,
		now:      now,
		handled:  make(map[string]time.Time),
		inflight: make(map[string]chan struct{}),
	}
}

// Handle calls fn to handle the delivery id, unless a call for id
// succeeded within the window: then it returns true without calling fn.
// While a call for id is running, another waits for it, and is a
// duplicate if it succeeded. An id is remembered only when fn returns nil,
// so the retry of a failed delivery calls fn again. An empty id is never a
// duplicate. If ctx ends while it waits, Handle returns ctx.Err().
func (d *Dedup) Handle(ctx context.Context, id string, fn func() error) (duplicate bool, err error) {
	if id == "" {
		return false, fn()
	}
	var done chan struct{}
	for {
		d.mu.Lock()
		d.forget(d.now())
		if _, ok := d.handled[id]; ok {
			d.mu.Unlock()
			return true, nil
		}
		running, busy := d.inflight[id]
		if !busy {
			done = make(chan struct{})
			d.inflight[id] = done
			d.mu.Unlock()
			break
		}
		d.mu.Unlock()
		select {
		case <-running:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	ok := false
	defer func() {
		d.mu.Lock()
		delete(d.inflight, id)
		close(done)
		if ok {
			d.remember(id, d.now())
		}
		d.mu.Unlock()
	}()
	err = fn()
	ok = err == nil
	return false, err
}

// errNotAcknowledged is what the Middleware's handler returns when it
// answered other than 2xx.
var errNotAcknowledged = errors.New("receiver: delivery not acknowledged")

// Middleware runs next for each delivery id once (see Handle): a request
// whose IDHeader was acknowledged with a 2xx within the window is answered
// 200, with no body, without calling next. Only a 2xx from next records
// the id, so next must verify the signature (or sit behind a handler that
// does): a forged request that next refuses records nothing, and a forged
// duplicate gets an empty 200 and reaches nothing.
func (d *Dedup) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dup, _ := d.Handle(r.Context(), r.Header.Get(IDHeader), func() error {
			sw := &statusWriter{ResponseWriter: w}
			next.ServeHTTP(sw, r)
			if sw.status != 0 && sw.status/100 != 2 { // 0: net/http sends 200
				return errNotAcknowledged
			}
			return nil
		})
		if dup {
			w.WriteHeader(http.StatusOK)
		}
	})
}

// forget drops the ids whose window has ended at now.
func (d *Dedup) forget(now time.Time) {
	for d.head < len(d.order) && now.Sub(d.order[d.head].at) >= d.window {
		d.pop()
	}
}

// remember records id as handled at now, pushing out the oldest ids
// beyond capacity.
func (d *Dedup) remember(id string, now time.Time) {
	for len(d.handled) >= d.capacity {
		d.pop()
	}
	d.handled[id] = now
	d.order = append(d.order, handledID{id, now})
}

// pop forgets the oldest entry of order.
func (d *Dedup) pop() {
	e := d.order[d.head]
	d.order[d.head] = handledID{}
	d.head++
	if at, ok := d.handled[e.id]; ok && at.Equal(e.at) {
		delete(d.handled, e.id)
	}
	// Reuse the slice once its dead head is half of it.
	if d.head > len(d.order)/2 {
		d.order = append(d.order[:0], d.order[d.head:]...)
		d.head = 0
	}
}

// statusWriter records the status a handler answers with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

// WriteHeader implements http.ResponseWriter.
func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write implements http.ResponseWriter.
func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap returns the wrapped writer, for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter {
	return w.ResponseWriter
}
