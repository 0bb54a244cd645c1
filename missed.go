package webhooks

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"
)

// maxMissedStreams bounds the stream paths an engine remembers to retry
// after a Store outage; past it, it sweeps every stream instead.
const maxMissedStreams = 1024

// missedStreams are the streams whose StreamCreated, StreamAppended or
// StreamDeleted failed because the Store could not be reached. Nothing
// else would wake their IDLE consumers until the next event on the same
// stream, nor remove the consumers of a deleted one, so the scheduler
// retries them once the Store answers again.
type missedStreams struct {
	mu    sync.Mutex
	paths map[string]struct{}
	// sweep is set when more streams were missed than paths holds.
	sweep bool
	// deleted maps the streams whose deletion was missed to when it was.
	deleted map[string]time.Time
	// lost counts deletions missed past the bound, which no sweep finds.
	lost int
}

// addDeleted records that the deletion at at of the stream at path was
// missed. A creation or append of it missed before is moot now.
func (m *missedStreams) addDeleted(path string, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.paths, path)
	if _, ok := m.deleted[path]; !ok && len(m.deleted) >= maxMissedStreams {
		m.lost++
		return
	}
	if m.deleted == nil {
		m.deleted = make(map[string]time.Time)
	}
	m.deleted[path] = at
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
func (m *missedStreams) take() (deleted map[string]time.Time, paths []string, sweep bool, lost int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	// In order, so that a retry is the same every time.
	paths = slices.Sorted(maps.Keys(m.paths))
	clear(m.paths)
	deleted, m.deleted = m.deleted, nil
	sweep, m.sweep = m.sweep, false
	lost, m.lost = m.lost, 0
	return deleted, paths, sweep, lost
}

// putBack returns what take returned and was not retried. A deletion
// missed again meanwhile is the later one, and stays.
func (m *missedStreams) putBack(deleted map[string]time.Time, paths []string, sweep bool) {
	m.mu.Lock()
	for p, at := range deleted {
		if _, later := m.deleted[p]; !later {
			if m.deleted == nil {
				m.deleted = make(map[string]time.Time)
			}
			m.deleted[p] = at
		}
	}
	m.mu.Unlock()
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
// not be reached, deletions first: a stream deleted and created again in
// the outage loses the consumers of its old self, then gets new ones. It
// reports false if the Store still cannot be reached; the events not yet
// retried are kept for the next call.
func (e *Engine) retryMissed(ctx context.Context) bool {
	deleted, paths, sweep, lost := e.missed.take()
	if lost > 0 {
		e.log.ErrorContext(ctx, "webhooks: stream deletions missed in a Store outage, past what the engine keeps; the consumers of those streams remain", "lost", lost)
	}
	gone := slices.Sorted(maps.Keys(deleted))
	for i, p := range slices.Concat(gone, paths) {
		var err error
		if i < len(gone) {
			err = errors.Join(e.removeStream(ctx, p, deleted[p]), e.ds.streamDeleted(ctx, p, true))
		} else {
			err = e.spawnAndWake(ctx, p, e.subs.index.match(p), nil)
		}
		if errors.Is(err, ErrStoreUnavailable) {
			rest := make(map[string]time.Time)
			for _, q := range gone[min(i, len(gone)):] {
				rest[q] = deleted[q]
			}
			e.missed.putBack(rest, paths[max(i-len(gone), 0):], sweep)
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
		e.sweep.recover(ctx, nil)
	}
	return true
}
