package dstream

import (
	"sync"
	"time"

	"github.com/benbjohnson/clock"
)

// storageLogInterval is how often, at most, a Server logs failures of one
// storage operation: in an outage every request fails, and one line an
// interval, with the count of the others, says as much as a line each.
const storageLogInterval = 10 * time.Second

// logSampler lets one event of each kind an interval through, and counts
// the others.
type logSampler struct {
	clock    clock.Clock
	interval time.Duration

	mu    sync.Mutex
	kinds map[string]*sampled
}

// sampled is the state of one kind of event.
type sampled struct {
	next       time.Time // when the next event is let through
	suppressed int       // events held back since the last let through
}

// allow reports whether to log an event of kind happening now, and, if so,
// how many of its kind were held back before it.
func (l *logSampler) allow(kind string) (ok bool, suppressed int) {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.kinds[kind]
	if k == nil {
		if l.kinds == nil {
			l.kinds = make(map[string]*sampled)
		}
		k = &sampled{}
		l.kinds[kind] = k
	}
	if now.Before(k.next) {
		k.suppressed++
		return false, 0
	}
	k.next = now.Add(l.interval)
	suppressed, k.suppressed = k.suppressed, 0
	return true, suppressed
}
