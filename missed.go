package webhooks

import (
	"context"
	"errors"
	"sync"
)

// maxMissedStreams bounds the stream paths an engine remembers to retry
// after a Store outage; past it, it sweeps every stream instead.
const maxMissedStreams = 1024

// missedStreams are the streams whose StreamCreated or StreamAppended
// failed because the Store could not be reached. Nothing else would wake
// their IDLE consumers until the next event on the same stream, so the
// scheduler retries them once the Store answers again.
type missedStreams struct {
	mu    sync.Mutex
	paths map[string]struct{}
	// sweep is set when more streams were missed than paths holds.
	sweep bool
}

func (m *missedStreams) add(path string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.paths) >= maxMissedStreams {
		m.sweep = true
		return
	}
	if m.paths == nil {
		m.paths = make(map[string]struct{})
	}
	m.paths[path] = struct{}{}
}

// take empties the set and returns what it held.
func (m *missedStreams) take() (paths []string, sweep bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for p := range m.paths {
		paths = append(paths, p)
	}
	clear(m.paths)
	sweep, m.sweep = m.sweep, false
	return paths, sweep
}

// putBack returns what take returned and was not retried.
func (m *missedStreams) putBack(paths []string, sweep bool) {
	for _, p := range paths {
		m.add(p)
	}
	if sweep {
		m.mu.Lock()
		m.sweep = true
		m.mu.Unlock()
	}
}

// retryMissed retries the stream events that failed while the Store could
// not be reached. It reports false if the Store still cannot be reached;
// the events not yet retried are kept for the next call.
func (e *Engine) retryMissed(ctx context.Context) bool {
	paths, sweep := e.missed.take()
	for i, p := range paths {
		err := e.spawnAndWake(ctx, p, e.subs.index.match(p))
		if errors.Is(err, ErrStoreUnavailable) {
			e.missed.putBack(paths[i:], sweep)
			if ctx.Err() == nil {
				e.log.ErrorContext(ctx, "webhooks: retrying stream events missed in a Store outage", "stream", p, "error", err)
			}
			return false
		}
		if err != nil && ctx.Err() == nil {
			e.log.ErrorContext(ctx, "webhooks: retrying a stream event missed in a Store outage", "stream", p, "error", err)
		}
	}
	if sweep {
		e.recover(ctx)
	}
	return true
}
